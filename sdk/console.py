"""Terminal output for the CLI: tables, progress and the native log, one behaviour everywhere.

- Width: the terminal's, or ``COLUMNS``; piped without ``COLUMNS`` nothing is folded (a log
  or ``grep`` wants whole lines) and no line carries trailing padding.
- ``NO_COLOR`` (any non-empty value) or ``--no-color``: no escape sequence at all, bold
  included (https://no-color.org asks for no ANSI colour; rich keeps bold and dim then).
- Tables and folded lines never split a word, nor a number from its unit (``1.00 s``): a
  table too wide for the terminal is shown row by row instead.
- Progress (:func:`progress`, :func:`step`, :func:`count`) is a transient line on stderr when
  stderr is a terminal; off a terminal or with ``--quiet`` nothing is drawn.
- What native libraries write to file descriptor 2 (TensorFlow's absl/oneDNN/CUDA start-up
  lines, the MLIR quantizer's ``fully_quantize: …``) goes to a log file
  (:func:`native_log`), shown when a command fails; a process that converts many candidates
  keeps TensorFlow's C++ log and the converter's per-conversion warning out
  (:func:`quiet_conversions`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit.simulator.infra import jsonout
from devicefit.simulator.infra.escape import clean
from devicefit.simulator.report.views.columns import fold_spans

if TYPE_CHECKING:
    from rich.console import Console

    from devicefit.sdk.terminal import FirstFit, FitTable

#: Width for output that goes to a pipe or file without ``COLUMNS``: wide enough that no
#: table or sentence folds; trailing padding is stripped, so it costs nothing.
PIPE_WIDTH = 1000
#: Lines of the native log shown with a failure.
LOG_TAIL_LINES = 12


def color_disabled(no_color: bool = False) -> bool:
    """``--no-color`` or a non-empty ``NO_COLOR``."""
    return no_color or os.environ.get("NO_COLOR", "") != ""


def console_width(stream: Any) -> int | None:
    """``COLUMNS`` if set, the terminal's width on a TTY (None: rich asks it), else wide."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if _isatty(stream) else PIPE_WIDTH


def output_width(stream: Any = None) -> int | None:
    """The width plain text is laid out at on ``stream`` (stdout): ``COLUMNS`` or the
    terminal's; None when piped without ``COLUMNS`` (nothing folded)."""
    stream = sys.stdout if stream is None else stream
    width = console_width(stream) or shutil.get_terminal_size().columns
    return None if width >= PIPE_WIDTH else width


def fold(text: str, stream: Any = None) -> str:
    """``text`` for plain ``print`` (report and diff views): lines wider than the terminal or
    ``COLUMNS`` folded between :func:`~simulator.report.views.columns.atoms` (never between a
    number and its unit), each continuation indented under its line's own text. Piped
    without ``COLUMNS`` it is left whole, like the tables."""
    width = output_width(stream)
    if width is None:
        return text
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        body = line.strip()
        spans = fold_spans(body, width - len(indent), indent=4)
        out += [indent + ("    " if i else "") + body[a:b] for i, (a, b) in enumerate(spans)]
    return "\n".join(out)


def _may_be_a_terminal(stream: Any) -> bool:
    """A terminal, or what rich takes for one (it colours a pipe when told to)."""
    return _isatty(stream) or any(v in os.environ for v in ("FORCE_COLOR", "TTY_COMPATIBLE"))


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def make_console(no_color: bool = False, stderr: bool = False) -> Console:
    from devicefit.sdk.terminal import SafeConsole

    stream = sys.stderr if stderr else sys.stdout
    plain = color_disabled(no_color)
    width = console_width(stream)
    return SafeConsole(no_color=plain, color_system=None if plain else "auto", stderr=stderr,
                       highlight=False, width=width, folds=width is None or width < PIPE_WIDTH)


#: Words of the text views and their colours on a colour terminal (as ``check`` shows
#: statuses); lines that start at the margin are section headings, in bold.
_REPORT_STYLES = ((r"(?m)^\S[^\n]*$", "bold"), (r"\bPASS\b|(?<=  )ok(?=  )", "green"),
                  (r"\b(FAIL|OVER|UNSUPPORTED|DISAGREE|FAILED)\b", "bold red"),
                  (r"\b(AT RISK|NOT CHECKED|UNCHECKED)\b", "bold yellow"))


def print_report(text: str, no_color: bool = False) -> None:
    """A text view (``simulate``, ``diff``) on stdout: folded to the terminal, its verdict
    and statuses in colour where :func:`make_console` gives colour (a terminal, no
    ``NO_COLOR``, no ``--no-color``), plain text otherwise."""
    if not _may_be_a_terminal(sys.stdout):
        # What rich prints off a terminal (no styles, tabs expanded, no trailing padding),
        # without importing it: a fifth of what a static simulate to a pipe imported.
        sys.stdout.write("\n".join(line.expandtabs(8).rstrip(" ")
                                    for line in fold(text).split("\n")))
        return
    from rich.text import Text

    console = make_console(no_color)
    styled = Text(fold(text))
    for pattern, style in _REPORT_STYLES:
        styled.highlight_regex(pattern, style)
    console.print(styled, end="", soft_wrap=True)


# --------------------------------------------------------------------------- tables
def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          whole: Sequence[int] = (), names: Sequence[int] = ()) -> FitTable:
    """A table of rich-markup cells (None shows empty; a tuple is a cell of several lines)
    for :meth:`Console.print`; the columns ``whole`` are never folded, those of ``names``
    also after a ``-`` or ``_`` (see :class:`~sdk.terminal.FitTable`)."""
    from devicefit.sdk.terminal import FitTable

    return FitTable(title and clean(title), [clean(c) for c in columns],
                    [[_cell(c) for c in row] for row in rows], whole=frozenset(whole),
                    names=frozenset(names))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return "\n".join(clean(line, one_line=True) for line in value)
    return clean(value, one_line=True)


def first_fit(*forms: FitTable) -> FirstFit:
    """One table in several forms, richest first: the console shows the first that fits it
    unfolded (see :class:`~sdk.terminal.FirstFit`)."""
    from devicefit.sdk.terminal import FirstFit

    return FirstFit(list(forms))


def print_json(data: Any) -> None:
    """Machine-readable output: stable key order, no colour, to stdout."""
    sys.stdout.write(jsonout.dumps(data, indent=2, sort_keys=False) + "\n")


# --------------------------------------------------------------------------- progress
class Steps:
    """The progress of one command: a transient line on a terminal (spinner, step, count,
    elapsed time), drawn from the first step on; without a console it records nothing.

    Library code reports through :func:`step` and :func:`count`, which reach the
    :class:`Steps` the CLI opened (:func:`progress`) and do nothing when the library is used
    from Python.
    """

    def __init__(self, console: Console | None) -> None:
        self.console = console
        self._bars: Any = None
        self._task: Any = None
        self._text = ""

    def _started(self) -> Any:
        if self._bars is None and self.console is not None:
            from rich.progress import (
                BarColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.table import Column

            # "3/40" only where there is a count (rich's MofN column shows "0/?" otherwise).
            counted = TextColumn("{task.fields[counted]}")
            # A long step's name gives way on a narrow terminal (…), not the elapsed time
            # (rich cut it to "0:00:…" at 80 columns): room left by the other columns.
            named = TextColumn("{task.description}", table_column=Column(
                no_wrap=True, overflow="ellipsis", max_width=max(self.console.width - 44, 10)))
            # print() goes above the line only when stdout is this terminal too; redirected
            # to a file it must stay in the file (rich would send it to stderr's terminal).
            self._bars = Progress(SpinnerColumn(), named,
                                  BarColumn(bar_width=24), counted, TimeElapsedColumn(),
                                  console=self.console, transient=True,
                                  redirect_stdout=_isatty(sys.stdout))
            self._bars.start()
        return self._bars

    def step(self, text: str) -> None:
        """A new step starts (it replaces the one before)."""
        bars = self._started()
        if bars is None:
            return
        if self._task is not None:
            bars.remove_task(self._task)
        self._text = text
        self._task = bars.add_task(clean(text, one_line=True), total=None, counted="")

    def count(self, text: str, done: int, total: int) -> None:
        """``done`` of ``total`` within a step named ``text`` (a new step if it is new)."""
        if self._started() is None:
            return
        if self._task is None or text != self._text:
            self.step(text)
        self._bars.update(self._task, completed=done, total=total, counted=f"{done}/{total}")

    def close(self) -> None:
        """The line taken off the terminal; a later step draws a new one."""
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
        self._task = None
        self._text = ""


_CURRENT: ContextVar[Steps | None] = ContextVar("devicefit_steps", default=None)


@contextlib.contextmanager
def progress(*, quiet: bool = False, no_color: bool = False) -> Iterator[Steps]:
    """Progress for the duration of a command: drawn on stderr only when it is a terminal
    and not ``quiet``."""
    shown = not quiet and _isatty(sys.stderr)
    steps = Steps(make_console(no_color, stderr=True) if shown else None)
    token = _CURRENT.set(steps)
    try:
        yield steps
    finally:
        steps.close()
        _CURRENT.reset(token)


def done() -> None:
    """The steps are over: the progress line leaves the terminal before the results are
    printed (a later :func:`step` draws it again)."""
    steps = _CURRENT.get()
    if steps is not None:
        steps.close()


def step(text: str) -> None:
    """Report that a step starts (no-op outside a CLI command)."""
    steps = _CURRENT.get()
    if steps is not None:
        steps.step(text)


def count(text: str, done: int, total: int) -> None:
    """Report ``done`` of ``total`` within a step (no-op outside a CLI command)."""
    steps = _CURRENT.get()
    if steps is not None:
        steps.count(text, done, total)


# --------------------------------------------------------------------------- native log
@dataclass
class NativeLog:
    """Where native stderr went; ``keep`` once it should survive the command."""

    path: Path
    keep: bool = False
    chosen: bool = False  # the user named the file (--log): never deleted

    def tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        """The last non-empty lines, control characters removed."""
        return log_tail(self.path, lines)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of a log file (empty if unreadable), without
    Python's tracebacks and faulthandler's stacks: the error message already says what they
    end in, and a traceback under it would read as a crash of devicefit."""
    try:
        text = path.read_bytes()[-64 * 1024:].decode("utf-8", "replace")
    except OSError:
        return []
    return [clean(ln, one_line=True) for ln in _without_python_stacks(text.splitlines())
            if ln.strip()][-lines:]


_STACK_STARTS = ("Traceback (most recent call last):", "Fatal Python error",
                 "Current thread 0x", "Thread 0x", "Stack (most recent call first)",
                 "Extension modules:", "During handling of the above exception",
                 "The above exception was the direct cause")


def _without_python_stacks(lines: list[str]) -> list[str]:
    kept, in_stack = [], False
    for line in lines:
        if line.startswith(_STACK_STARTS):
            in_stack = True
        elif in_stack and (line[:1] in (" ", "\t") or not line.strip()):
            pass  # a frame or its source line
        elif in_stack:
            in_stack = False  # the exception's own line ("ValueError: ...") ends the stack
        else:
            kept.append(line)
    return kept


@contextlib.contextmanager
def native_log(path: str | Path | None = None) -> Iterator[NativeLog]:
    """Send file descriptor 2 (native libraries, child processes that inherit it) and
    third-party Python warnings to a log file for the duration; ``sys.stderr`` keeps
    writing to the terminal, so the program's own messages and progress still show.

    Without ``path`` the log is a temporary file, deleted at the end unless ``keep`` was
    set (a failure) and it has something to show. Only file descriptors are swapped: a ``sys.stderr``
    that is not fd 2 (pytest's capture) is left alone.
    """
    if path is None:
        fd, name = tempfile.mkstemp(prefix="devicefit-", suffix=".log")
        log = NativeLog(Path(name))
    else:
        log = NativeLog(Path(path), chosen=True)
        fd = os.open(log.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    original = sys.stderr
    with contextlib.suppress(AttributeError, ValueError, OSError):
        original.flush()
    try:
        saved: int | None = os.dup(2)
    except OSError:  # started with stderr closed: nothing to restore but the closed state
        saved = None
    terminal = None
    if saved is not None and _fileno(original) == 2:
        terminal = io.TextIOWrapper(os.fdopen(os.dup(saved), "wb", buffering=0),
                                    encoding=getattr(original, "encoding", None) or "utf-8",
                                    errors="backslashreplace", line_buffering=True,
                                    write_through=True)
        sys.stderr = terminal
    os.dup2(fd, 2)
    os.close(fd)
    shown = warnings.showwarning
    warnings.showwarning = _warning_to_log
    try:
        yield log
    finally:
        warnings.showwarning = shown
        if saved is None:
            os.close(2)
        else:
            os.dup2(saved, 2)
            os.close(saved)
        if terminal is not None:
            sys.stderr = original
            terminal.close()
        if not (log.chosen or (log.keep and log.tail(1))):
            log.path.unlink(missing_ok=True)


def _warning_to_log(message: Any, category: type[Warning], filename: str, lineno: int,
                    file: Any = None, line: str | None = None) -> None:
    # fd 2 is the log while native_log is active: write there, not to sys.stderr.
    text = warnings.formatwarning(message, category, filename, lineno, line)
    with contextlib.suppress(OSError):
        os.write(2, text.encode("utf-8", "replace"))


def _fileno(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return None


def quiet_conversions() -> None:
    """For a process that converts many candidates (``fit``, ``search`` and their worker
    processes): TensorFlow's C++ log off (it must happen before TensorFlow is imported) and
    the converter's warning about input statistics, given once per full-integer
    conversion, ignored."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", message="Statistics for quantized inputs")


def print_stderr(line: str) -> None:
    """A line beside a ``--json`` answer: stdout holds the JSON alone."""
    print(line, file=sys.stderr)
