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
from devicefit.simulator.infra.safeyaml import read_regular_file
from devicefit.simulator.judge.verdict import static_arena_bytes
from devicefit.simulator.report.report import Report, plain_fields
from devicefit.simulator.types import BudgetName, Unit

from .project import RegressionRule

BASELINE_VERSION = 1
#: A baseline holds a few numbers per model × profile; more than this is not one.
MAX_BASELINE_BYTES = 64 * 1024**2
#: Metric → (baseline key, unit).
METRIC_KEYS = {BudgetName.FLASH: ("flash_bytes", Unit.BYTES),
               BudgetName.ARENA: ("arena_bytes", Unit.BYTES),
               BudgetName.LATENCY: ("latency_ms", Unit.MS),
               BudgetName.TRAIN_MEMORY: ("train_memory_bytes", Unit.BYTES)}


@dataclass(frozen=True)
class RegressionCheck:
    """One metric against its baseline: like a budget check whose limit comes from history."""

    name: BudgetName
    baseline: float
    value: float
    limit: float
    ok: bool
    unit: Unit
    #: limit − value, as for a budget.
    margin: float
    rule: str  # e.g. "5%"


@dataclass(frozen=True)
class BaselineEntry:
    """The figures a baseline keeps for one model × profile (None: the run had none)."""

    flash_bytes: float | None
    arena_bytes: float | None
    latency_ms: float | None
    #: The model file the figures are of.
    sha256: str = ""
    #: The planned memory of the model's train signature (None: it has none, or the
    #: target cannot run it).
    train_memory_bytes: float | None = None

    @classmethod
    def of(cls, report: Report) -> BaselineEntry:
        latency = report.latency.estimated_device_ms if report.latency else None
        flash = report.memory.flash_bytes if report.memory is not None else None
        train = report.training.total_bytes if report.training is not None else None
        return cls(flash, static_arena_bytes(report), latency, report.model.sha256, train)

    def figure(self, metric: BudgetName) -> float | None:
        value: float | None = getattr(self, METRIC_KEYS[metric][0])
        return value


@dataclass(frozen=True)
class Baseline:
    """A baseline file: model name → profile name → figures."""

    models: dict[str, dict[str, BaselineEntry]]
    version: int = BASELINE_VERSION
    generated_by: str = "devicefit check"

    def entry(self, model: str, profile: str) -> BaselineEntry | None:
        return self.models.get(model, {}).get(profile)

    def to_dict(self) -> dict[str, Any]:
        return plain_fields(self)

    @classmethod
    def of(cls, entries: list[tuple[str, str, Report]]) -> Baseline:
        """The baseline of (model, profile, report) triples."""
        models: dict[str, dict[str, BaselineEntry]] = {}
        for model, profile, report in entries:
            models.setdefault(model, {})[profile] = BaselineEntry.of(report)
        return cls(models)


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


def load_baseline(path: Path) -> Baseline:
    """The baseline file at ``path``; :class:`InputError` if missing or malformed."""
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
    return Baseline({model: {profile: _entry(m) for profile, m in profiles.items()}
                     for model, profiles in models.items()})


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a figure")


def _finite_metrics(metrics: dict[str, Any]) -> bool:
    return all(v is None or isinstance(v, str) or (isinstance(v, (int, float))
                                                   and math.isfinite(v))
               for v in metrics.values())


def _entry(metrics: dict[str, Any]) -> BaselineEntry:
    """An entry of a checked file; a figure that is not a number is no figure (its rule is
    then noted as not checked, like a figure the baseline lacks)."""
    def figure(key: str) -> float | None:
        value = metrics.get(key)
        return value if isinstance(value, (int, float)) else None

    sha256 = metrics.get("sha256")
    return BaselineEntry(figure("flash_bytes"), figure("arena_bytes"), figure("latency_ms"),
                         sha256 if isinstance(sha256, str) else "", figure("train_memory_bytes"))


def compare(rules: tuple[RegressionRule, ...], entry: BaselineEntry,
            report: Report) -> tuple[list[RegressionCheck], list[str]]:
    """Checks for every rule, and notes for the rules that could not be evaluated."""
    checks: list[RegressionCheck] = []
    notes: list[str] = []
    now = BaselineEntry.of(report)
    for rule in rules:
        base, value = entry.figure(rule.metric), now.figure(rule.metric)
        if base is None or value is None:
            missing = "the baseline" if base is None else "this run"
            notes.append(f"{rule.metric}: no figure in {missing}, regression not checked")
            continue
        limit = rule.limit(float(base))
        checks.append(RegressionCheck(rule.metric, float(base), float(value), limit,
                                      value <= limit, METRIC_KEYS[rule.metric][1],
                                      limit - value, rule.text))
    return checks, notes
