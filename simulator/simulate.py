"""The simulator's driver: read → plan → count → [measure] → [bench] → judge, one :class:`Report`.

The static path (the default) imports no runtime and no TensorFlow: it reads the flatbuffer,
plans the arena with the profile's runtime planner, counts flash, parameters and MACs,
checks op support and estimates latency. ``run=True`` hands the report to the measuring
stage, ``simulator.measure.measure(model, profile, report, **run_options) -> Report``, which
gives it back with the ``measured`` section and the host figures of ``latency``; a device
benchmark (``bench``) adds its section. Only then, with every figure in, are the budgets
judged — once (:func:`simulator.verdict.judge`), so measured figures win. Each stage gives
a new report; none changes the one it was given.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicefit.simulator.benchmark import BenchComparison, BenchResult
from devicefit.simulator.compat import static_compatibility, static_latency
from devicefit.simulator.compute import op_work, parameters_by_dtype
from devicefit.simulator.errors import CompileRefusal, CompilerRefused, ProfileError, UsageError
from devicefit.simulator.latency import latency_section
from devicefit.simulator.layers import layer_rows
from devicefit.simulator.model import Model
from devicefit.simulator.planners import plan_memory
from devicefit.simulator.planners.base import MemoryPlan
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.reader import read_model
from devicefit.simulator.report import (
    BenchSection,
    ComputeReport,
    MemoryReport,
    ModelSummary,
    OpCompute,
    PlannedBuffer,
    ProfileSummary,
    Report,
    ShapesReport,
    SourceModel,
    TimelineStep,
)
from devicefit.simulator.runtimes import runner_name
from devicefit.simulator.shapes import resolve_shapes, shape_notes
from devicefit.simulator.target import target_for
from devicefit.simulator.verdict import judge
from devicefit.simulator.views.messages import disagreement_messages

log = logging.getLogger(__name__)

#: Metadata entry in which ``devicefit convert`` records its settings (JSON).
CONVERSION_METADATA = "devicefit.conversion"


def simulate(model_path: str | Path, profile: Profile | str, *, run: bool = False,
             order: Sequence[int] | None = None, profiles_dirs: Sequence[str | Path] = (),
             bench: BenchResult | None = None, strict: bool = False, probe: bool = True,
             input_shapes: Sequence[tuple[str | None, tuple[int, ...]]] = (),
             **run_options: Any) -> Report:
    """Predict (and with ``run=True`` also measure) ``model_path`` on ``profile``, judged.

    ``profile`` is a loaded :class:`Profile` or a name/path for :func:`load_profile`.
    ``order`` executes the main graph's operators in that order (for the optimizer).
    ``bench`` is what the device itself measured (``devicefit bench``): its average time is
    judged against the latency budget instead of the estimate. ``strict``: a budget the
    report has no figure for fails the verdict. ``probe``: on a TFLM or LiteRT profile, ask
    the runtime about each operator signature (:mod:`simulator.compat.probe`; cached on
    disk, a child process only for signatures not seen before). ``input_shapes``: (input
    name or None for the only one, shape) pairs the dynamic dimensions are resolved from
    (else the stored input shapes; :mod:`simulator.shapes`). ``run_options`` go to the
    running half unchanged.
    """
    if not isinstance(profile, Profile):
        profile = load_profile(profile, list(profiles_dirs))
    if run:  # a target that cannot run models: one line, before any work
        runner_name(profile.runtime.name)
    source = read_model(model_path)
    try:
        model, shapes, fixed = device_model(source, profile, input_shapes, run)
    except CompilerRefused as exc:
        # A finding about the model on this device: reported, and the verdict fails.
        model, report = source, refused_report(source, profile, exc.refusal)
    else:
        report = static_report(model, profile, order, shapes=shapes, probe=probe)
        if fixed is not None:
            report = dataclasses.replace(report, notes=[*report.notes, fixed])
        if model.sha256 != source.sha256:
            report = dataclasses.replace(report, model=dataclasses.replace(
                report.model, source=compiled_from(source, profile)))
        if run:
            report = _measured(source, model, profile, report, shapes, input_shapes,
                               run_options)
    if bench is not None:
        report = dataclasses.replace(report, bench=bench_section(bench, report))
    report = dataclasses.replace(report, layers=layer_rows(model, report))
    return judge(report, profile, strict=strict)


def compiled_from(source: Model, profile: Profile) -> SourceModel:
    """The user's file, beside the compilation of it the report describes."""
    return SourceModel(source.size_bytes, source.sha256,
                       sum(len(sg.operators) for sg in source.subgraphs),
                       target_for(profile).title)


def _measured(source: Model, model: Model, profile: Profile, report: Report,
              shapes: ShapesReport | None,
              input_shapes: Sequence[tuple[str | None, tuple[int, ...]]],
              run_options: dict[str, Any]) -> Report:
    """``report`` with the running half: ``model`` run in the profile's runtime."""
    # Imported here: the static path must not load native runtimes.
    from devicefit.simulator.measure import measure

    if input_shapes and shapes is not None:
        run_options = {"input_shapes": dict(shapes.inputs), **run_options}
    # The runtimes load the file as it is (stored shapes): the one read above, unless the
    # target prepared another.
    file = source if target_for(profile).prepare is None else None
    return measure(model, profile, report, file=file, **run_options)


def refused_report(source: Model, profile: Profile, refusal: CompileRefusal) -> Report:
    """The report of a model the target's compiler refused, not judged yet: what the file
    itself tells (size, operators, parameters, MACs) and the compiler's refusal. The device
    runs the compiled model, which does not exist: no memory plan, op support, latency or
    run of it, so no budget is checked (:func:`simulator.verdict.judge` says why) and the
    refusal fails the verdict."""
    work = op_work(source)
    return Report(
        model=model_summary(source), profile=profile_summary(profile), memory=None,
        compute=ComputeReport(
            macs=sum(w.macs for w in work),
            per_op=[OpCompute(w.op_index, w.op, w.macs, w.bytes_moved) for w in work]),
        compile_refusal=refusal)


def device_model(source: Model, profile: Profile,
                 input_shapes: Sequence[tuple[str | None, tuple[int, ...]]], run: bool
                 ) -> tuple[Model, ShapesReport | None, str | None]:
    """The model the device runs (compiled, for an NPU target) with its shapes resolved, and
    a note when the given shapes are ones the runtime cannot resize to (TFLM runs the stored
    ones: the figures are then for the model converted at that shape, and it cannot run)."""
    target = target_for(profile)
    model = source
    if target.prepare is not None:  # e.g. compile it for an NPU
        if input_shapes:
            raise UsageError(f"--input-shape: the {target.title} target compiles the file "
                             f"with the shapes stored in it; convert the model at that shape")
        model = target.prepare(source, profile)
    model, shapes = resolve_shapes(model, input_shapes)
    if target.resizes_inputs or shapes is None or all(
            shape == source.main.tensors[i].shape
            for i, (_, shape) in zip(source.main.inputs, shapes.inputs, strict=False)):
        return model, shapes, None
    if run:
        raise UsageError(f"--input-shape with --run: {target.title} cannot resize an input, "
                         f"it runs the shapes stored in the file; convert the model at that "
                         f"shape, or run it on a LiteRT profile")
    return model, shapes, (f"{target.title} allocates the input shapes stored in the file and "
                           f"cannot resize them: these figures are for the model converted "
                           f"at the given shape")


def bench_section(result: BenchResult, report: Report | None,
                  why: str = "no latency in the report") -> BenchSection:
    """A device benchmark beside the report's estimate (``report`` None: none to compare)."""
    estimate = report.latency.estimated_device_ms if report and report.latency else None
    return BenchSection(result, BenchComparison.of(result.results.inference_avg_ms, estimate,
                                                   why if estimate is None else None))


def static_report(model: Model, profile: Profile, order: Sequence[int] | None = None, *,
                  shapes: ShapesReport | None = None, probe: bool = False) -> Report:
    """The report of the static half, not judged yet (:func:`simulate` judges it whole).
    ``shapes``: how :func:`simulator.shapes.resolve_shapes` set ``model``'s shapes;
    ``probe``: op support asked of the runtime too (see :func:`simulate`)."""
    plan = plan_memory(model, profile, order)
    work = op_work(model)
    compute = ComputeReport(
        macs=sum(w.macs for w in work),
        per_op=[OpCompute(w.op_index, w.op, w.macs, w.bytes_moved) for w in work])
    compatibility = static_compatibility(model, profile, probe=probe)
    report = Report(
        model=model_summary(model, shapes), profile=profile_summary(profile),
        memory=memory_report(model, profile, plan),
        compute=compute,
        compatibility=compatibility,
    )
    notes = [*plan.notes, *(shape_notes(shapes) if shapes is not None else []),
             *disagreement_messages(report)]
    latency = static_latency(compatibility, profile)
    if latency is None:
        try:
            latency = latency_section(model, profile, compute.per_op)
        except ProfileError as exc:
            # An incomplete cost model costs the latency figure, not the memory verdict.
            notes.append(f"no device latency estimate: {exc}")
    if latency and latency.no_estimate:
        notes.append(latency.no_estimate)
    if shapes is not None and not shapes.resolved and latency:
        latency = dataclasses.replace(
            latency, band_ms=None, band=None,
            band_basis="shapes unresolved: no validated band (the estimate counts the "
                       "file's placeholder sizes for the unresolved dimensions)")
    return dataclasses.replace(report, latency=latency, notes=notes)


def profile_summary(profile: Profile) -> ProfileSummary:
    return ProfileSummary(name=profile.name, device_class=profile.device.kind,
                          runtime=profile.runtime.name, kernels=profile.runtime.kernels,
                          description=profile.description)


def model_summary(model: Model, shapes: ShapesReport | None = None) -> ModelSummary:
    return ModelSummary(
        path=model.path, sha256=model.sha256, size_bytes=model.size_bytes,
        operators=sum(len(sg.operators) for sg in model.subgraphs),
        op_types=model.op_types, parameters=parameters_by_dtype(model),
        conversion=conversion_settings(model), shapes=shapes)


def conversion_settings(model: Model) -> dict[str, Any] | None:
    """The JSON ``devicefit convert`` stored in the model, or None (also if unreadable)."""
    raw = model.metadata.get(CONVERSION_METADATA)
    if raw is None:
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("%s: ignoring unreadable %s metadata: %s", model.path,
                    CONVERSION_METADATA, exc)
        return None
    return value if isinstance(value, dict) else {"value": value}


def runtime_code(model: Model, profile: Profile) -> tuple[int, str]:
    """The runtime's code in flash beside the model, and where the figure comes from: the
    target's own estimate for the model's operators where it has one (TFLM: the kernels
    it registers), else the profile's ``runtime.code_size``; 0 when neither says."""
    own = target_for(profile).code_size
    if own is not None and (found := own(model, profile)) is not None:
        return found
    if profile.runtime.code_bytes:
        return profile.runtime.code_bytes, "runtime.code_size, a fixed allowance"
    return 0, ""


def memory_report(model: Model, profile: Profile, plan: MemoryPlan) -> MemoryReport:
    code, code_basis = runtime_code(model, profile)
    sg = model.main
    timeline = []
    for op_index, (first, last) in sorted(plan.op_steps.items(), key=lambda kv: kv[1]):
        live = max(plan.live_bytes[first:last + 1], default=0)
        timeline.append(TimelineStep(op_index, sg.operators[op_index].op_name, live,
                                     first, last))
    planned = []
    for b, offset in zip(plan.buffers, plan.offsets, strict=True):
        t = model.subgraphs[b.subgraph].tensors[b.tensor] if b.tensor >= 0 else None
        planned.append(PlannedBuffer(
            kind=b.kind, tensor=b.tensor, name=b.name, size_bytes=b.size, offset=offset,
            first_step=b.first, last_step=b.last, shape=list(t.shape) if t else [],
            dtype=t.dtype if t else "", offline=b.offline_offset is not None))
    return MemoryReport(
        planner=plan.planner,
        arena_head_bytes=plan.head_bytes,
        arena_tail_bytes=plan.tail_bytes,
        arena_bytes=plan.arena_bytes,
        flash_bytes=model.size_bytes + code,
        flash_model_bytes=model.size_bytes,
        flash_code_bytes=code,
        flash_code_basis=code_basis,
        lower_bound_bytes=plan.lower_bound_bytes,
        arena_required_bytes=plan.arena_required_bytes,
        timeline=timeline,
        plan=planned,
        tail_breakdown=dict(plan.tail_breakdown),
        exact=list(plan.exact) + ([] if code else ["flash"]),
        estimated=list(plan.estimated) + (["flash"] if code else []),
    )
