"""What :mod:`devicefit.sdk.console` draws with rich, apart so that a command whose output
needs no rich (a report to a pipe, ``--json``) does not import it (a fifth of a static
``simulate``'s start-up)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rich.box import HEAVY_HEAD
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from devicefit.simulator.infra.escape import clean
from devicefit.simulator.report.views.columns import atoms, fold_spans

if TYPE_CHECKING:
    from rich.live import Live


class SafeConsole(Console):
    """A rich console that never writes a control character it did not make itself, and
    strips the padding rich adds to the end of lines when the output is not a terminal.

    rich passes ESC and C1 bytes inside strings through to the terminal; the strings
    printed here quote model and project files (see :mod:`simulator.infra.escape`). What
    it prints on a terminal goes above another console's progress line, never over it
    (:func:`_lives_paused`).
    """

    def __init__(self, *args: Any, folds: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: False when piped without ``COLUMNS``: a log or ``grep`` wants whole lines.
        self.folds = folds

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """As rich's, but one line of text wider than the console is folded between
        :func:`~simulator.report.views.columns.atoms`, continuations indented (rich would part a
        number from its unit)."""
        shown = [clean(o) if isinstance(o, str) else o for o in objects]
        if (len(shown) == 1 and isinstance(shown[0], str) and not kwargs.get("soft_wrap")
                and self.folds):
            markup = kwargs.pop("markup", None)
            text = (Text.from_markup(shown[0]) if markup is not False and self._markup
                    else Text(shown[0]))
            shown = [_folded(text, self.width, indent=4)]
        with _lives_paused(self):
            super().print(*shown, **kwargs)

    def set_live(self, live: Live) -> Any:
        """As rich's, and the live display is known to the other consoles (see
        :func:`_lives_paused`)."""
        started = super().set_live(live)
        _LIVES.append((self, live))
        return started

    def clear_live(self) -> None:
        super().clear_live()
        mine = [i for i, (console, _) in enumerate(_LIVES) if console is self]
        if mine:
            del _LIVES[mine[-1]]

    def _render_buffer(self, buffer: Any) -> str:
        text = super()._render_buffer(buffer)
        if self.is_terminal:
            return text
        return "\n".join(line.rstrip(" ") for line in text.split("\n"))


#: The live displays (progress lines) on the terminal and the consoles drawing them.
_LIVES: list[tuple[SafeConsole, Live]] = []


@contextlib.contextmanager
def _lives_paused(writer: Console) -> Iterator[None]:
    """Every live display of another console taken off the terminal while ``writer``
    prints, then drawn again under what it printed. rich moves only its own console's
    output above a live display: a second console's lines (results on stdout under a
    progress line on stderr) landed on the line, and the line's last state stayed above
    them."""
    # A file or a pipe cannot write over the line, nor can a console off a terminal draw it.
    others = ([live for console, live in _LIVES if console is not writer and console.is_terminal]
              if writer.is_terminal else [])
    for live in others:
        live.stop()
    try:
        yield
    finally:
        for live in reversed(others):
            live.start(refresh=True)


@dataclass
class FitTable:
    """A table that never splits a word, nor a number from its unit: as columns when every
    column's longest :func:`atoms` fits the width (cells folded between atoms here, as rich
    would fold them anywhere at a space), otherwise one block per row (``header  value``
    lines under the row's first cell), the way ``psql``'s expanded display does.

    A cell may hold several lines (``\\n``); ``rules`` draws rich's lines between the
    columns (three cells of a separator each, two without); the columns in ``whole`` are
    never folded (a status: ``AT`` over ``RISK`` reads as two words); those in ``names``
    hold names that may also fold after a ``-`` or ``_`` (``stm32l4r5-`` over
    ``cortex-m4``) rather than turn the table into blocks.
    """

    title: str | None
    columns: list[str]
    rows: list[list[str]]
    rules: bool = True
    whole: frozenset[int] = frozenset()
    names: frozenset[int] = frozenset()

    def _cells(self) -> list[list[Text]]:
        return [[Text.from_markup(c) for c in row] for row in [self.columns, *self.rows]]

    def _room(self, width: int) -> int:
        """What ``width`` leaves the cells once the separators are drawn."""
        return width - (3 if self.rules else 2) * (len(self.columns) - 1)

    def fits(self, width: int) -> bool:
        """Whether every cell's every line fits ``width`` as it is (nothing folded)."""
        return sum(_natural(self._cells())) <= self._room(width)

    def _widths(self, cells: list[list[Text]], room: int) -> list[int] | None:
        """Column widths: each its longest line if that fits ``room``, else the widest
        columns narrowed towards their longest atom; None when even those do not fit."""
        widths = _natural(cells)
        least = [widths[i] if i in self.whole else
                 max((len(piece) for c in col for piece in _NAME_BREAK.split(c.plain)),
                     default=1) or 1 if i in self.names else
                 max((b - a for c in col for a, b in atoms(c.plain)), default=1) or 1
                 for i, col in enumerate(zip(*cells, strict=True))]
        if sum(least) > room:
            return None
        while sum(widths) > room:
            widest = max(range(len(widths)), key=lambda i: widths[i] - least[i])
            widths[widest] -= 1
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        cells = self._cells()
        widths = self._widths(cells, self._room(options.max_width))
        if widths is not None:
            t = Table(title=self.title, title_justify="left", show_edge=False,
                      pad_edge=False, box=HEAVY_HEAD if self.rules else None)
            for head, width in zip(cells[0], widths, strict=True):
                t.add_column(_folded(head, width), width=width, no_wrap=True)
            for row in cells[1:]:
                t.add_row(*(_name_folded(c, w) if i in self.names else _folded(c, w)
                            for i, (c, w) in enumerate(zip(row, widths, strict=True))))
            yield t
            return
        if self.title:
            yield Text.from_markup(self.title, style="italic")
        names = [Text("\n").join(Text("  ") + line for line in head.split("\n"))
                 for head in cells[0][1:]]
        room = max(options.max_width - 2 - max(_natural([names]), default=0), 1)
        for row in cells[1:]:
            first = row[0] if row[0].plain else Text("-")
            first.stylize("bold")
            yield first
            grid = Table.grid(padding=(0, 2), pad_edge=False)
            grid.add_column(no_wrap=True)
            grid.add_column(no_wrap=True)
            for head, cell in zip(names, row[1:], strict=True):
                grid.add_row(head, _folded(cell, room))
            yield grid


@dataclass
class FirstFit:
    """One table in several forms, the richest first: the first form whose every line fits
    the console as it is (with the rules between columns, else without them) is shown, so
    a wide terminal gets every figure and a narrow one the compact form whole rather than
    the rich one folded; when none fits, the last form folded (or as blocks)."""

    forms: list[FitTable]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for form in self.forms:
            for shown in (form, replace(form, rules=False)):
                if shown.fits(options.max_width):
                    yield shown
                    return
        yield replace(self.forms[-1], rules=False)


def _natural(cells: list[list[Text]]) -> list[int]:
    """Each column's longest line."""
    return [max(len(line) for c in col for line in c.plain.split("\n")) or 1
            for col in zip(*cells, strict=True)]


#: Where a name may fold: after a hyphen or an underscore, or at a space.
_NAME_BREAK = re.compile(r"(?<=[-_])|\s+")


def _name_folded(text: Text, width: int) -> Text:
    """``text``, names, each line folded to ``width`` after a ``-`` or ``_`` or at a space
    (the piece that fills most of the line; one wider than the line stays whole)."""
    out: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        start, plain = 0, line.plain
        while len(plain) - start > width:
            breaks = [m.end() for m in _NAME_BREAK.finditer(plain, start + 1)]
            end = max((b for b in breaks if b - start <= width), default=None)
            end = end or min(breaks, default=len(plain))
            piece = line[start:end]
            piece.rstrip()
            out.append(piece)
            start = end
        out.append(line[start:])
    return Text("\n").join(out)


def _folded(text: Text, width: int, indent: int = 0) -> Text:
    """``text`` folded to ``width`` between :func:`atoms`, keeping its styles; lines after
    the first of each line are indented ``indent`` more than its own text."""
    if all(len(line) <= width for line in text.plain.split("\n")):
        return text
    out: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        lead = len(line.plain) - len(line.plain.lstrip(" "))
        body = line[lead:]
        spans = fold_spans(body.plain, max(width - lead, 1), indent=indent)
        out += [Text(" " * (lead + (indent if i else 0))) + body[a:b]
                for i, (a, b) in enumerate(spans)]
    return Text("\n").join(out)


