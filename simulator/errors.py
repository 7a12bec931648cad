"""The one exception hierarchy of devicefit.

The simulator defines it (``sdk`` may import ``simulator``, never the reverse) and the CLI
catches only :class:`DevicefitError`: anything else escaping is a bug and keeps its
traceback. Each class carries the process exit code the CLI maps it to.
"""

from __future__ import annotations


class DevicefitError(Exception):
    """A problem the user can fix; printed as one line, never as a traceback."""

    exit_code: int = 2


class UsageError(DevicefitError):
    """Bad command-line usage or option values."""


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
