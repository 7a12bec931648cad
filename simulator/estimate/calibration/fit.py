"""Fit a profile's cost terms to what the board measured, with the kernel tables as the prior.

The estimate of op *i* is today's (``simulator.estimate.latency.estimate_latency`` on the profile)
split into its cycles part ``c_i`` and the profile's per-op overhead ``o``. Calibration
scales the cycles of each op group (op kind and dtype: ``conv.int8``, ``depthwise.int8``…)
by ``s_g = b + t_g`` and adds a per-op overhead ``d``::

    ms_i = (b + t_g(i)) · c_i + o + d

``b`` is the board's factor on all of its kernels (compiler, flash wait states, clock tree:
what moves every op), ``t_g`` what one group differs by. ``b`` starts at 1, ``t_g`` and
``d`` at 0 (the kernel tables as they are), and the fit is a ridge toward that prior, not a
free fit: one model's total moves mostly ``b``, so a group the board never ran takes the
board's factor (``kernel_scale.default``); per-op timings move each group on its own
evidence. Each observation (one op of a per-op log, or a whole model) counts by its
relative error with spread ``OBS_SD``; ``b`` has a prior spread ``SCALE_SD`` (the kernel
tables' leave-one-board-out bands are about ±40%), each ``t_g`` ``GROUP_SD``, ``d``
``OVERHEAD_SD`` of the tables' cheapest op. Bounds (``b`` ≥ ``MIN_SCALE``, ``o + d`` ≥ 0) are
kept by fixing a parameter that crosses one at its bound and refitting the rest; a group's
scale is at least ``MIN_SCALE``.

Which terms are free is chosen by the evidence itself (Bayesian model comparison, equal
prior odds, the spreads above unchanged): the tables as they are, the board's factor with
the overhead, or every group's own scale too, whichever gives the measured figures the
highest marginal likelihood. A few whole-model totals that scatter around the tables as
much as ``OBS_SD`` allows favour the tables; totals off in one direction favour the board's
factor; per-op timings identify the groups. Without it, three totals of models that err in
opposite directions moved the per-group scales by more than they knew (the AndesCore rows
of docs/benchmarks-log.md "Calibration on the board"). The choice sees only the evidence it
is given, so a held-out model never takes part in choosing its own fit.

The error band: with ``BAND_MIN_MODELS`` models or more, the leave-one-model-out ratios
measured / predicted (the fit without that model predicting it), widened to contain 1. The
range of n such ratios holds a new model's ratio only about (n − 1)/(n + 1) of the time (1 in
3 for two models, whose ±3 % read as a tight band), so with fewer models the band is the base
profile's, widened to hold the held-out ratios; with one model there is nothing held out and
the band is the base profile's own. Its basis says which, and on how many models it rests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from devicefit.simulator.errors import InputError
from devicefit.simulator.estimate.calibration.logs import BoardLog
from devicefit.simulator.estimate.compute import op_work
from devicefit.simulator.estimate.kernels import KernelData, kernel_data
from devicefit.simulator.estimate.latency import (
    decoded_tensors,
    estimate_band,
    estimate_latency,
    op_shape,
    profile_core,
)
from devicefit.simulator.profile_types import KERNEL_SCALE, CostModel, Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.report.report import OpCompute

#: How far apart a board's figure and the base profile's estimate may be, either way: farther
#: is a wrong tick rate or clock, or another board's log, and leaves nothing to fit (a
#: profile scaled by 2**70 made the fit's matrix singular).
MAX_RATIO = 1000.0
OBS_SD = 0.1
SCALE_SD = 0.4
GROUP_SD = 0.2
OVERHEAD_SD = 0.5
MIN_SCALE = 0.05
#: Held-out models from which their own range is the band: the range of 8 holds a new
#: model's ratio about 7 times in 9, as the kernel tables' band (their 10th to 90th
#: percentile, an 80 % range, from 8 figures or more: benchmarks/bench_latency.py) does.
BAND_MIN_MODELS = 8


@dataclass(frozen=True)
class Evidence:
    """One model and what the board measured for it."""

    name: str
    model: Model
    log: BoardLog


@dataclass(frozen=True)
class _Prior:
    """One model's estimate on the base profile, op by op."""

    groups: tuple[str, ...]
    #: Cycles part of each op, in ms (scaled by the fit).
    cycles_ms: tuple[float, ...]
    overhead_ms: float

    def total(self, scale: dict[str, float], extra_ms: float) -> float:
        return sum(scale.get(g, scale.get("default", 1.0)) * c + self.overhead_ms + extra_ms
                   for g, c in zip(self.groups, self.cycles_ms, strict=True))


@dataclass(frozen=True)
class ModelMove:
    name: str
    form: str
    ops_timed: int
    measured_ms: float
    before_ms: float
    after_ms: float
    #: The estimate of the fit without this model (None with one model).
    held_out_ms: float | None
    #: Which of ``TERMS`` that fit freed (chosen on the other models' evidence only).
    held_out_terms: str | None


@dataclass(frozen=True)
class Calibration:
    #: Op group → cycles multiplier, relative to the base profile; ``"default"``: the
    #: board's factor, for the groups the evidence has none of.
    scale: dict[str, float]
    #: Per-op overhead added to the base profile's, ms.
    extra_overhead_ms: float
    band: tuple[float, float]
    band_basis: str
    moves: tuple[ModelMove, ...]
    #: Which of ``TERMS`` the evidence chose to free.
    terms: str

    @property
    def terms_said(self) -> str:
        return _TERMS_SAY[self.terms]

    def cost_keys(self, base: CostModel) -> dict[str, object]:
        """The ``cost_model`` keys of the calibrated profile (merged over the base's)."""
        before = base.kernel_scale
        scale = {g: round(before.get(g, before.get("default", 1.0)) * s, 4)
                 for g, s in self.scale.items()}
        low, high = KERNEL_SCALE
        for g, s in scale.items():
            if not low <= s <= high:
                raise InputError(f"the fit scales {g} by {s:g}, beyond the {low:g} to "
                                 f"{high:g} a profile takes: the board is not near this "
                                 f"profile (check the tick rate and the profile)")
        return {"kernel_scale": dict(sorted(scale.items())),
                "op_overhead": f"{base.op_overhead_ms + self.extra_overhead_ms:.6g}ms",
                "error_band": [round(self.band[0], 3), round(self.band[1], 3)],
                "calibration": self.band_basis}


def group(kind: str, dtype: str) -> str:
    return f"{kind}.{dtype}"


def prior_of(model: Model, profile: Profile, data: KernelData | None = None) -> _Prior:
    """``model``'s estimate on ``profile`` (with the kernel tables ``data``, default today's)."""
    per_op = [OpCompute(w.op_index, w.op, w.macs, w.bytes_moved) for w in op_work(model)]
    est = estimate_latency(model, per_op, profile, data)
    if est.total_ms is None:
        raise InputError(f"profile '{profile.name}' gives this model no estimate to "
                         f"calibrate: {est.no_estimate}")
    sg = model.main
    decoded = decoded_tensors(sg)
    shapes = [op_shape(sg, sg.operators[c.op_index], c.macs, decoded) for c in per_op]
    overhead = profile.cost_model.op_overhead_ms
    return _Prior(tuple(group(s.kind, s.dtype) for s in shapes),
                  tuple(o.ms - overhead for o in est.per_op), overhead)


def _rows(prior: _Prior, log: BoardLog, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Design rows and targets of one model, each divided by its measured figure. Column 0
    is the board's factor on every op's cycles, the last the per-op overhead."""
    n = len(columns)
    if log.runs:
        timed = [sum(run[i].ms for run in log.runs) / len(log.runs)
                 for i in range(len(log.runs[0]))]
        floor = 0.01 * sum(timed)
        x = np.zeros((len(timed), n))
        for i, (g, c) in enumerate(zip(prior.groups, prior.cycles_ms, strict=True)):
            x[i, 0] = x[i, columns.index(g)] = c
            x[i, -1] = 1.0
        y = np.array(timed) - prior.overhead_ms
        w = 1.0 / np.maximum(np.array(timed), floor)
    else:
        x = np.zeros((1, n))
        for g, c in zip(prior.groups, prior.cycles_ms, strict=True):
            x[0, 0] += c
            x[0, columns.index(g)] += c
        x[0, -1] = len(prior.groups)
        y = np.array([log.measured_ms - prior.overhead_ms * len(prior.groups)])
        w = np.array([1.0 / log.measured_ms])
    return x * w[:, None], y * w


@dataclass(frozen=True)
class _Design:
    """The whitened least-squares problem of a fit: rows ``x`` and targets ``y`` in units of
    ``OBS_SD``, and each column's prior (mean, spread, lower bound)."""

    columns: tuple[str, ...]
    x: np.ndarray
    y: np.ndarray
    prior_sd: np.ndarray
    beta0: np.ndarray
    lower: np.ndarray


#: The term sets a fit chooses from, simplest first, with what each frees: the tables as
#: they are; the board's factor and the per-op overhead; those and every op group's own scale.
TERMS = ("tables", "board", "groups")
_TERMS_SAY = {"tables": "none (the tables as they are)",
              "board": "the board's factor and the per-op overhead",
              "groups": "the board's factor, each op group's scale and the per-op overhead"}


def _design(priors: Sequence[_Prior], logs: Sequence[BoardLog]) -> _Design:
    groups = sorted({g for p in priors for g in p.groups})
    columns = ["default", *groups, "overhead"]
    parts = [_rows(p, log, columns) for p, log in zip(priors, logs, strict=True)]
    x = np.vstack([a for a, _ in parts]) / OBS_SD
    y = np.concatenate([b for _, b in parts]) / OBS_SD
    # The overhead's scale is the tables' cheapest op (a reshape: little but the fixed per-op
    # cost), not the measured mean op: a large convolution says nothing of a per-op cost.
    cheapest = min((c for p in priors for c in p.cycles_ms if c > 0), default=1e-3)
    return _Design(tuple(columns), x, y,
                   np.array([SCALE_SD, *[GROUP_SD] * len(groups), OVERHEAD_SD * cheapest]),
                   np.array([1.0, *[0.0] * len(groups), 0.0]),
                   np.array([MIN_SCALE, *[-np.inf] * len(groups), -priors[0].overhead_ms]))


def _free(d: _Design, terms: str) -> list[int]:
    last = len(d.columns) - 1
    return {"tables": [], "board": [0, last], "groups": list(range(last + 1))}[terms]


def log_evidence(d: _Design, free: Sequence[int]) -> float:
    """log p(y | terms), up to a constant the same for every term set: the rows' marginal
    likelihood with the ``free`` columns drawn from their prior, the rest at the prior mean
    (``y - x·beta0 ~ N(0, I + X S Xᵀ)``, computed in the columns' dimension). The bounds
    are left out: the comparison is of the Gaussian models."""
    r = d.y - d.x @ d.beta0
    if not free:
        return -0.5 * float(r @ r)
    xf = d.x[:, list(free)]
    var = d.prior_sd[list(free)] ** 2
    a = np.diag(1.0 / var) + xf.T @ xf
    xr = xf.T @ r
    logdet = np.linalg.slogdet(a)[1] + float(np.sum(np.log(var)))
    return -0.5 * (logdet + float(r @ r) - float(xr @ np.linalg.solve(a, xr)))


def _ridge(d: _Design, free_terms: Sequence[int]) -> np.ndarray:
    """The posterior mode of the free columns (the rest at the prior mean), bounds kept by
    fixing a parameter that crosses one at its bound and refitting the rest."""
    fixed = {j: float(d.beta0[j]) for j in range(len(d.columns)) if j not in free_terms}
    while True:
        free = [j for j in range(len(d.columns)) if j not in fixed]
        fixed_vec = np.array([fixed.get(j, 0.0) for j in range(len(d.columns))])
        beta = fixed_vec.copy()
        if not free:
            return beta
        # Ridge toward beta0 as extra rows: (beta - beta0) / prior_sd ~ 0.
        a = np.vstack([d.x[:, free], np.diag(1.0 / d.prior_sd[free])])
        b = np.concatenate([d.y - d.x @ fixed_vec, d.beta0[free] / d.prior_sd[free]])
        beta[free] = np.linalg.lstsq(a, b, rcond=None)[0]
        crossed = [j for j in free if beta[j] < d.lower[j]]
        if not crossed:
            return beta
        for j in crossed:
            fixed[j] = float(d.lower[j])


@dataclass(frozen=True)
class _Fit:
    #: Op group → cycles scale, with ``"default"`` the board's factor for groups the
    #: evidence has none of.
    scale: dict[str, float]
    #: The added per-op overhead, ms.
    extra_ms: float
    #: Which of ``TERMS`` the evidence chose.
    terms: str


def _solve(priors: Sequence[_Prior], logs: Sequence[BoardLog]) -> _Fit:
    """The fit of the term set with the highest evidence (equal prior odds; on a tie the
    simpler). With whole-model totals only, a total constrains a sum over the groups, and
    a per-group scale per group is more freedom than a few totals support: the evidence
    then keeps the groups (or everything) at the tables unless the totals call for it, so
    tables already near the board barely move. Per-op timings identify each group."""
    d = _design(priors, logs)
    evidence = [log_evidence(d, _free(d, t)) for t in TERMS]
    terms = TERMS[max(range(len(TERMS)), key=lambda i: (evidence[i], -i))]
    beta = _ridge(d, _free(d, terms))
    board = float(beta[0])
    groups = d.columns[1:-1]
    scale = {g: max(MIN_SCALE, board + float(beta[j + 1])) for j, g in enumerate(groups)}
    return _Fit({"default": board, **scale}, float(beta[-1]), terms)


def calibrate(profile: Profile, evidence: Sequence[Evidence],
              data: KernelData | None = None) -> Calibration:
    """Fit ``profile``'s cost terms to ``evidence`` (at least one model); ``data``: the kernel
    tables of the prior (a benchmark passes tables fitted without the board)."""
    if not evidence:
        raise InputError("calibrate needs at least one model with a log or a measured latency")
    data = data or kernel_data()
    priors = [prior_of(e.model, profile, data) for e in evidence]
    for e, p in zip(evidence, priors, strict=True):
        _check_ratio(e, p.total({}, 0.0), profile.name)
    logs = [e.log for e in evidence]
    fit = _solve(priors, logs)
    held: list[_Fit | None] = [None] * len(evidence)
    if len(evidence) >= 2:
        for k in range(len(evidence)):
            rest = [i for i in range(len(evidence)) if i != k]
            held[k] = _solve([priors[i] for i in rest], [logs[i] for i in rest])
    moves = tuple(ModelMove(e.name, e.log.form, len(e.log.runs[0]) if e.log.runs else 0,
                            e.log.measured_ms, p.total({}, 0.0), p.total(fit.scale, fit.extra_ms),
                            None if h is None else p.total(h.scale, h.extra_ms),
                            None if h is None else h.terms)
                  for e, p, h in zip(evidence, priors, held, strict=True))
    band, basis = _band(profile, evidence, moves, data)
    return Calibration(fit.scale, fit.extra_ms, band, basis, moves, fit.terms)


def _band(profile: Profile, evidence: Sequence[Evidence], moves: Sequence[ModelMove],
          data: KernelData) -> tuple[tuple[float, float], str]:
    """The calibrated profile's error band and its basis, saying how many models it rests
    on: their held-out range from ``BAND_MIN_MODELS`` on, else the base profile's band
    (widened to hold the held-out ratios there are)."""
    n = len(evidence)
    forms = ", ".join(sorted({e.log.form for e in evidence}))
    names = ", ".join(e.name for e in evidence)
    said = f"calibrated on the board ({n} model{'s' if n > 1 else ''}: {names}; {forms})"
    ratios = [m.measured_ms / m.held_out_ms for m in moves if m.held_out_ms]
    held = (min(1.0, *ratios), max(1.0, *ratios)) if ratios else (1.0, 1.0)
    if n >= BAND_MIN_MODELS:
        return held, f"{said}: leave-one-model-out residuals"
    base, base_basis = estimate_band(profile, profile_core(profile), data, evidence[0].model)
    if n == 1:
        return base, (f"{said}: one model holds nothing out, so the band is the base "
                      f"profile's ({base_basis})")
    return (min(base[0], held[0]), max(base[1], held[1])), (
        f"{said}: {n} held-out models are too few for a band of their own (their range "
        f"[{held[0]:.2f}, {held[1]:.2f}] would hold a new model about {n - 1} in {n + 1} "
        f"times; it takes {BAND_MIN_MODELS}), so the band is the base profile's "
        f"({base_basis}), widened to hold them")


def _check_ratio(e: Evidence, estimate_ms: float, profile: str) -> None:
    measured = e.log.measured_ms
    if not (estimate_ms > 0 and 1 / MAX_RATIO <= measured / estimate_ms <= MAX_RATIO):
        raise InputError(f"{e.log.source}: {e.name} measured {measured:.4g} ms where "
                         f"{profile} estimates {estimate_ms:.4g} ms, more than "
                         f"{MAX_RATIO:g}x apart: check the tick rate (--ticks-per-second, "
                         f"--clock) and that the profile is this board's")


def moved_percent(move: ModelMove) -> float:
    return (move.after_ms / move.before_ms - 1.0) * 100.0 if move.before_ms else math.nan
