"""``convert``: a trained Keras/SavedModel model → the smallest ``.tflite`` a profile can run,
with what it cost in accuracy.

What to do is a :class:`~sdk.convert.spec.ConversionSpec` (from flags, a YAML file or
keywords); how is a pipeline of named stages (:mod:`sdk.convert.pipeline`): check →
transform (load → data → float reference → sparsity → quantize, in TensorFlow) → verify →
optimize memory → write → evaluate → simulate. TensorFlow is imported only inside the stages
that need it, so ``import sdk.convert`` stays light.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devicefit.sdk.convert import gpu, lowbit, pipeline, stages
from devicefit.sdk.convert.data import RANDOM_WARNING
from devicefit.sdk.convert.pipeline import StageTimer, check_output, verify_scheme
from devicefit.sdk.convert.report import ConversionReport, ConversionSettings
from devicefit.sdk.convert.sparsity.nm import SAVES_NOTHING
from devicefit.sdk.convert.spec import INT4_WEIGHTS, ConversionSpec
from devicefit.sdk.types import Progress
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile

__all__ = ["ConversionReport", "ConversionSettings", "ConversionSpec", "check_output", "convert",
           "verify_scheme"]


def convert(model: Any, profile: str | Path | Profile, output: str | Path,
            spec: ConversionSpec | None = None, *,
            baseline_output: str | Path | None = None,
            simulate: bool = True,
            profiles_dirs: list[str | Path] | None = None,
            progress: Progress | None = None,
            on_stage: Callable[[str], None] | None = None,
            **options: Any) -> ConversionReport:
    """Convert ``model`` (a path or an in-memory Keras model) for ``profile`` into ``output``.

    What to do is ``spec``, or the keyword ``options`` that build one
    (:meth:`ConversionSpec.from_options`: ``calibration=``, ``scheme=``,
    ``sparsity_pattern=``, ``train=``/``epochs=``, ...), not both.
    A model given as a path is converted in a child process (:mod:`sdk.convert.tfprocess`):
    this process never imports TensorFlow, and a TensorFlow crash or hang becomes a
    :class:`~sdk.convert.diagnose.ConversionError`. ``baseline_output``, if given, receives
    the unpruned float32 ``.tflite`` (converted for it when the spec's ``float_baseline`` is
    off). ``on_stage`` is told each stage as it starts.

    Raises a :class:`~simulator.errors.DevicefitError` subclass for anything the user can fix.
    """
    if spec is not None and options:
        raise TypeError("give convert() a spec or keyword options, not both")
    spec = spec if spec is not None else ConversionSpec.from_options(**options)
    prof = profile if isinstance(profile, Profile) else load_profile(profile, profiles_dirs)
    job = pipeline.check(model, prof, output, spec)
    timer = StageTimer(on_stage)
    done = pipeline.transform(job, timer, progress, baseline=baseline_output is not None)
    result = done.result
    timer.start("verify")
    if spec.weights not in INT4_WEIGHTS:  # else the int4 stage's model replaces it
        verify_scheme(result.tflite, job.quant)
    tflite, low_bit, qat = result.tflite, None, None
    if spec.weights in INT4_WEIGHTS:
        timer.start("int4 weights")
        tflite, low_bit = pipeline.int4_weights(job, done)
        verify_scheme(tflite, job.quant)
        if spec.qat is not None:
            trained = pipeline.qat_int4(job, done, tflite, low_bit, timer, progress)
            tflite, low_bit, qat = trained.tflite, trained.low_bit, trained.outcome
            verify_scheme(tflite, job.quant)
    elif spec.weights == "lut4":
        from devicefit.sdk.convert.lut import lut_weights

        timer.start("lut weights")
        tflite = lut_weights(tflite)
    if result.baseline is not None and baseline_output is not None:  # a before/after report
        write_atomic(baseline_output, result.baseline, inputs=pipeline.input_paths(model))
    settings = pipeline.settings_of(job, done)
    if spec.qat is not None:  # the epochs that ran (none when --qat auto found no need)
        settings = dataclasses.replace(settings, qat=bool(qat and qat.trained),
                                       fine_tune_epochs=qat.epochs if qat else 0)
    memory = None
    if spec.optimize_memory is not None:
        timer.start("optimize memory")
        tflite, memory = stages.optimize_memory(tflite, prof, spec, name=str(job.output))
    timer.start("write")
    tflite, weights = pipeline.write(job, tflite, settings, done.sparsity)
    report = ConversionReport(
        source=result.source, output=str(job.output), profile=prof.name,
        runtime=prof.runtime.name, settings=settings, output_bytes=len(tflite),
        float_tflite_bytes=None if result.baseline is None else len(result.baseline),
        float_weight_bytes=result.float_weight_bytes or None, weights=weights,
        pruned_layers=done.sparsity.pruned_layers, nm_skipped=done.sparsity.skipped,
        fine_tune=done.sparsity.fine_tune, memory_optimization=memory, low_bit=low_bit,
        qat=qat, layers=result.layers,
        scheme_reason=gpu.scheme_reason(prof, job.quant.scheme, spec.scheme is not None))
    if io := gpu.io_warning(prof, job.quant.io_type):
        report.warnings.append(io)
    if done.calibration is not None and done.calibration.random:
        report.warnings.append(RANDOM_WARNING)
    if any(kind.kind == "n:m" for kind in spec.sparsity):
        report.warnings.append(SAVES_NOTHING)
    if done.evaluation is not None and result.reference is not None:
        timer.start("evaluate")
        report.accuracy = pipeline.evaluate(job, done)
        if report.accuracy is not None:
            tflite = pipeline.record_accuracy(job, tflite, settings, report.accuracy)
            report.output_bytes = len(tflite)
            if spec.weights == "int4" and (cost := lowbit.costly(report.accuracy)):
                report.warnings.append(cost)
    if simulate:
        timer.start("simulate")
        sim = pipeline.simulate(job, result.layers)
        report.simulation = sim.report
        report.verdict = None if sim.report is None else sim.report.verdict
        report.unchecked_budgets = sim.unchecked
        report.unsupported_layers = sim.unsupported_layers
        if sim.warning:
            report.warnings.append(sim.warning)
        elif sim.report is not None and sim.report.compile_refusal is None:
            # (A refusal of the target's compiler is in the simulation's failed verdict.)
            report.target_extra = pipeline.after_convert(job, done.evaluation)
    timer.start(None)
    report.stages = timer.stages
    return report
