"""The Markdown table the benchmarks print (and docs/benchmarks.md shows): one printer, so
that their tables are laid out alike."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    title: str
    #: Figures are right-aligned, so that their digits line up.
    right: bool = False


def markdown_table(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> list[str]:
    """The table's lines: the header, the alignment row, then one line per row."""
    return [_line(c.title for c in columns), _line("---:" if c.right else "---" for c in columns),
            *(_line(row) for row in rows)]


def _line(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"
