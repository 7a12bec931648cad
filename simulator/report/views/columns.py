"""Plain-text tables that fit the terminal, and the folding rule every text output shares.

A line is folded only between *atoms*: words, except that a number keeps the unit after it
(``1.00 s``, ``18.55 ms–34.49 ms)``), so no fold leaves ``1.00`` on one line and ``s`` on
the next. A table (:func:`columns`) is laid out at the width :func:`text_width` set (the
CLI sets the terminal's; a file or a pipe gets none): its natural columns if they fit,
else narrowed columns whose cells fold between atoms, else one block per row. ``sdk``'s
rich tables (:mod:`sdk.console`) fold by the same rule.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

#: Units a number is never parted from.
_UNIT = re.compile(r"(?:B|KiB|MiB|GiB|kB|MB|GB|us|µs|ms|s|pp|%|MHz|GHz|dB|MACs|bytes)"
                   r"(?![A-Za-z])")
#: Spaces between two columns.
GAP = 2
#: How much further a row's second line is indented when its columns take two lines.
BAND_INDENT = 4

_WIDTH: ContextVar[int | None] = ContextVar("devicefit_text_width", default=None)


@contextlib.contextmanager
def text_width(width: int | None) -> Iterator[None]:
    """Lay out the tables rendered inside at ``width`` columns (None: as wide as they are)."""
    token = _WIDTH.set(width)
    try:
        yield
    finally:
        _WIDTH.reset(token)


def atoms(text: str) -> list[tuple[int, int]]:
    """(start, end) of the pieces a line may be folded between: words, except that a word
    ending in a digit keeps the unit after it."""
    spans: list[tuple[int, int]] = []
    for word in re.finditer(r"\S+", text):
        start, end = word.span()
        if (spans and text[spans[-1][1] - 1].isdigit() and text[spans[-1][1]:start] == " "
                and _UNIT.match(text, start)):
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return spans


def fold_spans(text: str, width: int, indent: int = 0) -> list[tuple[int, int]]:
    """(start, end) of each line of ``text`` folded to ``width`` between :func:`atoms`;
    lines after the first are ``indent`` narrower. An atom wider than a line stays whole."""
    lines: list[tuple[int, int]] = []
    start = end = 0
    open_line = False
    for a, b in atoms(text):
        room = width - (indent if lines else 0)
        if open_line and b - start > room:
            lines.append((start, end))
            open_line = False
        if not open_line:
            start, open_line = a, True
        end = b
    if open_line:
        lines.append((start, end))
    return lines or [(0, 0)]


def folded(text: str, width: int) -> list[str]:
    """``text`` as lines of at most ``width`` (an atom wider than that stays whole)."""
    return [text[a:b] for a, b in fold_spans(text, width)]


def columns(rows: Sequence[Sequence[Any]], indent: str = "  ", *, header: bool = False,
            right: frozenset[int] = frozenset()) -> list[str]:
    """``rows`` as aligned columns (``right``: the indexes of right-aligned ones) at the
    width :func:`text_width` set: the natural columns if they fit; else the layout with the
    fewest lines of narrowed columns whose cells fold between atoms, or each row on two
    lines (the later columns on the second, indented, aligned across rows); else one
    block per row. ``header``: the first row names the columns (repeated in each block)."""
    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return []
    width = _WIDTH.get()
    widths = _natural(cells)
    if width is None or _fit(cells, width - len(indent), shrink=False) is not None:
        return _lines(cells, indent, widths, right)
    layouts = [_banded(cells, indent, width, right, k) for k in range(len(widths), 0, -1)]
    shortest = min((lay for lay in layouts if lay is not None), key=len, default=None)
    return shortest if shortest is not None else _blocks(cells, indent, width, header)


def _banded(cells: list[list[str]], indent: str, width: int, right: frozenset[int],
            k: int) -> list[str] | None:
    """The first ``k`` columns on a row's first line and the rest (if any) under them;
    None if either band cannot fit ``width``."""
    room = width - len(indent)
    first = _fit([r[:k] for r in cells], room, shrink=True)
    if first is None:
        return None
    if k == len(cells[0]):
        return _lines(cells, indent, first, right)
    second = _fit([r[k:] for r in cells], room - BAND_INDENT, shrink=True)
    if second is None:
        return None
    later = frozenset(i - k for i in right if i >= k)
    out: list[str] = []
    for r in cells:
        out += _lines([r[:k]], indent, first, right)
        out += _lines([r[k:]], indent + " " * BAND_INDENT, second, later)
    return out


def _natural(cells: list[list[str]]) -> list[int]:
    return [max(len(c) for c in col) for col in zip(*cells, strict=True)]


def _fit(cells: list[list[str]], room: int, shrink: bool) -> list[int] | None:
    """Column widths within ``room``: the natural ones, or (``shrink``) the widest columns
    narrowed towards their longest atom; None when they do not fit."""
    room -= GAP * (len(cells[0]) - 1)
    widths = _natural(cells)
    if sum(widths) <= room:
        return widths
    least = [max((b - a for c in col for a, b in atoms(c)), default=0)
             for col in zip(*cells, strict=True)]
    if not shrink or sum(least) > room:
        return None
    while sum(widths) > room:
        widest = max(range(len(widths)), key=lambda i: widths[i] - least[i])
        widths[widest] -= 1
    return widths


def _lines(cells: list[list[str]], indent: str, widths: list[int],
           right: frozenset[int]) -> list[str]:
    out: list[str] = []
    for r in cells:
        out += _line(indent, [folded(c, w) if len(c) > w else [c]
                              for c, w in zip(r, widths, strict=True)], widths, right)
    return out


def _line(indent: str, cells: list[list[str]], widths: list[int],
          right: frozenset[int]) -> list[str]:
    """One row whose cells may have several lines, as text lines."""
    height = max(len(c) for c in cells)
    return [(indent + (" " * GAP).join(
        (c[k] if k < len(c) else "").rjust(w) if i in right else
        (c[k] if k < len(c) else "").ljust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)))).rstrip()
        for k in range(height)]


def _blocks(cells: list[list[str]], indent: str, width: int, header: bool) -> list[str]:
    """Each row as its first cell, then one line per other cell (``name  value`` under a
    header), like ``psql``'s expanded display."""
    names = cells[0][1:] if header else [""] * (len(cells[0]) - 1)
    label = max((len(n) for n in names), default=0)
    out: list[str] = []
    for row in cells[1:] if header else cells:
        out.append(indent + (row[0] or "-"))
        for name, cell in zip(names, row[1:], strict=True):
            if not cell:
                continue
            lead = indent + "  " + (name.ljust(label) + "  " if label else "")
            lines = folded(cell, max(width - len(lead), 1))
            out += [lead + lines[0], *(" " * len(lead) + more for more in lines[1:])]
    return out
