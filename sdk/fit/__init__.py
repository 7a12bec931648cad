"""``fit``: find the most accurate compressed variant of a model that passes every budget of
a device profile, and verify it in the target's own runtime.

Stages: load → data → float reference → search (:mod:`sdk.fit.search` over
:mod:`sdk.fit.space`, each candidate judged by :mod:`sdk.fit.candidate`) → choose → verify
with ``simulate(run=True)`` → optional weight clustering (:mod:`sdk.fit.cluster`) → atomic
write → :class:`~sdk.fit.report.FitReport`. TensorFlow is imported only inside functions.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sdk.fit.candidate import (
    Context,
    TrialRecord,
    convert_candidate,
    evaluate,
    measure_accuracy,
)
from sdk.fit.cluster import check_clusters, gzip_size
from sdk.fit.distill import DistillSettings
from sdk.fit.report import FitReport, choose, closest_miss, reason_for
from sdk.fit.search import SearchSettings, search, study_name
from sdk.fit.space import space_for
from simulator.errors import UsageError
from simulator.fileio import write_atomic
from simulator.profiles import Profile, load_profile

__all__ = ["FitReport", "SearchSettings", "fit"]

log = logging.getLogger(__name__)

CALIBRATION_SAMPLES = 300
Progress = Callable[[str, int, int], None]
OnTrial = Callable[[TrialRecord], None]


def fit(model: Any, profile: str | Path | Profile, output: str | Path, *,
        train: Any, eval_data: Any, calibration: Any = None, epochs: int = 3,
        settings: SearchSettings | None = None, distill: bool = False,
        cluster: int | None = None, unsafe: bool = False, workdir: str | Path | None = None,
        profiles_dirs: list[str | Path] | None = None, progress: Progress | None = None,
        on_trial: OnTrial | None = None) -> FitReport:
    """Search, verify and write the best candidate to ``output`` (when one fits).

    ``train``/``eval_data``/``calibration`` are data sources as ``convert`` takes them
    (calibration defaults to the first training samples). The report is returned also when
    nothing fits (``report.found`` is False; nothing is written).
    """
    from sdk.convert import _check_output, data, loading

    settings = settings or SearchSettings()
    if settings.max_trials < 1:
        raise UsageError(f"--max-trials {settings.max_trials}: give at least 1")
    if settings.jobs < 1:
        raise UsageError(f"--jobs {settings.jobs}: give at least 1")
    if epochs < 1:
        raise UsageError(f"--epochs {epochs}: fine-tuning needs at least 1")
    if cluster is not None:
        check_clusters(cluster)
    prof = profile if isinstance(profile, Profile) else load_profile(profile, profiles_dirs)
    out_path = _check_output(output, model, train, eval_data, calibration)
    loaded = loading.load(model, unsafe=unsafe)
    if not loaded.is_keras:
        raise UsageError(f"{loaded.source}: fit prunes and fine-tunes, so it needs a Keras "
                         "model (.keras or .h5), not a SavedModel")
    training = data.load_data(train, loaded.input_shape, what="training")
    evaluation = data.load_data(eval_data, loaded.input_shape, what="evaluation")
    if training.y is None or evaluation.y is None:
        raise UsageError("fit needs labels in --train and --eval (.npz with x and y) to "
                         "fine-tune and to compare candidates by accuracy")
    calib = (training.head(CALIBRATION_SAMPLES) if calibration is None else data.load_data(
        calibration, loaded.input_shape, what="calibration", limit=CALIBRATION_SAMPLES)).x
    float_accuracy = _accuracy(loaded.predict(evaluation.x), evaluation.y)
    if float_accuracy is None:
        raise UsageError(f"{loaded.source}: fit ranks candidates by top-1 accuracy, so the "
                         "model must output class scores (one output, 2 or more classes)")

    own_workdir = workdir is None
    work = Path(tempfile.mkdtemp(prefix="devicefit-fit-")) if own_workdir else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        ctx = Context(loaded=loaded, profile=prof, train=training, evaluation=evaluation,
                      calibration=calib, epochs=epochs, workdir=work,
                      float_accuracy=float_accuracy,
                      distill=DistillSettings() if distill else None, progress=progress)
        space = space_for(prof, can_train=True, can_prune=True, groups=_groups(ctx.model))
        ctx.qat_twins = space.qat  # PTQ twins of QAT candidates train the same epochs
        name = settings.study_name or study_name(loaded.source, prof.name, space)
        model_path = Path(loaded.source) if loaded.kind in ("keras", "h5") else None
        result = search(ctx, space, settings, name=name, model_path=model_path,
                        on_trial=on_trial)
        report = FitReport(
            source=loaded.source, profile=prof.name, runtime=prof.runtime.name,
            budgets={"flash": prof.budgets.flash_bytes, "arena": prof.budgets.arena_bytes,
                     "latency_ms": prof.budgets.latency_ms},
            space=space.to_dict(),
            settings={"max_trials": settings.max_trials, "time_budget_s": settings.time_budget_s,
                      "jobs": settings.jobs, "storage": result.storage, "epochs": epochs,
                      "distill": ctx.distill.to_dict() if ctx.distill else None,
                      "cluster": cluster, "seed": settings.seed,
                      "runtime_code_bytes": prof.runtime.code_bytes},
            float_accuracy=float_accuracy, eval_samples=len(evaluation),
            trials=result.records, interrupted=result.interrupted,
            search_seconds=result.seconds, study={"name": result.study_name})
        _finish(report, ctx, out_path, cluster, model)
    finally:
        if own_workdir:
            shutil.rmtree(work, ignore_errors=True)
    return report


def _groups(model: Any) -> tuple[str, ...]:
    """The model's prunable layer groups, or none if channel pruning cannot read it."""
    from sdk.convert import sparsity

    try:
        return tuple("+".join(g) for g in sparsity.prunable_groups(model))
    except UsageError as exc:
        log.info("no per-layer pruning: %s", exc)
        return ()


def _accuracy(outputs: np.ndarray, y: np.ndarray) -> float | None:
    if outputs.ndim != 2 or outputs.shape[1] < 2:
        return None
    labels = y.argmax(1) if y.ndim == 2 and y.shape[1] > 1 else y.reshape(-1)
    return float(np.mean(outputs.argmax(1) == labels))


def _finish(report: FitReport, ctx: Context, out_path: Path, cluster: int | None,
            model: Any) -> None:
    """Verify the best fitting candidates in the real runtime; write the first that passes."""
    from simulator.simulate import simulate

    fitting = choose(report.trials)
    for record in fitting:
        path = Path(record.path) if record.path else None
        if path is None or not path.is_file():  # built by another machine sharing --storage
            record = replace(evaluate(ctx, record.candidate, record.number), seconds=0.0)
            path = Path(record.path)
        tflite = path.read_bytes()
        if cluster:
            tflite, report.clustering = _cluster(ctx, record, cluster, tflite)
        tflite = _embed(tflite, ctx, record, report)
        if report.clustering is not None:  # the download size of the file as written
            report.clustering["gzip_after"] = gzip_size(tflite)
        staged = ctx.workdir / "verify.tflite"
        write_atomic(staged, tflite)
        verified = simulate(staged, ctx.profile, run=True)
        if not verified.ok:
            record.note = "passed the static check, failed in the runtime"
            record.verdict = "fail"
            log.warning("trial %d passed the static check but not the real run; trying the "
                        "next candidate", record.number)
            continue
        write_atomic(out_path, tflite, inputs=[p for p in (model,) if isinstance(p, (str, Path))])
        verified.model.path = str(out_path)
        report.verification = verified.to_dict()
        report.verification_report = verified  # the HTML view draws it
        report.chosen = record.number
        report.output = str(out_path)
        report.reason = reason_for(record, fitting, report.float_accuracy, report.trials)
        return
    closest, misses = closest_miss(report.trials)
    report.closest = None if closest is None else closest.number
    report.closest_misses = misses


def _embed(tflite: bytes, ctx: Context, record: TrialRecord, report: FitReport) -> bytes:
    import tensorflow as tf

    from sdk.convert import metadata, quantize

    quant = quantize.resolve(ctx.profile, record.candidate.scheme, None)
    return metadata.embed(tflite, {
        "tool": "devicefit fit", "profile": ctx.profile.name, "runtime": ctx.profile.runtime.name,
        "source": Path(ctx.loaded.source).name if ctx.loaded.kind != "memory"
        else ctx.loaded.source, "source_format": ctx.loaded.kind,
        "scheme": quant.scheme, "io_type": quant.io_type, "per_channel": quant.per_channel,
        "prune_channels": record.candidate.prune or None,
        "prune_layers": dict(record.candidate.layers) or None, "sparsity": record.candidate.nm,
        "qat": record.candidate.qat, "fine_tune_epochs": ctx.epochs if
        record.candidate.needs_training else 0, "distill": report.settings["distill"],
        "cluster": report.settings["cluster"], "trial": record.number,
        "calibration": {"source": ctx.train.source, "samples": len(ctx.calibration),
                        "random": False},
        "sparse_encoding": False, "converter": f"tensorflow {tf.__version__}"})


def _cluster(ctx: Context, record: TrialRecord, clusters: int, tflite: bytes
             ) -> tuple[bytes, dict[str, Any]]:
    """Cluster the chosen candidate's weights, fine-tune with clusters kept, convert again."""
    import keras

    from sdk.convert import finetune
    from sdk.fit.cluster import cluster_weights, file_distinct_values, gzip_size

    if record.keras_path:
        model = keras.models.load_model(record.keras_path, compile=False)
    else:
        model = keras.models.clone_model(ctx.model)
        model.set_weights(ctx.model.get_weights())
    keeper = cluster_weights(model, clusters)
    run = finetune.fine_tune(model, ctx.train, ctx.epochs, on_step_end=keeper,
                             progress=ctx.progress)
    clustered = convert_candidate(ctx, model, record.candidate)
    path = ctx.workdir / f"trial-{record.number:03d}-clustered.tflite"
    write_atomic(path, clustered)
    return clustered, {
        "clusters": clusters, "gzip_before": gzip_size(tflite), "gzip_after": gzip_size(clustered),
        "bytes_before": len(tflite), "bytes_after": len(clustered),
        "accuracy_before": record.accuracy, "accuracy_after": measure_accuracy(ctx, path),
        "distinct_values": file_distinct_values(clustered),
        "distinct_values_measured_on": "the written .tflite (max per channel)",
        "fine_tune_loss": run.loss,
        "note": "clustering shrinks the gzip-compressed download only; the runtime stores "
                "int8 weights uncompressed, so flash and arena do not change"}
