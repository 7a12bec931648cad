"""Writing the winner of a search: verified in the real runtime, then written atomically.

Two ways in: at the end of :func:`sdk.fit.fit` (by the process that ran the search, or on
a shared study by the one worker that completed it), and ``devicefit fit --storage URL
--study NAME --export -o OUT`` on any machine at any time (:func:`export`), which needs
neither the model, the data nor TensorFlow: every worker keeps what the export needs in the
study (``devicefit`` user attribute) and every candidate's ``.tflite`` and record in the
shared artifact folder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit.sdk.convert.spec import ConversionSpec
from devicefit.sdk.fit.record import FitTrial, read_trial
from devicefit.sdk.fit.report import (
    FitBudgets,
    FitReport,
    FitSettings,
    StudyRecord,
    choose,
    closest_miss,
    reason_for,
)
from devicefit.sdk.fit.space import SearchSpace
from devicefit.sdk.study import (
    SearchSettings,
    artifact_dir,
    open_study,
    records,
    storage_for,
    unshown,
)
from devicefit.simulator.errors import InputError, UsageError
from devicefit.simulator.infra.fileio import temporary_folder, write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report.report import Report, build, plain_fields
from devicefit.simulator.types import MeasureOptions, Status

if TYPE_CHECKING:
    from devicefit.sdk.fit.candidate import Context

log = logging.getLogger(__name__)

#: Study user attribute holding what :func:`export` needs.
STUDY_INFO = "devicefit"
#: The bytes to write for a fitting record (read or rebuilt, with metadata).
Build = Callable[[FitTrial], bytes]


@dataclass(frozen=True)
class StudyInfo:
    """What :func:`export` needs, kept in the study (``devicefit`` user attribute) by every
    worker: the report's fixed part and the metadata every candidate is written with."""

    source: str
    profile: str
    profile_path: str | None
    runtime: str
    budgets: FitBudgets
    space: SearchSpace
    settings: FitSettings
    float_accuracy: float | None
    eval_samples: int
    artifacts: str | None
    #: devicefit's ``.tflite`` metadata shared by every candidate (:func:`metadata_base`).
    metadata: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return plain_fields(self)


def study_info(report: FitReport, profile: Profile, ctx: Context) -> StudyInfo:
    return StudyInfo(report.source, profile.name, str(profile.path) if profile.path else None,
                     report.runtime, report.budgets, report.space, report.settings,
                     report.float_accuracy, report.eval_samples,
                     report.study.artifacts if report.study else None,
                     metadata_base(ctx, report))


def metadata_base(ctx: Context, report: FitReport) -> dict[str, Any]:
    """devicefit's metadata for every candidate of this search (kept in the study so that
    ``fit --export`` writes the same bytes on a machine without the model or TensorFlow)."""
    import tensorflow as tf

    return {
        "tool": "devicefit fit", "profile": ctx.profile.name, "runtime": ctx.profile.runtime.name,
        "source": Path(ctx.loaded.source).name if ctx.loaded.kind != "memory"
        else ctx.loaded.source, "source_format": ctx.loaded.kind,
        "fine_tune_epochs": ctx.epochs, "distill": distill.to_dict() if (distill := report.settings.distill) else None,
        "cluster": report.settings.cluster,
        "calibration": {"source": ctx.train.source, "samples": len(ctx.calibration),
                        "random": False},
        "sparse_encoding": False, "converter": f"tensorflow {tf.__version__}"}


def remember(settings: SearchSettings, name: str, info: StudyInfo) -> None:
    """Every worker writes the same values, so whichever wrote last is right."""
    open_study(name, settings, None, create=True).set_user_attr(STUDY_INFO, info.to_dict())


def write_winner(report: FitReport, profile: Profile, out_path: Path, build: Build,
                 inputs: list[Any]) -> None:
    """Verify the best fitting candidates in the real runtime; write the first that passes."""
    fitting = choose(report.trials)
    for record in fitting:
        tflite = build(record)
        verified = verify(tflite, profile)
        if not verified.ok:
            failed = replace(record, note="passed the static check, failed in the runtime",
                             verdict=Status.FAIL)
            report.trials = [failed if t is record else t for t in report.trials]
            log.warning("trial %d passed the static check but not the real run; trying the "
                        "next candidate", record.number)
            continue
        report.verification = write_verified(out_path, tflite, verified, inputs)
        report.chosen = record.number
        report.output = str(out_path)
        report.reason = reason_for(record, fitting, report.float_accuracy, report.trials)
        return
    closest, misses = closest_miss(report.trials)
    report.closest = None if closest is None else closest.number
    report.closest_misses = misses


def verify(tflite: bytes, profile: Profile) -> Report:
    """``tflite`` simulated and run in the target's runtime (``simulate(run=True)``)."""
    from devicefit.simulator.simulate import simulate

    with temporary_folder("devicefit-verify-") as staging:
        staged = Path(staging) / "verify.tflite"  # the workdir may be shared: stage apart
        write_atomic(staged, tflite)
        return simulate(staged, profile, run=MeasureOptions())


def write_verified(out_path: Path, tflite: bytes, verified: Report, inputs: list[Any]
                   ) -> Report:
    """Write the verified bytes atomically; the verification as of the written file."""
    write_atomic(out_path, tflite, inputs=[p for p in inputs if isinstance(p, (str, Path))])
    return replace(verified, model=replace(verified.model, path=str(out_path)))


def embed_metadata(tflite: bytes, profile: Profile, record: FitTrial,
                   base: dict[str, Any]) -> bytes:
    """The candidate's bytes with devicefit's conversion metadata (``base`` + the trial's)."""
    from devicefit.sdk.convert import metadata, quantize

    spec = record.candidate.spec(ConversionSpec())
    quant = quantize.resolve(profile, spec.scheme, spec.io_type)
    return metadata.embed(tflite, {
        **base, **spec.settings(quant), "qat": record.candidate.qat, "trial": record.number,
        "fine_tune_epochs": base["fine_tune_epochs"] if record.candidate.needs_training else 0})


def export(settings: SearchSettings, output: str | Path, *, profile: str | Path | None = None,
           profiles_dirs: list[str | Path] | None = None) -> FitReport:
    """Write the best candidate of the study ``settings.study_name`` to ``output`` now.

    The candidate files are looked up in ``settings.artifacts`` (default: the folder the
    workers were given); a trial still running elsewhere is simply not considered yet.
    """
    import optuna

    from devicefit.sdk.convert import check_output

    if settings.storage is None or settings.study_name is None:
        raise UsageError("--export needs --storage URL and --study NAME")
    out_path = check_output(output)
    try:
        study = open_study(settings.study_name, settings, None, create=False)
    except UsageError as exc:
        if not isinstance(exc.__cause__, KeyError):  # the storage itself did not open
            raise
        names = [s.study_name for s in optuna.get_all_study_summaries(storage_for(settings))]
        raise UsageError(f"--study {settings.study_name}: no such study in --storage "
                         f"{settings.storage} (it has: {', '.join(names) or 'none'})") from None
    data = study.user_attrs.get(STUDY_INFO)
    if data is None:
        raise InputError(f"study {settings.study_name} has no devicefit search yet (no worker "
                         "has finished a trial)")
    try:
        info: StudyInfo = build(StudyInfo, data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"study {settings.study_name}: its devicefit search is not one this "
                         f"version reads ({type(exc).__name__}: {exc})") from None
    prof = _profile(profile, info, profiles_dirs)
    root = Path(settings.artifacts) if settings.artifacts else \
        Path(info.artifacts) if info.artifacts else None
    if root is None:
        raise UsageError("the workers ran without --artifacts, so their candidate models are "
                         "not kept; give --artifacts DIR to the workers")
    folder = artifact_dir(root, settings.study_name)
    report = FitReport(source=info.source, profile=prof.name, runtime=info.runtime,
                       budgets=info.budgets, space=info.space, settings=info.settings,
                       float_accuracy=info.float_accuracy, eval_samples=info.eval_samples,
                       trials=records(study, read_trial), unshown=unshown(study),
                       study=StudyRecord(settings.study_name, str(root), exported=True))

    def read_candidate(record: FitTrial) -> bytes:
        path = folder / Path(record.path or f"trial-{record.number:03d}.tflite").name
        if not path.is_file():
            raise InputError(f"{path}: trial {record.number}'s model is not in the artifact "
                             "folder (give --artifacts the folder the workers shared)")
        return embed_metadata(path.read_bytes(), prof, record, info.metadata)

    write_winner(report, prof, out_path, read_candidate, inputs=[])
    return report


def _profile(given: str | Path | None, info: StudyInfo,
             profiles_dirs: list[str | Path] | None) -> Profile:
    if given is not None:
        return load_profile(given, profiles_dirs)
    path = info.profile_path
    if path and Path(path).is_file():
        return load_profile(path, profiles_dirs)
    return load_profile(info.profile, profiles_dirs)
