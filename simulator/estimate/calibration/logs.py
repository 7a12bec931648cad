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

Logs and tables come from serial consoles and CI artefacts, so every reader is bounded: a
regular file of at most :data:`MAX_LOG_BYTES` (:data:`MAX_TABLE_BYTES`), read line by line
in one linear pass, at most :data:`MAX_EVENTS` op events (:data:`MAX_TABLE_ROWS` models),
and every figure checked against what a board can measure (:func:`op_time`): a tick count
fits a 64-bit counter, an op or a model takes between 0 and :data:`MAX_MS`, a tick rate is
within :data:`TICK_RATE_HZ`. Anything else is one :class:`InputError` line.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devicefit.simulator.errors import InputError
from devicefit.simulator.infra.fileio import read_regular_bytes


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


#: The largest board log read: a MicroProfiler line is ~40 bytes, so this holds some 200,000
#: op events (2,000 runs of a 100-op model); a larger capture is cut down to a few runs.
MAX_LOG_BYTES = 8 * 1024**2
MAX_EVENTS = 200_000
#: The largest latency table, and its rows: each row is a model to read and estimate.
MAX_TABLE_BYTES = 1024**2
MAX_TABLE_ROWS = 256
#: No tool prints a longer line: a longer one is not a profiler's line (and is never handed
#: to a pattern whose cost grows with the line).
MAX_LINE_CHARS = 512
#: The widest tick counter a board has.
MAX_TICKS = 2**64 - 1
#: Longer than any operator or model runs on a board (a day): a figure above is a broken
#: timer or a wrong rate, and would move every estimate by orders of magnitude.
MAX_MS = 86_400_000.0
#: Tick rates taken (Hz): a seconds counter up to a 10 GHz cycle counter.
TICK_RATE_HZ = (1.0, 1e10)

_OP_NAME = re.compile(r"[A-Z][A-Z0-9_]*(?::[A-Za-z0-9_]+)?")
#: What follows " took " in a ``Log()`` line; matched from its start, so linear.
_EVENT_TAIL = re.compile(r"([0-9]+) ticks \((-?[0-9]+) ms\)\.?\s*")
_TICKS = re.compile(r"-?[0-9]+")
CSV_HEADER = '"Event","Tag","Ticks"'


def read_board_text(path: Path, what: str) -> str:
    """The text of a board's output (bounded; bytes that are not UTF-8, a serial line's
    noise, read as U+FFFD)."""
    data = read_regular_bytes(path, f"the {what}", MAX_LOG_BYTES, "text file the board printed")
    return data.decode("utf-8", errors="replace")


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based number, line without its end) of ``text``, one at a time: a list of every
    line of a large log took several times its size."""
    start = n = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        n += 1
        yield n, text[start:end].rstrip("\r")
        start = end + 1


def op_time(op: str, ms: float, where: str) -> OpTime:
    """An operator's time, refused (one line naming ``where``) unless a board can have
    measured it: NaN, infinite, negative or above :data:`MAX_MS` is a broken timer."""
    if not math.isfinite(ms) or not 0 <= ms <= MAX_MS:
        raise InputError(f"{where}: {op[:40]} took {ms!r} ms, which no board measures (0 to "
                         f"{MAX_MS:,.0f} ms); a broken timer or a wrong tick rate")
    return OpTime(op, ms)


def check_tick_rate(ticks_per_second: float | None, source: str) -> float:
    """The rate ticks are converted with, refused when missing or implausible."""
    if ticks_per_second is None:
        raise InputError(f"{source}: MicroProfiler counts ticks: give their rate "
                         f"(--ticks-per-second, or --clock when they are CPU cycles)")
    low, high = TICK_RATE_HZ
    if not (math.isfinite(ticks_per_second) and low <= ticks_per_second <= high):
        raise InputError(f"{source}: a tick rate of {ticks_per_second:g} Hz; a board's timer "
                         f"counts between {low:g} Hz and {high:g} Hz")
    return ticks_per_second


class _Events:
    """The op events of one log as they are read: ticks checked and converted, the count
    bounded, op names shared (a long log repeats a few dozen names). The rate is asked for
    at the first event: a file without any says so rather than asking for a rate."""

    def __init__(self, ticks_per_second: float | None, source: str) -> None:
        self.ticks_per_second, self.source = ticks_per_second, source
        self.ops: list[OpTime] = []
        self._names: dict[str, str] = {}

    def add(self, op: str, ticks: str, line: int) -> None:
        where = f"{self.source}:{line}"
        rate = check_tick_rate(self.ticks_per_second, self.source)
        if ticks.startswith("-"):
            raise InputError(f"{where}: {op[:40]} took {ticks[:24]} ticks; a tick count is not "
                             f"negative")
        if len(ticks) > 20 or int(ticks) > MAX_TICKS:
            raise InputError(f"{where}: {op[:40]} took a tick count of {len(ticks):,} digits, more "
                             f"than a 64-bit counter holds")
        if len(self.ops) >= MAX_EVENTS:
            raise InputError(f"{self.source}: more than {MAX_EVENTS:,} op events; give a log "
                             f"of fewer runs")
        name = self._names.setdefault(op, op)
        self.ops.append(op_time(name, int(ticks) / rate * 1e3, where))


def _log_event(line: str) -> tuple[str, str] | None:
    r"""(op, ticks) of a ``Log()`` line, or None. Split at the last " took " instead of one
    search for ``(\S+) took``: that search retried the run at every position of a long
    line (a 100 KB line took a minute)."""
    head, took, tail = line.rpartition(" took ")
    if not took or not head or head[-1].isspace():
        return None
    m = _EVENT_TAIL.fullmatch(tail)
    op = head.rsplit(None, 1)[-1]
    if m is None or _OP_NAME.fullmatch(op) is None:
        return None
    return op, m.group(1)


def parse_micro_log(text: str, ticks_per_second: float | None, source: str) -> list[OpTime]:
    """Every op event of a ``MicroProfiler::Log()`` output, in order (all runs together)."""
    events = _Events(ticks_per_second, source)
    for n, line in numbered_lines(text):
        if (found := _log_event(line)) is not None:
            events.add(*found, n)
    return events.ops


def _csv_row(line: str) -> list[str]:
    if len(line) > MAX_LINE_CHARS:
        return []  # not a row; the csv module refuses fields over 128 KiB with a traceback
    return [c.strip() for c in next(csv.reader([line]), [])]


def parse_micro_csv(text: str, ticks_per_second: float | None, source: str) -> list[OpTime]:
    """Every row of the ``MicroProfiler::LogCsv()`` tables in ``text`` (a new header starts
    another run; lines around the tables are skipped). Inside a table, a row whose event
    index is a number must have whole ticks."""
    events = _Events(ticks_per_second, source)
    inside = False
    for n, raw in numbered_lines(text):
        line = raw.strip()
        if line == CSV_HEADER:
            inside = True
            continue
        row = _csv_row(line) if inside else []
        if len(row) == 3 and row[0].isascii() and row[0].isdigit():
            if _TICKS.fullmatch(row[2]) is None:
                raise InputError(f"{source}:{n}: ticks {row[2][:40]!r} of {row[1][:40]} are "
                                 f"not a whole number")
            events.add(row[1], row[2], n)
        else:
            inside = False
    return events.ops


def read_profiler_log(path: Path, ticks_per_second: float | None) -> tuple[str, list[OpTime]]:
    """(form, op events) of a MicroProfiler log file, in either form."""
    return parse_profiler_log(read_board_text(path, "log"), ticks_per_second, str(path))


def parse_profiler_log(text: str, ticks_per_second: float | None,
                       source: str) -> tuple[str, list[OpTime]]:
    """(form, op events) of MicroProfiler output, in either form."""
    if CSV_HEADER in text:
        return "MicroProfiler CSV", parse_micro_csv(text, ticks_per_second, source)
    ops = parse_micro_log(text, ticks_per_second, source)
    if not ops:
        raise InputError(f"{source}: no MicroProfiler lines ('CONV_2D took N ticks (M ms).' "
                         f"or a \"Event\",\"Tag\",\"Ticks\" table) and no benchmark_model "
                         f"op profile in it")
    return "MicroProfiler log", ops


def runs_of(ops: list[OpTime], n_ops: int, source: str) -> tuple[tuple[OpTime, ...], ...]:
    """``ops`` cut into runs of ``n_ops`` (the model's operator count); anything else is a
    log of another model. A run that adds up to no time says the timer did not count."""
    if not ops:
        raise InputError(f"{source}: no operator timings in the log")
    if n_ops <= 0 or len(ops) % n_ops:
        raise InputError(f"{source}: the log has {len(ops)} op events, the model has {n_ops} "
                         f"operators (not the log of this model, or a cut log)")
    runs = tuple(tuple(ops[i:i + n_ops]) for i in range(0, len(ops), n_ops))
    for k, run in enumerate(runs, 1):
        total = sum(o.ms for o in run)
        if not 0 < total <= MAX_MS:
            raise InputError(f"{source}: run {k} of the log adds up to {total:g} ms; a run "
                             f"takes more than 0 and at most {MAX_MS:,.0f} ms (a timer that "
                             f"did not count, or a wrong tick rate)")
    return runs


def _table_ms(cell: str, where: str) -> float:
    ms = float(cell)
    if not (math.isfinite(ms) and 0 < ms <= MAX_MS):
        raise InputError(f"{where}: latency {cell[:40]} ms is not a positive number up to "
                         f"{MAX_MS:,.0f} ms (a day)")
    return ms


def read_latency_table(path: Path) -> list[tuple[Path, float]]:
    """A CSV of whole-model latencies: ``model file, ms`` per row (a header row is allowed;
    model paths are relative to the table's folder)."""
    data = read_regular_bytes(path, "the latency table", MAX_TABLE_BYTES, ".csv file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: the latency table is not UTF-8 text (byte "
                         f"{exc.start})") from None
    out: list[tuple[Path, float]] = []
    for n, line in numbered_lines(text):
        where = f"{path}:{n}"
        if len(line) > MAX_LINE_CHARS:
            raise InputError(f"{where}: a row of {len(line):,} characters; a row is "
                             f"'model file, ms'")
        try:
            row = next(csv.reader([line]), [])
        except csv.Error as exc:
            raise InputError(f"{where}: not a CSV row ({exc})") from None
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        try:
            if len(cells) != 2:
                raise ValueError
            ms = _table_ms(cells[1], where)
        except ValueError:
            if n == 1:
                continue  # a header
            raise InputError(f"{where}: expected 'model file, ms', got "
                             f"{line[:80]!r}") from None
        if "\0" in cells[0]:
            raise InputError(f"{where}: the model path has a NUL byte")
        if len(out) >= MAX_TABLE_ROWS:
            raise InputError(f"{path}: more than {MAX_TABLE_ROWS} models; calibrate on "
                             f"fewer at a time")
        out.append((path.parent / cells[0], ms))
    if not out:
        raise InputError(f"{path}: no 'model file, ms' rows")
    return out
