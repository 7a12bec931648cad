"""Views of a :class:`simulator.report.report.Report`, one module per format, found by name.

Each view renders numbers the report already has; none computes a figure of its own. A
format is a module of this package that defines ``VIEW`` (a
:class:`~simulator.report.views.base.View`) and its line in :data:`FORMATS`, so that
printing one format imports that view alone (the HTML page imports the firmware checks, the
picture matplotlib): text, json, html, png, junit, markdown, csv.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View

#: Format name (its module's too) -> whether it renders bytes (a picture: written to a file,
#: never printed).
FORMATS = {"csv": False, "html": False, "json": False, "junit": False, "markdown": False,
           "png": True, "text": False}

#: The formats that are text, which a command may print.
TEXT_FORMATS = sorted(name for name, binary in FORMATS.items() if not binary)


class _Views(Mapping[str, View]):
    """View name → view, each module imported when its view is first asked for."""

    def __getitem__(self, name: str) -> View:
        if name not in FORMATS:
            raise KeyError(name)
        view = importlib.import_module(f"{__name__}.{name}").VIEW
        assert isinstance(view, View) and view.name == name
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(FORMATS)

    def __len__(self) -> int:
        return len(FORMATS)


#: View name → view.
VIEWS: Mapping[str, View] = _Views()


def render(name: str, report: Report, **options: Any) -> str | bytes:
    """``report`` in the format ``name`` (a key of :data:`VIEWS`)."""
    return VIEWS[name].render(report, **options)
