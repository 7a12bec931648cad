"""``adapt``'s work: check the request, build the trainable model in a TensorFlow child,
measure and run it in LiteRT children, and return what they found."""

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
from devicefit.sdk.devtrain.spec import BuildRequest, Update
from devicefit.simulator.errors import InputError, RuntimeFailure, UsageError
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile

#: Longest a child may take: the TensorFlow build (import, trace, convert) or the training.
TIMEOUT_S = 1800.0
#: The runtime name of the one target that trains (LiteRT on a CPU).
TRAINS = "litert"


@dataclass(frozen=True)
class AdaptSettings:
    update: Update
    batch: int
    steps: int | None
    epochs: int
    learning_rate: float
    int8_frozen: bool
    seed: int = 0


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def adapt(model: str, profile: Profile, data: str, evaluation: str, output: str,
          settings: AdaptSettings) -> Adaptation:
    """Write the trainable model to ``output`` and measure its adaptation in LiteRT."""
    refuse_untrainable(profile)
    shape = keras_input_shape(check_file(model))
    if shape is None:
        raise InputError(f"{model}: adapt needs a .keras model with one input of fixed size")
    x, y = _labelled(data, shape, "adaptation")
    x_eval, y_eval = _labelled(evaluation, shape, "evaluation")
    if len(x) < settings.batch:
        raise UsageError(f"--batch {settings.batch} is more than the {len(x)} adaptation "
                         "samples")
    steps = settings.steps or settings.epochs * (len(x) // settings.batch)
    xnnpack = profile.runtime.kernels == "xnnpack"
    with tempfile.TemporaryDirectory(prefix="devicefit-adapt-") as tmp:
        folder = Path(tmp)
        for name, array in (("adapt_x", x), ("adapt_y", y), ("eval_x", x_eval),
                            ("eval_y", y_eval)):
            np.save(folder / f"{name}.npy", array)
        request = BuildRequest(model=str(Path(model).resolve()), update=str(settings.update),
                               batch=settings.batch, learning_rate=settings.learning_rate,
                               int8_frozen=settings.int8_frozen,
                               rank_x=str(folder / "adapt_x.npy"),
                               rank_y=str(folder / "adapt_y.npy"))
        (folder / "request.json").write_text(json.dumps(request.to_json()))
        step(f"writing the trainable model ({settings.update}, batch {settings.batch}; "
             "TensorFlow starts)")
        _child("devicefit.sdk.devtrain.build", [str(folder)], folder,
               "building the trainable model")
        built = json.loads((folder / "build.json").read_text())
        if "error" in built:
            error = built["error"]
            raise (InputError if error["type"] == "InputError" else UsageError)(error["message"])
        info = built["built"]
        run_request = {"x_shape": [settings.batch, *shape], "threads": 1, "steps": steps,
                       "seed": settings.seed}
        step("measuring the train signature's memory in LiteRT (fresh processes)")
        memory: dict[str, int] = {}
        # The process's rise with the profile's kernels; LiteRT's own tensors with its builtin
        # kernels, where no delegate hides them.
        for kernels, keys in ((xnnpack, ("peak_rise_bytes",)),
                              (False, ("tensor_bytes", "heap_bytes"))):
            (folder / "litert_request.json").write_text(
                json.dumps(run_request | {"xnnpack": kernels}))
            _child("devicefit.sdk.devtrain.litert", ["measure", str(folder)], folder,
                   "LiteRT's train signature")
            measured = json.loads((folder / "measure.json").read_text())
            memory.update({key: measured[key] for key in keys})
        (folder / "litert_request.json").write_text(json.dumps(run_request | {"xnnpack": xnnpack}))
        step(f"adapting in LiteRT: {steps} steps")
        _child("devicefit.sdk.devtrain.litert", ["adapt", str(folder)], folder,
               "LiteRT's adaptation")
        run = json.loads((folder / "adapt.json").read_text())
        tflite = (folder / "model.tflite").read_bytes()
        write_atomic(output, tflite, inputs=[model, data, evaluation])
    return Adaptation(
        update=str(settings.update), batch=settings.batch, trained=tuple(info["trained"]),
        trained_parameters=info["trained_parameters"],
        frozen_parameters=info["frozen_parameters"],
        scores=tuple((path, score) for path, score in info["scores"]), model_bytes=len(tflite),
        train_peak_rise_bytes=memory["peak_rise_bytes"],
        train_tensor_bytes=memory["tensor_bytes"], train_heap_bytes=memory["heap_bytes"],
        accuracy_before=run["accuracy_before"],
        accuracy_after=run["accuracy_after"], first_loss=run["first_loss"],
        last_loss=run["last_loss"], steps=run["steps"],
        step_seconds_median=run["step_seconds_median"], threads=1, xnnpack=xnnpack)
