"""What ``simulate --run`` measures that is TFLM's own: the arena, the cross-check against
LiteRT's reference kernels, and the model on the device's own TFLM build.

The functions are the TFLM record's ``read_run``, ``cross_check`` and ``device_build`` hooks
(:mod:`simulator.targets`), called by :mod:`simulator.run.measure`; each gives back the
section it was handed with its figures added, and the notes they call for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.estimate.latency import op_dtype
from devicefit.simulator.infra.units import format_bytes
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.plan.planners import plan_memory
from devicefit.simulator.profile_types import Ops, Profile
from devicefit.simulator.profiles import with_runtime
from devicefit.simulator.read.model import INTEGER_DTYPES, Model
from devicefit.simulator.report.report import (
    CrossCheck,
    MeasuredReport,
    MemoryReport,
    OutputDiff,
    TargetMeasurement,
)
from devicefit.simulator.run.runtimes import (
    compare_outputs,
    input_specs,
    load_inputs,
    random_inputs,
    starting_arena,
)
from devicefit.simulator.target import TARGETS, OnDevice
from devicefit.simulator.targets.tflm import TARGET
from devicefit.simulator.targets.tflm import ops as tflm_ops
from devicefit.simulator.targets.tflm.export import export_files, export_spec
from devicefit.simulator.targets.tflm.settings import OutputTolerance, TflmSettings
from devicefit.simulator.types import Basis, BuildRequest, ModelRuns, RunOptions, RunResult

if TYPE_CHECKING:
    from devicefit.simulator.targets.tflm.build import BuildSpec, MemoryMap

#: Ops that only convert between float and integer at the model's edges.
_EDGE_OPS = {"QUANTIZE", "DEQUANTIZE"}


def is_integer_model(model: Model) -> bool:
    """True when every compute op of the main graph runs on integer activations."""
    sg = model.main
    ops = [op for op in sg.operators if op.op_name not in _EDGE_OPS]
    return bool(ops) and all(op_dtype(sg, op) in INTEGER_DTYPES for op in ops)


def read_run(measured: MeasuredReport, model: Model, profile: Profile, mem: MemoryReport,
             result: RunResult) -> tuple[MeasuredReport, list[str]]:
    """``measured`` with the arena the run measured beside the prediction, and what it means
    for the device.

    The wheel runs reference kernels on a 64-bit host. Its head checks the planner: it is
    compared with the prediction for those same kernels, which must match to the byte. The
    device's own kernels (CMSIS-NN, ESP-NN) request other scratch buffers and its pointers
    are narrower, so the device needs the head and tail predicted for its runtime; only a
    host-like profile (reference kernels, 64-bit) takes the measured figures as they are.
    The head for reference kernels is planned again here when the profile's kernels are
    others: the static plan is the device's.
    """
    if result.arena_head_bytes is None:
        return measured, []
    notes = []
    head = result.arena_head_bytes
    kernels_match = profile.runtime.kernels == "reference"
    host_like = kernels_match and profile.runtime.pointer_bytes == 8
    wheel_head = mem.arena_head_bytes if kernels_match else plan_memory(
        model, with_runtime(profile, kernels="reference")).head_bytes
    device_head = head if kernels_match else mem.arena_head_bytes
    device_arena = (result.arena_total_bytes or 0) if host_like \
        else device_head + mem.arena_tail_bytes
    difference = head - wheel_head
    budget = profile.budgets.arena_bytes
    if budget is not None and device_arena > budget:
        notes.append(f"the model needs {format_bytes(device_arena - budget)} more arena than "
                     f"the profile's budget of {format_bytes(budget)}")
    if difference:
        notes.append(f"measured arena head differs from the prediction for reference "
                     f"kernels by {difference:+,} B")
    return dataclasses.replace(
        measured, arena_head_bytes=head, arena_tail_bytes=result.arena_tail_bytes,
        arena_total_bytes=result.arena_total_bytes, arena_categories=result.arena_categories,
        predicted_head_bytes=wheel_head,
        predicted_head_basis="reference kernels, as the tflite-micro wheel runs them",
        head_difference_bytes=difference,
        device_head_bytes=device_head,
        device_head_basis=("measured" if kernels_match else
                           f"predicted for {profile.runtime.kernels} kernels (the wheel runs "
                           f"reference kernels)"),
        tail_basis=("measured" if host_like else
                    f"predicted for {profile.runtime.pointer_bytes * 8}-bit pointers and "
                    f"{profile.runtime.kernels} kernels (the host's tail is not the device's)"),
        arena_bytes=device_arena,
        # What the device arena figure rests on, for the budget check: only a host-like
        # profile takes the interpreter's own total; others keep estimated parts.
        arena_basis=Basis.MEASURED if host_like else Basis.ESTIMATED,
        arena_budget_bytes=budget,
        over_budget_bytes=None if budget is None else max(0, device_arena - budget)), notes


def cross_check(model: Model, profile: Profile, setup: ModelRuns, host: RunResult
                ) -> tuple[CrossCheck | None, list[str]]:
    """TFLM against LiteRT's reference kernels on the same inputs (bit-exact for integer
    kernels), for an integer model TFLM's table accepts, on any profile; None otherwise.
    ``host`` is the profile's own run, reused when it was TFLM's. Either runtime refusing
    or crashing on the file is a finding of the check — some real models load in one and
    not the other — never the end of the measurement."""
    if not is_integer_model(model) or tflm_ops.check(model, profile):
        return None, []
    second = TARGET.second_opinion
    assert second is not None
    runtimes = (TARGET.name, f"{second} (reference kernels)")
    if f"CUSTOM:{tflm_ops.DECODE}" in model.op_types:
        # One line, not LiteRT's refusal of every encoded tensor's quantization.
        return CrossCheck(runtimes, skipped=f"{TARGETS[second].title} has no kernel for TFLM's "
                                            "DECODE operator (look-up-table compression)"), []
    lacking = check_ops(model, dataclasses.replace(profile, ops=Ops(table=second)))
    if not lacking.supported:  # e.g. TFLM's Signal ops: LiteRT has no kernel for them
        return CrossCheck(runtimes, skipped=f"{TARGETS[second].title} cannot run "
                                            f"{lacking.summary()}"), []
    try:
        tflm = host if host.runtime == TARGET.name else setup.run(TARGET.name, RunOptions())
        ref = setup.run(second, RunOptions(reference_kernels=True))
    except RuntimeFailure as exc:
        return CrossCheck(runtimes, error=str(exc)), [f"cross-check not done: {exc}"]
    exact, diff = compare_outputs(tflm.outputs, ref.outputs)
    notes = [] if exact else [f"TFLM and LiteRT reference kernels disagree on the same inputs "
                              f"(max difference {diff}); expected bit-exact"]
    return CrossCheck(runtimes, bit_exact=exact, max_abs_difference=diff), notes


def device_build(request: BuildRequest, profile: Profile) -> OnDevice:
    """The measurement on the device's own TFLM build: the user's checkout built for the
    profile's core and kernels, the model exported (:mod:`.export`) and run as exported
    under QEMU (:mod:`.qemu`); a :class:`~.build.TargetBuildError` (one line) now, before
    anything runs, when there is no such build."""
    # Imported here: only --target-build needs the builder.
    from devicefit.simulator.targets.tflm.build import spec_for

    return OnBuild(spec_for(request.checkout, profile.device.cpu, profile.runtime.kernels,
                            profile.name), request)


@dataclass(frozen=True)
class OnBuild:
    """The model measured on one TFLM build (:func:`device_build`)."""

    spec: BuildSpec
    request: BuildRequest

    def __call__(self, measured: MeasuredReport, model: Model, profile: Profile,
                 setup: ModelRuns, host: RunResult | None, memory: MemoryReport
                 ) -> tuple[MeasuredReport, list[str]]:
        """``measured`` with the build's figures. The inputs are the host run's (the same
        file, or the same seed), so the export's outputs on the build are compared with
        the host runtime's (``host``; None: that run failed). A build that runs the model
        gives the device arena: its smallest working arena, measured (the budget is judged
        on it), and the flash of the linked image."""
        from devicefit.simulator.targets.tflm.build import (
            BuildFailure,
            TargetBuildError,
            TflmBuild,
        )
        from devicefit.simulator.targets.tflm.checkout import checkout_methods
        from devicefit.simulator.targets.tflm.qemu import ExportRun, measure

        spec = self.spec
        specs = input_specs(model)
        inputs = (load_inputs(setup.input_path, specs) if setup.input_path
                  else random_inputs(specs))
        build = TflmBuild(spec)
        try:
            methods, source = checkout_methods(spec.tflm_dir)
            export = export_spec(model, profile, memory, methods, source,
                                 self.request.export_name, self.request.arena_margin)
            files = tuple(export_files(export))
            run = ExportRun(files, tuple(r.method for r in export.registrations),
                            export.arena.bytes, export.name)
            target, outputs = measure(build, run, inputs, starting_arena(model),
                                      memory_map(profile), timeout_s=setup.timeout_s)
        except (RuntimeFailure, BuildFailure, TargetBuildError, OSError) as exc:
            # the set-up failed: nothing was measured, and the verdict says so
            target, outputs = TargetMeasurement(f"{build.label} (qemu)", spec.core,
                                                spec.kernels, build.source, "error",
                                                message=str(exc)), []
        if host is not None and target.ok and target.arena_constant_starts:
            target = compared(target, outputs, host, tolerance(profile))
        note = _note(target)
        if not target.ok:
            return dataclasses.replace(measured, target_build=target), [note] if note else []
        budget = profile.budgets.arena_bytes
        arena = target.min_arena_bytes or 0
        return dataclasses.replace(
            measured, target_build=target, arena_bytes=arena, arena_basis=Basis.MEASURED,
            arena_budget_bytes=budget,
            over_budget_bytes=None if budget is None else max(0, arena - budget)), \
            [note] if note else []


def _note(target: TargetMeasurement) -> str | None:
    """What the build found that the verdict fails on, as one note."""
    if not target.ok:
        return (f"{target.build}: {target.status}"
                + (f" ({', '.join(target.unsupported_ops)})" if target.unsupported_ops
                   else f": {target.message}" if target.message else ""))
    if target.arena_constant_starts is False:
        return f"{target.build}: {target.message}"
    if target.outputs_within_tolerance is False:
        worst = max(target.output_diffs, key=lambda d: (d.max_steps or 0, d.relative))
        return (f"{target.build}: outputs differ from the host run beyond the tolerance "
                f"({target.tolerance}): output {worst.index} by {_diff_text(worst)}")
    return None


def _diff_text(d: OutputDiff) -> str:
    if d.max_steps is not None:
        return f"{d.max_steps} quantization step(s) ({d.differing} of {d.elements} elements)"
    return f"{d.max_abs:.3g} ({d.relative:.2%} of its largest magnitude; {d.differing} of " \
           f"{d.elements} elements)"


def memory_map(profile: Profile) -> MemoryMap:
    """The device's flash and SRAM for the firmware link (generous where the profile sets
    none: the link then measures, it does not judge)."""
    from devicefit.simulator.targets.tflm.build import MemoryMap

    d = profile.device
    return MemoryMap(d.flash_bytes or 64 * 1024 * 1024,
                     d.sram_bytes or d.ram_bytes or 64 * 1024 * 1024)


def tolerance(profile: Profile) -> OutputTolerance:
    settings = profile.target_settings
    return settings.tolerance if isinstance(settings, TflmSettings) else OutputTolerance()


def compared(target: TargetMeasurement, outputs: list[np.ndarray], host: RunResult,
             allowed: OutputTolerance) -> TargetMeasurement:
    """``target`` with each output against the host run's, judged against ``allowed``."""
    diffs = tuple(output_diff(i, raw, ref) for i, (raw, ref)
                  in enumerate(zip(outputs, host.outputs, strict=False)))
    exact = all(d.differing == 0 for d in diffs) and len(diffs) == len(host.outputs)
    within = len(diffs) == len(host.outputs) and all(allowed.admits(d) for d in diffs)
    worst = max((d.max_steps if d.max_steps is not None else d.max_abs for d in diffs),
                default=0)
    return dataclasses.replace(target, outputs_agree=exact, max_abs_difference=float(worst),
                               compared_with=f"{host.runtime} on this host, same inputs",
                               output_diffs=diffs, tolerance=allowed.text(),
                               outputs_within_tolerance=within)


def output_diff(index: int, raw: np.ndarray, ref: np.ndarray) -> OutputDiff:
    """One output of the build (its raw bytes) against the host's array."""
    got = (np.frombuffer(raw.tobytes(), dtype=ref.dtype).reshape(ref.shape)
           if raw.size == ref.nbytes else None)
    if got is None:  # another size: every element differs
        return OutputDiff(index, str(ref.dtype), ref.size, ref.size,
                          None if ref.dtype.kind == "f" else -1, float("inf"), float("inf"))
    if ref.dtype.kind in "iub":
        steps = np.abs(got.astype(np.int64) - ref.astype(np.int64))
        return OutputDiff(index, str(ref.dtype), int(np.count_nonzero(steps)), ref.size,
                          int(steps.max(initial=0)))
    delta = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    delta = np.where(np.isnan(got) & np.isnan(ref), 0.0, delta)
    worst = float(np.nan_to_num(delta, nan=np.inf).max(initial=0.0))
    scale = float(np.abs(ref.astype(np.float64)).max(initial=0.0))
    return OutputDiff(index, str(ref.dtype), int(np.count_nonzero(delta)), ref.size,
                      None, worst, worst / scale if scale > 0 else (0.0 if worst == 0 else
                                                                    float("inf")))
