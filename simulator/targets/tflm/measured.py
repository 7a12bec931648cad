"""What ``simulate --run`` measures that is TFLM's own: the arena, the cross-check against
LiteRT's reference kernels, and the model on the device's own TFLM build.

The functions are the TFLM record's ``read_run``, ``cross_check`` and ``device_build`` hooks
(:mod:`simulator.targets`), called by :mod:`simulator.measure`; each gives back the
section it was handed with its figures added, and the notes they call for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from devicefit.simulator.compat import check_ops
from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.latency import op_dtype
from devicefit.simulator.model import INTEGER_DTYPES, Model
from devicefit.simulator.planners import plan_memory
from devicefit.simulator.profile_types import Ops, Profile
from devicefit.simulator.profiles import with_runtime
from devicefit.simulator.report import CrossCheck, MeasuredReport, MemoryReport, TargetMeasurement
from devicefit.simulator.runtimes import (
    compare_outputs,
    input_specs,
    load_inputs,
    random_inputs,
    starting_arena,
)
from devicefit.simulator.targets.registry import TARGETS
from devicefit.simulator.targets.tflm import TARGET
from devicefit.simulator.targets.tflm import ops as tflm_ops
from devicefit.simulator.types import Basis, ModelRuns, RunOptions, RunResult
from devicefit.simulator.units import format_bytes

if TYPE_CHECKING:
    from devicefit.simulator.targets.tflm.build import BuildSpec

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


def device_build(build_dir: str | Path, profile: Profile) -> OnBuild:
    """The measurement on the device's own TFLM build: the user's checkout built for the
    profile's core and kernels, run under QEMU (:mod:`.qemu`); a
    :class:`~.build.TargetBuildError` (one line) now, before anything runs, when there is
    no such build."""
    # Imported here: only --target-build needs the builder.
    from devicefit.simulator.targets.tflm.build import spec_for

    return OnBuild(spec_for(build_dir, profile.device.cpu, profile.runtime.kernels,
                            profile.name))


@dataclass(frozen=True)
class OnBuild:
    """The model measured on one TFLM build (:func:`device_build`)."""

    spec: BuildSpec

    def __call__(self, measured: MeasuredReport, model: Model, profile: Profile,
                 setup: ModelRuns, host: RunResult | None) -> tuple[MeasuredReport, list[str]]:
        """``measured`` with the build's figures. The inputs are the host run's (the same
        file, or the same seed), so the outputs of the build are compared with the host
        runtime's (``host``; None: that run failed). A build that runs the model gives the
        device arena: its smallest working arena, measured (the budget is judged on it)."""
        from devicefit.simulator.targets.tflm.build import TflmBuild
        from devicefit.simulator.targets.tflm.qemu import measure

        spec = self.spec
        specs = input_specs(model)
        inputs = (load_inputs(setup.input_path, specs) if setup.input_path
                  else random_inputs(specs))
        build = TflmBuild(spec)
        try:
            target, outputs = measure(build, Path(model.path), model.op_types, inputs,
                                      starting_arena(model))
        except RuntimeFailure as exc:  # the build or QEMU failed: a finding, the host run stands
            target, outputs = TargetMeasurement(f"{build.label} (qemu)", spec.core,
                                                spec.kernels, build.key, "error",
                                                message=str(exc)), []
        if host is not None and target.ok:
            as_host = [np.frombuffer(raw.tobytes(), dtype=ref.dtype).reshape(ref.shape)
                       if raw.size == ref.nbytes else raw
                       for raw, ref in zip(outputs, host.outputs)]
            exact, diff = compare_outputs(as_host, host.outputs)
            target = dataclasses.replace(target, outputs_agree=exact, max_abs_difference=diff,
                                         compared_with=f"{host.runtime} on this host, same "
                                                       f"inputs")
        if not target.ok:
            note = (f"{target.build}: {target.status}"
                    + (f" ({', '.join(target.unsupported_ops)})" if target.unsupported_ops
                       else f": {target.message}" if target.message else ""))
            return dataclasses.replace(measured, target_build=target), [note]
        budget = profile.budgets.arena_bytes
        arena = target.min_arena_bytes or 0
        return dataclasses.replace(
            measured, target_build=target, arena_bytes=arena, arena_basis=Basis.MEASURED,
            arena_budget_bytes=budget,
            over_budget_bytes=None if budget is None else max(0, arena - budget)), []
