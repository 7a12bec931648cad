"""``convert``: a trained Keras/SavedModel model → the smallest ``.tflite`` a profile can run,
with what it cost in accuracy.

Stages, each its own module: loading → data → sparsity/finetune → quantize → metadata +
atomic write → read-back verification → accuracy → simulation. TensorFlow is imported only
inside the stages that need it, so ``import sdk.convert`` stays light.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdk.convert import accuracy, data, metadata, quantize, sparsity, tfchild, tfwork
from sdk.convert.accuracy import AccuracyReport
from sdk.convert.diagnose import ConversionError
from sdk.convert.finetune import FineTuneResult
from sdk.convert.sparsity import PrunedLayer, WeightSparsity
from simulator.errors import DevicefitError, InputError, UsageError
from simulator.fileio import write_atomic
from simulator.profiles import Profile, load_profile

__all__ = ["ConversionReport", "convert"]

log = logging.getLogger(__name__)

#: Calibration samples used at most (the converter's guidance is 100-500).
CALIBRATION_SAMPLES = 300
Progress = Callable[[str, int, int], None]


@dataclass
class ConversionReport:
    source: str
    output: str
    profile: str
    runtime: str
    #: What was asked and applied; the same dict is stored in the ``.tflite`` metadata.
    settings: dict[str, Any]
    output_bytes: int
    #: The input model converted without pruning or quantization (the "before" size;
    #: only with ``float_baseline``: it costs a second conversion).
    float_tflite_bytes: int | None = None
    #: The model's weights as float32 (the cheap "before" size, always known).
    float_weight_bytes: int | None = None
    #: Seconds per stage, in the order they ran.
    stages: dict[str, float] = field(default_factory=dict)
    #: Sparsity of every Conv/FC weight tensor, read back from the written file.
    weights: list[WeightSparsity] = field(default_factory=list)
    pruned_layers: list[PrunedLayer] = field(default_factory=list)
    #: Layers N:M pruning left dense, and why.
    nm_skipped: dict[str, str] = field(default_factory=dict)
    fine_tune: list[FineTuneResult] = field(default_factory=list)
    accuracy: AccuracyReport | None = None
    warnings: list[str] = field(default_factory=list)
    #: ``simulator.report.Report.to_dict()`` of the written model on the profile.
    simulation: dict[str, Any] | None = None
    verdict: str | None = None
    #: Edge TPU op mapping of the written model (edgetpu profiles only).
    edgetpu: dict[str, Any] | None = None
    #: What ``--optimize-memory`` did (``simulator.optimize.OptimizeReport`` as a dict).
    memory_optimization: dict[str, Any] | None = None
    #: Keras layer name → class (names unsupported ops' layers in verdict lines).
    layers: dict[str, str] = field(default_factory=dict)
    #: Budgets the profile sets that the simulation could not judge, and why.
    unchecked_budgets: dict[str, str] = field(default_factory=dict)

    @property
    def size_ratio(self) -> float | None:
        """Output size over the float32 .tflite, or over the float32 weights without one."""
        before = self.float_tflite_bytes or self.float_weight_bytes
        return self.output_bytes / before if before else None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["size_ratio"] = self.size_ratio
        if self.accuracy is not None:
            out["accuracy"]["accuracy_drop_pp"] = self.accuracy.accuracy_drop_pp
        return out


def convert(model: Any, profile: str | Path | Profile, output: str | Path, *,
            calibration: data.DataSource | None = None,
            eval_data: data.DataSource | None = None,
            sparsity_pattern: str | None = None,
            prune_channels: float | None = None,
            train: data.DataSource | None = None,
            epochs: int = 0,
            distill: bool = False,
            optimize_memory: bool = False,
            patches: str | None = None,
            max_mac_overhead: float = 0.2,
            patch_objective: str = "arena",
            scheme: str | None = None,
            io_type: str | None = None,
            unsafe: bool = False,
            float_baseline: bool = False,
            baseline_output: str | Path | None = None,
            simulate: bool = True,
            profiles_dirs: list[str | Path] | None = None,
            progress: Progress | None = None,
            on_stage: Callable[[str], None] | None = None) -> ConversionReport:
    """Convert ``model`` (a path or an in-memory Keras model) for ``profile`` into ``output``.

    A model given as a path is converted in a child process (:mod:`sdk.convert.tfchild`):
    this process never imports TensorFlow, and a TensorFlow crash or hang becomes a
    :class:`~sdk.convert.diagnose.ConversionError`. ``float_baseline`` also converts the
    unpruned float32 model to report the size against (costs a second conversion; without
    it the "before" is the float32 size of the weights); ``baseline_output``, if given,
    receives that float32 ``.tflite``. ``on_stage`` is told each stage as it starts.

    Raises a :class:`~simulator.errors.DevicefitError` subclass for anything the user can fix.
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile, profiles_dirs)
    quant = quantize.resolve(prof, scheme, io_type)
    pattern = _check_sparsity(prof, sparsity_pattern, prune_channels)
    out_path = _check_output(output, model, calibration, eval_data, train)
    if train is not None and epochs <= 0:
        raise UsageError("--train needs --epochs N (N >= 1)")
    if epochs > 0 and train is None:
        raise UsageError("--epochs needs --train DATA (labelled training samples)")
    if optimize_memory and prof.runtime.name != "tflm":
        raise UsageError(f"--optimize-memory rewrites the TFLite-Micro arena plan; profile "
                         f"'{prof.name}' runs '{prof.runtime.name}'")
    if patches is not None and not optimize_memory:
        raise UsageError("--patches rewrites the graph as part of --optimize-memory: add it")
    if distill and train is None:
        raise UsageError("--distill fine-tunes with the original model as teacher: add --train")
    if train is not None and pattern is None and prune_channels is None:
        raise UsageError("--train fine-tunes after pruning: add --sparsity N:M or --prune-channels")
    in_memory = not isinstance(model, (str, Path))
    if not in_memory and not Path(model).exists():
        raise InputError(f"model not found: {model}")
    request = tfwork.TFRequest(
        model="<in-memory model>" if in_memory else str(model), profile=prof.name,
        runtime=prof.runtime.name, scheme=quant.scheme, io_type=quant.io_type,
        per_channel=quant.per_channel, unsafe=unsafe,
        sparsity=str(pattern) if pattern else None, prune_channels=prune_channels,
        epochs=epochs, distill=distill, baseline=float_baseline or baseline_output is not None)
    timer = _Timer(on_stage)
    loaded_data: dict[str, data.Dataset | None] = {}

    def supply(shape: tuple[int, ...]) -> tfwork.DataBundle:
        bundle = tfwork.DataBundle(
            calibration=_calibration(calibration, shape, quant),
            evaluation=None if eval_data is None else data.load_data(
                eval_data, shape, what="evaluation"),
            training=None if train is None else data.load_data(train, shape, what="training"))
        loaded_data.update(calibration=bundle.calibration, evaluation=bundle.evaluation)
        return bundle

    if in_memory:
        result = _in_process(request, model, supply, timer.start, progress)
    else:
        result = tfchild.run_in_child(request, supply, timer.start, progress)
    calib, evaluation = loaded_data.get("calibration"), loaded_data.get("evaluation")
    tflite = result.tflite
    timer.start("verify")
    verify_scheme(tflite, quant)
    float_bytes = None
    if result.baseline is not None:
        float_bytes = len(result.baseline)
        if baseline_output is not None:  # the "before" of a before/after report
            write_atomic(baseline_output, result.baseline, inputs=_input_paths(model))
    parts = result.parts
    settings = _settings(result, prof, quant, pattern, prune_channels, epochs, calib, parts)
    settings["distill"] = distill
    settings["optimize_memory"] = optimize_memory
    settings["patches"] = patches
    memory_optimization = None
    if optimize_memory:
        from simulator.optimize import optimize_model_bytes

        timer.start("optimize memory")
        tflite, optimized = optimize_model_bytes(tflite, prof, name=str(out_path),
                                                 patches=patches,
                                                 max_mac_overhead=max_mac_overhead,
                                                 patch_objective=patch_objective)
        memory_optimization = dataclasses.asdict(optimized)
    timer.start("write")
    tflite = metadata.embed(tflite, settings)
    write_atomic(out_path, tflite, inputs=_input_paths(model, calibration, eval_data, train))
    weights = sparsity.tflite_weight_sparsity(tflite, pattern)
    _verify_nm(weights, pattern, parts.get("masks", 0))

    report = ConversionReport(
        source=result.source, output=str(out_path), profile=prof.name, runtime=prof.runtime.name,
        settings=settings, output_bytes=len(tflite), float_tflite_bytes=float_bytes,
        float_weight_bytes=result.float_weight_bytes or None,
        weights=weights, pruned_layers=[PrunedLayer(**p) for p in parts.get("pruned_layers", [])],
        nm_skipped=parts.get("nm_skipped", {}),
        fine_tune=[FineTuneResult(**f) for f in parts.get("fine_tune", [])],
        memory_optimization=memory_optimization, layers=result.layers)
    if calib is not None and calib.random:
        report.warnings.append(data.RANDOM_WARNING)
    if evaluation is not None and result.reference is not None:
        timer.start("evaluate")
        converted = accuracy.run_tflite(out_path, evaluation.x)
        report.accuracy = accuracy.compare(result.reference, converted, evaluation.y)
    if simulate:
        timer.start("simulate")
        _simulate(report, out_path, prof)
    timer.start(None)
    report.stages = timer.stages
    return report


def _in_process(request: tfwork.TFRequest, model: Any,
                supply: Callable[[tuple[int, ...]], tfwork.DataBundle],
                stage: Callable[[str], None], progress: Progress | None) -> tfwork.TFResult:
    """An in-memory Keras model: TensorFlow is loaded already, convert here. A converter
    failure still gets one line, with the full converter message kept in a log file."""
    try:
        return tfwork.run(request, model, supply, stage, progress)
    except ConversionError as exc:
        fd, log = tempfile.mkstemp(prefix="devicefit-convert-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            traceback.print_exception(exc.__cause__ or exc, file=f)
        raise ConversionError(f"{exc} (converter log: {log})") from exc


def verify_scheme(tflite: bytes, quant: quantize.QuantSettings) -> None:
    """The written model must be what the report will call it: a full-integer scheme has no
    float computation left (only QUANTIZE/DEQUANTIZE at float I/O), float16 and dynamic
    range have their reduced weights. Bad calibration data used to give "int8 ... PASS" for
    a float model."""
    from simulator.reader import parse_model

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


# --------------------------------------------------------------------------- checks
def _check_sparsity(profile: Profile, pattern: str | None, prune: float | None
                    ) -> sparsity.NMPattern | None:
    if pattern is not None and prune is not None:
        raise UsageError("choose one of --sparsity N:M and --prune-channels, not both")
    if prune is not None:
        if not 0.0 < prune < 1.0:
            raise UsageError(f"--prune-channels {prune}: give a fraction between 0 and 1")
        sparsity.check_allowed(profile, "channel")
    if pattern is None:
        return None
    nm = sparsity.parse_nm(pattern)
    sparsity.check_allowed(profile, "n:m", nm)
    return nm


def _check_output(output: str | Path, *inputs: Any) -> Path:
    out = Path(output)
    if out.is_dir():
        raise UsageError(f"-o {out} is a folder; give a file name such as {out / 'model.tflite'}")
    # Checked before converting (minutes of work); write_atomic checks again when writing.
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: folder {out.parent} does not exist")
    for source in _input_paths(*inputs):
        if source.exists() and out.resolve() == source.resolve():
            raise UsageError(f"-o {out} is an input file; write the .tflite somewhere else")
    return out


def _input_paths(*sources: Any) -> list[Path]:
    return [Path(s) for s in sources if isinstance(s, (str, Path)) and s != data.RANDOM]


def _calibration(source: data.DataSource | None, shape: tuple[int, ...],
                 quant: quantize.QuantSettings) -> data.Dataset | None:
    if not quant.needs_calibration:
        if source is not None:
            log.info("--scheme %s does not use calibration data; ignoring it", quant.scheme)
        return None
    if source is None:
        raise UsageError(
            f"--scheme {quant.scheme} needs calibration data: --calibration FILE.npy|.npz|DIR "
            "(a few hundred real inputs), or '--calibration random' to accept a broken model")
    return data.load_data(source, shape, what="calibration",
                          limit=CALIBRATION_SAMPLES)


def _verify_nm(weights: list[WeightSparsity], pattern: sparsity.NMPattern | None,
               masks: int) -> None:
    """The written file must hold the pattern in as many tensors as were pruned."""
    if pattern is None:
        return
    clean = [w for w in weights if w.nm_groups and w.nm_violations == 0]
    if len(clean) < masks:
        raise RuntimeError(f"{pattern} pruning of {masks} layers survived in only "
                           f"{len(clean)} weight tensors of the written .tflite")


# --------------------------------------------------------------------------- output
def _settings(result, profile, quant, pattern, prune, epochs, calib, parts) -> dict[str, Any]:
    return {
        "profile": profile.name,
        "runtime": profile.runtime.name,
        "source": Path(result.source).name if result.kind != "memory" else result.source,
        "source_format": result.kind,
        "scheme": quant.scheme,
        "io_type": quant.io_type,
        "per_channel": quant.per_channel,
        "sparsity": str(pattern) if pattern else None,
        "prune_channels": prune,
        "prune_stages": parts.get("prune_stages"),
        "fine_tune_epochs": epochs,
        "calibration": None if calib is None else {
            "source": Path(calib.source).name, "samples": len(calib), "random": calib.random},
        "sparse_encoding": False,
        "converter": result.converter,
    }


def _simulate(report: ConversionReport, path: Path, profile: Profile) -> None:
    """The simulator's verdict on the written model, and the Edge TPU partition if any."""
    from simulator.simulate import simulate

    try:
        sim = simulate(path, profile)
    except DevicefitError as exc:
        # The .tflite is written and fine; a simulator that cannot judge it (e.g. a profile
        # without a cost for this dtype) must not turn the conversion into a failure.
        report.warnings.append(f"simulation on {profile.name} failed, no verdict: {exc}")
        return
    report.simulation = sim.to_dict()
    report.verdict = sim.verdict
    _name_layers(report, path)
    checked = {b["name"] for b in report.simulation["budgets"]}
    for name, limit in (("flash", profile.budgets.flash_bytes),
                        ("arena", profile.budgets.arena_bytes),
                        ("latency", profile.budgets.latency_ms)):
        if limit is not None and name not in checked:
            why = next((n for n in report.simulation.get("notes", [])
                        if n.startswith(f"no device {name}") or n.startswith(f"no {name}")),
                       f"no {name} figure")
            report.unchecked_budgets[name] = why
    if profile.runtime.name == "edgetpu":
        from simulator.compat.edgetpu import partition
        from simulator.reader import read_model

        report.edgetpu = partition(read_model(path), profile).to_dict()


def _name_layers(report: ConversionReport, path: Path) -> None:
    """Add the Keras layer to each unsupported op (from its output tensor's name)."""
    unsupported = (report.simulation.get("compatibility") or {}).get("unsupported_ops") or []
    if not unsupported:
        return
    from sdk.convert.diagnose import layer_of
    from simulator.reader import read_model

    model = read_model(path)
    for entry in unsupported:
        graph = model.subgraphs[entry.get("subgraph", 0)]
        op = graph.operators[entry["op_index"]]
        names = [graph.tensors[i].name for i in op.outputs if i >= 0]
        layer = next((layer_of(n, list(report.layers)) for n in names), None)
        if layer:
            entry["layer"] = layer


class _Timer:
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
