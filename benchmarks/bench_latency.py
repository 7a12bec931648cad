"""Leave-one-board-out validation of the device-latency model on published latencies.

Builds the public MLPerf Tiny architectures (DS-CNN keyword spotting, ResNet-8 image
classification, MobileNetV1-0.25 visual wake words, FC auto-encoder), TFLM's person
detection model and the MicroNets of Banbury et al. (MLSys 2021, Table 5) with random
weights, converts them to int8 with the real TFLite converter
(the benchmark's only TensorFlow use; cached in tests/artifacts/mlperf_tiny/), and estimates
each on the (core, kernel library, runtime version, clock) of every published figure in
``simulator/estimate/latency_data/published.yaml`` with devicefit's own estimator
(:func:`simulator.estimate.latency.estimate_latency`). Latency depends on shapes, not weight values,
so random weights time like trained ones; ``--models DIR`` uses the submitters' own .tflite
files instead (``DIR/<key>.tflite`` for any model key of published.yaml, read locally, never
downloaded).

    .venv/bin/python benchmarks/bench_latency.py          # table + leave-one-board-out summary
    .venv/bin/python benchmarks/bench_latency.py --fit    # the fitted constants for kernels.yaml

The fit: bounded least squares on log(estimate / published) over every figure of a board
not marked ``fit: false``, for the cycles/MAC of each library's code paths (reference,
CMSIS-NN DSP and Helium, ESP-NN C and PIE, Andes NN), the cost of 1x1, depthwise, fully
connected and element-wise ops relative to k x k convolutions (and the library-specific ones
of LIBRARY_KINDS), the fixed per-op cost, the costs per output element and per output
channel, the old-TFLM factors, XNNPACK's float32 cost and the gamma of the libraries with
figures on two peaks of one path; weak priors decide what no remaining figure constrains
(a held-out board's only SIMD path, core peak or runtime version).
Leave-one-board-out refits without any figure of one board and predicts that board's
figures; its spread per library is the error band every estimate carries.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import inspect
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.estimate.cores import DATA_DIR  # noqa: E402
from devicefit.simulator.estimate.kernels import FITTED, KernelData, load_kernels  # noqa: E402
from devicefit.simulator.estimate.latency import estimate_latency  # noqa: E402
from devicefit.simulator.profile_types import CostModel, Profile  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.read.model import Model  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.report.report import OpCompute  # noqa: E402
from devicefit.simulator.simulate import static_report  # noqa: E402

CACHE_ROOT = ROOT / "tests" / "artifacts" / "mlperf_tiny"


# --------------------------------------------------------------------------- models
def _kws_dscnn(k):
    """MLPerf Tiny KWS: DS-CNN small (mlcommons/tiny benchmark/training/keyword_spotting)."""
    x = inp = k.Input((49, 10, 1), batch_size=1)
    x = k.layers.Conv2D(64, (10, 4), strides=2, padding="same")(x)
    x = k.layers.ReLU()(k.layers.BatchNormalization()(x))
    for _ in range(4):
        x = k.layers.DepthwiseConv2D(3, padding="same")(x)
        x = k.layers.ReLU()(k.layers.BatchNormalization()(x))
        x = k.layers.Conv2D(64, 1, padding="same")(x)
        x = k.layers.ReLU()(k.layers.BatchNormalization()(x))
    x = k.layers.AveragePooling2D((25, 5))(x)
    return k.Model(inp, k.layers.Dense(12, activation="softmax")(k.layers.Flatten()(x)))


def _ic_resnet8(k):
    """MLPerf Tiny IC: ResNet-8 for CIFAR-10 (benchmark/training/image_classification)."""
    def bn_relu(y):
        return k.layers.ReLU()(k.layers.BatchNormalization()(y))

    x = inp = k.Input((32, 32, 3), batch_size=1)
    x = bn_relu(k.layers.Conv2D(16, 3, padding="same")(x))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        y = bn_relu(k.layers.Conv2D(filters, 3, strides=stride, padding="same")(x))
        y = k.layers.BatchNormalization()(k.layers.Conv2D(filters, 3, padding="same")(y))
        if stride != 1:
            x = k.layers.Conv2D(filters, 1, strides=stride, padding="same")(x)
        x = k.layers.ReLU()(k.layers.Add()([x, y]))
    x = k.layers.AveragePooling2D(8)(x)
    return k.Model(inp, k.layers.Dense(10, activation="softmax")(k.layers.Flatten()(x)))


def _mobilenet_v1_025(k, channels: int):
    """MobileNetV1 α=0.25 at 96×96: MLPerf Tiny VWW (3 channels), TFLM person detection (1)."""
    def bn_relu(y):
        return k.layers.ReLU()(k.layers.BatchNormalization()(y))

    x = inp = k.Input((96, 96, channels), batch_size=1)
    x = bn_relu(k.layers.Conv2D(8, 3, strides=2, padding="same")(x))
    for filters, stride in ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1),
                            (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1)):
        x = bn_relu(k.layers.DepthwiseConv2D(3, strides=stride, padding="same")(x))
        x = bn_relu(k.layers.Conv2D(filters, 1, padding="same")(x))
    x = k.layers.AveragePooling2D(3)(x)
    return k.Model(inp, k.layers.Dense(2, activation="softmax")(k.layers.Flatten()(x)))


def _ad_autoencoder(k):
    """MLPerf Tiny AD: FC auto-encoder, 640 → 4×128 → 8 → 4×128 → 640."""
    x = inp = k.Input((640,), batch_size=1)
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = k.layers.ReLU()(k.layers.BatchNormalization()(k.layers.Dense(units)(x)))
    return k.Model(inp, k.layers.Dense(640)(x))


def _micronet(k, shape: tuple[int, int], first: tuple[int, int, int],
              blocks: tuple[tuple[int, int], ...], pool: tuple[int, int], classes: int):
    """A MicroNet (Banbury et al., MLSys 2021, Table 5): a k×k convolution with ``first`` =
    (kernel h, kernel w, filters) at stride 1, depthwise-separable blocks (3×3 depthwise at
    the block's stride, 1×1 to its filters; each followed by batch norm and ReLU), average
    pooling and the classifier."""
    def bn_relu(y):
        return k.layers.ReLU()(k.layers.BatchNormalization()(y))

    x = inp = k.Input((*shape, 1), batch_size=1)
    x = bn_relu(k.layers.Conv2D(first[2], first[:2], padding="same")(x))
    for filters, stride in blocks:
        x = bn_relu(k.layers.DepthwiseConv2D(3, strides=stride, padding="same")(x))
        x = bn_relu(k.layers.Conv2D(filters, 1, padding="same")(x))
    x = k.layers.AveragePooling2D(pool)(x)
    return k.Model(inp, k.layers.Dense(classes, activation="softmax")(k.layers.Flatten()(x)))


#: MicroNet-KWS-S/M/L and -AD-S/M on 49×10 MFCCs and 32×32 spectrograms (Table 5).
MICRONETS = {
    "micronet_kws_s": ((49, 10), (10, 4, 84),
                       ((112, 2), (84, 1), (84, 1), (84, 1), (196, 1)), (25, 5), 12),
    "micronet_kws_m": ((49, 10), (10, 4, 140),
                       ((140, 2), (140, 1), (140, 1), (112, 1), (196, 1)), (25, 5), 12),
    "micronet_kws_l": ((49, 10), (10, 4, 276),
                       ((248, 2), (276, 1), (276, 1), (248, 1), (248, 1), (248, 1), (248, 1)),
                       (25, 5), 12),
    "micronet_ad_s": ((32, 32), (3, 3, 72), ((164, 2), (220, 1), (276, 2), (276, 2)), (4, 4), 4),
    "micronet_ad_m": ((32, 32), (3, 3, 192),
                      ((276, 2), (276, 1), (276, 1), (276, 2), (276, 2)), (4, 4), 4),
}

BUILDERS = {
    **{name: (lambda k, spec=spec: _micronet(k, *spec)) for name, spec in MICRONETS.items()},
    "kws_dscnn": _kws_dscnn,
    "ic_resnet8": _ic_resnet8,
    "vww_mobilenet_v1_025": lambda k: _mobilenet_v1_025(k, 3),
    "person_detection": lambda k: _mobilenet_v1_025(k, 1),
    "ad_autoencoder": _ad_autoencoder,
    # XNNPACK's published float32 figures: Keras' MobileNet v1 / v2 (alpha 1.0, 224x224).
    "mobilenet_v1_f32": lambda k: k.applications.MobileNet(
        weights=None, input_tensor=k.Input((224, 224, 3), batch_size=1)),
    "mobilenet_v2_f32": lambda k: k.applications.MobileNetV2(
        weights=None, input_tensor=k.Input((224, 224, 3), batch_size=1)),
}
#: Converted without quantization (the rest are full-integer int8).
FLOAT_MODELS = ("mobilenet_v1_f32", "mobilenet_v2_f32")


def _cache() -> Path:
    """Cache folder keyed by the builders' source, so editing the rest reuses the models."""
    source = "".join(inspect.getsource(f) for f in (_kws_dscnn, _ic_resnet8, _mobilenet_v1_025,
                                                     _ad_autoencoder, _micronet)) + repr(MICRONETS)
    return CACHE_ROOT / hashlib.sha256(source.encode()).hexdigest()[:12]


def model_path(name: str) -> Path:
    """The int8 ``.tflite`` of ``name``, converted once with the real converter and cached."""
    cache = _cache()
    target = cache / f"{name}.tflite"
    if not target.exists():
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import keras

        from tests.zoo import convert_keras

        keras.utils.set_random_seed(0)
        data = convert_keras(BUILDERS[name](keras), quantize=name not in FLOAT_MODELS,
                             samples=16)
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    return target


#: published.yaml's model keys → the builders above.
MODEL_KEYS = {"kws": "kws_dscnn", "ic": "ic_resnet8", "vww": "vww_mobilenet_v1_025",
              "ad": "ad_autoencoder", "person_detection": "person_detection",
              "mobilenet_v1_f32": "mobilenet_v1_f32", "mobilenet_v2_f32": "mobilenet_v2_f32",
              **{name: name for name in MICRONETS}}


# --------------------------------------------------------------------------- published
@dataclass(frozen=True)
class Published:
    board: str
    cpu: str
    clock_hz: float
    runtime: str
    version: str | None
    kernels: str
    model: str
    ms: float
    source: str
    threads: int = 1
    #: False for a figure that validates but is never fitted (published.yaml ``fit: false``:
    #: its board differs in something the model has no term for; see ``why``).
    fit: bool = True


def published() -> list[Published]:
    data = yaml.safe_load((DATA_DIR / "published.yaml").read_text(encoding="utf-8"))
    return [Published(b["board"], b["cpu"], float(b["clock"]), b["runtime"], b.get("version"),
                      b["kernels"], model, float(ms), " ".join(b["source"].split()),
                      int(b.get("threads", 1)), bool(b.get("fit", True)))
            for b in data["boards"] for model, ms in b["ms"].items()]


MODELS_DIR: Path | None = None


def source_path(key: str) -> Path:
    """``--models DIR``'s file for ``key`` where it has one, else the built architecture."""
    given = MODELS_DIR / f"{key}.tflite" if MODELS_DIR else None
    return given if given is not None and given.is_file() else model_path(MODEL_KEYS[key])


@cache
def model_and_ops(key: str) -> tuple[Model, tuple[OpCompute, ...]]:
    model = read_model(source_path(key))
    return model, tuple(static_report(model, load_profile("stm32l4r5-cortex-m4")).compute.per_op)


@cache
def profile_for(row: Published) -> Profile:
    """A profile with the row's core, clock, library, version and threads (the phone
    profile's parallel efficiency) and no cost table of its own."""
    base = load_profile("stm32l4r5-cortex-m4")
    phone = load_profile("android-arm64-cpu").cost_model
    return dataclasses.replace(
        base, device=dataclasses.replace(base.device, cpu=row.cpu, clock_hz=row.clock_hz),
        runtime=dataclasses.replace(base.runtime, name=row.runtime, kernels=row.kernels,
                                    version=row.version, threads=row.threads),
        cost_model=CostModel(parallel_efficiency=phone.parallel_efficiency))


def estimate_ms(row: Published, data: KernelData | None = None) -> float:
    model, per_op = model_and_ops(row.model)
    total = estimate_latency(model, per_op, profile_for(row), data).total_ms
    assert total is not None, f"no estimate for {row}"
    return total


# --------------------------------------------------------------------------- fit
KIND_PARAMS = ("conv1x1", "depthwise", "fully_connected", "elementwise")
PATH_PARAMS = (("reference", "scalar"), ("cmsis-nn", "dsp"), ("cmsis-nn", "mve"),
               ("esp-nn", "scalar"), ("esp-nn", "pie"), ("andes-nn", "p-ext"))
LIBRARIES = ("reference", "cmsis-nn", "esp-nn", "andes-nn")
#: Every library with published figures (XNNPACK: float32 only, so only its float cost is fitted).
VALIDATED = (*LIBRARIES, "xnnpack")
#: Op-kind costs a library has of its own, fitted where its figures cover the kind: the
#: fully connected cost (memory-bound: each weight is used once) of the libraries with an
#: FC model (MLPerf's AD) among their figures, and CMSIS-NN's 1x1 convolution (its own
#: kernel without im2col, arm_convolve_1x1_s8_fast).
LIBRARY_KINDS = (("cmsis-nn", "fully_connected"), ("andes-nn", "fully_connected"),
                 ("cmsis-nn", "conv1x1"))
VERSION_KINDS = ("conv", "depthwise")
#: Libraries with figures on two cores of different peak on one path (CMSIS-NN's DSP path on
#: the single-issue M4/M33 and the dual-issue M7; Andes NN on the D25F and the dual-issue
#: D45), so how much of the wider core's peak their kernels reach can be fitted.
GAMMA_LIBRARIES = ("cmsis-nn", "andes-nn")
NAMES = (*(f"{lib}.{path}" for lib, path in PATH_PARAMS),
         *(f"kinds.{k}" for k in KIND_PARAMS), "op_overhead_cycles",
         *(f"tflm<2.5.{k}" for k in VERSION_KINDS), "cycles_per_output", "cycles_per_channel",
         *(f"{lib}.kinds.{kind}" for lib, kind in LIBRARY_KINDS), "xnnpack.dtypes.float32",
         *(f"{lib}.gamma" for lib in GAMMA_LIBRARIES))
N_PATHS = len(PATH_PARAMS)
#: Positions in the parameter vector (natural logs) after the paths.
I_KINDS, I_OVERHEAD, I_VERSION, I_OUTPUT, I_CHANNEL, I_FC = (
    N_PATHS, N_PATHS + 4, N_PATHS + 5, N_PATHS + 7, N_PATHS + 8, N_PATHS + 9)
I_XNNPACK = len(NAMES) - 1 - len(GAMMA_LIBRARIES)
I_GAMMA = I_XNNPACK + 1


def _current() -> dict:
    """The kernel tables without the previous fit's numbers (the fit must not see them)."""
    return yaml.safe_load((DATA_DIR / "kernels.yaml").read_text(encoding="utf-8"))


def apply(x: np.ndarray, base: dict | None = None) -> dict:
    """kernels.yaml's mapping with the parameter vector ``x`` (natural logs) in it."""
    import copy

    d = copy.deepcopy(base or _current())
    for i, (lib, path) in enumerate(PATH_PARAMS):
        d["libraries"][lib]["paths"][path]["cycles_per_mac"] = float(np.exp(x[i]))
    for i, k in enumerate(KIND_PARAMS):
        d["kinds"][k] = float(np.exp(x[I_KINDS + i]))
    rule = next(v for v in d["versions"] if v["library"] == "cmsis-nn")
    conv, dw = (float(np.exp(v)) for v in x[I_VERSION:I_VERSION + 2])
    rule["kinds"] = {"conv": conv, "conv1x1": conv, "depthwise": dw,
                     "fully_connected": conv, "elementwise": conv}
    for lib in LIBRARIES:
        d["libraries"][lib]["op_overhead_cycles"] = float(np.exp(x[I_OVERHEAD]))
        d["libraries"][lib]["cycles_per_output"] = float(np.exp(x[I_OUTPUT]))
        d["libraries"][lib]["cycles_per_channel"] = float(np.exp(x[I_CHANNEL]))
    for i, (lib, kind) in enumerate(LIBRARY_KINDS):
        d["libraries"][lib].setdefault("kinds", {})[kind] = float(np.exp(x[I_FC + i]))
    d["libraries"]["xnnpack"]["dtypes"]["float32"] = float(np.exp(x[I_XNNPACK]))
    for i, lib in enumerate(GAMMA_LIBRARIES):
        d["libraries"][lib]["gamma"] = float(np.exp(x[I_GAMMA + i]))
    return d


#: Start values; the priors below only decide parameters no remaining figure constrains
#: (a held-out board's only SIMD path or runtime version).
X0 = np.array([np.log(60), np.log(4), np.log(1), np.log(10), np.log(2), np.log(2),
               0, 0, 0, 0, np.log(3000), 0, 0, np.log(20), np.log(50),
               *np.zeros(len(LIBRARY_KINDS)), np.log(3.1),
               *np.full(len(GAMMA_LIBRARIES), np.log(0.5))])
PRIOR_WEIGHT = 0.2

def priors(x: np.ndarray, base: dict) -> np.ndarray:
    """Weak pulls: op kinds and version factors toward 1, overhead toward 3000 cycles, gamma
    toward 0.5, and a SIMD path toward its library's other path scaled by the ratio of their
    peak MACs/cycle."""
    libs = base["libraries"]

    def peak(lib: str, path: str) -> float:
        return float(libs[lib]["paths"][path]["peak"])

    mve = x[2] - (x[1] - np.log(peak("cmsis-nn", "mve") / peak("cmsis-nn", "dsp")))
    pie = x[4] - (x[3] - np.log(peak("esp-nn", "pie") / peak("esp-nn", "scalar")))
    # Andes NN's P-extension path: toward ESP-NN's C path (the other RISC-V library) scaled
    # by SMAQA's four MACs per cycle.
    pext = x[5] - (x[3] - np.log(peak("andes-nn", "p-ext") / peak("esp-nn", "scalar")))
    # The per-channel cost has no prior: every board's figures constrain it.
    return PRIOR_WEIGHT * np.array([mve, pie, pext, *x[I_KINDS:I_KINDS + 4],
                                    x[I_OVERHEAD] - np.log(3000),
                                    *x[I_VERSION:I_VERSION + 2],
                                    x[I_OUTPUT] - np.log(20), *x[I_FC:I_XNNPACK],
                                    x[I_XNNPACK] - np.log(3.1),
                                    *(x[I_GAMMA:] - np.log(0.5))])


def fit(rows: list[Published]) -> np.ndarray:
    from scipy.optimize import least_squares

    base = _current()

    def residuals(x: np.ndarray) -> np.ndarray:
        data = load_kernels(apply(x, base))
        errs = [np.log(estimate_ms(r, data) / r.ms) for r in rows]
        return np.array([*errs, *priors(x, base)])

    bound = np.full(len(X0), 12.0)
    return least_squares(residuals, X0, bounds=(-bound, bound)).x


def leave_one_board_out(rows: list[Published]) -> dict[Published, float]:
    """Each row's estimate from constants fitted without any figure of its board."""
    out: dict[Published, float] = {}
    for board in sorted({r.board for r in rows}):
        data = load_kernels(apply(fit([r for r in rows if r.board != board and r.fit])))
        for r in rows:
            if r.board == board:
                out[r] = estimate_ms(r, data)
    return out


BAND_QUANTILES = (0.1, 0.9)
#: A library with fewer validated figures takes the band of all figures pooled.
BAND_MIN_FIGURES = 8


def bands(rows: list[Published], loo: dict[Published, float]) -> dict[str, tuple[float, float]]:
    """Per library: the 10th and 90th percentiles of published / leave-one-board-out estimate
    (an 80 % "likely" range), widened to include 1."""
    pooled = [r.ms / loo[r] for r in rows]
    out = {}
    for lib in VALIDATED:
        ratios = [r.ms / loo[r] for r in rows if r.kernels == lib]
        use = ratios if len(ratios) >= BAND_MIN_FIGURES else pooled
        low, high = np.quantile(use, BAND_QUANTILES)
        out[lib] = (round(min(float(low), 1.0), 2), round(max(float(high), 1.0), 2))
    return out


def fitted_tables(x: np.ndarray, band: dict[str, tuple[float, float]]) -> dict:
    """The part of the tables the fit decides, as kernels_fitted.yaml holds it."""
    d = apply(x)
    libs = {}
    for lib in LIBRARIES:
        src = d["libraries"][lib]
        libs[lib] = {"paths": {p: {"cycles_per_mac": round(v["cycles_per_mac"], 4)}
                               for p, v in src["paths"].items()
                               if (lib, p) in PATH_PARAMS},
                     "op_overhead_cycles": round(src["op_overhead_cycles"]),
                     "cycles_per_output": round(src["cycles_per_output"], 2),
                     "cycles_per_channel": round(src["cycles_per_channel"], 1),
                     "band": list(band[lib])}
        if lib in GAMMA_LIBRARIES:
            libs[lib]["gamma"] = round(src["gamma"], 4)
        if src.get("kinds"):
            libs[lib]["kinds"] = {k: round(v, 4) for k, v in src["kinds"].items()}
    libs["xnnpack"] = {"dtypes": {"float32": round(d["libraries"]["xnnpack"]["dtypes"]["float32"], 4)},
                       "band": list(band["xnnpack"]), "calibrated": ["float32"]}
    return {"kinds": {k: round(d["kinds"][k], 4) for k in KIND_PARAMS},
            "libraries": libs,
            "versions": [{**v, "kinds": {k: round(f, 4) for k, f in v["kinds"].items()}}
                         if v.get("kinds") else v for v in d["versions"]]}


def write_fitted(tables: dict, summary_line: str) -> None:
    from devicefit.simulator.infra.fileio import write_atomic

    header = ("# Written by `benchmarks/bench_latency.py --fit --write`: the kernel-table numbers\n"
              "# fitted on every figure of published.yaml not marked `fit: false` (merged over\n"
              "# kernels.yaml). Do not edit by hand; change the data or the model and refit.\n"
              f"# Validation of this model: {summary_line}\n")
    write_atomic(FITTED, header + yaml.safe_dump(tables, sort_keys=False))


# --------------------------------------------------------------------------- report
def table(rows: list[Published], loo: dict[Published, float]) -> str:
    lines = ["| board | core | clock | kernels | version | model | MACs | published ms | "
             "estimated ms (shipped tables) | est. / published | leave-one-board-out ms | "
             "LOBO / published |",
             "|---|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        model, per_op = model_and_ops(r.model)
        macs = sum(c.macs for c in per_op)
        est = estimate_ms(r)
        board = r.board if r.fit else f"{r.board} (not fitted)"
        lines.append(f"| {board} | {r.cpu} | {r.clock_hz / 1e6:g} MHz | {r.kernels} | "
                     f"{r.version or 'current'} | {r.model} | {macs:,} | {r.ms:g} | {est:.3g} | "
                     f"{est / r.ms:.2f} | {loo[r]:.3g} | {loo[r] / r.ms:.2f} |")
    return "\n".join(lines)


def summaries(rows: list[Published], loo: dict[Published, float]) -> list[str]:
    """The summary over every figure, over the microcontroller (TFLM) ones, and over the
    TFLM figures of boards the fit may use (without the validation-only ones)."""
    tflm = [r for r in rows if r.runtime == "tflm"]
    return [f"all figures: {summary(rows, loo)}", f"TFLM figures: {summary(tflm, loo)}",
            f"TFLM figures of fitted boards: {summary([r for r in tflm if r.fit], loo)}"]


def summary(rows: list[Published], loo: dict[Published, float]) -> str:
    errors = [abs(loo[r] / r.ms - 1) for r in rows]
    within = sum(1 for r in rows if 0.5 <= loo[r] / r.ms <= 2.0)
    families = {profile_family(r.cpu) for r in rows}
    return (f"leave-one-board-out: {len(rows)} (board, model) pairs on "
            f"{len({r.board for r in rows})} boards of {len(families)} core families "
            f"({', '.join(sorted(families))}); median |estimate/published - 1| = "
            f"{statistics.median(errors):.1%}; within 2x: {within}/{len(rows)}; "
            f"reference-kernel pairs: {sum(1 for r in rows if r.kernels == 'reference')}")


def profile_family(cpu: str) -> str:
    from devicefit.simulator.estimate.cores import find_core

    return find_core(cpu).family


def main(argv: list[str] | None = None) -> int:
    global MODELS_DIR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true",
                        help="print the constants fitted on every figure, and the bands")
    parser.add_argument("--write", action="store_true",
                        help=f"with --fit: write the fitted numbers to {FITTED.name}")
    parser.add_argument("--models", type=Path, metavar="DIR",
                        help="local .tflite files to use instead of the built architectures")
    args = parser.parse_args(argv)
    MODELS_DIR = args.models
    rows = published()
    loo = leave_one_board_out(rows)
    if args.fit:
        x = fit([r for r in rows if r.fit])
        for name, value in zip(NAMES, x, strict=True):
            print(f"{name}: {float(np.exp(value)):.4g}")
        for lib, band in bands(rows, loo).items():
            print(f"band.{lib}: [{band[0]}, {band[1]}]")
        if args.write:
            write_fitted(fitted_tables(x, bands(rows, loo)), "; ".join(summaries(rows, loo)))
            print(f"wrote {FITTED}")
        return 0
    print(table(rows, loo))
    print()
    for key in sorted({r.model for r in rows}):
        path = source_path(key)
        print(f"model {key}: {path.name}, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}, "
              f"{sum(c.macs for c in model_and_ops(key)[1]):,} MACs")
    print("\n".join(summaries(rows, loo)))
    for lib, band in bands(rows, loo).items():
        print(f"band {lib}: published / estimate in [{band[0]}, {band[1]}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
