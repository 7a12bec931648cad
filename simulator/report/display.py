"""What a target's own report section shows on a page, as plain data: its facts, tables and
charts. A target builds it (:meth:`simulator.report.report.TargetSection.display`) and the views
render it (:func:`simulator.report.views.html.display_html`), so a target returns data and never
markup, and a view draws any target's section, a third party's too, without knowing it.

Frozen dataclasses of text and numbers, imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class Bar:
    """One bar of a chart: the label under it, its value, what hovering it says."""

    label: str
    value: float
    title: str


@dataclass(frozen=True)
class TimeChart:
    """Times in ms as bars (e.g. Vela's cycles per layer at the NPU clock)."""

    #: The chart's name on the page (its class).
    name: str
    heading: str
    bars: tuple[Bar, ...]
    #: What the y axis measures, and the line under the chart.
    axis: str
    caption: str


@dataclass(frozen=True)
class Split:
    """An estimate's parts, each (name, ms), drawn as one bar with a legend."""

    name: str
    heading: str
    parts: tuple[tuple[str, float], ...]
    caption: str


@dataclass(frozen=True)
class Row:
    """One operator's row of a partition table."""

    cells: tuple[str, ...]
    #: The unit that runs it ("tpu", "npu", "cpu"): the row's name on the page.
    unit: str
    #: Whether that unit is the host CPU: the pages colour the two kinds of unit apart.
    on_cpu: bool


@dataclass(frozen=True)
class Table:
    """A partition: one row per operator and where it runs."""

    heading: str | None
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    #: The columns of figures (aligned right).
    numeric: tuple[int, ...] = ()


@dataclass(frozen=True)
class Note:
    """A sentence in place of a part the section cannot show (and why)."""

    text: str


#: One part of a section's display, in the order shown.
Part: TypeAlias = "Split | TimeChart | Table | Note"


@dataclass(frozen=True)
class SectionDisplay:
    """A target's section as a page shows it: its heading, its facts as a list, then its
    parts (charts, tables, notes) in order."""

    #: The section's name on the page (its class: ``"edgetpu-partition"``).
    name: str
    heading: str
    facts: tuple[str, ...]
    parts: tuple[Part, ...] = ()
