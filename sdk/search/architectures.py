"""The architecture search's driver: screen a family's grid, train the candidates that fit,
rank them, verify the best in the target's runtime and write it.

:func:`search_architectures` screens the grid (:func:`sdk.search.screen.screen`, one
TensorFlow child, shape-only calibration), then runs a study (:mod:`sdk.study`) over the
survivors (:class:`sdk.search.trials.SurvivorTrials`): in memory, SQLite (a rerun resumes:
survivors trained before are not trained again) or a server database that several machines
join, whose trial-order decisions keep two workers from training one survivor twice. The
winner goes through fit's verification (:func:`sdk.fit.export.verify`,
``simulate(run=True)``). Ctrl-C keeps the best survivor trained so far.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.convert.data import DataSource, load_labelled
from devicefit.sdk.convert.spec import MemoryOptimization
from devicefit.sdk.search.candidate import ArchCandidate, candidate
from devicefit.sdk.search.objective import Objective
from devicefit.sdk.search.screen import Screened, ScreenRun, screen
from devicefit.sdk.search.trials import (
    ArchTrial,
    Data,
    Job,
    SurvivorTrials,
    ranked,
    train_survivor,
)
from devicefit.sdk.study import SearchSettings, Stopped, Unshown, run_study, work_folder
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import InputError, UsageError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report.report import Report

log = logging.getLogger(__name__)

#: Samples the int8 converter calibrates on (fit's number).
CALIBRATION_SAMPLES = 300


@dataclass(frozen=True)
class SearchSpec:
    """``devicefit search``'s training flags as one value (checked by the search)."""

    train: DataSource
    eval_data: DataSource
    #: None: the first training samples.
    calibration: DataSource | None = None
    epochs: int = 3
    objective: Objective = Objective.ACCURACY
    #: The study's settings: trials, time budget, storage, study, jobs, seed, heartbeats,
    #: artifacts (fit's flags).
    search: SearchSettings = field(default_factory=SearchSettings)
    #: ``--patches`` (TFLM profiles): the screen and every trained file also try running the
    #: first stage patch by patch, so a candidate can fit by it.
    optimize_memory: MemoryOptimization | None = None


@dataclass
class Searched:
    """What :func:`search_architectures` did; :mod:`sdk.search.report` builds the report."""

    profile: Profile
    objective: Objective
    settings: SearchSettings
    epochs: int
    screen: ScreenRun
    trials: list[ArchTrial]
    study_name: str | None = None
    #: The signal that ended the study early and the trials it cut short.
    stopped: Stopped | None = None
    search_seconds: float = 0.0
    #: Ranked fitting trials; the first that passed the runtime is :attr:`chosen`.
    chosen: int | None = None
    verification: Report | None = None
    #: Trials that passed the static check but failed in the runtime.
    failed_in_runtime: tuple[int, ...] = ()
    output: str | None = None
    writer: bool = True
    train_samples: int = 0
    eval_samples: int = 0
    calibration_source: str = ""
    #: Trial numbers the study used without a record, and why (the table skips them).
    unshown: tuple[Unshown, ...] = ()

    @property
    def found(self) -> bool:
        return self.chosen is not None

    @property
    def interrupted(self) -> bool:
        return self.stopped is not None


OnTrial = Callable[[ArchTrial], None]


def search_architectures(family: str, axes: Mapping[str, Sequence[Any]],
                         profile: str | Path | Profile, output: str | Path, spec: SearchSpec, *,
                         profiles_dirs: Sequence[str | Path] = (),
                         progress: Progress | None = None,
                         on_trial: OnTrial | None = None) -> Searched:
    """Screen ``family``'s grid over ``axes`` for ``profile``, train the survivors on
    ``spec``'s data, write the most accurate one that passes in the runtime to ``output``.

    ``input_shape`` and ``classes`` default to the data's (a grid axis of ``input_shape``
    must be the data's sample shape: the search trains on the data as it is).
    """
    from devicefit.sdk.convert import check_output

    settings = spec.search
    settings.check()
    if spec.epochs < 1:
        raise UsageError(f"--epochs {spec.epochs}: training needs at least 1")
    prof = profile if isinstance(profile, Profile) else load_profile(profile, list(profiles_dirs))
    out_path = check_output(output, spec.train, spec.eval_data, spec.calibration)
    data, fixed = _data(spec, axes)
    grid = _grid(family, {k: v for k, v in axes.items() if k not in fixed}, fixed)
    screened = screen(grid, prof, memory=spec.optimize_memory)
    found = Searched(prof, spec.objective, settings, spec.epochs, screened, [],
                     train_samples=len(data.train), eval_samples=len(data.evaluation),
                     calibration_source=str(spec.calibration or data.train.source))
    if not screened.fitting:
        return found
    found.study_name = settings.study_name or study_name(prof.name, screened.fitting, spec)
    with work_folder(settings, found.study_name, "devicefit-search-") as work:
        found.settings = settings.shared_by_jobs(work / "search.db")
        job = Job(list(screened.fitting), prof, data, spec.epochs, spec.objective, work,
                  progress, spec.optimize_memory)
        _train(found, job, on_trial)
        if found.writer:
            _write_winner(found, job, out_path, [spec.train, spec.eval_data, spec.calibration])
    return found


def _train(found: Searched, job: Job, on_trial: OnTrial | None) -> None:
    """The study over the survivors; its trials, time and outcome go into ``found``."""
    assert found.study_name is not None
    workers = partial(SurvivorTrials, replace(job, progress=None))
    result = run_study(SurvivorTrials(job), found.settings, found.study_name,
                       workers=workers, on_trial=on_trial)
    found.trials, found.stopped = result.records, result.stopped
    found.unshown = result.unshown
    found.writer, found.search_seconds = result.writer, result.seconds


def _data(spec: SearchSpec, axes: Mapping[str, Sequence[Any]]
          ) -> tuple[Data, dict[str, Any]]:
    """The data, and the parameters it fixes (input_shape, classes) unless ``axes`` give them."""
    from devicefit.sdk.fit import top1_accuracy

    shape = _sample_shape(spec.train, axes)
    train, evaluation, calibration = load_labelled(
        spec.train, spec.eval_data, spec.calibration, shape, samples=CALIBRATION_SAMPLES,
        command="search", purpose="train the candidates and rank them by accuracy")
    assert train.y is not None and evaluation.y is not None  # load_labelled checked them
    classes = _classes(train.y)
    given = [int(c) for c in axes.get("classes", [])]
    if given and given != [classes]:
        raise UsageError(f"--param classes={','.join(map(str, given))}: the training labels "
                         f"have {classes} classes")
    # A label the model cannot output would only show as a low accuracy: refuse it.
    if top1_accuracy(np.zeros((1, classes)), evaluation.y[:1]) is None or \
            _classes(evaluation.y) > classes:
        raise UsageError(f"{evaluation.source}: its labels go beyond the {classes} classes "
                         "of the training data")
    fixed = {"input_shape": shape, "classes": classes}
    return Data(train, evaluation, calibration.x), fixed


def _sample_shape(source: DataSource, axes: Mapping[str, Sequence[Any]]) -> tuple[int, ...]:
    """The training samples' shape (read from the file), which every candidate takes."""
    given = [tuple(s) for s in axes.get("input_shape", [])]
    if isinstance(source, (str, Path)) and Path(source).suffix.lower() in (".npz", ".npy"):
        if not Path(source).is_file():
            raise InputError(f"training data not found: {source}")
        try:
            loaded = np.load(source, mmap_mode="r")  # only the header is read here
            if isinstance(loaded, np.lib.npyio.NpzFile):
                with loaded:
                    shape = tuple(int(d) for d in loaded["x"].shape[1:])
            else:
                shape = tuple(int(d) for d in loaded.shape[1:])
        except (KeyError, ValueError, OSError) as exc:
            raise InputError(f"{source}: cannot read training data x: {exc}") from None
        if given and given != [shape]:
            raise UsageError(f"--param input_shape={','.join('x'.join(map(str, s)) for s in given)}"
                             f": the training samples are {'x'.join(map(str, shape))}; the "
                             "search trains on the data as it is")
        return shape
    if len(given) != 1:
        raise UsageError("give --param input_shape=HxWxC (one value) when --train is not an "
                         ".npz or .npy file")
    return given[0]


def _classes(y: np.ndarray) -> int:
    if y.ndim == 2 and y.shape[1] > 1:
        return int(y.shape[1])
    return int(y.max()) + 1


def _grid(family: str, axes: Mapping[str, Sequence[Any]], fixed: Mapping[str, Any]
          ) -> list[ArchCandidate]:
    from devicefit.sdk.search.candidate import grid

    if not axes:
        return [candidate(family, **fixed)]
    return grid(family, axes, **fixed)


def study_name(profile: str, survivors: Sequence[Screened], spec: SearchSpec) -> str:
    """The same survivors, profile, data, epochs and objective give the same name: a rerun
    on the same storage resumes the study."""
    text = json.dumps({"profile": profile, "survivors": [s.candidate.key for s in survivors],
                       "data": [str(spec.train), str(spec.eval_data), str(spec.calibration)],
                       "epochs": spec.epochs, "objective": spec.objective.value,
                       **({"memory": spec.optimize_memory.options()}
                          if spec.optimize_memory else {})},
                      sort_keys=True)
    family = survivors[0].candidate.family.replace(":", "-")
    return f"search-{family}-{profile}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


# --------------------------------------------------------------------------- the winner
def _write_winner(found: Searched, job: Job, out_path: Path, inputs: list[Any]) -> None:
    """Verify the ranked fitting trials in the runtime; write the first that passes."""
    from devicefit.sdk.fit.export import verify, write_verified

    failed = []
    for record in ranked(found.trials):
        tflite = _metadata(_bytes(job, record), found, record)
        verified = verify(tflite, job.profile)
        if not verified.ok:
            log.warning("trial %d passed the static check but not the real run; trying the "
                        "next candidate", record.number)
            failed.append(record.number)
            continue
        found.verification = write_verified(out_path, tflite, verified, inputs)
        found.chosen, found.output = record.number, str(out_path)
        break
    found.failed_in_runtime = tuple(failed)


def _bytes(job: Job, record: ArchTrial) -> bytes:
    """The trial's file (trained again, seeded, when another machine trained it and the
    artifact folder is not shared)."""
    path = Path(record.path or "")
    if path.is_file():
        return path.read_bytes()
    if (here := job.workdir / path.name).is_file():
        return here.read_bytes()
    again = train_survivor(job, job.survivor(record.candidate.key), record.number)
    return Path(again.path or "").read_bytes()


def _metadata(tflite: bytes, found: Searched, record: ArchTrial) -> bytes:
    import tensorflow as tf

    from devicefit.sdk.convert import metadata, quantize

    quant = quantize.resolve(found.profile, "int8", None)
    return metadata.embed(tflite, {
        "tool": "devicefit search", "profile": found.profile.name,
        "runtime": found.profile.runtime.name, "scheme": "int8", "io_type": quant.io_type,
        "per_channel": quant.per_channel, "family": record.candidate.family,
        "architecture": record.candidate.params.to_dict(), "candidate": record.candidate.key,
        "trial": record.number, "train_epochs": found.epochs,
        "calibration": {"source": found.calibration_source,
                        "samples": CALIBRATION_SAMPLES, "random": False},
        "converter": f"tensorflow {tf.__version__}"})


__all__ = ["ArchTrial", "Objective", "SearchSpec", "Searched", "search_architectures"]
