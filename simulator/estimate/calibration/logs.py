"""Readers of what a board prints about its own latency.

TFLM's ``MicroProfiler`` (tensorflow/lite/micro/micro_profiler.cc) has two forms; its tags
are the op names the interpreter gives each ``BeginEvent`` (``CONV_2D``):

- ``Log()``: ``CONV_2D took 3753 ticks (3 ms).``, one line per event;
- ``LogCsv()``: a ``"Event","Tag","Ticks"`` header, then ``0,CONV_2D,3753`` rows.

Ticks are whatever the port's ``GetCurrentTimeTicks()`` counts, so the user gives the rate
(``--ticks-per-second``, or ``--clock`` when the timer counts CPU cycles); the ``(N ms)`` of
the log form is integer-truncated by ``TicksToMs`` and is not used. A log may hold several
runs of the same model (the benchmarks print one per invocation): :func:`runs_of` splits
them by the model's op count. Lines that are not an op's event (``InitializeKeywordRunner
took …``, a run's total) are skipped: an op name is upper case.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from devicefit.simulator.errors import InputError


@dataclass(frozen=True)
class OpTime:
    """One operator's measured time, in the order the board ran them."""

    op: str
    ms: float


@dataclass(frozen=True)
class BoardLog:
    """What one log says about one model: per-op times (one run each) or only a total."""

    #: Where it came from (a file name) and its form, for the evidence line.
    source: str
    form: str
    #: Per run, per op; empty when the log gives only the whole model's latency.
    runs: tuple[tuple[OpTime, ...], ...] = ()
    total_ms: float | None = None

    @property
    def measured_ms(self) -> float:
        """The whole model's latency: the given total, else the mean over the runs."""
        if self.total_ms is not None:
            return self.total_ms
        return sum(sum(o.ms for o in run) for run in self.runs) / len(self.runs)


_OP_NAME = re.compile(r"[A-Z][A-Z0-9_]*(?::[A-Za-z0-9_]+)?")
_LOG_LINE = re.compile(r"(\S+) took (\d+) ticks \((-?\d+) ms\)\.?\s*$")
CSV_HEADER = '"Event","Tag","Ticks"'


def _tick_rate(ticks_per_second: float | None, source: str) -> float:
    if not ticks_per_second or ticks_per_second <= 0:
        raise InputError(f"{source}: MicroProfiler counts ticks: give their rate "
                         f"(--ticks-per-second, or --clock when they are CPU cycles)")
    return ticks_per_second


def parse_micro_log(text: str, ticks_per_second: float | None, source: str) -> list[OpTime]:
    """Every op event of a ``MicroProfiler::Log()`` output, in order (all runs together)."""
    rate = _tick_rate(ticks_per_second, source)
    out = []
    for line in text.splitlines():
        m = _LOG_LINE.search(line)
        if m and _OP_NAME.fullmatch(m.group(1)):
            out.append(OpTime(m.group(1), int(m.group(2)) / rate * 1e3))
    return out


def parse_micro_csv(text: str, ticks_per_second: float | None, source: str) -> list[OpTime]:
    """Every row of the ``MicroProfiler::LogCsv()`` tables in ``text`` (a new header starts
    another run; lines around the tables are skipped)."""
    rate = _tick_rate(ticks_per_second, source)
    out = []
    inside = False
    for line in text.splitlines():
        line = line.strip()
        if line == CSV_HEADER:
            inside = True
            continue
        row = next(csv.reader(io.StringIO(line)), []) if inside else []
        if len(row) == 3 and row[0].strip().isdigit() and row[2].strip().lstrip("-").isdigit():
            out.append(OpTime(row[1].strip(), int(row[2]) / rate * 1e3))
        else:
            inside = False
    return out


def read_profiler_log(path: Path, ticks_per_second: float | None) -> tuple[str, list[OpTime]]:
    """(form, op events) of a MicroProfiler log file, in either form."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the log: {exc.strerror or exc}") from exc
    if CSV_HEADER in text:
        return "MicroProfiler CSV", parse_micro_csv(text, ticks_per_second, str(path))
    if not any(_LOG_LINE.search(line) for line in text.splitlines()):
        raise InputError(f"{path}: no MicroProfiler lines ('CONV_2D took N ticks (M ms).' "
                         f"or a \"Event\",\"Tag\",\"Ticks\" table) and no benchmark_model "
                         f"op profile in it")
    return "MicroProfiler log", parse_micro_log(text, ticks_per_second, str(path))


def runs_of(ops: list[OpTime], n_ops: int, source: str) -> tuple[tuple[OpTime, ...], ...]:
    """``ops`` cut into runs of ``n_ops`` (the model's operator count); anything else is a
    log of another model."""
    if not ops:
        raise InputError(f"{source}: no operator timings in the log")
    if n_ops <= 0 or len(ops) % n_ops:
        raise InputError(f"{source}: the log has {len(ops)} op events, the model has {n_ops} "
                         f"operators (not the log of this model, or a cut log)")
    return tuple(tuple(ops[i:i + n_ops]) for i in range(0, len(ops), n_ops))


def read_latency_table(path: Path) -> list[tuple[Path, float]]:
    """A CSV of whole-model latencies: ``model file, ms`` per row (a header row is allowed;
    model paths are relative to the table's folder)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the latency table: {exc}") from exc
    out = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        try:
            if len(cells) != 2:
                raise ValueError
            ms = float(cells[1])
        except ValueError:
            if n == 1:
                continue  # a header
            raise InputError(f"{path}:{n}: expected 'model file, ms', got {','.join(row)!r}") from None
        if not ms > 0 or ms == float("inf"):
            raise InputError(f"{path}:{n}: latency {cells[1]} ms is not a positive number")
        out.append((path.parent / cells[0], ms))
    if not out:
        raise InputError(f"{path}: no 'model file, ms' rows")
    return out
