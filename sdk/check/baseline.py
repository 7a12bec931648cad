"""Baselines: the figures of an accepted run, and the regression checks against them.

Regressions compare the *static* figures only (flash and the arena the budget judges, from
the planner; latency from the cost model's device estimate): they are deterministic, so a CI
gate on them never flakes. A host-measured latency would move with the CI machine's load.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import InputError
from devicefit.simulator.report import Report
from devicefit.simulator.safeyaml import read_regular_file
from devicefit.simulator.verdict import static_arena_bytes

from .project import RegressionRule

BASELINE_VERSION = 1
#: A baseline holds a few numbers per model × profile; more than this is not one.
MAX_BASELINE_BYTES = 64 * 1024**2
#: Metric → (baseline key, unit).
METRIC_KEYS = {"flash": ("flash_bytes", "bytes"), "arena": ("arena_bytes", "bytes"),
               "latency": ("latency_ms", "ms")}


@dataclass
class RegressionCheck:
    """One metric against its baseline: like a budget check whose limit comes from history."""

    name: str  # "flash" | "arena" | "latency"
    baseline: float
    value: float
    limit: float
    ok: bool
    unit: str  # "bytes" | "ms"
    #: limit − value, as for a budget.
    margin: float
    rule: str  # e.g. "5%"


def report_metrics(report: Report) -> dict[str, float | None]:
    """The figures a baseline keeps for one model × profile."""
    latency = report.latency.estimated_device_ms if report.latency else None
    return {"flash_bytes": report.memory.flash_bytes, "arena_bytes": static_arena_bytes(report),
            "latency_ms": latency}


def starts_baseline(given: Path | None, named: Path | None) -> bool:
    """True on a project's first run: the file its ``baseline:`` key names does not exist
    yet (and no ``--baseline`` was given), so an unsharded run writes it, as
    ``--update-baseline`` would, and a shard checks without it. A missing file given with
    ``--baseline`` stays an error: likely a typo."""
    return given is None and named is not None and not named.exists()


def first_run_note(path: Path, sharded: bool = False) -> str:
    if sharded:
        return (f"{path}: no baseline yet; the regression rules are not checked (a shard "
                f"cannot write it: run unsharded once, or 'devicefit check merge SHARDS "
                f"--update-baseline --baseline {path}')")
    return (f"{path}: no baseline yet, so this run writes it (the regression rules apply "
            f"from the next run; commit the file)")


def load_baseline(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Model name → profile name → metrics; :class:`InputError` if missing or malformed."""
    if not path.exists():
        raise InputError(f"{path}: baseline file not found (write it from a run you accept "
                         f"with 'devicefit check --update-baseline'; a project's first "
                         f"run writes the file its 'baseline:' key names)")
    # A regular file of bounded size (not /dev/zero), finite numbers only (NaN would pass
    # every regression rule).
    text = read_regular_file(path, "baseline", limit=MAX_BASELINE_BYTES, kind=".json")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: cannot read baseline: {exc}") from exc
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("version") != BASELINE_VERSION or not (
            isinstance(models, dict)
            and all(isinstance(v, dict) and all(isinstance(m, dict) and _finite_metrics(m)
                                                for m in v.values())
                    for v in models.values())):
        raise InputError(f"{path}: not a devicefit baseline (version {BASELINE_VERSION}); "
                         f"rewrite it with 'devicefit check --update-baseline'")
    return models


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a figure")


def _finite_metrics(metrics: dict) -> bool:
    return all(v is None or isinstance(v, str) or (isinstance(v, (int, float))
                                                   and math.isfinite(v))
               for v in metrics.values())


def baseline_document(entries: list[tuple[str, str, Report]]) -> dict[str, Any]:
    """The baseline file's content for (model, profile, report) triples."""
    models: dict[str, dict[str, Any]] = {}
    for model, profile, report in entries:
        models.setdefault(model, {})[profile] = {**report_metrics(report),
                                                 "sha256": report.model.sha256}
    return {"version": BASELINE_VERSION, "generated_by": "devicefit check", "models": models}


def compare(rules: tuple[RegressionRule, ...], entry: dict[str, Any],
            report: Report) -> tuple[list[RegressionCheck], list[str]]:
    """Checks for every rule, and notes for the rules that could not be evaluated."""
    checks: list[RegressionCheck] = []
    notes: list[str] = []
    now = report_metrics(report)
    for rule in rules:
        key, unit = METRIC_KEYS[rule.metric]
        base, value = entry.get(key), now[key]
        if not isinstance(base, (int, float)) or value is None:
            missing = "the baseline" if not isinstance(base, (int, float)) else "this run"
            notes.append(f"{rule.metric}: no figure in {missing}, regression not checked")
            continue
        limit = rule.limit(float(base))
        checks.append(RegressionCheck(rule.metric, float(base), float(value), limit,
                                      value <= limit, unit, limit - value, rule.text))
    return checks, notes
