"""Views of a :class:`simulator.report.report.Report`, one module per format, found by name.

Each view renders numbers the report already has; none computes a figure of its own. A
module of this package that defines ``VIEW`` (a :class:`~simulator.report.views.base.View`) is
registered under the view's name: text, json, html, png, junit, markdown, csv.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View


def _discover() -> dict[str, View]:
    found: dict[str, View] = {}
    for info in pkgutil.iter_modules(__path__):
        view = getattr(importlib.import_module(f"{__name__}.{info.name}"), "VIEW", None)
        if isinstance(view, View):
            found[view.name] = view
    return found


#: View name → view.
VIEWS: dict[str, View] = _discover()


def render(name: str, report: Report, **options: Any) -> str | bytes:
    """``report`` in the format ``name`` (a key of :data:`VIEWS`)."""
    return VIEWS[name].render(report, **options)
