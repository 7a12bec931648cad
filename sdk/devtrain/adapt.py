"""``adapt``'s work: check the request, build the trainable model in a TensorFlow child,
measure and run it in LiteRT children, and return what they found. ``--update auto``
builds every candidate in that one child, plans each (the simulator's ``plan_training``),
adapts those under the training-memory budget on a validation split of the adaptation data
and keeps the most accurate, then verifies it like a single update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.console import step
from devicefit.sdk.convert.data import load_data
from devicefit.sdk.convert.loading import check_file, keras_input_shape
from devicefit.sdk.devtrain.build import RESULT, model_file
from devicefit.sdk.devtrain.spec import BuildRequest, Update
from devicefit.simulator.errors import InputError, RuntimeFailure, UsageError
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile

#: Longest a child may take: the TensorFlow build (import, trace, convert) or the training.
TIMEOUT_S = 1800.0
#: The runtime name of the one target that trains (LiteRT on a CPU).
TRAINS = "litert"
#: ``--update auto`` holds out one sample in this many of each class of ``--data`` to
#: compare the candidates on (``--eval`` stays unseen until the choice is made).
VALIDATION_EVERY = 4


@dataclass(frozen=True)
class AdaptSettings:
    update: Update
    batch: int
    steps: int | None
    epochs: int
    learning_rate: float
    int8_frozen: bool
    seed: int = 0
    #: ``--train-memory``: the budget ``auto`` chooses under, instead of the profile's.
    train_memory_bytes: int | None = None


@dataclass(frozen=True)
class Adaptation:
    """What ``adapt`` found: figures measured in LiteRT on this host (its wheel's build)."""

    update: str
    batch: int
    trained: tuple[str, ...]
    trained_parameters: int
    frozen_parameters: int
    #: ``sparse``: every weight tensor's |gradient| x |weight| on the first batches, highest
    #: first (what the choice was made by); empty for the other updates.
    scores: tuple[tuple[str, float], ...]
    model_bytes: int
    #: The rise of the LiteRT process's peak resident memory to run ``train`` once.
    train_peak_rise_bytes: int
    #: What the C allocator holds for the train signature with LiteRT's builtin kernels
    #: (the arena as allocated, the variables, the kernels' data).
    train_heap_bytes: int
    #: The union of the train signature's tensors' buffers with LiteRT's builtin kernels:
    #: the arena bytes its tensors occupy (holes the planner leaves not counted).
    train_tensor_bytes: int
    accuracy_before: float
    accuracy_after: float
    first_loss: float
    last_loss: float
    steps: int
    step_seconds_median: float
    threads: int
    xnnpack: bool
    #: The simulator's plan of the train signature (``plan_training``'s total: estimated).
    planned_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Candidate:
    """One choice ``--update auto`` weighed."""

    update: str
    #: The simulator's plan of its train signature (estimated); None when it was refused.
    planned_bytes: int | None
    fits: bool
    #: Accuracy on the held-out part of ``--data`` after training on the rest (LiteRT);
    #: None for a candidate over the budget, which is not trained.
    validation_accuracy: float | None = None
    #: Why the model could not be written (an update that needs a Flex op).
    refused: str | None = None


@dataclass(frozen=True)
class AutoChoice:
    """What ``--update auto`` weighed and chose, under which budget."""

    budget_bytes: int
    #: Where the budget comes from: the profile's ``budgets.train_memory`` or the flag.
    budget_from: str
    fit_samples: int
    validation_samples: int
    candidates: tuple[Candidate, ...]
    #: None when no candidate fits the budget.
    chosen: str | None

    def closest_miss(self) -> Candidate | None:
        """The candidate over the budget with the smallest plan."""
        over = [c for c in self.candidates if c.planned_bytes is not None and not c.fits]
        return min(over, key=lambda c: c.planned_bytes or 0, default=None)


@dataclass(frozen=True)
class AutoResult:
    """``--update auto``'s outcome: the choice, and the chosen model's verification."""

    choice: AutoChoice
    #: The chosen model adapted on all of ``--data`` and measured; None when none fits.
    adaptation: Adaptation | None

    @property
    def measured_fits(self) -> bool:
        """The chosen model's heap measured in LiteRT is within the budget (the verification
        of the plan it was chosen by)."""
        return self.adaptation is not None and \
            self.adaptation.train_heap_bytes <= self.choice.budget_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"auto": asdict(self.choice) | {"measured_fits": self.measured_fits}} | \
            (self.adaptation.to_dict() if self.adaptation else {})


def refuse_untrainable(profile: Profile) -> None:
    """Only LiteRT on a CPU runs training signatures: TFLM has no training, and the
    accelerators' compilers take inference graphs only."""
    name = profile.runtime.name
    if name == "tflm":
        raise UsageError(f"profile {profile.name}: TFLM has no training (no gradient kernels, "
                         "no resource variables); adapt runs on LiteRT profiles such as "
                         "android-arm64-cpu")
    if name != TRAINS:
        raise UsageError(f"profile {profile.name}: {name} has no training (its compiler takes "
                         "inference graphs only); adapt runs on LiteRT CPU profiles such as "
                         "android-arm64-cpu")


def _labelled(path: str, shape: tuple[int, ...], what: str) -> tuple[np.ndarray, np.ndarray]:
    data = load_data(path, shape, what=what)
    if data.y is None:
        raise UsageError(f"adapt needs labels in the {what} data (.npz with x and y)")
    y = np.asarray(data.y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
        raise InputError(f"{path}: {what} labels must be class indices (one non-negative "
                         "integer per sample)")
    return data.x.astype(np.float32), y.astype(np.int32)


def _child(module: str, args: list[str], folder: Path, what: str) -> None:
    """Run ``python -m module *args`` in ``folder``; its output goes to a log of its own,
    whose last line (the exception a child dies of) a failure quotes."""
    # TensorFlow leaves __autograph_generated_file* in $TMPDIR, and a killed child cleans
    # nothing: its temporary files go into the folder this process removes.
    (folder / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(folder / "tmp"))
    log = folder / f"{'-'.join([module.rsplit('.', 1)[-1], *args[:-1]])}.log"
    with open(log, "wb") as out:
        try:
            code = subprocess.run([sys.executable, "-m", module, *args], stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=out, env=env, timeout=TIMEOUT_S,
                                  cwd=folder).returncode
        except subprocess.TimeoutExpired as exc:
            raise RuntimeFailure(f"{what} took more than {TIMEOUT_S:.0f} s") from exc
    if code != 0:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        raise RuntimeFailure(f"{what} failed (exit {code}): {lines[-1] if lines else 'no output'}",
                             crashed=code < 0)


@dataclass(frozen=True)
class _Inputs:
    """The checked request: the model's input shape and the data as arrays."""

    shape: tuple[int, ...]
    x: np.ndarray
    y: np.ndarray
    x_eval: np.ndarray
    y_eval: np.ndarray


def _inputs(model: str, profile: Profile, data: str, evaluation: str,
            settings: AdaptSettings) -> _Inputs:
    refuse_untrainable(profile)
    shape = keras_input_shape(check_file(model))
    if shape is None:
        raise InputError(f"{model}: adapt needs a .keras model with one input of fixed size")
    x, y = _labelled(data, shape, "adaptation")
    x_eval, y_eval = _labelled(evaluation, shape, "evaluation")
    if len(x) < settings.batch:
        raise UsageError(f"--batch {settings.batch} is more than the {len(x)} adaptation "
                         "samples")
    return _Inputs(shape, x, y, x_eval, y_eval)


def _save(folder: Path, **arrays: np.ndarray) -> dict[str, str]:
    """Each array as ``folder/<name>.npy``: name → path, as the children's requests name
    them."""
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)
    return {name: str(folder / f"{name}.npy") for name in arrays}


def _steps(settings: AdaptSettings, samples: int) -> int:
    return settings.steps or settings.epochs * (samples // settings.batch)


def _build(folder: Path, model: str, updates: list[str], settings: AdaptSettings,
           rank: dict[str, str]) -> list[dict[str, Any]]:
    """Write a trainable model per update in one TensorFlow child (``auto``: one per
    candidate); what each trains or why it was refused, in order."""
    request = BuildRequest(model=str(Path(model).resolve()), updates=tuple(updates),
                           batch=settings.batch, learning_rate=settings.learning_rate,
                           int8_frozen=settings.int8_frozen, rank_x=rank["adapt_x"],
                           rank_y=rank["adapt_y"])
    (folder / "request.json").write_text(json.dumps(request.to_json()))
    _child("devicefit.sdk.devtrain.build", [str(folder)], folder,
           "building the trainable model")
    built = json.loads((folder / RESULT).read_text())
    if "error" in built:
        error = built["error"]
        raise (InputError if error["type"] == "InputError" else UsageError)(error["message"])
    return list(built["built"])


def _litert(job: str, folder: Path, tag: str, request: dict[str, Any],
            what: str) -> dict[str, Any]:
    """Run one LiteRT child's ``job`` on ``request`` and return its result."""
    path, result = folder / f"{tag}-{job}.request.json", folder / f"{tag}-{job}.json"
    path.write_text(json.dumps(request | {"result": str(result)}))
    _child("devicefit.sdk.devtrain.litert", [job, str(path)], folder, what)
    return dict(json.loads(result.read_text()))


def _planned(path: Path) -> int:
    from devicefit.simulator.plan.training import plan_training
    from devicefit.simulator.read.reader import read_model

    return plan_training(read_model(path), signature="train").total_bytes


def _verify(folder: Path, index: int, info: dict[str, Any], inputs: _Inputs,
            files: dict[str, str], settings: AdaptSettings, xnnpack: bool) -> Adaptation:
    """Measure model ``index``'s train signature in LiteRT and adapt it on all of the
    adaptation data, the accuracy on the evaluation data."""
    path = folder / model_file(index)
    base = {"model": str(path), "x_shape": [settings.batch, *inputs.shape], "threads": 1,
            "steps": _steps(settings, len(inputs.x)), "seed": settings.seed}
    step("measuring the train signature's memory in LiteRT (fresh processes)")
    memory: dict[str, int] = {}
    # The process's rise with the profile's kernels; LiteRT's own tensors with its builtin
    # kernels, where no delegate hides them.
    for kernels, keys in ((xnnpack, ("peak_rise_bytes",)),
                          (False, ("tensor_bytes", "heap_bytes"))):
        measured = _litert("measure", folder, f"{index}-{kernels}", base | {"xnnpack": kernels},
                           "LiteRT's train signature")
        memory.update({key: measured[key] for key in keys})
    step(f"adapting in LiteRT: {base['steps']} steps")
    run = _litert("adapt", folder, str(index), base | {"xnnpack": xnnpack} | files,
                  "LiteRT's adaptation")
    return Adaptation(
        update=info["update"], batch=settings.batch, trained=tuple(info["trained"]),
        trained_parameters=info["trained_parameters"],
        frozen_parameters=info["frozen_parameters"],
        scores=tuple((p, score) for p, score in info["scores"]),
        model_bytes=path.stat().st_size, train_peak_rise_bytes=memory["peak_rise_bytes"],
        train_tensor_bytes=memory["tensor_bytes"], train_heap_bytes=memory["heap_bytes"],
        accuracy_before=run["accuracy_before"], accuracy_after=run["accuracy_after"],
        first_loss=run["first_loss"], last_loss=run["last_loss"], steps=run["steps"],
        step_seconds_median=run["step_seconds_median"], threads=1, xnnpack=xnnpack,
        planned_bytes=_planned(path))


def adapt(model: str, profile: Profile, data: str, evaluation: str, output: str,
          settings: AdaptSettings) -> Adaptation:
    """Write the trainable model to ``output`` and measure its adaptation in LiteRT."""
    inputs = _inputs(model, profile, data, evaluation, settings)
    with tempfile.TemporaryDirectory(prefix="devicefit-adapt-") as tmp:
        folder = Path(tmp)
        files = _save(folder, adapt_x=inputs.x, adapt_y=inputs.y, eval_x=inputs.x_eval,
                      eval_y=inputs.y_eval)
        step(f"writing the trainable model ({settings.update}, batch {settings.batch}; "
             "TensorFlow starts)")
        (info,) = _build(folder, model, [str(settings.update)], settings, files)
        if "error" in info:
            raise UsageError(info["error"])
        result = _verify(folder, 0, info, inputs, files, settings,
                         profile.runtime.kernels == "xnnpack")
        write_atomic(output, (folder / model_file(0)).read_bytes(),
                     inputs=[model, data, evaluation])
    return result


def train_budget(profile: Profile, settings: AdaptSettings) -> tuple[int, str]:
    """The training-memory budget ``auto`` chooses under, and where it comes from."""
    if settings.train_memory_bytes is not None:
        return settings.train_memory_bytes, "--train-memory"
    if profile.budgets.train_memory_bytes is None:
        raise UsageError(f"--update auto chooses under a training-memory budget: profile "
                         f"{profile.name} sets no budgets.train_memory; give --train-memory")
    return profile.budgets.train_memory_bytes, f"profile {profile.name}'s budgets.train_memory"


def _held_out(y: np.ndarray, seed: int) -> np.ndarray:
    """A mask of the validation samples: one in :data:`VALIDATION_EVERY` of each class,
    drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(y), bool)
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        mask[members[:len(members) // VALIDATION_EVERY]] = True
    return mask


def adapt_auto(model: str, profile: Profile, data: str, evaluation: str, output: str,
               settings: AdaptSettings) -> AutoResult:
    """Choose what to train under the training-memory budget, adapt the choice and write it
    to ``output`` when its measured memory is within the budget too."""
    budget, source = train_budget(profile, settings)
    inputs = _inputs(model, profile, data, evaluation, settings)
    validation = _held_out(inputs.y, settings.seed)
    fit_samples, validation_samples = int((~validation).sum()), int(validation.sum())
    if validation_samples == 0 or fit_samples < settings.batch:
        raise UsageError(f"--update auto holds out one sample in {VALIDATION_EVERY} of each "
                         f"class of --data to compare the choices: {len(inputs.y)} samples "
                         f"leave {validation_samples} to validate and {fit_samples} to train "
                         f"on, --batch {settings.batch}; give more adaptation data")
    xnnpack = profile.runtime.kernels == "xnnpack"
    with tempfile.TemporaryDirectory(prefix="devicefit-adapt-") as tmp:
        folder = Path(tmp)
        files = _save(folder, adapt_x=inputs.x, adapt_y=inputs.y, eval_x=inputs.x_eval,
                      eval_y=inputs.y_eval)
        split = _save(folder, fit_x=inputs.x[~validation], fit_y=inputs.y[~validation],
                      val_x=inputs.x[validation], val_y=inputs.y[validation])
        step(f"writing every candidate's trainable model (batch {settings.batch}; one "
             "TensorFlow child)")
        built = _build(folder, model, ["auto"], settings,
                       {"adapt_x": split["fit_x"], "adapt_y": split["fit_y"]})
        planned = [None if "error" in info else _planned(folder / model_file(index))
                   for index, info in enumerate(built)]
        accuracy: dict[int, float] = {}
        fitting = [i for i, plan in enumerate(planned) if plan is not None and plan <= budget]
        for done, index in enumerate(fitting):
            step(f"adapting {built[index]['update']} in LiteRT on {fit_samples} samples, "
                 f"validated on {validation_samples} ({done + 1} of {len(fitting)} that fit)")
            run = _litert("adapt", folder, f"{index}-val", {
                "model": str(folder / model_file(index)),
                "x_shape": [settings.batch, *inputs.shape], "threads": 1,
                "steps": _steps(settings, fit_samples), "seed": settings.seed,
                "xnnpack": xnnpack, "adapt_x": split["fit_x"], "adapt_y": split["fit_y"],
                "eval_x": split["val_x"], "eval_y": split["val_y"]}, "LiteRT's adaptation")
            accuracy[index] = run["accuracy_after"]
        # The most accurate on validation; of equals, the one that plans less memory.
        chosen = max(fitting, key=lambda i: (accuracy[i], -(planned[i] or 0)), default=None)
        choice = AutoChoice(
            budget_bytes=budget, budget_from=source, fit_samples=fit_samples,
            validation_samples=validation_samples,
            candidates=tuple(Candidate(info["update"], planned[i], i in fitting,
                                       accuracy.get(i), info.get("error"))
                             for i, info in enumerate(built)),
            chosen=None if chosen is None else built[chosen]["update"])
        if chosen is None:
            return AutoResult(choice, None)
        result = AutoResult(choice, _verify(folder, chosen, built[chosen], inputs, files,
                                            settings, xnnpack))
        if result.measured_fits:
            write_atomic(output, (folder / model_file(chosen)).read_bytes(),
                         inputs=[model, data, evaluation])
    return result
