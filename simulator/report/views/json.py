"""The JSON view: the report as data (``--json``), with its ``schema_version``, and the way
back (:func:`read_report`, for the shard results ``check merge`` combines)."""

from __future__ import annotations

from typing import Any

from devicefit.simulator.infra import jsonout
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View
from devicefit.simulator.target import section_type


def render(report: Report) -> str:
    return jsonout.dumps(report.to_dict(), indent=2) + "\n"


def read_report(data: dict[str, Any]) -> Report:
    """A report from its JSON form (:meth:`Report.from_dict` with the targets' sections): a
    newer ``schema_version`` is refused, keys no field names are dropped (why: there)."""
    return Report.from_dict(data, section_type)


VIEW = View("json", ".json", render)
