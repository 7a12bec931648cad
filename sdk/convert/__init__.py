"""``convert``: a trained Keras/SavedModel model → the smallest ``.tflite`` a profile can run,
with what it cost in accuracy.

Stages, each its own module: loading → data → sparsity/finetune → quantize → metadata +
atomic write → read-back verification → accuracy → simulation. TensorFlow is imported only
inside the stages that need it, so ``import sdk.convert`` stays light.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sdk.convert import accuracy, data, loading, metadata, quantize, sparsity
from sdk.convert.accuracy import AccuracyReport
from sdk.convert.finetune import FineTuneResult
from sdk.convert.sparsity import PrunedLayer, WeightSparsity
from simulator.errors import DevicefitError, UsageError
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
    #: The input model converted without pruning or quantization (the "before" size).
    float_tflite_bytes: int | None = None
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

    @property
    def size_ratio(self) -> float | None:
        return self.output_bytes / self.float_tflite_bytes if self.float_tflite_bytes else None

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
            float_baseline: bool = True,
            baseline_output: str | Path | None = None,
            simulate: bool = True,
            profiles_dirs: list[str | Path] | None = None,
            progress: Progress | None = None) -> ConversionReport:
    """Convert ``model`` (a path or an in-memory Keras model) for ``profile`` into ``output``.

    ``baseline_output``, if given, receives the unpruned float32 ``.tflite`` of the same
    model (what the conversion is measured against).

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

    timer = _Timer()
    with timer("load"):
        loaded = loading.load(model, unsafe=unsafe)
        if (pattern or prune_channels) and not loaded.is_keras:
            raise UsageError(f"{loaded.source}: pruning needs a Keras model (.keras or .h5); a "
                             "SavedModel can only be quantized")
    with timer("data"):
        calib = _calibration(calibration, loaded, quant)
        evaluation = None if eval_data is None else data.load_data(
            eval_data, loaded.input_shape, what="evaluation")
        training = None if train is None else data.load_data(
            train, loaded.input_shape, what="training")
    reference = None
    if evaluation is not None:
        with timer("float reference"):
            reference = loaded.predict(evaluation.x)

    original = loaded
    report_parts: dict[str, Any] = {}
    with timer("sparsity"):
        loss = None
        if distill and training is not None:  # the unpruned model teaches the pruned one
            from sdk.fit.distill import distillation

            training, loss = distillation(loaded.keras_model, loaded.keras_model, training)
        loaded = _sparsify(loaded, pattern, prune_channels, training, epochs, progress,
                           report_parts, loss)
    with timer("quantize"):
        tflite = quantize.to_tflite(loaded, quant, None if calib is None else calib.x, progress)
    float_bytes = None
    if float_baseline or baseline_output is not None:
        with timer("float baseline"):
            baseline = tflite if quant.scheme == "float32" and original is loaded else \
                quantize.to_tflite(original, quantize.QuantSettings(
                    "float32", "float32", quant.per_channel), None)
            float_bytes = len(baseline)
            if baseline_output is not None:  # the "before" of a before/after report
                write_atomic(baseline_output, baseline, inputs=_input_paths(model))

    settings = _settings(loaded, prof, quant, pattern, prune_channels, epochs, calib,
                         report_parts)
    settings["distill"] = distill
    settings["optimize_memory"] = optimize_memory
    settings["patches"] = patches
    if optimize_memory:
        from simulator.optimize import optimize_model_bytes

        with timer("optimize memory"):
            tflite, optimized = optimize_model_bytes(tflite, prof, name=str(out_path),
                                                     patches=patches,
                                                     max_mac_overhead=max_mac_overhead,
                                                     patch_objective=patch_objective)
            report_parts["memory_optimization"] = dataclasses.asdict(optimized)
    with timer("write"):
        tflite = metadata.embed(tflite, settings)
        write_atomic(out_path, tflite, inputs=_input_paths(model, calibration, eval_data, train))
    with timer("verify"):
        weights = sparsity.tflite_weight_sparsity(tflite, pattern)
        _verify_nm(weights, pattern, report_parts.get("masks", {}))

    report = ConversionReport(
        source=loaded.source, output=str(out_path), profile=prof.name, runtime=prof.runtime.name,
        settings=settings, output_bytes=len(tflite), float_tflite_bytes=float_bytes,
        weights=weights, pruned_layers=report_parts.get("pruned_layers", []),
        nm_skipped=report_parts.get("nm_skipped", {}),
        fine_tune=report_parts.get("fine_tune", []),
        memory_optimization=report_parts.get("memory_optimization"))
    if calib is not None and calib.random:
        report.warnings.append(data.RANDOM_WARNING)
    if evaluation is not None and reference is not None:
        with timer("evaluate"):
            converted = accuracy.run_tflite(out_path, evaluation.x)
            report.accuracy = accuracy.compare(reference, converted, evaluation.y)
    if simulate:
        with timer("simulate"):
            _simulate(report, out_path, prof)
    report.stages = timer.stages
    return report


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


def _calibration(source: data.DataSource | None, loaded: loading.LoadedModel,
                 quant: quantize.QuantSettings) -> data.Dataset | None:
    if not quant.needs_calibration:
        if source is not None:
            log.info("--scheme %s does not use calibration data; ignoring it", quant.scheme)
        return None
    if source is None:
        raise UsageError(
            f"--scheme {quant.scheme} needs calibration data: --calibration FILE.npy|.npz|DIR "
            "(a few hundred real inputs), or '--calibration random' to accept a broken model")
    return data.load_data(source, loaded.input_shape, what="calibration",
                          limit=CALIBRATION_SAMPLES)


# --------------------------------------------------------------------------- sparsity stage
def _sparsify(loaded: loading.LoadedModel, pattern: sparsity.NMPattern | None,
              prune: float | None, training: data.Dataset | None, epochs: int,
              progress: Progress | None, parts: dict[str, Any], loss: Any = None
              ) -> loading.LoadedModel:
    from sdk.convert import finetune

    if pattern is not None:
        model = _clone(loaded.keras_model)  # never change the caller's model in place
        masks, parts["nm_skipped"] = sparsity.nm_masks(model, pattern)
        if not masks:
            raise UsageError(f"no Conv/Dense layer takes {pattern} sparsity (input channels must "
                             f"be a multiple of {pattern.m})")
        sparsity.apply_masks(model, masks)
        if training is not None:
            parts["fine_tune"] = [finetune.fine_tune(model, training, epochs, masks=masks,
                                                     progress=progress, loss=loss)]
            sparsity.apply_masks(model, masks)
        parts["masks"] = masks
        return dataclasses.replace(loaded, keras_model=model)
    if prune is not None:
        result = finetune.prune_channels(loaded.keras_model, prune, training, epochs, progress,
                                         loss=loss)
        if not result.layers:
            raise UsageError("channel pruning found no prunable filters (every layer feeds an "
                             "output or a layer whose channels must stay)")
        parts["pruned_layers"] = result.layers
        parts["fine_tune"] = result.fine_tune
        parts["prune_stages"] = result.stages
        return dataclasses.replace(loaded, keras_model=result.model)
    return loaded


def _clone(model: Any) -> Any:
    import keras

    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    return clone


def _verify_nm(weights: list[WeightSparsity], pattern: sparsity.NMPattern | None,
               masks: dict[str, np.ndarray]) -> None:
    """The written file must hold the pattern in as many tensors as were pruned."""
    if pattern is None:
        return
    clean = [w for w in weights if w.nm_groups and w.nm_violations == 0]
    if len(clean) < len(masks):
        raise RuntimeError(f"{pattern} pruning of {len(masks)} layers survived in only "
                           f"{len(clean)} weight tensors of the written .tflite")


# --------------------------------------------------------------------------- output
def _settings(loaded, profile, quant, pattern, prune, epochs, calib, parts) -> dict[str, Any]:
    import tensorflow as tf

    return {
        "profile": profile.name,
        "runtime": profile.runtime.name,
        "source": Path(loaded.source).name if loaded.kind != "memory" else loaded.source,
        "source_format": loaded.kind,
        "scheme": quant.scheme,
        "io_type": quant.io_type,
        "per_channel": quant.per_channel,
        "sparsity": str(pattern) if pattern else None,
        "prune_channels": prune,
        "prune_stages": parts.get("prune_stages"),
        "fine_tune_epochs": epochs,
        "calibration": None if calib is None else {
            "source": calib.source, "samples": len(calib), "random": calib.random},
        "sparse_encoding": False,
        "converter": f"tensorflow {tf.__version__}",
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
    if profile.runtime.name == "edgetpu":
        from simulator.compat.edgetpu import partition
        from simulator.reader import read_model

        report.edgetpu = partition(read_model(path), profile).to_dict()


class _Timer:
    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = round(self.stages.get(name, 0.0) + time.perf_counter() - start, 4)
