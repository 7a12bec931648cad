"""Evaluate one candidate: cheap static check first, training only for candidates that fit.

Every step runs the conversion stages ``convert`` runs (:func:`sdk.convert.stages.run`), with
the candidate's :class:`~sdk.convert.stages.Stages`:

1. **Structure**: the channels are removed (without training) and N:M masks applied, then
   the model is converted with the candidate's scheme and simulated statically (flash,
   arena, estimated latency, op support). Fine-tuning does not change any of these, so a
   candidate that misses a budget here is rejected in seconds.
2. **Training** (only if it fits and needs it): channel pruning in stages with fine-tuning,
   N:M fine-tuning with masks kept, or quantization-aware training; each optionally with
   the original model as distillation teacher.
3. **Conversion and evaluation**: the trained model is converted again, simulated again and
   run in LiteRT (child process) on the evaluation data for its accuracy.

An int4 candidate (``weights="int4"``, or "auto": only where the flash budget needs them) is
converted in both steps from its model's float32 ``.tflite`` with int4 weights where the
runtime takes them (:mod:`sdk.fit.int4`). Its QAT version trains the layers the first step
wrote at 4 bits on the int4 grid, per channel or per tensor as written there.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.convert import accuracy, qat, quantize
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.distill import DistillSettings
from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.convert.loading import LoadedModel
from devicefit.sdk.convert.lowbit import LowBitReport
from devicefit.sdk.convert.spec import ConversionSpec
from devicefit.sdk.convert.stages import (
    Converted,
    Int8Training,
    Sparse,
    Stages,
    optimize_memory,
    run,
)
from devicefit.sdk.fit import int4
from devicefit.sdk.fit.cluster import gzip_size
from devicefit.sdk.fit.record import FitPayload, FitTrial
from devicefit.sdk.fit.space import Candidate
from devicefit.sdk.study.record import TrialStage
from devicefit.sdk.types import Progress
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.report.report import Report
from devicefit.simulator.types import BudgetName

log = logging.getLogger(__name__)

NO_LATENCY = "latency not estimated (the profile's cost model lacks this scheme's ops)"


@dataclass
class Context:
    """What every trial needs; built once per process."""

    loaded: LoadedModel
    profile: Profile
    train: Dataset
    evaluation: Dataset
    calibration: np.ndarray
    epochs: int
    workdir: Path
    float_accuracy: float | None
    distill: DistillSettings | None = None
    progress: Progress | None = None
    #: What every trial's conversion shares (its ``optimize_memory`` shrinks each
    #: candidate's TFLM arena); a trial's own spec is ``candidate.spec(ctx.spec)``.
    spec: ConversionSpec = ConversionSpec()
    #: The search also tries QAT: a PTQ candidate that has a QAT twin trains the same extra
    #: epochs, one at a time like QAT, without fake quantization (like for like).
    qat_twins: bool = False
    #: The last trained sparsity results (``stages.run``'s ``reuse``): a QAT candidate
    #: starts from its PTQ twin's pruned and fine-tuned model instead of training it again.
    reuse: dict[Any, Sparse] = field(default_factory=dict, repr=False, compare=False)

    @property
    def model(self) -> Any:
        return self.loaded.keras_model


def static_check(path: Path, profile: Profile) -> Report:
    """The simulator's static report (op support and latency estimate included; no runtime
    is started). A latency budget the cost model cannot estimate for this candidate fails
    it: fit only returns what it can show to fit."""
    from devicefit.simulator.simulate import simulate

    return simulate(path, profile, strict=True)


def stages_of(ctx: Context, candidate: Candidate) -> Stages:
    """The conversion stages ``candidate`` runs once it is trained."""
    int8: Int8Training | None = "qat" if candidate.qat else \
        "plain" if has_qat_twin(ctx, candidate) else None
    return Stages(candidate.sparsity(), ctx.epochs, ctx.distill, int8)


def convert_candidate(ctx: Context, spec: ConversionSpec, stages: Stages | None = None,
                      model: Any = None, training: Dataset | None = None) -> Converted:
    """``model`` (default the context's) through ``stages`` (none by default; training only
    with ``training``), quantized and written as ``spec`` says."""
    loaded = ctx.loaded if model is None else dataclasses.replace(ctx.loaded, keras_model=model)
    converted = run(loaded, stages or Stages(),
                    quantize.resolve(ctx.profile, spec.scheme, spec.io_type),
                    ctx.calibration, training, ctx.progress, reuse=ctx.reuse)
    if spec.weights in ("int4", "auto"):
        # The same compressed (and trained) model, quantized again from float32 with int4
        # weights where the runtime takes them, on the same calibration data.
        compressed = dataclasses.replace(loaded, keras_model=converted.model)
        converted.tflite, converted.low_bit = int4.int4_weights(
            compressed, ctx.calibration, ctx.train.source, ctx.profile) \
            if spec.weights == "int4" else int4.auto_weights(
            compressed, ctx.calibration, ctx.evaluation, ctx.train.source, ctx.profile)
    # A candidate may fit only once its first stage runs in patches.
    converted.tflite, _ = optimize_memory(converted.tflite, ctx.profile, spec)
    return converted


def has_qat_twin(ctx: Context, candidate: Candidate) -> bool:
    """Whether the search space holds the QAT version of this PTQ candidate."""
    return ctx.qat_twins and not candidate.qat and candidate.scheme == "int8" and \
        candidate.nm is None and candidate.weights == "int8"


def measure_accuracy(ctx: Context, path: Path) -> float | None:
    out = accuracy.run_tflite(path, ctx.evaluation.x)
    y = ctx.evaluation.y
    if y is None or out.ndim != 2 or out.shape[1] < 2:
        return None
    labels = y.argmax(1) if y.ndim == 2 and y.shape[1] > 1 else y.reshape(-1)
    return float(np.mean(out.argmax(1) == labels))


def evaluate(ctx: Context, candidate: Candidate, number: int) -> FitTrial:
    """Run one candidate through the three steps; the ``.tflite`` stays in the work folder."""
    started = time.perf_counter()
    path = ctx.workdir / f"trial-{number:03d}.tflite"
    spec = candidate.spec(ctx.spec)
    stages = stages_of(ctx, candidate)
    structure = convert_candidate(ctx, spec, stages.structure())
    tflite, low_bit = structure.tflite, structure.low_bit
    write_atomic(path, tflite)
    report = static_check(path, ctx.profile)
    if not report.ok:
        return _record(number, candidate, TrialStage.STATIC, report, tflite, started, path,
                       note=_why_not(report), low_bit=low_bit)
    runs: list[FineTuneResult] = []
    keras_path = None
    if candidate.qat and low_bit is not None:
        # QAT trains the layers this structure has at 4 bits on the int4 grid.
        grid = qat.int4_layers(structure.model, low_bit)
        stages = dataclasses.replace(stages, int4=tuple(sorted(grid.items())))
    if candidate.needs_training or stages.int8_training is not None:
        trained = convert_candidate(ctx, spec, stages, training=ctx.train)
        runs, tflite, low_bit = trained.fine_tune, trained.tflite, trained.low_bit
        keras_path = ctx.workdir / f"trial-{number:03d}.keras"
        trained.model.save(keras_path)
        write_atomic(path, tflite)
        report = static_check(path, ctx.profile)
    record = _record(number, candidate, TrialStage.TRAINED if runs else TrialStage.POST_TRAINING,
                     report, tflite, started, path, note="" if report.ok else _why_not(report),
                     low_bit=low_bit)
    payload = dataclasses.replace(record.payload, fine_tune=tuple(runs),
                                  keras_path=str(keras_path) if keras_path else None)
    return dataclasses.replace(record, payload=payload, accuracy=measure_accuracy(ctx, path),
                               seconds=time.perf_counter() - started)


def _record(number: int, candidate: Candidate, stage: TrialStage, report: Report, tflite: bytes,
            started: float, path: Path, note: str = "", low_bit: LowBitReport | None = None
            ) -> FitTrial:
    return FitTrial(
        number=number, candidate=candidate, stage=stage, verdict=report.verdict,
        budgets=tuple(report.budgets),
        flash_bytes=report.memory.flash_bytes if report.memory is not None else None,
        arena_bytes=_arena(report),
        latency_ms=report.latency.estimated_device_ms if report.latency else None,
        latency_band_ms=report.latency.band_ms if report.latency else None,
        seconds=time.perf_counter() - started, path=str(path), note=note,
        payload=FitPayload(model_bytes=len(tflite), gzip_bytes=gzip_size(tflite),
                           low_bit=low_bit))


def _arena(report: Report) -> int | None:
    """The arena figure the budget is judged on (TFLM also needs room while planning); None
    without a memory plan (the target's compiler refused the model)."""
    judged = next((b.value for b in report.budgets if b.name == BudgetName.ARENA), None)
    if judged is not None:
        return int(judged)
    return report.memory.arena_bytes if report.memory is not None else None


def _why_not(report: Report) -> str:
    missed: list[str] = [b.name for b in report.budgets if not b.ok]
    if report.compatibility is not None and not report.compatibility.supported:
        missed.append("unsupported ops")
    if BudgetName.LATENCY in report.unchecked_budgets:
        return NO_LATENCY
    return "misses " + ", ".join(missed) if missed else "fails"
