"""The simulator's driver: read → plan → count → [measure] → [bench] → judge, one :class:`Report`.

The profile's target is resolved once (:func:`simulator.target.target_for`) and handed to
each stage. The static path (the default) imports no runtime and no TensorFlow: it reads the
flatbuffer, plans the arena with the target's planner, counts flash, parameters and MACs,
checks op support and estimates latency; then :func:`simulator.judge.invariants.check_static`
states what every later stage and view relies on (a failure is a devicefit bug). ``run``
(a :class:`~simulator.types.MeasureOptions`: what the command asks of ``--run``) hands the
report to the measuring stage, :func:`simulator.run.measure.measure`, which gives it back with
the ``measured`` section and the host figures of ``latency``; a device benchmark
(``bench``) adds its section. Only then, with every figure in, are the budgets judged —
once (:func:`simulator.judge.verdict.judge`), so measured figures win. Each stage gives a new
report; none changes the one it was given.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import CompileRefusal, CompilerRefused, ProfileError, UsageError
from devicefit.simulator.estimate.compute import op_work, parameters_by_dtype
from devicefit.simulator.estimate.latency import device_latency
from devicefit.simulator.judge.invariants import check_static
from devicefit.simulator.judge.verdict import judge
from devicefit.simulator.plan.compat import static_compatibility
from devicefit.simulator.plan.shapes import resolve_shapes, shape_notes
from devicefit.simulator.plan.training import TRAIN, cannot_train, plan_training
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.benchmark import BenchComparison, BenchResult
from devicefit.simulator.report.layers import layer_rows
from devicefit.simulator.report.report import (
    BenchSection,
    ComputeReport,
    LatencyReport,
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
from devicefit.simulator.target import Target, runner_for, target_for
from devicefit.simulator.types import InputShape, MeasureOptions, MemoryPlan

#: Metadata entry in which ``devicefit convert`` records its settings (JSON).
CONVERSION_METADATA = "devicefit.conversion"


def simulate(model_path: str | Path, profile: Profile | str, *,
             run: MeasureOptions | None = None, order: Sequence[int] | None = None,
             profiles_dirs: Sequence[str | Path] = (), bench: BenchResult | None = None,
             strict: bool = False, probe: bool = True,
             input_shapes: Sequence[InputShape] = ()) -> Report:
    """Predict (and with ``run`` also measure) ``model_path`` on ``profile``, judged.

    ``profile`` is a loaded :class:`Profile` or a name/path for :func:`load_profile`.
    ``run``: how to run the model in the profile's runtime (None: the static half only).
    ``order`` executes the main graph's operators in that order (for the optimizer).
    ``bench`` is what the device itself measured (``devicefit bench``): its average time is
    judged against the latency budget instead of the estimate. ``strict``: a budget the
    report has no figure for fails the verdict. ``probe``: on a TFLM or LiteRT profile, ask
    the runtime about each operator signature (:mod:`simulator.run.probe`; cached on
    disk, a child process only for signatures not seen before). ``input_shapes``: (input
    name or None for the only one, shape) pairs the dynamic dimensions are resolved from
    (else the stored input shapes; :mod:`simulator.plan.shapes`).
    """
    if not isinstance(profile, Profile):
        profile = load_profile(profile, list(profiles_dirs))
    target = target_for(profile)
    if run is not None:  # a target that cannot run models: one line, before any work
        runner_for(target)
    source = read_model(model_path)
    try:
        model, shapes, fixed = device_model(source, profile, target, input_shapes,
                                            run is not None)
    except CompilerRefused as exc:
        # A finding about the model on this device: reported, and the verdict fails.
        model, shapes, report = source, None, refused_report(source, profile, exc.refusal)
    else:
        report = static_report(model, profile, order, shapes=shapes, probe=probe,
                               target=target)
        if fixed is not None:
            report = dataclasses.replace(report, notes=[*report.notes, fixed])
        if model.sha256 != source.sha256:
            report = dataclasses.replace(report, model=dataclasses.replace(
                report.model, source=compiled_from(source, target)))
    check_static(model, report)
    if run is not None and report.compile_refusal is None:  # a refused model has no run
        report = _measured(source, model, profile, target, report, shapes, input_shapes, run)
    if bench is not None:
        report = dataclasses.replace(report, bench=bench_section(bench, report))
    report = dataclasses.replace(report, layers=layer_rows(model, report))
    return judge(report, profile, strict=strict)


def compiled_from(source: Model, target: Target) -> SourceModel:
    """The user's file, beside the compilation of it the report describes."""
    return SourceModel(source.size_bytes, source.sha256,
                       sum(len(sg.operators) for sg in source.subgraphs), target.title)


def _measured(source: Model, model: Model, profile: Profile, target: Target, report: Report,
              shapes: ShapesReport | None, input_shapes: Sequence[InputShape],
              options: MeasureOptions) -> Report:
    """``report`` with the running half: ``model`` run in the profile's runtime."""
    # Imported here: the static path must not load native runtimes.
    from devicefit.simulator.run.measure import measure

    given = dict(shapes.inputs) if input_shapes and shapes is not None else None
    # The runtimes load the file as it is (stored shapes): the one read above, unless the
    # target prepared another.
    return measure(model, profile, target, report, options,
                   file=source if target.prepare is None else None, input_shapes=given)


def refused_report(source: Model, profile: Profile, refusal: CompileRefusal) -> Report:
    """The report of a model the target's compiler refused, not judged yet: what the file
    itself tells (size, operators, parameters, MACs) and the compiler's refusal. The device
    runs the compiled model, which does not exist: no memory plan, op support, latency or
    run of it, so no budget is checked (:func:`simulator.judge.verdict.judge` says why) and the
    refusal fails the verdict."""
    return Report(model=model_summary(source), profile=profile_summary(profile), memory=None,
                  compute=compute_report(source), compile_refusal=refusal)


def compute_report(model: Model) -> ComputeReport:
    """MACs and bytes moved per operator of the main graph, and the MACs in all."""
    work = op_work(model)
    return ComputeReport(
        macs=sum(w.macs for w in work),
        per_op=[OpCompute(w.op_index, w.op, w.macs, w.bytes_moved) for w in work])


def device_model(source: Model, profile: Profile, target: Target,
                 input_shapes: Sequence[InputShape], run: bool
                 ) -> tuple[Model, ShapesReport | None, str | None]:
    """The model the device runs (compiled, for an NPU target) with its shapes resolved, and
    a note when the given shapes are ones the runtime cannot resize to (TFLM runs the stored
    ones: the figures are then for the model converted at that shape, and it cannot run)."""
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
    """A device benchmark beside the report's estimate and its band (``report`` None: none to
    compare). Without an estimate the report's own reason is given (a GPU profile with no
    fitted constants says so), ``why`` only when the report has no latency section at all."""
    latency = report.latency if report else None
    estimate = latency.estimated_device_ms if latency else None
    reason = (latency.no_estimate if latency else None) or why
    return BenchSection(result, BenchComparison.of(result.results.inference_avg_ms, estimate,
                                                   reason if estimate is None else None,
                                                   latency.band_ms if latency else None))


def static_report(model: Model, profile: Profile, order: Sequence[int] | None = None, *,
                  shapes: ShapesReport | None = None, probe: bool = False,
                  target: Target | None = None) -> Report:
    """The report of the static half, not judged yet (:func:`simulate` judges it whole).
    ``shapes``: how :func:`simulator.plan.shapes.resolve_shapes` set ``model``'s shapes;
    ``probe``: op support asked of the runtime too (see :func:`simulate`); ``target``: the
    profile's, when the caller has resolved it."""
    target = target or target_for(profile)
    plan = target.planner(model, profile, order)
    compute = compute_report(model)
    compatibility = static_compatibility(model, profile, probe=probe)
    notes = [*plan.notes, *(shape_notes(shapes) if shapes is not None else []),
             *compatibility.disagreement_lines()]
    try:
        latency: LatencyReport | None = device_latency(model, profile, target, compatibility,
                                                       compute.per_op)
    except ProfileError as exc:
        # An incomplete cost model costs the latency figure, not the memory verdict.
        latency = None
        notes.append(f"no device latency estimate: {exc}")
    if latency and latency.no_estimate:
        notes.append(latency.no_estimate)
    if shapes is not None and not shapes.resolved and latency:
        latency = dataclasses.replace(
            latency, band_ms=None, band=None,
            band_basis="shapes unresolved: no validated band (the estimate counts the "
                       "file's placeholder sizes for the unresolved dimensions)")
    training, no_training = None, None
    if model.signature(TRAIN) is not None:
        no_training = cannot_train(target)
        training = plan_training(model, TRAIN, target) if no_training is None else None
        notes.append(no_training or f"training memory ('{TRAIN}' signature): " +
                     "; ".join(training.notes if training else ()))
    return Report(model=model_summary(model, shapes), profile=profile_summary(profile),
                  memory=memory_report(model, profile, target, plan), compute=compute,
                  compatibility=compatibility, latency=latency, notes=notes,
                  training=training, no_training=no_training)


def profile_summary(profile: Profile) -> ProfileSummary:
    return ProfileSummary(name=profile.name, device_class=profile.device.kind,
                          runtime=profile.runtime.name, kernels=profile.runtime.kernels,
                          description=profile.description)


def model_summary(model: Model, shapes: ShapesReport | None = None) -> ModelSummary:
    return ModelSummary(
        path=model.path, sha256=model.sha256, size_bytes=model.size_bytes,
        operators=sum(len(sg.operators) for sg in model.subgraphs),
        op_types=model.op_types, parameters=parameters_by_dtype(model),
        conversion=conversion_settings(model), shapes=shapes,
        signatures={s.key: s.subgraph for s in model.signatures})


def conversion_settings(model: Model) -> dict[str, Any] | None:
    """The JSON ``devicefit convert`` stored in the model, or None (also if unreadable)."""
    raw = model.metadata.get(CONVERSION_METADATA)
    if raw is None:
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        import logging  # here only: importing it cost ~0.01 s of every simulate

        logging.getLogger(__name__).warning("%s: ignoring unreadable %s metadata: %s",
                                            model.path, CONVERSION_METADATA, exc)
        return None
    return value if isinstance(value, dict) else {"value": value}


def runtime_code(model: Model, profile: Profile, target: Target) -> tuple[int, str]:
    """The runtime's code in flash beside the model, and where the figure comes from: the
    target's own estimate for the model's operators where it has one (TFLM: the kernels
    it registers), else the profile's ``runtime.code_size``; 0 when neither says."""
    own = target.code_size
    if own is not None and (found := own(model, profile)) is not None:
        return found
    if profile.runtime.code_bytes:
        return profile.runtime.code_bytes, "runtime.code_size, a fixed allowance"
    return 0, ""


def memory_report(model: Model, profile: Profile, target: Target, plan: MemoryPlan
                  ) -> MemoryReport:
    code, code_basis = runtime_code(model, profile, target)
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
