"""The one exception hierarchy of devicefit.

The simulator defines it (``sdk`` may import ``simulator``, never the reverse) and the CLI
catches only :class:`DevicefitError`: anything else escaping is a bug and keeps its
traceback. Each class carries the process exit code the CLI maps it to.
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass


class DevicefitError(Exception):
    """A problem the user can fix; printed as one line, never as a traceback."""

    exit_code: int = 2


class UsageError(DevicefitError):
    """Bad command-line usage or option values."""


class MissingExtra(UsageError):
    """A command needs an optional dependency that the light install (``pip install
    devicefit``) leaves out: one line naming the ``pip install`` that brings it
    (:func:`install_command`)."""

    def __init__(self, module: str, purpose: str, alternative: str = "") -> None:
        extra, distribution = EXTRAS[module]
        super().__init__(f"{purpose} needs {distribution}, which the light install leaves out: "
                         f"{install_command(extra)}"
                         + (f" ({alternative})" if alternative else ""))
        self.module = module
        self.extra = extra


def install_command(extra: str) -> str:
    """``pip install`` of this devicefit with ``extra``. devicefit is on no package index, so
    ``'devicefit[EXTRA]'`` would fail (or install another project that took the name): where
    pip installed it from a folder, a wheel or a URL (its ``direct_url.json``, PEP 610), that
    source; in a source checkout never installed, the checkout; from an index, the name."""
    import importlib.metadata
    import json
    import shlex
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    try:
        direct = importlib.metadata.distribution("devicefit").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        checkout = Path(__file__).resolve().parents[1]  # simulator/ is the checkout's
        where = checkout if (checkout / "pyproject.toml").is_file() else "/path/to/devicefit"
        return f"pip install {shlex.quote(f'{where}[{extra}]')}"
    url = json.loads(direct).get("url", "") if direct else ""
    if not url:
        return f"pip install {shlex.quote(f'devicefit[{extra}]')}"
    if url.startswith("file://"):
        return f"pip install {shlex.quote(f'{unquote(urlparse(url).path)}[{extra}]')}"
    return f"pip install {shlex.quote(f'devicefit[{extra}] @ {url}')}"


#: Top-level module of an optional dependency → (the extra of pyproject.toml that installs
#: it, the distribution named in the message). keras and sqlalchemy come with tensorflow and
#: optuna. tests/sdk/cli/test_light_install.py holds this against pyproject.toml.
EXTRAS: dict[str, tuple[str, str]] = {
    "tensorflow": ("convert", "TensorFlow"),
    "keras": ("convert", "TensorFlow"),
    "sklearn": ("convert", "scikit-learn"),
    "optuna": ("study", "optuna"),
    "sqlalchemy": ("study", "optuna"),
    "matplotlib": ("plot", "matplotlib"),
    "psycopg2": ("distributed", "psycopg2"),
    "ethosu": ("ethos-u", "Arm's Vela compiler (ethos-u-vela)"),
    "ai_edge_quantizer": ("convert", "AI Edge Quantizer (ai-edge-quantizer)"),
}


def missing_extra(exc: BaseException, purpose: str) -> MissingExtra | None:
    """The :class:`MissingExtra` an ``ImportError`` of an optional module stands for, also
    when a library re-raised it as its own (optuna: "Failed to import DB access module");
    None for any other exception (a missing module of devicefit itself stays a bug)."""
    seen: BaseException | None = exc
    while seen is not None:
        name = seen.name if isinstance(seen, ImportError) else None
        if (top := (name or "").partition(".")[0]) in EXTRAS:
            return MissingExtra(top, purpose)
        seen = seen.__cause__ or seen.__context__
    return None


def require_extra(module: str, purpose: str, alternative: str = "") -> None:
    """Raise :class:`MissingExtra` at once when ``module`` is not installed (before any work
    is done, rather than at the first import deep inside it)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtra(module, purpose, alternative)


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for a misspelt name, or ``""`` when nothing is near.

    The names containing ``word`` come first (``coral`` → every coral profile), then the
    closest spellings (``simualte`` → ``simulate``)."""
    lowered = word.lower()
    close = [c for c in choices if len(lowered) >= 3 and lowered in c.lower()] or \
        difflib.get_close_matches(word, list(choices), n=1)
    if not close:
        return ""
    if len(close) == 1:
        return f"; did you mean '{close[0]}'?"
    shown = ", ".join(f"'{c}'" for c in close[:SUGGESTIONS])
    return f"; did you mean one of {shown}{', ...' if len(close) > SUGGESTIONS else ''}?"


#: The most names a did-you-mean lists.
SUGGESTIONS = 5


class InputError(DevicefitError):
    """A missing, unreadable or malformed input file (model, data, config)."""


class ProfileError(InputError):
    """A device profile that does not load or does not validate."""


class ModelFormatError(InputError):
    """A file that is not a valid ``.tflite`` flatbuffer."""


class RuntimeFailure(DevicefitError):
    """A native runtime crashed, hung or refused a model (it ran in a child process).

    Exit 1, as a failed budget: the model does not work there, which is a verdict on the
    model, not bad input (2). ``stage``: where it stopped (load, allocate, invoke), when
    known; ``crashed``: the runtime died (a signal or an exit status), rather than refusing
    with a message."""

    exit_code = 1

    def __init__(self, message: str, *, stage: str | None = None, crashed: bool = False):
        super().__init__(message)
        self.stage = stage
        self.crashed = crashed


class ToolFailure(RuntimeFailure):
    """A tool around the model failed, not the model in it: a compiler rejecting its
    configuration or dying where it names no operator, adb, a result nobody can read.
    Exit 2, as bad input: nothing was learnt about the model, and a CI job must not read it
    as a model that does not work (1)."""

    exit_code = 2


@dataclass(frozen=True)
class CompileRefusal:
    """What a target's compiler said when it refused a model (Vela: an operator it cannot
    take, e.g. a float HARD_SWISH, "IFM has to be 8bit"). A finding about the model on that
    device, not bad input: the model's report carries it and fails, and has no figure of
    the compiled model, which does not exist."""

    #: The compiler and its version: "Vela 5.2.0".
    compiler: str
    #: Its whole message, as it wrote it.
    message: str
    #: The operator it names, if it names one: its type and output tensor as the compiler
    #: writes them, and where it is in the model (``op_index`` None when no single operator
    #: of the model has that type and output).
    op: str | None = None
    tensor: str | None = None
    op_index: int | None = None
    subgraph: int = 0
    #: The rule the operator breaks (or, naming none, why it refused), and the compiler's
    #: figures for it.
    reason: str | None = None
    detail: str | None = None
    #: What the user can do about it.
    advice: str | None = None

    def operator(self) -> str | None:
        """``op 3 HARD_SWISH (output 'h_swish'): IFM has to be 8bit (IFM type=FLOAT32)``,
        or None when the compiler named no operator."""
        if self.op is None:
            return None
        where = "" if self.op_index is None else (
            f"{self.subgraph}:{self.op_index} " if self.subgraph else f"{self.op_index} ")
        output = f" (output '{self.tensor}')" if self.tensor is not None else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"op {where}{self.op}{output}: {self.reason or 'refused'}{detail}"

    def line(self) -> str:
        """The refusal in one line: who, which operator, why, and what to do."""
        said = self.operator() or self.reason or self.message.strip() or "no message"
        return (f"{self.compiler} could not compile the model: {said}"
                + (f"; {self.advice}" if self.advice else ""))


class CompilerRefused(DevicefitError):
    """A target's compiler refused the model. ``simulate`` reports it (verdict fail, exit
    1); a command that has no report to put it in prints it as one line, exit 1."""

    exit_code = 1

    def __init__(self, refusal: CompileRefusal) -> None:
        super().__init__(refusal.line())
        self.refusal = refusal
