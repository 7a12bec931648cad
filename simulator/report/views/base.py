"""What a view is: a named renderer of a :class:`~simulator.report.report.Report`.

Every module of :mod:`simulator.report.views` that defines ``VIEW`` is one output format; the
package finds them (:data:`simulator.report.views.VIEWS`), so a new format is one module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devicefit.simulator.infra.units import format_bytes
from devicefit.simulator.report.report import MemoryReport, Report


@dataclass(frozen=True)
class View:
    #: The format's name, as commands and ``VIEWS`` know it ("text", "json", ...).
    name: str
    #: The file suffix of its output.
    suffix: str
    #: The report → its text (``str``) or its bytes (a picture); options are the view's own.
    render: Callable[..., str | bytes]
    #: Bytes, not text: written to a file, never printed.
    binary: bool = False


def heading(report: Report) -> str:
    """``model on profile``: what a single report's page or picture is titled."""
    return f"{report.model.path} on {report.profile.name}"


def flash_basis(mem: MemoryReport, decimal: bool = False) -> str:
    """What the flash figure adds up: the model (exact) and the runtime's code (estimated),
    in kB/MB with ``decimal`` (:func:`~simulator.report.views.messages.decimal_sizes`)."""
    if not mem.flash_code_bytes:
        return "exact: the model file (no runtime code counted)"
    return (f"estimated: model {format_bytes(mem.flash_model_bytes, decimal)} + code "
            f"{format_bytes(mem.flash_code_bytes, decimal)} ({mem.flash_code_basis})")
