"""The one exception hierarchy of devicefit.

The simulator defines it (``sdk`` may import ``simulator``, never the reverse) and the CLI
catches only :class:`DevicefitError`: anything else escaping is a bug and keeps its
traceback. Each class carries the process exit code the CLI maps it to.
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Sequence


class DevicefitError(Exception):
    """A problem the user can fix; printed as one line, never as a traceback."""

    exit_code: int = 2


class UsageError(DevicefitError):
    """Bad command-line usage or option values."""


class MissingExtra(UsageError):
    """A command needs an optional dependency that the light install (``pip install
    devicefit``) leaves out: one line naming the ``pip install 'devicefit[EXTRA]'`` that
    brings it."""

    def __init__(self, module: str, purpose: str, alternative: str = "") -> None:
        extra, distribution = EXTRAS[module]
        super().__init__(f"{purpose} needs {distribution}, which the light install leaves out: "
                         f"pip install 'devicefit[{extra}]'"
                         + (f" ({alternative})" if alternative else ""))
        self.module = module
        self.extra = extra


#: Top-level module of an optional dependency → (the extra of pyproject.toml that installs
#: it, the distribution named in the message). keras and sqlalchemy come with tensorflow and
#: optuna. tests/sdk/test_light_install.py holds this against pyproject.toml.
EXTRAS: dict[str, tuple[str, str]] = {
    "tensorflow": ("convert", "TensorFlow"),
    "keras": ("convert", "TensorFlow"),
    "sklearn": ("convert", "scikit-learn"),
    "optuna": ("convert", "optuna"),
    "sqlalchemy": ("convert", "optuna"),
    "matplotlib": ("plot", "matplotlib"),
    "psycopg2": ("distributed", "psycopg2"),
    "ethosu": ("ethos-u", "Arm's Vela compiler (ethos-u-vela)"),
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

    ``stage``: where it stopped (load, allocate, invoke), when known; ``crashed``: the
    runtime died (a signal or an exit status), rather than refusing with a message."""

    def __init__(self, message: str, *, stage: str | None = None, crashed: bool = False):
        super().__init__(message)
        self.stage = stage
        self.crashed = crashed
