"""The measuring stage of ``simulate --run``: the model run for real, beside the prediction.

:mod:`simulator.simulate` reads, plans and counts (the static report), then hands that
report to :func:`measure`, which gives back a new report with the running half's sections —
``measured``, the host figures of ``latency``, and ``compatibility`` where the run answered
op support otherwise — and the driver judges it whole (:mod:`simulator.judge.verdict`). It runs:

- the model in its runner (the profile's target's ``runner``: the Edge TPU's CPU reference
  runs in LiteRT) with the warm-up and timed invokes its :class:`~simulator.types.
  MeasureOptions` ask for (what the command hands the driver), for the host latency;
- what the runner's target reads from that run beside the prediction (``Target.read_run``:
  TFLM's arena, from its RecordingMicroAllocator);
- the cross-check of a target that has one (``Target.cross_check``: for integer models,
  TFLM against LiteRT's reference kernels on the same inputs, bit for bit);
- the target's accelerator itself, where one runs here (``Target.ask_accelerator``: the
  phone GPU's delegate, its partition beside the predicted one and its outputs against the
  CPU's);
- with ``options.target_build``, the profile's target's device build (``Target.device_build``: TFLM
  built for the device's core and kernels, under QEMU), whose arena then wins.

The model is read once (every run loads the same file, :class:`RunSetup`) and op support is
the static report's. The model is always run, also when the static op support says it
cannot be: the run's answer wins and a difference is a disagreement in ``compatibility``; a
failed run names the stage, the runtime's message and the operator, and fails the verdict.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from devicefit.simulator.errors import InputError, RuntimeFailure
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.report import (
    CompatibilityReport,
    Disagreement,
    HostLatency,
    HostOpTime,
    LatencyReport,
    MeasuredReport,
    MemoryReport,
    Report,
    RunFailure,
)
from devicefit.simulator.run.probe import probe_ops, probe_runtime, scales
from devicefit.simulator.run.runtimes import INPUT_SEED, RunSetup
from devicefit.simulator.target import TARGETS, Target, runner_for, target_for
from devicefit.simulator.types import (
    BuildRequest,
    MeasureOptions,
    RunOptions,
    RunResult,
    UnsupportedOp,
)

if TYPE_CHECKING:
    from devicefit.simulator.target import OnDevice


def measure(model: Model, profile: Profile, target: Target, report: Report,
            options: MeasureOptions, *, file: Model | None = None,
            input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Report:
    """``report`` (the static half's, not changed) with the running-half sections of
    ``model`` run for real on ``profile`` (whose target is ``target``) as ``options`` say;
    random inputs at ``input_shapes`` (input name → shape) where given.

    ``model`` is the model the device runs, as the report describes it; ``file`` is the
    same model as its file holds it (what the runtimes load; read from ``model.path`` when
    not given). The model is run whatever the static answer was: a run that fails is
    reported (stage, message, operator) and fails the verdict; a run that disagrees with the
    static op support, either way, is a disagreement in ``compatibility`` and the run's
    answer wins. ``options.target_build``: the device's own build to also measure on, for a
    target that has one (TFLM: a checkout, built for the profile's core and kernels); its
    smallest working arena is then the measured device arena.
    """
    memory, compat = report.memory, report.compatibility
    if memory is None or compat is None:  # only a model its compiler refused has none
        raise ValueError(f"measure: the report of {model.path} has no memory plan or op "
                         f"support: a model its compiler refused is not run")
    runner = runner_for(target)
    build = options.target_build
    on_device = None if build is None else device_build(build, profile, target)
    threads = profile.runtime.threads
    # A runner without the flag ignores it; LiteRT's follows the profile's delegates.
    xnnpack = not runner.xnnpack_option or "xnnpack" in profile.runtime.delegates
    run_options = RunOptions(runs=options.runs, warmup=options.warmup, threads=threads,
                             xnnpack=xnnpack)
    # Inputs are read or generated in each run's child, never here (see RunSetup).
    setup = RunSetup(file or read_model(model.path), input_path=options.input_path,
                     input_shapes=input_shapes, timeout_s=options.timeout_s)
    inputs = _inputs(options.input_path, input_shapes)
    try:
        main = setup.run(runner.name, run_options)
    except RuntimeFailure as exc:
        failure = _failure(model, profile, runner, exc)
        measured, built = _on_device(on_device, MeasuredReport(runner.name, inputs,
                                                               failure=failure),
                                     model, profile, setup, None, memory)
        return _with_failed_run(report, _after_failed_run(compat, failure, runner.name),
                                measured, [f"{runner.name} {failure.line()}", *built])
    after = _after_run(compat, profile, runner.name)
    notes = [*report.notes, *after.disagreement_lines(len(compat.disagreements))]
    # A profile whose cost model has no entry for the model's dtypes has no latency section
    # from the static half; the host measurement still belongs in one.
    per_op = (tuple(HostOpTime(o["op_index"], o["op"], o["ms"]) for o in main.per_op_ms)
              if main.per_op_ms is not None else None)
    latency = dataclasses.replace(report.latency or LatencyReport(),
                                  host_ms=host_summary(main, threads), host_per_op_ms=per_op)
    measured = MeasuredReport(runner.name, inputs)
    if runner.read_run is not None:
        measured, read = runner.read_run(measured, model, profile, memory, main)
        notes += read
    if options.cross_check:
        measured, checked = _cross_checked(measured, model, profile, setup, main)
        notes += checked
    if target.ask_accelerator is not None and after.section is not None:
        section, asked = target.ask_accelerator(after.section, model, profile, setup)
        after = dataclasses.replace(after, section=section)
        notes += asked
    measured, built = _on_device(on_device, measured, model, profile, setup, main, memory)
    return dataclasses.replace(report, compatibility=after, latency=latency,
                               measured=measured, notes=[*notes, *built])


def _with_failed_run(report: Report, after: CompatibilityReport, measured: MeasuredReport,
                     notes: list[str]) -> Report:
    """``report`` with a run that failed: its section, its op support, its notes."""
    assert report.compatibility is not None  # measure ran on a static half
    new = after.disagreement_lines(len(report.compatibility.disagreements))
    return dataclasses.replace(report, compatibility=after, measured=measured,
                               notes=[*report.notes, *notes, *new])


def _inputs(input_path: str | Path | None,
            input_shapes: Mapping[str, tuple[int, ...]] | None) -> str:
    """Where the inputs come from, for the report."""
    if input_path:
        return str(input_path)
    inputs = f"random within each input's range (seed {INPUT_SEED})"
    if input_shapes:
        inputs += ", at " + ", ".join(f"{name} {'x'.join(map(str, shape))}"
                                      for name, shape in input_shapes.items())
    return inputs


def _cross_checked(measured: MeasuredReport, model: Model, profile: Profile, setup: RunSetup,
                   main: RunResult) -> tuple[MeasuredReport, list[str]]:
    """``measured`` with the first cross-check a target runs on this model, and its notes."""
    for target in TARGETS.values():
        if target.cross_check is None:
            continue
        check, found = target.cross_check(model, profile, setup, main)
        if check is not None:
            return dataclasses.replace(measured, cross_check=check,
                                       outputs_agree=check.bit_exact), found
    return measured, []


def host_summary(result: RunResult, threads: int) -> HostLatency:
    times = sorted(result.host_ms)
    p90 = times[min(len(times) - 1, int(np.ceil(0.9 * len(times))) - 1)]
    return HostLatency(median=statistics.median(times), p90=p90, min=times[0],
                       runs=len(times), runtime=result.runtime, threads=threads)


def device_build(request: BuildRequest, profile: Profile, target: Target | None = None
                 ) -> OnDevice:
    """The profile's target's measurement on the device's own build ``request`` names
    (``--target-build``), checked now: an :class:`InputError` (one line) before anything
    runs when the target has no device build or this one cannot be made. ``target``: the
    profile's, when the caller has resolved it."""
    hook = (target or target_for(profile)).device_build
    if hook is None:
        builds = " or ".join(t.title for t in TARGETS.values() if t.device_build) or "nothing"
        raise InputError(f"--target-build builds {builds}; profile '{profile.name}' runs "
                         f"'{profile.runtime.name}'")
    return hook(request, profile)


def _on_device(on_device: OnDevice | None, measured: MeasuredReport, model: Model,
               profile: Profile, setup: RunSetup, host: RunResult | None,
               memory: MemoryReport | None) -> tuple[MeasuredReport, list[str]]:
    """``measured`` with the model measured on the device's own build, when asked (a
    report without a memory plan is one its compiler refused: it is never run)."""
    if on_device is None or memory is None:
        return measured, []
    return on_device(measured, model, profile, setup, host, memory)


def _failure(model: Model, profile: Profile, runner: Target, exc: RuntimeFailure
             ) -> RunFailure:
    """What the run did, with the operator it stopped at: the one the runtime's message
    names, else (a crash says nothing) the first one the runtime refuses on its own, asked
    one operator at a time (:mod:`simulator.run.probe`, cached)."""
    message = str(exc)
    failure = RunFailure(exc.stage or "start", message, crashed=exc.crashed)
    # The runner's own form first, then every other target's: nothing guarantees a
    # runner's message quotes only its own interpreter.
    patterns = dict.fromkeys([runner.failed_node, *(t.failed_node for t in TARGETS.values())])
    for pattern in filter(None, patterns):
        if (m := re.search(pattern, message)) is not None:
            return dataclasses.replace(failure, op_index=int(m["index"]), op=m["op"],
                                       op_found_by="the runtime's message")
    runtime = probe_runtime(runner.name, profile)
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
