"""The arena optimizer's driver: reorder, plan offline, rewrite, verify.

Stages, each checked before the next reads it:

1. the file's buffers and TFLM's greedy head (:mod:`simulator.plan.lifetimes`,
   :func:`simulator.targets.tflm.planner.greedy_plan`), and the DAG built from them, whose peak in
   file order must equal the lifetimes module's bound (two implementations, one answer);
2. the order with the lowest peak (:mod:`simulator.optimize.reorder`);
3. for the file's order (when it is as good) and the best order: TFLM's greedy plan and the
   packings of :mod:`simulator.optimize.packing` written as tensor offsets, with the
   scratch buffers left to TFLM's online planner exactly as the stock interpreter will
   place them; the smallest predicted head wins;
4. the rewritten flatbuffer is read back and planned again: it must predict that head;
5. (``verify``) both files run in TFLM and LiteRT on the same inputs: outputs must be
   bit-identical, and TFLM's measured head must not grow, else nothing is returned.

With ``patches`` (opt-in) the first stage is first rewritten to run patch by patch
(:mod:`simulator.optimize.patches`), which goes below the whole-tensor bound; stages 1-4
then run on the rewritten graph and stage 5 compares it with the original file. Patches
shrink the head but every cloned operator adds tail, so each patched graph and the plain
offline plan (stages 1-4 on the original) are weighed on the whole arena to start; stage 5
then also measures the plain plan's whole arena, and a patched graph that needs more is
dropped for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from devicefit.simulator.errors import InputError, RuntimeFailure, UsageError
from devicefit.simulator.infra.fileio import temporary_folder
from devicefit.simulator.infra.units import format_count
from devicefit.simulator.optimize.graph import graph_from_buffers
from devicefit.simulator.optimize.packing import pack
from devicefit.simulator.optimize.patches import (
    DEFAULT_MAX_MAC_OVERHEAD,
    ArenaFigures,
    PatchChoice,
    PatchReport,
    PatchSettings,
    build_name,
    patch_model,
    plan_for,
    search_patches,
)
from devicefit.simulator.optimize.reorder import DEFAULT_STEP_BUDGET, OrderResult, best_order
from devicefit.simulator.plan.lifetimes import OFFLINE_METADATA, lower_bound
from devicefit.simulator.plan.planners import plan_memory
from devicefit.simulator.plan.planners.base import PlanError, check_plan
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile, with_runtime
from devicefit.simulator.read.model import Model
from devicefit.simulator.read.reader import parse_model
from devicefit.simulator.read.writer import reorder_operators, set_offline_plan
from devicefit.simulator.target import TARGETS, target_for
from devicefit.simulator.targets.tflm.planner import greedy_plan
from devicefit.simulator.targets.tflm.scratch import tflm_buffers
from devicefit.simulator.types import Buffer

if TYPE_CHECKING:  # the runners load only when verification runs
    from devicefit.simulator.types import RunResult

#: Patched graphs up to this many operators get the order search; larger ones keep their
#: patch-by-patch order.
EXACT_ORDER_SEARCH_OPS = 64


@dataclass(frozen=True)
class OptimizeReport:
    """What the optimizer did to one model, with the figures that justify it (each stage
    gives a new one, ``dataclasses.replace``)."""

    model: str
    profile: str
    #: False when the output would equal the input (the model is left unchanged).
    changed: bool
    #: One line for people: what changed, or why nothing did.
    summary: str
    operators: int
    order_changed: bool
    #: Operator order written (indices into the input file's operator list).
    order: list[int]
    offline_plan: bool
    #: How the written offsets were found ("tflm greedy", "two-ended search", ...).
    plan_method: str
    head_before_bytes: int
    head_after_bytes: int
    #: Max live bytes over steps in the file's operator order (no plan can go lower).
    bound_file_order_bytes: int
    #: The same for the best order found; proven minimal when ``bound_exact``.
    bound_best_order_bytes: int
    bound_exact: bool
    search_states: int
    seconds: float
    #: TFLM's measured heads (RecordingMicroAllocator, reference kernels, 64-bit host).
    measured_head_before_bytes: int | None = None
    measured_head_after_bytes: int | None = None
    #: TFLM's measured whole arenas (head + tail), same build.
    measured_arena_before_bytes: int | None = None
    measured_arena_after_bytes: int | None = None
    #: Runtime → outputs of the two files bit-identical on the same inputs.
    outputs_identical: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: What ``patches`` did (None when not asked). With a patched graph written, ``order``
    #: indexes the patched graph's operators and the bounds above are the patched graph's.
    patches: PatchReport | None = None
    #: Steps the order search took of its budget (a step: a set of operators already run
    #: extended by one more), and whether it stopped there: the operators it had not
    #: placed then kept their file order (``notes`` says so).
    search_steps: int = 0
    search_step_budget: int = DEFAULT_STEP_BUDGET
    search_stopped: bool = False
    #: Seconds spent running both files in the runtimes (stage 5), apart from ``seconds``:
    #: TFLM's own allocation grows faster than the search on very large graphs.
    verify_seconds: float = 0.0

    @property
    def reduction_bytes(self) -> int:
        return self.head_before_bytes - self.head_after_bytes

    @property
    def reduction_pct(self) -> float:
        return 100.0 * self.reduction_bytes / self.head_before_bytes if self.head_before_bytes else 0.0

    @property
    def gap_bytes(self) -> int:
        """Head after minus the best-order bound (0: provably the smallest head)."""
        return self.head_after_bytes - self.bound_best_order_bytes

    @property
    def gap_pct(self) -> float:
        bound = self.bound_best_order_bytes
        return 100.0 * self.gap_bytes / bound if bound else 0.0

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(reduction_bytes=self.reduction_bytes, reduction_pct=round(self.reduction_pct, 2),
                 gap_bytes=self.gap_bytes, gap_pct=round(self.gap_pct, 2))
        if self.patches is not None:
            d["patches"]["mac_overhead_pct"] = round(self.patches.mac_overhead_pct, 2)
            for key in ("plain_arena", "patched_arena", "plain_measured", "patched_measured"):
                figures = getattr(self.patches, key)
                if figures is not None:
                    d["patches"][key]["whole_bytes"] = figures.whole_bytes
        return d


@dataclass(frozen=True)
class _Candidate:
    order: tuple[int, ...]
    #: Offline offset per tensor index of the main subgraph (None: leave TFLM to plan).
    tensor_offsets: dict[int, int] | None
    head: int
    method: str


def optimize_model_bytes(data: bytes, profile: Profile | str, *, verify: bool = True,
                         name: str = "<bytes>", patches: str | None = None,
                         max_mac_overhead: float = DEFAULT_MAX_MAC_OVERHEAD,
                         patch_objective: str = "arena", timeout_s: float = 60
                         ) -> tuple[bytes, OptimizeReport]:
    """Rewrite a ``.tflite`` so TFLM's stock interpreter needs a smaller arena head.

    Returns the new bytes (the input bytes when nothing improves) and the report. With
    ``verify`` both files run in TFLM and LiteRT (child processes) and a rewrite is only
    returned when outputs are bit-identical and the measured head does not grow.
    ``patches`` (``"auto"`` or ``"RxC"``) also tries patch-based execution of the first
    stage within ``max_mac_overhead`` extra MACs (0.2: +20 %), minimising
    ``patch_objective``: ``arena``, the arena TFLM needs to start on the profile's build
    (head + tail + load-time room, simulate's ``arena_required_bytes``), or ``head``. The
    plain offline plan (no patches) is always a candidate; under ``arena`` a patched graph
    is only written when its predicted arena is smaller, and (``verify``) when the arena TFLM
    measures for it (head + tail) is not larger than the plain plan's. Otherwise the report
    says why and the plain result stands.
    ``profile`` is a :class:`Profile` or a profile name or ``.yaml`` path; ``timeout_s``
    bounds each run of verification (a run that takes longer fails the verification, and
    nothing is returned).
    """
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    if patches is None:
        return _optimize(data, profile, verify=verify, name=name, timeout_s=timeout_s)
    settings = PatchSettings(patches, max_mac_overhead, patch_objective)
    started = time.perf_counter()
    plain_out, plain = _optimize(data, profile, verify=False, name=name)
    plain_arena = planned_arena(plain_out, profile)
    model = parse_model(data, name)
    choices, p = search_patches(data, model, settings, profile, plain.head_after_bytes,
                                plain.bound_best_order_bytes, plain_arena)
    by_arena = patch_objective == "arena"

    def value(arena: ArenaFigures, planned: OptimizeReport) -> int:
        return arena.start_bytes if by_arena else planned.head_after_bytes

    # "No patches" is always a candidate, and wins ties: a patched graph costs MACs and flash.
    candidates = [_Planned(value(plain_arena, plain), plain_out, plain, plain_arena, None)]
    for choice in choices:
        patched, after = plan_patched(choice.data, profile, name)
        arena = planned_arena(patched, profile)
        candidates.append(_Planned(value(arena, after), patched, after, arena, choice))
        if after.head_after_bytes <= choice.bound:  # at its bound: the next cannot beat it
            break
    best_patched = min(candidates[1:], key=lambda c: c.value, default=None)
    chosen = min(candidates, key=lambda c: (c.value, c.choice is not None))
    report = dataclasses.replace(plain, patches=p)
    out = plain_out
    if best_patched is not None and best_patched.choice is not None:
        p = dataclasses.replace(p, patched_arena=best_patched.arena,
                                patched_grid=best_patched.choice.plan.grid,
                                patched_split=best_patched.choice.plan.split)
    if chosen.choice is not None:
        out = chosen.data
        p = dataclasses.replace(p.with_choice(chosen.choice, model),
                                model_bytes_before=len(data), model_bytes_after=len(out))
        report = _adopt_patched(dataclasses.replace(report, patches=p), chosen.report, model,
                                chosen.choice.model, profile)
        p = report.patches or p
    elif best_patched is not None:
        what = f"the best patched graph, {p.patched_grid} over the first {p.patched_split} " \
            "operators"
        p = p.without_patches(
            _arena_change(what, plain_arena, best_patched.arena) if by_arena else
            f"{what}, needs a head of {best_patched.value:,} B, not below the plain "
            f"offline plan's {chosen.value:,} B")
    refused = [f"patches not used: {p.refused}"] if p.refused else []
    report = dataclasses.replace(report, patches=p, notes=[*report.notes, *refused],
                                 seconds=time.perf_counter() - started)
    if verify and report.changed:
        return _verified(data, out, plain_out, plain, report, profile, by_arena, _Runs(timeout_s))
    return (out if report.changed else data), report


def _verified(data: bytes, out: bytes, plain_out: bytes, plain: OptimizeReport,
              report: OptimizeReport, profile: Profile, by_arena: bool, run: _Runs
              ) -> tuple[bytes, OptimizeReport]:
    """Stage 5 of ``--patches``' result ``out``: verified, and a patched graph judged on the
    arenas TFLM measures (else the plain plan, verified in its turn)."""
    p = report.patches
    assert p is not None
    report = _verify(data, out, report, profile, run)
    if not report.changed:
        if p.grid:  # the plain plan may still gain
            return _keep_plain(data, plain_out, plain, p, profile, run, report.summary)
        return data, report
    notes = []
    if p.grid is None:
        p = dataclasses.replace(p, plain_measured=_measured(report))
    else:
        p = dataclasses.replace(p, patched_measured=_measured(report),
                                plain_measured=_measure(plain_out, profile, run))
        judged = judge_measured(p, *_host_change(plain_out, out, profile))
        if by_arena and judged.refuse:
            return _keep_plain(data, plain_out, plain, p, profile, run, judged.reason)
        if judged.refuse:
            notes.append("patches kept (--patch-objective head) though the whole arena "
                         f"grows: {judged.reason}")
        elif judged.reason:
            notes.append(judged.reason)
    report = dataclasses.replace(report, patches=p, notes=[*report.notes, *notes])
    return out, dataclasses.replace(report, summary=_changed_summary(report))


def plan_patched(patched: bytes, profile: Profile, name: str = "<bytes>"
                 ) -> tuple[bytes, OptimizeReport]:
    """A patched graph (:func:`~simulator.optimize.patches.patch_model`'s) with the order
    and offline plan ``--patches`` would write for it, unverified: what it weighs."""
    # The order search is exact and cheap on a few dozen operators (and can interleave
    # patches better); on hundreds it turns into a beam search that costs seconds and found
    # nothing below the patch-by-patch order on the models tried.
    operators = len(parse_model(patched, name).main.operators)
    return _optimize(patched, profile, verify=False, name=name,
                     search_order=operators <= EXACT_ORDER_SEARCH_OPS)


def rebuild_patched(data: bytes, p: PatchReport, profile: Profile) -> bytes | None:
    """The best patched graph ``p`` names (kept or not), rebuilt from the input ``data`` as
    ``--patches`` would write it: the report keeps its figures, not its bytes."""
    if p.patched_grid is None or p.patched_split is None:
        return None
    rows, cols = (int(v) for v in p.patched_grid.split("x"))
    model = parse_model(data)
    return plan_patched(patch_model(data, model, plan_for(model, p.patched_split, rows, cols)),
                        profile)[0]


@dataclass(frozen=True)
class _Planned:
    """A result ``optimize --patches`` can write, planned: its objective value, bytes, report
    and predicted arena; ``choice`` None is the plain offline plan (no patches)."""

    value: int
    data: bytes
    report: OptimizeReport
    arena: ArenaFigures
    choice: PatchChoice | None


def planned_arena(data: bytes, profile: Profile) -> ArenaFigures:
    """The arena simulate predicts for the file ``data`` on ``profile``'s build (its offline
    plan, if written, is the head TFLM places the tensors by)."""
    plan = plan_memory(parse_model(data, "<optimized>"), profile)
    return ArenaFigures(plan.head_bytes, plan.tail_bytes, plan.arena_required_bytes,
                        build_name(profile))


#: The build the verification measures on: the tflite-micro wheel in this Python.
MEASURED_BUILD = (f"measured, TFLM wheel on this host ({struct.calcsize('P')}-byte pointers, "
                  "reference kernels)")


def _measured(report: OptimizeReport) -> ArenaFigures:
    """The arena TFLM measured for the optimized file."""
    head, whole = report.measured_head_after_bytes, report.measured_arena_after_bytes
    assert head is not None and whole is not None  # set by _verify
    return ArenaFigures(head, whole - head, whole, MEASURED_BUILD)


def _runner(profile: Profile) -> str:
    """The runner of the profile's target: TFLM, as only targets that take an offline plan
    get this far (:func:`_optimize`) and each of them has a runner."""
    runner = target_for(profile).runner
    assert runner is not None, f"offline-plan target of '{profile.name}' has no runner"
    return runner


def _measure(data: bytes, profile: Profile, run: _Runs) -> ArenaFigures:
    """The arena the profile's runner (TFLM, reference kernels) measures for ``data``."""
    result = run(data, _runner(profile))
    head, whole = result.arena_head_bytes, result.arena_total_bytes
    if head is None or whole is None:
        raise RuntimeFailure("TFLM reported no arena figures for the plain offline plan")
    return ArenaFigures(head, whole - head, whole, MEASURED_BUILD)


@dataclass(frozen=True)
class MeasuredVerdict:
    """What the measured arenas say of a patched graph: refuse it, and why (or a note)."""

    refuse: bool
    reason: str = ""


def judge_measured(p: PatchReport, host_change: int, same_build: bool) -> MeasuredVerdict:
    """Judge a patched graph on the whole arena of the profile's build, with the arenas TFLM
    measured (``p.plain_measured``, ``p.patched_measured``) as the check on the prediction.

    TFLM runs here as the tflite-micro wheel: this host's pointer width, reference kernels.
    The profile's build may have other pointers and kernels, whose tail only the prediction
    gives; ``host_change`` is the change with patches devicefit predicts for the measured
    build (``same_build``: it is the profile's). When the measurement grew more than that,
    the excess is added to the profile's predicted change, which must stay a gain; on the
    profile's own build this is the measured change itself.
    """
    assert p.plain_arena and p.patched_arena and p.plain_measured and p.patched_measured
    measured = _arena_change(f"the {p.grid} patched graph over the first {p.split} operators",
                             p.plain_measured, p.patched_measured)
    grows = p.patched_measured.whole_bytes - p.plain_measured.whole_bytes
    change = p.patched_arena.start_bytes - p.plain_arena.start_bytes + max(grows - host_change, 0)
    other = f"the profile's build ({p.patched_arena.build.removeprefix('predicted, ')})"
    if change >= 0:
        return MeasuredVerdict(True, measured if same_build else
                               f"{measured}; devicefit predicted {_signed(host_change)} B for "
                               f"that build, so {other} is expected at {_signed(change)} B too")
    if grows < 0:
        return MeasuredVerdict(False)
    return MeasuredVerdict(False, f"patches kept: {measured}, as devicefit predicts for that "
                           f"build ({_signed(host_change)} B); for {other} it predicts "
                           f"{_signed(change)} B (smaller pointers and kernel data)")


def _host_change(plain: bytes, patched: bytes, profile: Profile) -> tuple[int, bool]:
    """The change of the whole arena with patches predicted for the build TFLM measures on
    (this host's pointers, reference kernels), and whether that is the profile's build."""
    host = with_runtime(profile, kernels="reference", pointer_bytes=struct.calcsize("P"))
    change = planned_arena(patched, host).whole_bytes - planned_arena(plain, host).whole_bytes
    return change, host.runtime == profile.runtime


def _keep_plain(data: bytes, plain_out: bytes, plain: OptimizeReport, p: PatchReport,
                profile: Profile, run: _Runs, reason: str) -> tuple[bytes, OptimizeReport]:
    """Verification refused the patched graph (``reason``: TFLM measured a larger whole
    arena than without patches, or no gain at all): write the plain plan, verified in its
    turn."""
    p = p.without_patches(reason)
    report = dataclasses.replace(plain, patches=p,
                                 notes=[*plain.notes, f"patches not used: {p.refused}"])
    if report.changed:
        report = _verify(data, plain_out, report, profile, run)
    if report.changed:
        report = dataclasses.replace(report, summary=_changed_summary(report))
    return (plain_out if report.changed else data), report


def _signed(n: int) -> str:
    return f"+{n:,}" if n >= 0 else f"\u2212{-n:,}"


def _arena_change(what: str, plain: ArenaFigures, patched: ArenaFigures) -> str:
    """"WHAT (measured, ...): head −8,304 B but tail +9,648 B, whole arena +1,344 B against
    the plain offline plan (85,248 → 86,592 B)"."""
    head, tail = patched.head_bytes - plain.head_bytes, patched.tail_bytes - plain.tail_bytes
    arena = "arena to start" if patched.start_bytes != patched.whole_bytes or \
        plain.start_bytes != plain.whole_bytes else "whole arena"
    return (f"{what} ({patched.build}): head {_signed(head)} B "
            f"{'but' if head * tail < 0 else 'and'} tail {_signed(tail)} B, {arena} "
            f"{_signed(patched.start_bytes - plain.start_bytes)} B against the plain offline "
            f"plan ({plain.start_bytes:,} \u2192 {patched.start_bytes:,} B)")


def _adopt_patched(report: OptimizeReport, after: OptimizeReport, model: Model,
                   patched: Model, profile: Profile) -> OptimizeReport:
    """``report`` (whose "before" is the original) with the patched graph's plan."""
    p = report.patches
    assert p is not None and p.plain_arena is not None and p.patched_arena is not None
    plain_arena, patched_arena = p.plain_arena, p.patched_arena
    p = dataclasses.replace(p, estimated_ms_before=_latency_ms(model, profile),
                            estimated_ms_after=_latency_ms(patched, profile))
    notes = [*report.notes, *(n for n in after.notes if n not in report.notes)]
    if patched_arena.start_bytes > plain_arena.start_bytes:
        notes.append(
            _arena_change("the arena grows with patches", plain_arena, patched_arena)
            + ": each cloned operator keeps its own OpData and per-channel arrays in the "
            "tail; --patch-objective arena (the default) never lets it grow")
    report = dataclasses.replace(
        report, order=after.order, plan_method=after.plan_method,
        head_after_bytes=after.head_after_bytes,
        bound_best_order_bytes=after.bound_best_order_bytes, bound_exact=after.bound_exact,
        search_states=after.search_states, search_steps=after.search_steps,
        search_stopped=after.search_stopped, changed=True, order_changed=True,
        offline_plan=after.offline_plan, notes=notes, patches=p)
    return dataclasses.replace(report, summary=_changed_summary(report))


def _latency_ms(model: Model, profile: Profile) -> float | None:
    """The cost model's estimate (extra ops and MACs included), None without one."""
    from devicefit.simulator.errors import ProfileError
    from devicefit.simulator.estimate.compute import op_work
    from devicefit.simulator.estimate.latency import estimate_latency
    from devicefit.simulator.report.report import OpCompute

    work = [OpCompute(w.op_index, w.op, w.macs, w.bytes_moved) for w in op_work(model)]
    try:
        return estimate_latency(model, work, profile).total_ms
    except ProfileError:
        return None


def _optimize(data: bytes, profile: Profile, *, verify: bool, name: str,
              search_order: bool = True, timeout_s: float = 60
              ) -> tuple[bytes, OptimizeReport]:
    """Stages 1-5 of the module doc; without ``search_order`` the file's order is kept (a
    patched graph is written patch by patch, the order its plan is built for)."""
    target = target_for(profile)
    if not target.offline_plan:
        takers = " or ".join(t.name for t in TARGETS.values() if t.offline_plan)
        raise UsageError(f"optimize rewrites the TFLite-Micro arena plan; profile "
                         f"'{profile.name}' targets '{profile.runtime.name}' ({target.title}), "
                         f"which takes no offline plan: pick a {takers} profile")
    started = time.perf_counter()
    model = parse_model(data, name)
    pointer = profile.runtime.pointer_bytes
    before = tflm_buffers(model, pointer_bytes=pointer)
    head_before = check_plan(before, greedy_plan(before), "TFLM greedy plan")
    file_order = tuple(range(len(model.main.operators)))
    report = OptimizeReport(
        model=name, profile=profile.name, changed=False, summary="", operators=len(file_order),
        order_changed=False, order=list(file_order), offline_plan=False, plan_method="none",
        head_before_bytes=head_before, head_after_bytes=head_before,
        bound_file_order_bytes=lower_bound(before), bound_best_order_bytes=lower_bound(before),
        bound_exact=False, search_states=0, seconds=0.0, notes=[] if profile.runtime.kernels
        == "reference" else [
            f"scratch buffers are sized as the reference kernels request them; "
            f"'{profile.runtime.kernels}' kernels request others, which TFLM places online "
            "around the offline plan (safe, but the head on the device may differ)"])

    def timed(summary: str = "") -> OptimizeReport:
        return dataclasses.replace(report, summary=summary,
                                   seconds=time.perf_counter() - started)

    if len(model.subgraphs) > 1:
        return data, timed("unchanged: models with control flow (several subgraphs) are not "
                           "optimized")
    try:
        graph = graph_from_buffers(model.main, before)
    except InputError as exc:  # valid for TFLM, but not a DAG the search can reorder
        return data, timed(f"unchanged: {exc}")
    if graph.peak(file_order) != report.bound_file_order_bytes:
        raise PlanError(f"optimizer DAG peak {graph.peak(file_order)} != lifetimes bound "
                        f"{_b(report.bound_file_order_bytes)} for the file order")
    best = best_order(graph) if search_order else OrderResult(
        file_order, graph.peak(file_order), exact=False, bound=graph.peak(file_order), states=0)
    report = dataclasses.replace(report, bound_best_order_bytes=best.bound,
                                 bound_exact=best.exact, search_states=best.states,
                                 search_steps=best.steps, search_step_budget=best.step_budget,
                                 search_stopped=best.stopped,
                                 notes=[*report.notes, *_search_notes(best, graph.n_ops)])
    orders = [best.order] if best.order == file_order else [file_order, best.order]
    orders = [o for o in orders if graph.peak(o) == best.peak]
    keep_metadata = OFFLINE_METADATA in model.metadata
    candidate = min((_best_plan(model, o, pointer, keep_metadata) for o in orders),
                    key=lambda c: (c.head, c.order != file_order, c.tensor_offsets is not None))
    if candidate.head >= head_before:
        return data, timed(_unchanged_summary(report))
    out = _rewrite(data, model, candidate)
    _check_written(out, candidate.head, pointer)
    report = dataclasses.replace(
        timed(), changed=True, order_changed=candidate.order != file_order,
        order=list(candidate.order), offline_plan=candidate.tensor_offsets is not None,
        plan_method=candidate.method, head_after_bytes=candidate.head)
    if verify:
        report = _verify(data, out, report, profile, _Runs(timeout_s))
        if not report.changed:
            return data, report
    return out, dataclasses.replace(report, summary=_changed_summary(report))


def _search_notes(best: OrderResult, operators: int) -> list[str]:
    """What the report says of an order search that did not prove its order the best."""
    floor = "the best-order bound is the per-operator floor (inputs + outputs + scratch of " \
        "one operator)"
    if best.stopped and best.placed < operators:
        return [f"the order search stopped at its budget of {best.step_budget:,} steps after "
                f"placing {best.placed:,} of {operators:,} operators: the best order it had "
                f"then, the rest in file order; {floor}"]
    if best.stopped:
        return [f"the order search kept fewer orders per step to stay within its budget of "
                f"{best.step_budget:,} steps (a beam search); {floor}"]
    if not best.exact and best.states:
        return ["the graph is too wide for an exact order search: the order comes from a "
                f"beam search and {floor}"]
    return []


def _best_plan(model: Model, order: tuple[int, ...], pointer: int,
               keep_metadata: bool) -> _Candidate:
    """The smallest predicted head for ``order``: TFLM's own greedy plan, else the best
    offline packing once TFLM has placed the scratch buffers around it."""
    buffers = [dataclasses.replace(b, offline_offset=None)
               for b in tflm_buffers(model, order, pointer_bytes=pointer)]
    greedy = greedy_plan(buffers)
    head = check_plan(buffers, greedy, "TFLM greedy plan")
    bound = lower_bound(buffers)
    tensors = {i for i, b in enumerate(buffers) if b.kind == "tensor"}
    # With an offline plan already in the file, a new order needs a new plan: write the
    # greedy offsets rather than leave stale ones.
    best = _Candidate(order, _tensor_offsets(buffers, greedy, tensors) if keep_metadata else None,
                      head, "tflm greedy")
    if head == bound:
        return best
    for packing in pack(buffers):
        if packing.head >= best.head:
            break
        fixed = [dataclasses.replace(b, offline_offset=packing.offsets[i]) if i in tensors else b
                 for i, b in enumerate(buffers)]
        offsets = greedy_plan(fixed)
        head = check_plan(fixed, offsets, f"offline plan ({packing.method})")
        if head < best.head:
            best = _Candidate(order, _tensor_offsets(buffers, offsets, tensors), head,
                              packing.method)
        if head == packing.head:  # the scratch buffers went where the packing left room
            break
    return best


def _rewrite(data: bytes, model: Model, candidate: _Candidate) -> bytes:
    out = data
    if candidate.order != tuple(range(len(model.main.operators))):
        out = reorder_operators(out, candidate.order)
    if candidate.tensor_offsets is not None:
        offsets = [-1] * len(model.main.tensors)  # one subgraph: TFLM reads n = its tensors
        for t, off in candidate.tensor_offsets.items():
            offsets[t] = off
        out = set_offline_plan(out, offsets)
    return out


def _tensor_offsets(buffers: Sequence[Buffer], offsets: Sequence[int],
                    tensors: set[int]) -> dict[int, int]:
    return {buffers[i].tensor: offsets[i] for i in tensors}


def _check_written(data: bytes, expected_head: int, pointer: int) -> None:
    """Read the rewritten file back: TFLM must plan exactly the head that was promised."""
    buffers = tflm_buffers(parse_model(data, "<optimized>"), pointer_bytes=pointer)
    head = check_plan(buffers, greedy_plan(buffers), "optimized model")
    if head != expected_head:
        raise PlanError(f"the rewritten model plans a head of {_b(head)}, "
                        f"the optimizer predicted {expected_head}")


class _Runs:
    """Each file runs once per runtime (reference kernels, the same default inputs) however
    many results are compared: verifying patches also measures the plain plan, and
    verifies it too when it is the one written."""

    def __init__(self, timeout_s: float) -> None:
        self._done: dict[tuple[bytes, str], RunResult] = {}
        self._timeout_s = timeout_s
        #: Seconds spent in the runtimes so far.
        self.seconds = 0.0

    def __call__(self, data: bytes, runtime: str) -> RunResult:
        from devicefit.simulator.run.runtimes import run_model

        key = (hashlib.sha256(data).digest(), runtime)
        if key not in self._done:
            started = time.perf_counter()
            try:
                with temporary_folder("devicefit-optimize-") as tmp:
                    path = tmp / "model.tflite"
                    path.write_bytes(data)
                    self._done[key] = run_model(path, runtime, reference_kernels=True,
                                                timeout_s=self._timeout_s)
            finally:
                self.seconds += time.perf_counter() - started
        return self._done[key]


def _verify(original: bytes, optimized: bytes, report: OptimizeReport,
            profile: Profile, run: _Runs) -> OptimizeReport:
    """``report`` with both files run on the same inputs (reference kernels) in the
    profile's runner (TFLM), which must take both, and in its target's ``second_opinion``
    (LiteRT: a second implementation of the same kernels), where it has one; unchanged
    (the file's order, no plan) when TFLM's measured head does not shrink."""
    from devicefit.simulator.run.runtimes import compare_outputs

    runner = _runner(profile)
    second = target_for(profile).second_opinion
    notes, identical = list(report.notes), dict(report.outputs_identical)
    mine: list[RunResult] = []  # the runner's runs of the original and the optimized file
    for runtime in dict.fromkeys(r for r in (runner, second) if r is not None):
        runs = []
        for which, data in (("original", original), ("optimized", optimized)):
            try:
                runs.append(run(data, runtime))
            except RuntimeFailure as exc:
                title = TARGETS[runtime].title
                if runtime == runner:
                    raise RuntimeFailure(f"cannot check the optimized model in {title} ({which} "
                                         f"model), so it is not written: {exc}") from exc
                notes.append(f"outputs not compared in {title} ({which} model): {exc}")
                break
        if len(runs) < 2:
            continue
        same, diff = compare_outputs(runs[0].outputs, runs[1].outputs)
        identical[runtime] = same
        if not same:
            raise RuntimeFailure(
                f"the optimized model's outputs differ from the original's in {runtime} "
                f"(max |diff| {diff:g}); nothing written. This is a devicefit bug: "
                "please report it with the model")
        if runtime == runner:
            mine = runs
    report = dataclasses.replace(report, notes=notes, outputs_identical=identical,
                                 verify_seconds=run.seconds)
    if mine:
        report = dataclasses.replace(
            report, measured_head_before_bytes=mine[0].arena_head_bytes,
            measured_head_after_bytes=mine[1].arena_head_bytes,
            measured_arena_before_bytes=mine[0].arena_total_bytes,
            measured_arena_after_bytes=mine[1].arena_total_bytes)
    before, after = report.measured_head_before_bytes, report.measured_head_after_bytes
    if before is not None and after is not None and after >= before:
        return _no_gain(report, before, after)
    if after is not None and after != report.head_after_bytes:
        return dataclasses.replace(report, notes=[
            *notes, f"TFLM measured a head of {_b(after)}, predicted "
                    f"{_b(report.head_after_bytes)} (host pointer width)"])
    return report


def _no_gain(report: OptimizeReport, before: int, after: int) -> OptimizeReport:
    """``report`` unchanged (the file's order, no plan): TFLM measured no smaller head."""
    unseen = (f"; TFLM's head was {_b(before)} where devicefit predicted "
              f"{_b(report.head_before_bytes)}: it plans buffers devicefit does not know "
              "(custom-op scratch?)" if before != report.head_before_bytes else "")
    return dataclasses.replace(
        report, summary=f"unchanged: TFLM measured {_b(after)} after vs {_b(before)} before, "
                        f"no gain{unseen}",
        changed=False, order_changed=False, offline_plan=False,
        order=list(range(report.operators)), plan_method="none",
        head_after_bytes=report.head_before_bytes, measured_head_after_bytes=before,
        measured_arena_after_bytes=report.measured_arena_before_bytes)


def _b(num_bytes: int) -> str:
    return f"{format_count(num_bytes)} B"


def _unchanged_summary(r: OptimizeReport) -> str:
    if r.head_before_bytes == r.bound_best_order_bytes and r.bound_exact:
        return (f"already optimal: TFLM's head of {_b(r.head_before_bytes)} equals the "
                "lowest peak of any operator order; model left unchanged")
    return (f"unchanged: no order or offline plan found below TFLM's head of "
            f"{_b(r.head_before_bytes)} (best-order bound {_b(r.bound_best_order_bytes)})")


def _changed_summary(r: OptimizeReport) -> str:
    p = r.patches
    if p is not None and p.grid:
        what = [f"first {p.split} operators run as {p.grid} patches "
                f"(+{p.mac_overhead_pct:.1f}% MACs)"]
        if r.offline_plan:
            what.append("offline arena plan written")
        return (f"{' and '.join(what)}: head {format_count(r.head_before_bytes)} → "
                f"{_b(r.head_after_bytes)} "
                f"(−{r.reduction_pct:.1f}%), whole-tensor bound "
                f"{_b(p.bound_whole_tensor_bytes)}")
    what = [w for w, on in (("operators reordered", r.order_changed),
                            ("offline arena plan written", r.offline_plan)) if on]
    at = "at the bound" if r.gap_bytes == 0 else f"{_b(r.gap_bytes)} above the bound"
    return (f"{' and '.join(what)}: head {format_count(r.head_before_bytes)} → "
            f"{_b(r.head_after_bytes)} "
            f"(−{r.reduction_pct:.1f}%), {at}")
