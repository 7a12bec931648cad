"""Recorded truth of TFLM target builds, and devicefit's static prediction against it.

``tests/data/tflm_builds/<build>.json`` holds what ``benchmarks/bench_target_builds.py``
measured on one TFLM build (core, kernel library, pinned sources, toolchain, QEMU): per
model its sha256, head, tail, start arena (RecordingMicroAllocator total), the smallest
working arena (a multiple of 16, an application's own set-up), the tail by category, the
planner's buffers and the output hash. The models are named by where they come from, never
stored: a public corpus model (``tests/corpus.py``), a file of a public repository at a
commit, or a function here that writes the bytes (so CI regenerates them identically).

:func:`compare` puts devicefit's static prediction for the build's profile beside each
measured model: predicted head vs measured head, and the predicted start arena (what
``simulate`` tells a user to give TFLM) vs the smallest working arena — it must never be
under, and should be over by little.

``tests/data/tflm_wheel.json`` holds the same truth for the host's pinned ``tflite-micro``
wheel (64-bit, reference kernels) on the models of :data:`WHEEL_MODELS`, the smallest
arena to the byte too; ``python -m benchmarks.target_truth --wheel [--record]`` compares
(and measures again first)::

    python -m benchmarks.target_truth --wheel            # recorded vs predicted, exit 1 if under
    python -m benchmarks.target_truth --wheel --record   # bisect with the wheel, then compare
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "tflm_builds"
#: Bare git mirrors of public repositories (``owner+name/repo``), where a checkout has them.
MIRRORS = Path(os.environ.get("DEVICEFIT_MIRRORS", "/work/.mirror"))


@dataclass(frozen=True)
class BuildConfig:
    """A recorded build: its file name, the core and kernels, and the profile predicting it."""

    name: str
    cpu: str
    kernels: str
    profile: str


BUILDS = (
    BuildConfig("cortex-m4-cmsis-nn", "cortex-m4", "cmsis-nn", "stm32l4r5-cortex-m4"),
    BuildConfig("cortex-m7-cmsis-nn", "cortex-m7", "cmsis-nn", "stm32h743-cortex-m7"),
    BuildConfig("cortex-m4-reference", "cortex-m4", "reference", "stm32l4r5-cortex-m4"),
    BuildConfig("cortex-m0plus-reference", "cortex-m0plus", "reference", "stm32l4r5-cortex-m4"),
)


# --------------------------------------------------------------------------- models
TFLM_REPO, TFLM_COMMIT = "tensorflow/tflite-micro", "90b983c2b3f1480642e040bbd2ddb37b998f3424"
TINY_REPO, TINY_COMMIT = "mlcommons/tiny", "1afd2c9820f795965a6134facd0b4dfae41ef23f"
_TFLM_FILES = (
    "tensorflow/lite/micro/examples/hello_world/models/hello_world_float.tflite",
    "tensorflow/lite/micro/examples/hello_world/models/hello_world_int8.tflite",
    "tensorflow/lite/micro/examples/memory_footprint/models/simple_add_model.tflite",
    "tensorflow/lite/micro/examples/micro_speech/models/audio_preprocessor_float.tflite",
    "tensorflow/lite/micro/examples/micro_speech/models/audio_preprocessor_int8.tflite",
    "tensorflow/lite/micro/examples/micro_speech/models/micro_speech_quantized.tflite",
    "tensorflow/lite/micro/examples/mnist_lstm/trained_lstm.tflite",
    "tensorflow/lite/micro/examples/mnist_lstm/trained_lstm_int8.tflite",
    "tensorflow/lite/micro/examples/dtln/dtln_noise_suppression.tflite",
    "tensorflow/lite/micro/models/keyword_scrambled.tflite",
    "tensorflow/lite/micro/models/keyword_scrambled_8bit.tflite",
    "tensorflow/lite/micro/models/person_detect.tflite",
    "tensorflow/lite/micro/models/person_detect_vela.tflite",
    "tensorflow/lite/micro/integration_tests/seanet/conv/conv10.tflite",
    "tensorflow/lite/micro/integration_tests/seanet/transpose_conv/transpose_conv0.tflite",
    "tensorflow/lite/micro/integration_tests/seanet/strided_slice/strided_slice15.tflite",
    "third_party/xtensa/examples/micro_speech_lstm/micro_speech_lstm.tflite",
)
_TINY_FILES = (
    "benchmark/training/anomaly_detection/trained_models/ad01_int8.tflite",
    "benchmark/training/anomaly_detection/trained_models/ad01_fp32.tflite",
    "benchmark/training/image_classification/trained_models/pretrainedResnet_quant.tflite",
    "benchmark/training/image_classification/trained_models/pretrainedResnet.tflite",
    "benchmark/training/keyword_spotting/trained_models/kws_ref_model.tflite",
    "benchmark/training/keyword_spotting/trained_models/kws_ref_model_float32.tflite",
    "benchmark/training/streaming_wakeword/trained_models/str_ww_ref_model.tflite",
    "benchmark/training/visual_wake_words/trained_models/vww_96_int8.tflite",
    "benchmark/training/visual_wake_words/trained_models/vww_96_float.tflite",
)
#: Models written by code here: (name, "module:function", arguments).
_BUILT = (
    ("lstm_int8", "tests.recurrent_models:lstm_model", ("int8",)),
    ("lstm_float32", "tests.recurrent_models:lstm_model", ("float32",)),
    ("slice_begin1", "tests.tflite_builder:slice_model", (1,)),
    ("custom_op_unknown", "tests.tflite_builder:custom_model", ("DevicefitNoSuchOp",)),
)
#: Public corpus kinds TFLM can run (phone-only int models need LiteRT ops).
CORPUS_KINDS = ("mcu-int8", "float32")


@dataclass(frozen=True)
class TruthModel:
    """A model by its origin; :meth:`load` gives its bytes, or None where it is not here."""

    name: str
    source: dict[str, Any]

    def load(self, models_dir: Path | None = None) -> bytes | None:
        src = self.source
        if "function" in src:
            module, _, func = src["function"].partition(":")
            import importlib

            return getattr(importlib.import_module(module), func)(*src["args"])
        if "corpus" in src:
            from tests.corpus import CorpusUnavailable, corpus

            try:
                (m,) = corpus(names={src["corpus"]})
            except CorpusUnavailable:
                return None
            return Path(m.path).read_bytes() if Path(m.path).is_file() else None
        if models_dir is not None and (models_dir / self.name).is_file():
            return (models_dir / self.name).read_bytes()
        git_dir = MIRRORS / src["repo"].replace("/", "+") / "repo"
        if not git_dir.is_dir():
            return None
        done = subprocess.run(["git", "--git-dir", str(git_dir), "show",
                               f"{src['commit']}:{src['path']}"], capture_output=True)
        return done.stdout if done.returncode == 0 else None


def _repo_model(repo: str, commit: str, path: str) -> TruthModel:
    short = repo.split("/")[1].replace("tflite-micro", "tflm")
    return TruthModel(f"{short}__{Path(path).name}", {"repo": repo, "path": path,
                                                      "commit": commit})


def truth_models(with_corpus: bool = True) -> list[TruthModel]:
    """Every model the recorded builds measure, in a fixed order."""
    out = [TruthModel(f"built__{n}", {"function": f, "args": list(a)}) for n, f, a in _BUILT]
    out += [_repo_model(TFLM_REPO, TFLM_COMMIT, p) for p in _TFLM_FILES]
    out += [_repo_model(TINY_REPO, TINY_COMMIT, p) for p in _TINY_FILES]
    if with_corpus:
        from tests.corpus import MODELS

        out += [TruthModel(f"corpus__{m.name}", {"corpus": m.name}) for m in MODELS
                if set(m.kinds) & set(CORPUS_KINDS)]
    return out


# --------------------------------------------------------------------------- records
def load_records(data: Path = DATA) -> dict[str, dict[str, Any]]:
    """Build name → its recorded JSON (``{"build": {...}, "models": [...]}``)."""
    out = {}
    for path in sorted(data.glob("*.json")):
        record = json.loads(path.read_text())
        if not isinstance(record.get("build"), dict) or not isinstance(record.get("models"), list):
            raise ValueError(f"{path}: not a recorded TFLM build (needs 'build' and 'models')")
        out[record["build"]["name"]] = record
    return out


def build_config(name: str) -> BuildConfig:
    for b in BUILDS:
        if b.name == name:
            return b
    raise KeyError(f"no build '{name}' (known: {', '.join(b.name for b in BUILDS)})")


def build_profile(config: BuildConfig) -> Any:
    """The profile devicefit predicts the build with: the named board's, with the build's
    core and kernel library."""
    from devicefit.simulator.profiles import load_profile, with_runtime

    profile = with_runtime(load_profile(config.profile), kernels=config.kernels)
    if profile.device.cpu != config.cpu:
        profile = dataclasses.replace(profile,
                                      device=dataclasses.replace(profile.device, cpu=config.cpu))
    return profile


#: What the harness's RecordingMicroAllocator adds to the recorded tail over an application's
#: plain MicroAllocator, which devicefit predicts: sizeof RecordingMicroAllocator 124 and
#: RecordingSingleArenaBufferAllocator 52 against MicroAllocator 36 and
#: SingleArenaBufferAllocator 36 (arm-none-eabi-g++ 12.2.1 -mcpu=cortex-m4, TFLM 90b983c2).
RECORDING_BYTES = (124 - 36) + (52 - 36)


@dataclass(frozen=True)
class Comparison:
    """One measured model against devicefit's static prediction for the build."""

    model: str
    build: str
    measured_head: int
    predicted_head: int
    min_arena: int
    #: What devicefit tells a user to give TFLM (the verdict's arena figure).
    predicted_start: int
    #: The recorded tail (RecordingMicroAllocator's) and devicefit's (a plain MicroAllocator).
    measured_tail: int | None = None
    predicted_tail: int | None = None
    #: What the measuring allocator adds to the recorded tail over the predicted one.
    recording_bytes: int = RECORDING_BYTES

    @property
    def head_exact(self) -> bool:
        return self.measured_head == self.predicted_head

    @property
    def over(self) -> int:
        """Predicted start arena − smallest working arena (negative: under, a failure)."""
        return self.predicted_start - self.min_arena

    @property
    def tail_over(self) -> int | None:
        """Predicted tail − the recorded one without the recording allocator's own bytes."""
        if self.measured_tail is None or self.predicted_tail is None:
            return None
        return self.predicted_tail - (self.measured_tail - self.recording_bytes)


def predict(model_bytes: bytes, profile: Any, name: str = "model.tflite") -> tuple[int, int, int]:
    """(head, start arena, tail) devicefit predicts for a model on a profile, statically."""
    import tempfile

    from devicefit.simulator.plan.planners import plan_memory
    from devicefit.simulator.read.reader import read_model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(model_bytes)
        plan = plan_memory(read_model(path), profile)
    return (plan.head_bytes, max(plan.arena_bytes, plan.arena_required_bytes),
            plan.tail_bytes)


def compare(record: Mapping[str, Any], load: Callable[[Mapping[str, Any]], bytes | None],
            profile: Any | None = None, recording_bytes: int = RECORDING_BYTES,
            ) -> tuple[list[Comparison], list[str]]:
    """Every measured model of ``record`` against the prediction; and the models left out
    (bytes not available here, or not matching the recorded sha256), each with why.

    ``load(entry)`` gives a recorded model's bytes or None; ``profile`` defaults to the
    build's (:func:`build_profile`); ``recording_bytes``: :attr:`Comparison.recording_bytes`.
    """
    build = record["build"]["name"]
    profile = profile or build_profile(build_config(build))
    out, skipped = [], []
    for entry in record["models"]:
        if entry.get("status") != "ok":
            continue
        data = load(entry)
        if data is None:
            skipped.append(f"{entry['name']}: not available here")
            continue
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            skipped.append(f"{entry['name']}: bytes differ from the recorded sha256")
            continue
        head, start, tail = predict(data, profile, entry["name"])
        out.append(Comparison(entry["name"], build, entry["head"], head,
                              entry["min_arena_mult16"], start, entry["tail"], tail,
                              recording_bytes))
    return out, skipped


def loader(models_dir: Path | None = None) -> Callable[[Mapping[str, Any]], bytes | None]:
    """``load`` for :func:`compare`: the recorded entry's source, via :class:`TruthModel`."""

    def load(entry: Mapping[str, Any]) -> bytes | None:
        return TruthModel(entry["name"], entry["source"]).load(models_dir)

    return load


@dataclass(frozen=True)
class Summary:
    models: int
    head_exact: int
    under: tuple[str, ...]
    median_over: float | None
    max_over: int | None
    #: The same for the tail (:attr:`Comparison.tail_over`), over the rows that have one.
    tail_under: tuple[str, ...] = ()
    median_tail_over: float | None = None
    max_tail_over: int | None = None


def summarize(comparisons: Iterable[Comparison]) -> Summary:
    rows = list(comparisons)
    overs = [c.over for c in rows]
    tails = [(c.model, c.tail_over) for c in rows if c.tail_over is not None]
    tail_overs = [t for _, t in tails]
    return Summary(len(rows), sum(c.head_exact for c in rows),
                   tuple(f"{c.model} ({c.over:+,} B)" for c in rows if c.over < 0),
                   statistics.median(overs) if overs else None, max(overs, default=None),
                   tuple(f"{m} ({t:+,} B)" for m, t in tails if t < 0),
                   statistics.median(tail_overs) if tail_overs else None,
                   max(tail_overs, default=None))



# --------------------------------------------------------------------------- the wheel
#: The host's recorded truth: the pinned ``tflite-micro`` wheel (reference kernels, 64-bit),
#: per model the smallest arena it starts in, found by bisection with the real runtime.
WHEEL_DATA = ROOT / "tests" / "data" / "tflm_wheel.json"
#: Models whose wheel truth is recorded: TFLM's own keyword benchmarks, seven SVDF each with
#: its variable state (int16 state; int8 in the ``_8bit`` one).
WHEEL_MODELS = tuple(_repo_model(TFLM_REPO, TFLM_COMMIT, f"tensorflow/lite/micro/models/{n}")
                     for n in ("keyword_scrambled.tflite", "keyword_scrambled_8bit.tflite"))


def wheel_version() -> str:
    from tflite_micro.python.tflite_micro import _version

    return str(_version.__version__)


def measure_wheel(path: Path, predicted: int) -> dict[str, Any]:
    """What the wheel says about one model: the RecordingMicroAllocator's head and tail at a
    big arena, the smallest arena it starts in (16-byte steps, then to the byte) and whether
    it invokes there. Each trial runs in a forked child (too small an arena can segfault)."""
    from benchmarks.bench_corpus import run_tflm, tflm_runs

    found = run_tflm(path, predicted)
    if not found.get("loads"):
        raise RuntimeError(f"{path.name}: the wheel does not load it: {found.get('error')}")
    lo, hi = found["smallest"] - 16, found["smallest"]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        (answer,) = tflm_runs([(str(path), mid)])
        lo, hi = (lo, mid) if answer["status"] == "ok" else (mid, hi)
    return {"head": found["head"], "tail": found["tail"], "total": found["total"],
            "min_arena_mult16": found["smallest"], "min_arena_bytes": hi,
            "invokes": found["invokes"]}


def record_wheel(models: Iterable[TruthModel] = WHEEL_MODELS) -> dict[str, Any]:
    """Measure ``models`` on the wheel: the record :data:`WHEEL_DATA` holds."""
    import tempfile

    from benchmarks.bench_corpus import tflm_wheel_profile

    profile = tflm_wheel_profile()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            data = m.load()
            if data is None:
                raise RuntimeError(f"{m.name}: not available here (needs {MIRRORS})")
            path = Path(tmp) / m.name
            path.write_bytes(data)
            _, start, _ = predict(data, profile, m.name)
            rows.append({"name": m.name, "source": m.source, "size": len(data),
                         "sha256": hashlib.sha256(data).hexdigest(), "status": "ok",
                         **measure_wheel(path, start)})
    return {"build": {"name": "tflite-micro-wheel", "wheel": wheel_version(),
                      "kernels": "reference", "pointer_bytes": 8,
                      "how_run": "python -m benchmarks.target_truth --wheel --record: "
                                 "tflite_micro.runtime.Interpreter, each trial forked"},
            "models": rows}


def compare_wheel(record: Mapping[str, Any]) -> tuple[list[Comparison], list[str]]:
    """The wheel's recorded models against devicefit's prediction for the wheel's setting
    (its tail holds the recording allocator, as devicefit's 64-bit tail does)."""
    from benchmarks.bench_corpus import tflm_wheel_profile

    return compare(record, loader(), tflm_wheel_profile(), recording_bytes=0)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from devicefit.simulator.infra.fileio import write_atomic

    ap = argparse.ArgumentParser(description="The wheel's recorded truth vs the prediction.")
    ap.add_argument("--wheel", action="store_true", required=True,
                    help="the pinned tflite-micro wheel (the 32-bit builds: "
                         "bench_target_builds.py)")
    ap.add_argument("--record", action="store_true",
                    help=f"measure again and write {WHEEL_DATA.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if args.record:
        try:
            record = record_wheel()
        except RuntimeError as exc:  # a model not here, or the wheel refusing it
            print(f"target_truth: {exc}", file=sys.stderr)
            return 2
        write_atomic(WHEEL_DATA, json.dumps(record, indent=1) + "\n")
    record = json.loads(WHEEL_DATA.read_text())
    rows, skipped = compare_wheel(record)
    print(f"wheel {record['build']['wheel']} (measured) vs devicefit (predicted)")
    print("| model | head measured / predicted | smallest arena (16 B steps / to the byte) "
          "| predicted start | over |")
    print("| --- | --- | --- | ---: | ---: |")
    exact = {m["name"]: m["min_arena_bytes"] for m in record["models"]}
    for c in rows:
        print(f"| {c.model} | {c.measured_head:,} / {c.predicted_head:,} | "
              f"{c.min_arena:,} / {exact[c.model]:,} | {c.predicted_start:,} | {c.over:+,} B |")
    for why in skipped:
        print(f"left out: {why}")
    return 1 if any(c.over < 0 for c in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
