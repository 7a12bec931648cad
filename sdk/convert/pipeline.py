"""``convert`` as named stages, each a function with typed inputs and outputs.

    check → transform (TensorFlow: load → data → float reference → the conversion stages of
    :mod:`sdk.convert.stages`, sparsity (prune + fine-tune) → quantize → float baseline) →
    verify → int4 weights (``--weights int4|auto``; with ``--qat``, :func:`qat_int4`: PTQ
    int4 measured, the 4-bit layers trained in TensorFlow again, quantized again) → optimize
    memory (:func:`sdk.convert.stages.optimize_memory`) → write (metadata, atomic write,
    weights read back) → evaluate → simulate

:func:`sdk.convert.convert` runs them in this order and times each under its name
(:class:`StageTimer`). ``transform`` runs in a child process for models given as paths
(:mod:`sdk.convert.tfprocess`), so this module never imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit.sdk.convert import (
    accuracy,
    data,
    loading,
    metadata,
    quantize,
    sparsity,
    tfprocess,
)
from devicefit.sdk.convert.diagnose import ConversionError
from devicefit.sdk.convert.report import CalibrationInfo, ConversionSettings, QATOutcome
from devicefit.sdk.convert.spec import INT4_WEIGHTS, ConversionSpec
from devicefit.sdk.convert.transform import DataBundle, TFRequest, TFResult
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import DevicefitError, UsageError
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.target import target_for

if TYPE_CHECKING:
    from devicefit.sdk.convert.lowbit import LowBitReport
    from devicefit.simulator.report.report import Report
    from devicefit.simulator.types import UnsupportedOp

log = logging.getLogger(__name__)

#: Calibration samples used at most (the converter's guidance is 100-500).
CALIBRATION_SAMPLES = 300


# --------------------------------------------------------------------------- check
@dataclass(frozen=True)
class Job:
    """A conversion whose settings were checked against the profile (nothing ran yet)."""

    #: A path, or an in-memory Keras model.
    model: Any
    profile: Profile
    output: Path
    spec: ConversionSpec
    quant: quantize.QuantSettings
    #: The calibration data as :func:`check` read it, with the input shape it was checked
    #: against (read from a .keras config), so the TensorFlow stage does not read it again.
    calibration: tuple[tuple[int, ...], data.Dataset] | None = None

    @property
    def in_memory(self) -> bool:
        return not isinstance(self.model, (str, Path))

    @property
    def float_tflite(self) -> bool:
        """A float32 ``.tflite`` given for ``--weights int4|auto``: AI Edge Quantizer
        quantizes it, no TensorFlow runs."""
        return not self.in_memory and Path(self.model).suffix.lower() == ".tflite" \
            and self.spec.weights in INT4_WEIGHTS

    def inputs(self) -> list[Path]:
        """Files the outputs must never replace."""
        s = self.spec
        return input_paths(self.model, s.calibration, s.eval_data,
                           s.fine_tune.train if s.fine_tune else None)


def check(model: Any, profile: Profile, output: str | Path, spec: ConversionSpec) -> Job:
    """Refuse, before minutes of work, what the profile or the file system cannot take."""
    quant = quantize.resolve(profile, spec.scheme, spec.io_type)
    if spec.weights in INT4_WEIGHTS:
        from devicefit.sdk.convert.lowbit import check_request

        check_request(quant.scheme, quant.io_type, bool(spec.sparsity), spec.weights,
                      spec.eval_data is not None, profile.budgets.flash_bytes)
    elif spec.weights == "lut4":
        from devicefit.sdk.convert.lut import check_request as check_lut

        check_lut(profile, quant.scheme, bool(spec.sparsity))
    for kind in spec.sparsity:
        sparsity.check_allowed(profile, kind.kind, kind)
    out = check_output(output, model, spec.calibration, spec.eval_data,
                       spec.fine_tune.train if spec.fine_tune else None)
    target = target_for(profile)
    if spec.optimize_memory is not None and not target.offline_plan:
        raise UsageError(f"--optimize-memory writes an offline arena plan, which {target.title} "
                         f"does not take; profile '{profile.name}' runs '{profile.runtime.name}'")
    job = Job(model, profile, out, spec, quant)
    if job.float_tflite and spec.qat is not None:
        raise UsageError(f"--qat trains the Keras model, and {Path(model).name} is a .tflite: "
                         "give the .keras or .h5 file it came from")
    if job.float_tflite:
        from devicefit.sdk.convert.lowbit import float_input_shape

        float_input_shape(Path(model))  # one clear line for a quantized or dynamic file
    elif not job.in_memory:
        loading.check_file(model, unsafe=spec.unsafe)
    if quant.needs_calibration and spec.calibration is None:
        raise missing_calibration(quant)
    shape = None if job.in_memory else loading.keras_input_shape(Path(model))
    if shape is not None and quant.needs_calibration \
            and isinstance(spec.calibration, (str, Path)) and spec.calibration != data.RANDOM:
        # Data of the wrong shape is the commonest mistake: refused here, at once, not
        # after TensorFlow's start-up; the TensorFlow process checks every input again.
        calibration = calibration_data(spec.calibration, shape, quant)
        if calibration is not None:
            job = dataclasses.replace(job, calibration=(shape, calibration))
    return job


def check_output(output: str | Path, *inputs: Any) -> Path:
    """``output`` as a path that can be written and is none of ``inputs`` (shared by fit)."""
    out = Path(output)
    if out.is_dir():
        raise UsageError(f"-o {out} is a folder; give a file name such as {out / 'model.tflite'}")
    # Checked before converting (minutes of work); write_atomic checks again when writing.
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: folder {out.parent} does not exist")
    for source in input_paths(*inputs):
        if source.exists() and out.resolve() == source.resolve():
            raise UsageError(f"-o {out} is an input file; write the .tflite somewhere else")
    return out


def input_paths(*sources: Any) -> list[Path]:
    return [Path(s) for s in sources if isinstance(s, (str, Path)) and s != data.RANDOM]


# --------------------------------------------------------------------------- transform
@dataclass
class Transformed:
    """What the TensorFlow stages produced, and the data they were given."""

    result: TFResult
    sparsity: sparsity.SparsityOutcome
    calibration: data.Dataset | None = None
    evaluation: data.Dataset | None = None


def transform(job: Job, timer: StageTimer, progress: Progress | None = None, *,
              baseline: bool = False) -> Transformed:
    """load → data → float reference → sparsity → quantize → float baseline, in TensorFlow.
    ``baseline`` also converts the float32 model when the spec does not ask for it. A float
    ``.tflite`` (``--weights int4|auto``) needs no TensorFlow: :func:`_float_tflite`."""
    if job.float_tflite:
        return _float_tflite(job, timer)
    s = job.spec
    request = TFRequest(
        model="<in-memory model>" if job.in_memory else str(job.model),
        profile=job.profile.name, runtime=job.profile.runtime.name, scheme=job.quant.scheme,
        io_type=job.quant.io_type, per_channel=job.quant.per_channel, unsafe=s.unsafe,
        sparsity=[kind.to_mapping() for kind in s.sparsity],
        epochs=s.fine_tune.epochs if s.fine_tune else 0,
        distill=bool(s.fine_tune and s.fine_tune.distill),
        # --weights int4 quantizes the float model with AI Edge Quantizer.
        baseline=s.float_baseline or baseline or s.weights in INT4_WEIGHTS)
    result, loaded = _run(job, request, timer, progress)
    outcome = sparsity.SparsityOutcome.from_dict(result.sparsity or {})
    return Transformed(result, outcome, loaded.get("calibration"), loaded.get("evaluation"))


def _run(job: Job, request: TFRequest, timer: StageTimer, progress: Progress | None,
         evaluation: bool = True) -> tuple[TFResult, dict[str, data.Dataset | None]]:
    """``request`` in TensorFlow (a child process for a model given as a path), with the
    spec's data loaded for the model's input shape (without evaluation data, no float
    reference is computed); the result and the data it got."""
    s = job.spec
    loaded: dict[str, data.Dataset | None] = {}

    def supply(shape: tuple[int, ...]) -> DataBundle:
        bundle = DataBundle(
            calibration=(job.calibration[1] if job.calibration and job.calibration[0] == shape
                         else calibration_data(s.calibration, shape, job.quant)),
            evaluation=None if s.eval_data is None or not evaluation else data.load_data(
                s.eval_data, shape, what="evaluation"),
            training=None if s.fine_tune is None else data.load_data(
                s.fine_tune.train, shape, what="training"))
        loaded.update(calibration=bundle.calibration, evaluation=bundle.evaluation)
        return bundle

    if job.in_memory:
        return _in_process(request, job.model, supply, timer.start, progress), loaded
    return tfprocess.run_in_child(request, supply, timer.start, progress), loaded


def _float_tflite(job: Job, timer: StageTimer) -> Transformed:
    """The data and the float model's outputs for a float ``.tflite`` given as it is: it is
    its own float reference (run in LiteRT) and the model AI Edge Quantizer quantizes."""
    from devicefit.sdk.convert.lowbit import engine, float_input_shape

    path, s = Path(job.model), job.spec
    shape = float_input_shape(path)
    timer.start("data")
    calibration = calibration_data(s.calibration, shape, job.quant)
    evaluation = None if s.eval_data is None else data.load_data(s.eval_data, shape,
                                                                 what="evaluation")
    reference = None
    if evaluation is not None:
        timer.start("float reference")
        reference = accuracy.run_tflite(path, evaluation.x)
    float_tflite = path.read_bytes()
    result = TFResult(tflite=float_tflite, source=str(path), kind="tflite", input_shape=shape,
                      converter=engine(), float_weight_bytes=0, baseline=float_tflite,
                      reference=reference)
    return Transformed(result, sparsity.SparsityOutcome(), calibration, evaluation)


def _in_process(request: TFRequest, model: Any,
                supply: Callable[[tuple[int, ...]], DataBundle],
                stage: Callable[[str], None], progress: Progress | None) -> TFResult:
    """An in-memory Keras model: TensorFlow is loaded already, convert here. A converter
    failure still gets one line, with the full converter message kept in a log file."""
    from devicefit.sdk.convert.transform import run

    try:
        return run(request, model, supply, stage, progress)
    except ConversionError as exc:
        fd, log_path = tempfile.mkstemp(prefix="devicefit-convert-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            traceback.print_exception(exc.__cause__ or exc, file=f)
        raise ConversionError(f"{exc} (converter log: {log_path})") from exc


def calibration_data(source: data.DataSource | None, shape: tuple[int, ...],
                     quant: quantize.QuantSettings) -> data.Dataset | None:
    if not quant.needs_calibration:
        if source is not None:
            log.info("--scheme %s does not use calibration data; ignoring it", quant.scheme)
        return None
    if source is None:
        raise missing_calibration(quant)
    return data.load_data(source, shape, what="calibration", limit=CALIBRATION_SAMPLES)


def missing_calibration(quant: quantize.QuantSettings) -> UsageError:
    return UsageError(
        f"--scheme {quant.scheme} needs calibration data: --calibration FILE.npy|.npz|DIR "
        "(a few hundred real inputs), or '--calibration random' to accept a broken model")


# --------------------------------------------------------------------------- verify
def verify_scheme(tflite: bytes, quant: quantize.QuantSettings) -> None:
    """The written model must be what the report will call it: a full-integer scheme has no
    float computation left (only QUANTIZE/DEQUANTIZE at float I/O), float16 and dynamic
    range have their reduced weights. Bad calibration data used to give "int8 ... PASS" for
    a float model."""
    from devicefit.simulator.read.reader import parse_model

    model = parse_model(tflite)
    graph = model.subgraphs[0]
    boundary = ("QUANTIZE", "DEQUANTIZE")
    float_ops = sorted({op.op_name for op in graph.operators if op.op_name not in boundary
                        and any(graph.tensors[i].dtype == "float32"
                                for i in (*op.inputs, *op.outputs) if i >= 0)})
    weights = {t.dtype for t in graph.tensors if t.has_data}
    problem = None
    if quant.scheme in quantize.FULL_INTEGER and float_ops:
        problem = f"float32 computation left in {', '.join(float_ops[:5])}"
    elif quant.scheme == "float16" and "float16" not in weights:
        problem = "no float16 weights"
    elif quant.scheme == "dynamic" and "int8" not in weights:
        problem = "no int8 weights"
    if problem:
        raise ConversionError(f"the converter did not apply --scheme {quant.scheme}: "
                              f"{problem}; nothing was written (check the calibration data "
                              "and the model's ops)")


def settings_of(job: Job, done: Transformed) -> ConversionSettings:
    """What was asked and applied (stored in the file's metadata and the report)."""
    result, s, calib = done.result, job.spec, done.calibration
    return ConversionSettings(
        profile=job.profile.name, runtime=job.profile.runtime.name,
        source=Path(result.source).name if result.kind != "memory" else result.source,
        source_format=result.kind, **s.settings(job.quant), prune_stages=done.sparsity.prune_stages,
        fine_tune_epochs=s.fine_tune.epochs if s.fine_tune else 0,
        calibration=None if calib is None else CalibrationInfo(
            Path(calib.source).name, len(calib), calib.random),
        converter=result.converter, distill=bool(s.fine_tune and s.fine_tune.distill),
        optimize_memory=s.optimize_memory is not None,
        patches=s.optimize_memory.patches if s.optimize_memory else None)


def int4_weights(job: Job, done: Transformed) -> tuple[bytes, LowBitReport]:
    """``--weights int4|auto``: the float model quantized again, int4 weights where the
    profile's runtime runs them (auto: where the flash budget needs them), on the same
    calibration data (:mod:`sdk.convert.lowbit`)."""
    from devicefit.sdk.convert import lowbit

    float_tflite, calibration = done.result.baseline, done.calibration
    assert float_tflite is not None and calibration is not None  # transform was asked both
    if job.spec.weights == "int4":
        return lowbit.int4_weights(float_tflite, calibration, job.profile, job.output.name)
    evaluation, reference = done.evaluation, done.result.reference
    assert evaluation is not None and reference is not None  # check() asked for --eval
    return lowbit.int4_under_budget(float_tflite, calibration, evaluation, reference,
                                    job.profile, job.output.name)


@dataclass(frozen=True)
class QATInt4:
    """What ``--qat`` made: the model to write and its weights' report (PTQ's when QAT did
    not run), what the report says of it, and the trained float32 model (None then)."""

    tflite: bytes
    low_bit: LowBitReport
    outcome: QATOutcome
    trained_float: bytes | None = None


def qat_int4(job: Job, done: Transformed, ptq: bytes, low_bit: LowBitReport,
             timer: StageTimer, progress: Progress | None = None) -> QATInt4:
    """``--qat``: PTQ int4 (``ptq``, which ``low_bit`` describes) measured in LiteRT on the
    evaluation data; then, always or (``--qat auto``) when it lost more than the tolerance,
    the Keras model trained with those 4-bit layers on the int4 grid (:mod:`sdk.convert.qat`)
    in TensorFlow, and quantized again with int4 on exactly those layers."""
    from devicefit.sdk.convert import lowbit, qat

    s, result = job.spec, done.result
    assert s.qat is not None and s.fine_tune is not None  # the spec refuses --qat without
    assert result.baseline is not None and done.calibration is not None
    timer.start("PTQ int4 accuracy")
    ptq_accuracy = _measured(ptq, done)
    lost = _loss(ptq_accuracy)
    grid = qat.int4_layer_names([n for n, kind in result.layers.items()
                                 if kind in qat.WEIGHT_LAYERS], low_bit)
    skip = None
    if not low_bit.int4_layers:
        skip = f"--weights {s.weights} put no layer at 4 bits: nothing to train"
    elif s.qat == "auto" and lowbit.costly(ptq_accuracy) is None:
        skip = f"PTQ int4 lost {lost}, within the tolerance: no QAT (--qat auto)"
    elif not grid:
        skip = "no 4-bit layer matches a Conv/Dense layer of the Keras model: nothing to train"
    if skip is not None:
        return QATInt4(ptq, low_bit, QATOutcome(s.qat, False, skip, 0, (), ptq_accuracy))
    why = "--qat" if s.qat == "always" else f"PTQ int4 lost {lost}, over the tolerance"
    request = TFRequest(
        model="<in-memory model>" if job.in_memory else str(job.model),
        profile=job.profile.name, runtime=job.profile.runtime.name, scheme="float32",
        io_type="float32", per_channel=job.quant.per_channel, unsafe=s.unsafe,
        epochs=s.fine_tune.epochs, int8_training="qat", int4=sorted(grid.items()))
    trained, _ = _run(job, request, timer, progress, evaluation=False)
    timer.start("int4 weights after QAT")
    tflite, report = lowbit.int4_as_before(result.baseline, trained.tflite, done.calibration,
                                           low_bit, job.output.name)
    return QATInt4(tflite, report, QATOutcome(s.qat, True, why, s.fine_tune.epochs,
                                              tuple(sorted(grid)), ptq_accuracy),
                   trained.tflite)


def _measured(tflite: bytes, done: Transformed) -> accuracy.AccuracyReport:
    """``tflite`` against the float model on the evaluation data, run in LiteRT."""
    from devicefit.simulator.infra.fileio import temporary_folder

    assert done.evaluation is not None and done.result.reference is not None
    with temporary_folder("devicefit-ptq-") as tmp:
        path = Path(tmp) / "ptq-int4.tflite"
        path.write_bytes(tflite)
        outputs = accuracy.run_tflite(path, done.evaluation.x)
    return accuracy.compare(done.result.reference, outputs, done.evaluation.y)


def _loss(measured: accuracy.AccuracyReport) -> str:
    """What PTQ lost against the float model, in the terms of ``lowbit.costly``'s limits."""
    from devicefit.sdk.convert import lowbit

    if measured.accuracy_drop_pp is not None:
        return f"{measured.accuracy_drop_pp:.2f} pp of accuracy (tolerance " \
               f"{lowbit.COSTLY_DROP_PP:g} pp)"
    if measured.top1_agreement is not None:
        return f"top-1 agreement down to {measured.top1_agreement:.2%} (tolerance " \
               f"{lowbit.COSTLY_AGREEMENT:.0%})"
    return f"an SQNR of {measured.sqnr_db or 0:.1f} dB (tolerance {lowbit.COSTLY_SQNR_DB:g} dB)"


# --------------------------------------------------------------------------- write
def write(job: Job, tflite: bytes, settings: ConversionSettings,
          outcome: sparsity.SparsityOutcome) -> tuple[bytes, list[sparsity.WeightSparsity]]:
    """Embed the settings, write atomically, read the weights back (checked for what the
    sparsity kind did); returns the bytes written."""
    tflite = metadata.embed(tflite, settings.to_dict())
    write_atomic(job.output, tflite, inputs=job.inputs())
    kinds = job.spec.sparsity
    weights = sparsity.tflite_weight_sparsity(tflite, next(
        (p for kind in kinds if (p := kind.group_pattern()) is not None), None))
    for kind in kinds:
        kind.check_written(weights, outcome)
    return tflite, weights


# --------------------------------------------------------------------------- evaluate
def evaluate(job: Job, done: Transformed) -> accuracy.AccuracyReport | None:
    """The written model against the float one on the evaluation data, if any."""
    if done.evaluation is None or done.result.reference is None:
        return None
    # LiteRT has no DECODE kernel: a look-up-table model is measured in TFLM's wheel.
    runtime = "tflm" if job.spec.weights == "lut4" else "litert"
    converted = accuracy.run_tflite(job.output, done.evaluation.x, runtime)
    return dataclasses.replace(
        accuracy.compare(done.result.reference, converted, done.evaluation.y),
        runtime=f"{runtime} (host, child process)")


def record_accuracy(job: Job, tflite: bytes, settings: ConversionSettings,
                    measured: accuracy.AccuracyReport) -> bytes:
    """Rewrite the output with the accuracy in its conversion metadata, so ``devicefit diff``
    and ``simulate`` can show it later without the evaluation data; returns the new bytes.
    Only the metadata changes: the graph and weights evaluated are the ones kept."""
    recorded = {"accuracy": measured.converted_accuracy,
                "reference_accuracy": measured.float_accuracy,
                "accuracy_drop_pp": measured.accuracy_drop_pp, "sqnr_db": measured.sqnr_db,
                "agreement": measured.top1_agreement, "samples": measured.samples}
    rounded = {k: round(v, 4) for k, v in recorded.items() if v is not None}
    tflite = metadata.embed(tflite, {**settings.to_dict(), "accuracy": rounded})
    write_atomic(job.output, tflite, inputs=job.inputs())
    return tflite


# --------------------------------------------------------------------------- simulate
@dataclass
class Simulated:
    report: Report | None = None
    #: Budget → why the simulation could not judge it.
    unchecked: dict[str, str] = field(default_factory=dict)
    #: "subgraph:op_index" → Keras layer of each unsupported op.
    unsupported_layers: dict[str, str] = field(default_factory=dict)
    warning: str | None = None


def simulate(job: Job, layers: dict[str, str]) -> Simulated:
    """The simulator's verdict on the written model."""
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.simulate import simulate as run_simulation

    profile, path = job.profile, job.output
    try:
        sim = run_simulation(path, profile)
    except DevicefitError as exc:
        # The .tflite is written and fine; a simulator that cannot judge it (e.g. a profile
        # without a cost for this dtype) must not turn the conversion into a failure.
        return Simulated(warning=f"simulation on {profile.name} failed, no verdict: {exc}")
    out = Simulated(report=sim, unchecked={str(k): why for k, why in
                                           sim.unchecked_budgets.items()})
    unsupported = sim.compatibility.unsupported_ops if sim.compatibility is not None else ()
    if unsupported:
        out.unsupported_layers = _unsupported_layers(read_model(path), unsupported, layers)
    return out


def after_convert(job: Job, evaluation: data.Dataset | None = None) -> Any:
    """What the profile's target adds on the written model (``Target.after_convert``: the
    Edge TPU's predicted partition; with evaluation data, ``Target.accelerator_eval``: the
    phone GPU's delegate and fp16 accuracy), or None."""
    target = target_for(job.profile)
    if target.accelerator_eval is not None and evaluation is not None:
        return target.accelerator_eval(job.output, job.profile, evaluation.x, evaluation.y)
    hook = target.after_convert
    return None if hook is None else hook(job.output, job.profile)


def _unsupported_layers(model: Any, unsupported: Sequence[UnsupportedOp],
                        layers: dict[str, str]) -> dict[str, str]:
    """The Keras layer of each unsupported op (from its output tensor's name)."""
    from devicefit.sdk.convert.diagnose import layer_of

    found: dict[str, str] = {}
    for entry in unsupported:
        graph = model.subgraphs[entry.subgraph]
        op = graph.operators[entry.op_index]
        names = [graph.tensors[i].name for i in op.outputs if i >= 0]
        layer = next((layer_of(n, list(layers)) for n in names), None)
        if layer:
            found[f"{entry.subgraph}:{entry.op_index}"] = layer
    return found


# --------------------------------------------------------------------------- timing
class StageTimer:
    """Seconds per stage; a stage ends when the next one starts (the child reports starts)."""

    def __init__(self, on_stage: Callable[[str], None] | None = None) -> None:
        self.stages: dict[str, float] = {}
        self.on_stage = on_stage
        self._current: tuple[str, float] | None = None

    def start(self, name: str | None) -> None:
        now = time.perf_counter()
        if self._current is not None:
            last, began = self._current
            self.stages[last] = round(self.stages.get(last, 0.0) + now - began, 4)
        self._current = None if name is None else (name, now)
        if name is not None and self.on_stage is not None:
            self.on_stage(name)
