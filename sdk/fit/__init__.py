"""``fit``: find the most accurate compressed variant of a model that passes every budget of
a device profile, and verify it in the target's own runtime.

Stages: load → data → float reference → the study (:mod:`sdk.study` running
:mod:`sdk.fit.trials` over :mod:`sdk.fit.space`, each candidate judged by
:mod:`sdk.fit.candidate`) → choose → verify with ``simulate(run=True)`` → optional weight
clustering (:mod:`sdk.fit.cluster`) → atomic write → :class:`~sdk.fit.report.FitReport`.
TensorFlow is imported only inside functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.convert.data import load_labelled
from devicefit.sdk.convert.distill import DistillSettings
from devicefit.sdk.fit.candidate import (
    Context,
    convert_candidate,
    evaluate,
    measure_accuracy,
)
from devicefit.sdk.fit.cluster import check_clusters, gzip_size
from devicefit.sdk.fit.export import (
    embed_metadata,
    export,
    metadata_base,
    remember,
    study_info,
    write_winner,
)
from devicefit.sdk.fit.int4 import weights_choice
from devicefit.sdk.fit.record import FitTrial
from devicefit.sdk.fit.report import Clustering, FitBudgets, FitReport, FitSettings, StudyRecord
from devicefit.sdk.fit.space import SearchSpace, space_for
from devicefit.sdk.fit.spec import FitSpec
from devicefit.sdk.fit.trials import run_trials, study_name
from devicefit.sdk.study import SearchSettings, shown_url, work_folder
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import UsageError
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.target import target_for

__all__ = ["FitReport", "FitSpec", "SearchSettings", "export", "fit"]

log = logging.getLogger(__name__)

CALIBRATION_SAMPLES = 300
OnTrial = Callable[[FitTrial], None]


def fit(model: Any, profile: str | Path | Profile, output: str | Path, spec: FitSpec, *,
        workdir: str | Path | None = None, profiles_dirs: list[str | Path] | None = None,
        progress: Progress | None = None, on_trial: OnTrial | None = None) -> FitReport:
    """Search, verify and write the best candidate to ``output`` (when one fits).

    ``spec`` holds the data (sources as ``convert`` takes them), the fine-tuning, the search
    settings and what is done to every candidate or to the winner. The report is returned
    also when nothing fits (``report.found`` is False; nothing is written).
    """
    from devicefit.sdk.convert import check_output, loading

    settings, tune, memory = spec.search, spec.fine_tune, spec.optimize_memory
    settings.check()
    if tune.epochs < 1:
        raise UsageError(f"--epochs {tune.epochs}: fine-tuning needs at least 1")
    if spec.cluster is not None:
        check_clusters(spec.cluster)
    prof = profile if isinstance(profile, Profile) else load_profile(profile, profiles_dirs)
    target = target_for(prof)
    if memory is not None and not target.offline_plan:
        raise UsageError(f"--patches rewrites the graph and its TFLite-Micro arena plan, which "
                         f"{target.title} does not take; profile '{prof.name}' runs "
                         f"'{prof.runtime.name}'")
    out_path = check_output(output, model, tune.train, spec.eval_data, spec.calibration)
    loaded = loading.load(model, unsafe=spec.unsafe)
    if not loaded.is_keras:
        raise UsageError(f"{loaded.source}: fit prunes and fine-tunes, so it needs a Keras "
                         "model (.keras or .h5), not a SavedModel")
    training, evaluation, calibration = load_labelled(
        tune.train, spec.eval_data, spec.calibration, loaded.input_shape,
        samples=CALIBRATION_SAMPLES, command="fit",
        purpose="fine-tune and to compare candidates by accuracy")
    assert evaluation.y is not None  # load_labelled checked the labels
    float_accuracy = top1_accuracy(loaded.predict(evaluation.x), evaluation.y)
    if float_accuracy is None:
        raise UsageError(f"{loaded.source}: fit ranks candidates by top-1 accuracy, so the "
                         "model must output class scores (one output, 2 or more classes)")

    space = space_for(prof, can_train=True, can_prune=True, groups=_groups(loaded.keras_model))
    choice = weights_choice(loaded, calibration.x, training.source, prof, spec.conversion().io_type)
    space = replace(space, weights=choice.widths, weights_note=choice.note)
    name = settings.study_name or study_name(loaded.source, prof.name, space)
    with work_folder(settings, name, "devicefit-fit-", workdir) as work:
        ctx = Context(loaded=loaded, profile=prof, train=training, evaluation=evaluation,
                      calibration=calibration.x, epochs=tune.epochs, workdir=work,
                      float_accuracy=float_accuracy,
                      distill=DistillSettings() if tune.distill else None, progress=progress,
                      spec=spec.conversion())
        ctx.qat_twins = space.qat  # PTQ twins of QAT candidates train the same epochs
        study = StudyRecord(name, str(Path(settings.artifacts).resolve())
                            if settings.artifacts else None)
        report = _report(ctx, space, spec, study)
        if settings.storage is not None:  # before the search: --export works at any time
            remember(settings, name, study_info(report, prof, ctx))
        model_path = Path(loaded.source) if loaded.kind in ("keras", "h5") else None
        result = run_trials(ctx, space, settings, name=name, model_path=model_path,
                            on_trial=on_trial)
        report.settings = replace(report.settings, storage=shown_url(result.storage))
        report.trials, report.stopped = result.records, result.stopped
        report.unshown = result.unshown
        report.search_seconds = result.seconds
        report.study = replace(study, worker=result.worker, writer=result.writer)
        if result.writer:
            write_winner(report, prof, out_path,
                         lambda record: _build(ctx, record, report, spec.cluster), inputs=[model])
    return report




def _report(ctx: Context, space: SearchSpace, spec: FitSpec, study: StudyRecord) -> FitReport:
    """The report before the search: what is searched, how, against which budgets."""
    settings, prof, memory = spec.search, ctx.profile, spec.optimize_memory
    return FitReport(
        source=ctx.loaded.source, profile=prof.name, runtime=prof.runtime.name,
        budgets=FitBudgets.of(prof.budgets), space=space,
        settings=FitSettings(settings.max_trials, settings.time_budget_s, settings.jobs,
                             shown_url(settings.storage), ctx.epochs, ctx.distill,
                             spec.cluster, settings.seed,
                             memory.patches if memory else None, prof.runtime.code_bytes),
        float_accuracy=ctx.float_accuracy, eval_samples=len(ctx.evaluation),
        study=study)


def _groups(model: Any) -> tuple[str, ...]:
    """The model's prunable layer groups, or none if channel pruning cannot read it."""
    from devicefit.sdk.convert import sparsity

    try:
        return tuple("+".join(g) for g in sparsity.prunable_groups(model))
    except UsageError as exc:
        log.info("no per-layer pruning: %s", exc)
        return ()


def top1_accuracy(outputs: np.ndarray, y: np.ndarray) -> float | None:
    if outputs.ndim != 2 or outputs.shape[1] < 2:
        return None
    labels = y.argmax(1) if y.ndim == 2 and y.shape[1] > 1 else y.reshape(-1)
    return float(np.mean(outputs.argmax(1) == labels))


def _build(ctx: Context, record: FitTrial, report: FitReport, cluster: int | None
           ) -> bytes:
    """The bytes to write for ``record``: its model (rebuilt if another machine built it
    and its file is not here), clustered if asked, with devicefit's metadata."""
    found = _here(ctx, record)
    record = found or replace(evaluate(ctx, record.candidate, record.number), seconds=0.0)
    tflite = Path(record.path or "").read_bytes()
    if cluster:
        tflite, report.clustering = _cluster(ctx, record, cluster, tflite)
    tflite = embed_metadata(tflite, ctx.profile, record, metadata_base(ctx, report))
    if report.clustering is not None:  # the download size of the file as written
        report.clustering = replace(report.clustering, gzip_after=gzip_size(tflite))
    return tflite


def _here(ctx: Context, record: FitTrial) -> FitTrial | None:
    """``record`` with its files where this machine sees them (as recorded, or in the work
    folder: a shared artifact folder may be mounted elsewhere here), None if missing."""
    if not record.path:
        return None
    keras_path = record.payload.keras_path
    paths = [Path(record.path)] + ([Path(keras_path)] if keras_path else [])
    for found in (paths, [ctx.workdir / p.name for p in paths]):
        if all(p.is_file() for p in found):
            payload = replace(record.payload, keras_path=str(found[1]) if len(found) > 1 else None)
            return replace(record, path=str(found[0]), payload=payload)
    return None


def _cluster(ctx: Context, record: FitTrial, clusters: int, tflite: bytes
             ) -> tuple[bytes, Clustering]:
    """Cluster the chosen candidate's weights, fine-tune with clusters kept, convert again."""
    import keras

    from devicefit.sdk.convert import finetune
    from devicefit.sdk.fit.cluster import cluster_weights, file_distinct_values, gzip_size

    if record.payload.keras_path:
        model = keras.models.load_model(record.payload.keras_path, compile=False)
    else:
        model = keras.models.clone_model(ctx.model)
        model.set_weights(ctx.model.get_weights())
    keeper = cluster_weights(model, clusters)
    run = finetune.fine_tune(model, ctx.train, ctx.epochs, on_step_end=keeper,
                             progress=ctx.progress)
    clustered = convert_candidate(ctx, record.candidate.spec(ctx.spec), model=model).tflite
    path = ctx.workdir / f"trial-{record.number:03d}-clustered.tflite"
    write_atomic(path, clustered)
    return clustered, Clustering(
        clusters, gzip_size(tflite), gzip_size(clustered), len(tflite), len(clustered),
        record.accuracy, measure_accuracy(ctx, path), file_distinct_values(clustered),
        fine_tune_loss=tuple(run.loss))
