"""The running half of ``simulate``: op support, real runs, cross-check, latency → report.

:func:`run_stage` fills ``report.compatibility``, ``report.measured`` and ``report.latency``
(the driver then judges the whole report). What it runs:

- the profile's runtime (``edgetpu`` → its LiteRT CPU reference) with warm-up and ``runs``
  timed invokes, for host latency and, in TFLM, the real arena (RecordingMicroAllocator);
- for integer models, TFLM and LiteRT's reference kernels on the same inputs: the int8
  kernels are the same code, so the outputs must agree bit for bit.

The model is always run, also when the static op support says it cannot be: the run's
answer wins and a difference is a disagreement in ``compatibility``; a failed run names
the stage, the runtime's message and the operator, and fails the verdict.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np

from devicefit.simulator.compat import check_ops
from devicefit.simulator.compat.probe import probe_ops, probe_runtime, scales
from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.latency import op_dtype
from devicefit.simulator.model import INTEGER_DTYPES, Model
from devicefit.simulator.planners import plan_memory
from devicefit.simulator.profile_types import Ops, Profile
from devicefit.simulator.profiles import with_runtime
from devicefit.simulator.report import (
    CompatibilityReport,
    CrossCheck,
    Disagreement,
    HostLatency,
    HostOpTime,
    LatencyReport,
    MeasuredReport,
    MemoryReport,
    Report,
    RunFailure,
    TargetMeasurement,
)
from devicefit.simulator.runtimes import (
    INPUT_SEED,
    compare_outputs,
    input_specs,
    load_inputs,
    random_inputs,
    run_model,
    runner_name,
    starting_arena,
)
from devicefit.simulator.targets.tflm import ops as tflm_ops
from devicefit.simulator.types import Basis, RunResult, UnsupportedOp
from devicefit.simulator.units import format_bytes

#: Ops that only convert between float and integer at the model's edges.
_EDGE_OPS = {"QUANTIZE", "DEQUANTIZE"}


class _RunInputs(TypedDict):
    """The :func:`run_model` arguments every run of one stage shares: the same inputs."""

    input_path: str | Path | None
    timeout_s: float
    input_shapes: Mapping[str, Sequence[int]] | None


def is_integer_model(model: Model) -> bool:
    """True when every compute op of the main graph runs on integer activations."""
    sg = model.main
    ops = [op for op in sg.operators if op.op_name not in _EDGE_OPS]
    return bool(ops) and all(op_dtype(sg, op) in INTEGER_DTYPES for op in ops)


def host_summary(result: RunResult, threads: int) -> HostLatency:
    times = sorted(result.host_ms)
    p90 = times[min(len(times) - 1, int(np.ceil(0.9 * len(times))) - 1)]
    return HostLatency(median=statistics.median(times), p90=p90, min=times[0],
                       runs=len(times), runtime=result.runtime, threads=threads)


def run_stage(model: Model, profile: Profile, report: Report, *, runs: int = 10,
              warmup: int = 1, input_path: str | Path | None = None, timeout_s: float = 60,
              cross_check: bool = True,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None,
              target_build: str | Path | None = None) -> Report:
    """``report`` with its running-half sections filled by running ``model`` for real;
    random inputs at ``input_shapes`` (input name → shape) where given.

    The model is run whatever the static answer was: a run that fails is reported (stage,
    message, operator) and fails the verdict; a run that disagrees with the static op
    support, either way, is a disagreement in ``compatibility`` and the run's answer wins.
    ``target_build``: a TFLM checkout to also build for the profile's core and kernels and
    run the model on under QEMU (:mod:`simulator.targets.tflm.qemu`); its smallest
    working arena is then the measured device arena.
    """
    compat = report.compatibility or check_ops(model, profile)
    notes = list(report.notes)
    done = dataclasses.replace(report, compatibility=compat, notes=notes)
    primary = runner_name(profile.runtime.name)
    inputs = (str(input_path) if input_path
              else f"random within each input's range (seed {INPUT_SEED})")
    if input_shapes and not input_path:
        inputs += ", at " + ", ".join(f"{name} {'x'.join(map(str, shape))}"
                                      for name, shape in input_shapes.items())
    threads = profile.runtime.threads
    xnnpack = primary != "litert" or "xnnpack" in profile.runtime.delegates
    # Inputs are read or generated in each run's child, never here (see run_model).
    common = _RunInputs(input_path=input_path, timeout_s=timeout_s, input_shapes=input_shapes)
    try:
        main = run_model(model.path, primary, runs=runs, warmup=warmup, threads=threads,
                         xnnpack=xnnpack, **common)
    except RuntimeFailure as exc:
        failure = _failure(model, profile, primary, exc)
        notes.append(f"{primary} {failure.line()}")
        done.measured = _with_target(MeasuredReport(primary, inputs, failure=failure), model,
                                     profile, target_build, input_path, None, notes)
        done.compatibility = _after_failed_run(compat, failure, primary)
        notes += _new_disagreements(compat, done.compatibility)
        return done
    done.compatibility = _after_run(compat, profile, primary)
    notes += _new_disagreements(compat, done.compatibility)
    # A profile whose cost model has no entry for the model's dtypes has no latency section
    # from the static half; the host measurement still belongs in one.
    per_op = (tuple(HostOpTime(o["op_index"], o["op"], o["ms"]) for o in main.per_op_ms)
              if main.per_op_ms is not None else None)
    done.latency = dataclasses.replace(report.latency or LatencyReport(),
                                       host_ms=host_summary(main, threads), host_per_op_ms=per_op)
    measured = MeasuredReport(primary, inputs)
    if main.arena_head_bytes is not None:
        measured = _arena(measured, model, main, report.memory, profile, notes)
    if cross_check and is_integer_model(model) and not tflm_ops.check(model, profile):
        check = _cross_check(model, main if primary == "tflm" else None, common, profile, notes)
        measured = dataclasses.replace(measured, cross_check=check, outputs_agree=check.bit_exact)
    done.measured = _with_target(measured, model, profile, target_build, input_path, main, notes)
    return done


#: How the interpreters name the node they stopped at: TFLM, then LiteRT.
_NODE = (re.compile(r"Node (?P<op>[A-Z0-9_]+) \(number (?P<index>\d+)\)"),
         re.compile(r"Node number (?P<index>\d+) \((?P<op>[A-Z0-9_]+)\)"))


def _failure(model: Model, profile: Profile, runner: str, exc: RuntimeFailure) -> RunFailure:
    """What the run did, with the operator it stopped at: the one the runtime's message
    names, else (a crash says nothing) the first one the runtime refuses on its own, asked
    one operator at a time (:mod:`simulator.compat.probe`, cached)."""
    message = str(exc)
    failure = RunFailure(exc.stage or "start", message, crashed=exc.crashed)
    for pattern in _NODE:
        if (m := pattern.search(message)) is not None:
            return dataclasses.replace(failure, op_index=int(m["index"]), op=m["op"],
                                       op_found_by="the runtime's message")
    runtime = probe_runtime(runner, profile)
    if runtime is None:
        return failure
    answers = probe_ops(model, runtime).answers
    refused = next((where for where, a in sorted(answers.items()) if not a.ok), None)
    if refused is None:
        return failure
    sg, index = refused
    op = model.subgraphs[sg].operators[index]
    return dataclasses.replace(
        failure, op_index=index, subgraph=sg, op=op.op_name,
        op_found_by=f"running each operator alone: it fails alone too, at "
                    f"{answers[refused].stage}; its scales: {scales(model.subgraphs[sg], op)}")


def _new_disagreements(before: CompatibilityReport, after: CompatibilityReport) -> list[str]:
    return [f"op support: {d.line()}" for d in after.disagreements[len(before.disagreements):]]


def _after_failed_run(compat: CompatibilityReport, failure: RunFailure, runner: str
                      ) -> CompatibilityReport:
    """A failed run of the profile's own runtime is its answer on op support: a model the
    static check passed fails it, as a disagreement. (An Edge TPU profile's run is its CPU
    reference in LiteRT: its failure is reported, not the accelerator's verdict.)"""
    if compat.table != runner or not compat.supported:
        return compat
    index = -1 if failure.op_index is None else failure.op_index
    op = failure.op or "(model)"
    said = f"the run {failure.line()}"
    return dataclasses.replace(
        compat, supported=False,
        unsupported_ops=(UnsupportedOp(index, op, said, failure.subgraph),),
        disagreements=(*compat.disagreements,
                       Disagreement(index, op, "supported", said, "run", failure.subgraph)))


def _after_run(compat: CompatibilityReport, profile: Profile, runner: str
               ) -> CompatibilityReport:
    """A complete run of the profile's own runtime answers op support for the whole model:
    what the static check refused ran (a disagreement, the run wins), except ops the
    profile's ``ops.allow`` leaves out of the device's resolver."""
    if compat.table != runner or compat.supported:
        return compat
    allowed = profile.ops.allow
    kept = tuple(u for u in compat.unsupported_ops if allowed is not None
                 and u.op not in allowed)
    ran = tuple(Disagreement(u.op_index, u.op, u.reason, "ran (the whole model, --run)",
                             "run", u.subgraph)
                for u in compat.unsupported_ops if u not in kept)
    return dataclasses.replace(compat, supported=not kept, unsupported_ops=kept,
                               disagreements=(*compat.disagreements, *ran))


def _with_target(measured: MeasuredReport, model: Model, profile: Profile,
                 target_build: str | Path | None, input_path: str | Path | None,
                 host: RunResult | None, notes: list[str]) -> MeasuredReport:
    """``measured`` with the model measured on the device's own TFLM build, when asked.

    The inputs are the host run's (the same file, or the same seed), so the outputs of the
    build are compared with the host runtime's. A build that runs the model gives the
    device arena: its smallest working arena, measured (the budget is judged on it).
    """
    if target_build is None:
        return measured
    # Imported here: only --target-build needs the builder.
    from devicefit.simulator.targets.tflm.build import TflmBuild, spec_for
    from devicefit.simulator.targets.tflm.qemu import measure

    spec = spec_for(target_build, profile.device.cpu, profile.runtime.kernels,
                    profile.runtime.name, profile.name)
    specs = input_specs(model)
    inputs = load_inputs(input_path, specs) if input_path else random_inputs(specs)
    build = TflmBuild(spec)
    try:
        target, outputs = measure(build, Path(model.path), model.op_types, inputs,
                                  starting_arena(model))
    except RuntimeFailure as exc:  # the build or QEMU failed: a finding, the host run stands
        target, outputs = TargetMeasurement(f"{build.label} (qemu)", spec.core, spec.kernels,
                                            build.key, "error", message=str(exc)), []
    if host is not None and target.ok:
        as_host = [np.frombuffer(raw.tobytes(), dtype=ref.dtype).reshape(ref.shape)
                   if raw.size == ref.nbytes else raw for raw, ref in zip(outputs, host.outputs)]
        exact, diff = compare_outputs(as_host, host.outputs)
        target = dataclasses.replace(target, outputs_agree=exact, max_abs_difference=diff,
                                     compared_with=f"{host.runtime} on this host, same inputs")
    if not target.ok:
        notes.append(f"{target.build}: {target.status}"
                     + (f" ({', '.join(target.unsupported_ops)})" if target.unsupported_ops
                        else f": {target.message}" if target.message else ""))
        return dataclasses.replace(measured, target_build=target)
    budget = profile.budgets.arena_bytes
    arena = target.min_arena_bytes or 0
    return dataclasses.replace(
        measured, target_build=target, arena_bytes=arena, arena_basis=Basis.MEASURED,
        arena_budget_bytes=budget,
        over_budget_bytes=None if budget is None else max(0, arena - budget))


def _cross_check(model: Model, tflm: RunResult | None, common: _RunInputs, profile: Profile,
                 notes: list[str]) -> CrossCheck:
    """TFLM against LiteRT's reference kernels on the same inputs (bit-exact for integer
    kernels). Either runtime refusing or crashing on the file is a finding of the check —
    some real models load in one and not the other — never the end of the measurement."""
    lacking = check_ops(model, dataclasses.replace(profile, ops=Ops(table="litert")))
    if not lacking.supported:  # e.g. TFLM's Signal ops: LiteRT has no kernel for them
        return CrossCheck(skipped=f"LiteRT cannot run {lacking.summary()}")
    try:
        tflm = tflm or run_model(model.path, "tflm", runs=1, **common)
        ref = run_model(model.path, "litert", runs=1, reference_kernels=True, **common)
    except RuntimeFailure as exc:
        notes.append(f"cross-check not done: {exc}")
        return CrossCheck(error=str(exc))
    exact, diff = compare_outputs(tflm.outputs, ref.outputs)
    if not exact:
        notes.append(f"TFLM and LiteRT reference kernels disagree on the same inputs (max "
                     f"difference {diff}); expected bit-exact")
    return CrossCheck(bit_exact=exact, max_abs_difference=diff)


def _arena(measured: MeasuredReport, model: Model, result: RunResult, mem: MemoryReport,
           profile: Profile, notes: list[str]) -> MeasuredReport:
    """``measured`` with the arena the run measured beside the prediction, and what it means
    for the device.

    The wheel runs reference kernels on a 64-bit host. Its head checks the planner: it is
    compared with the prediction for those same kernels, which must match to the byte. The
    device's own kernels (CMSIS-NN, ESP-NN) request other scratch buffers and its pointers
    are narrower, so the device needs the head and tail predicted for its runtime; only a
    host-like profile (reference kernels, 64-bit) takes the measured figures as they are.
    """
    head = result.arena_head_bytes or 0
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
        over_budget_bytes=None if budget is None else max(0, device_arena - budget))
