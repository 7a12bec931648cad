"""Phone GPU latency: devicefit's estimate vs the published times of LiteRT's GPU delegate.

The figures (``simulator/targets/gpu/published.yaml``, each with its table) are TensorFlow
Lite's own: its "Performance benchmarks for well known models" (``benchmark_model
--use_gpu=true`` on a Pixel 3 and a Pixel 4, Adreno 630/640, Android 10; the iOS benchmark app
with the GPU delegate on an iPhone XS, Apple A12 GPU, Metal; four float32 models), its pose
estimation page (PoseNet on the same three phones) and tensorflow/tpu's EfficientNet-lite
README (lite0-4, Pixel 4, fp16), plus one Mali figure (a Galaxy S8, listed, not fitted: a
class needs ``MIN_FIGURES``) and three more Adreno phones timed by an app on the delegate's
2019 preview (glDelegateBench: Pixel 2, Xiaomi Mi 9, Pixel 3a; ``speed: own``: predicted with
the class's constants times a speed factor of the phone's own, from its other figure). Their
architectures are built here in code with random weights — MobileNet v1 (Keras, the file
``bench_latency`` also uses), SqueezeNet 1.0, Inception v4, PoseNet's MobileNet v1 bodies and
EfficientNet-lite as their papers and READMEs lay them out, Inception-ResNet v2 from Keras —
converted float32 with the real converter (cached), and partitioned by devicefit's GPU rules.
Latency depends on shapes, not on weight values.

    .venv/bin/python benchmarks/bench_gpu_latency.py          # the leave-one-out table
    .venv/bin/python benchmarks/bench_gpu_latency.py --fit    # each phone's fitted constants

The estimate (:mod:`devicefit.simulator.targets.gpu.latency`) is linear in its constants
once the partition is known, so ``--fit`` solves a non-negative least-squares problem on
the relative error of a phone's figures (each model weighs the same, 6 ms or 100 ms).
The leave-one-out column refits that phone's class without the row and predicts it; for a
``speed: own`` phone it keeps the class's constants and takes the speed factor from the
phone's other figures only.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import math
import os
import statistics
import sys
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.infra.fileio import write_atomic  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.targets.gpu.latency import (  # noqa: E402
    GpuCost,
    GpuFeatures,
    Phone,
    gpu_features,
    load_published,
    predict_ms,
)
from devicefit.simulator.targets.gpu.partition import partition  # noqa: E402

PROFILE = "android-gpu-adreno"
CACHE_ROOT = ROOT / "tests" / "artifacts" / "gpu_bench"


# --------------------------------------------------------------------------- models
def _conv(k, x, filters, size, strides=1, padding="same"):
    """A convolution with its batch norm folded and ReLU, as the converter writes it."""
    return k.layers.Conv2D(filters, size, strides=strides, padding=padding,
                           activation="relu")(x)


def _squeezenet_1_0(k):
    """SqueezeNet 1.0 (Iandola et al. 2016, Table 1): 7x7/2 conv of 96, fire modules
    (squeeze 1x1, expand 1x1 and 3x3 concatenated), 1x1 classifier conv, global pooling.
    1.0, not 1.1: the page's CPU times of it are 1.5x MobileNet v1's on both Pixels, the
    ratio of 1.0's MACs (1.1 has 2.4x fewer)."""
    def fire(x, squeeze, expand):
        s = _conv(k, x, squeeze, 1)
        return k.layers.Concatenate()([_conv(k, s, expand, 1), _conv(k, s, expand, 3)])

    pool = k.layers.MaxPooling2D(3, 2)
    x = inp = k.Input((224, 224, 3), batch_size=1)
    x = pool(_conv(k, x, 96, 7, 2, "valid"))
    x = fire(fire(fire(x, 16, 64), 16, 64), 32, 128)
    x = k.layers.MaxPooling2D(3, 2)(x)
    x = fire(fire(fire(fire(x, 32, 128), 48, 192), 48, 192), 64, 256)
    x = fire(k.layers.MaxPooling2D(3, 2)(x), 64, 256)
    x = k.layers.GlobalAveragePooling2D()(_conv(k, x, 1001, 1))
    return k.Model(inp, k.layers.Softmax()(x))


def _inception_v4(k):
    """Inception v4 (Szegedy et al. 2016, Figures 3-9; TF-slim's ``inception_v4``), 299x299,
    batch norm folded into the convolutions."""
    L = k.layers

    def c(x, f, size, s=1, p="same"):
        return _conv(k, x, f, size, s, p)

    def chain(x, *layers):
        for f, size in layers:
            x = c(x, f, size)
        return x

    def avg(x, f):
        return c(L.AveragePooling2D(3, 1, padding="same")(x), f, 1)

    cat = L.Concatenate
    x = inp = k.Input((299, 299, 3), batch_size=1)
    x = c(c(c(x, 32, 3, 2, "valid"), 32, 3, 1, "valid"), 64, 3)
    x = cat()([L.MaxPooling2D(3, 2)(x), c(x, 96, 3, 2, "valid")])
    x = cat()([c(c(x, 64, 1), 96, 3, 1, "valid"),
               c(chain(x, (64, 1), (64, (1, 7)), (64, (7, 1))), 96, 3, 1, "valid")])
    x = cat()([c(x, 192, 3, 2, "valid"), L.MaxPooling2D(3, 2)(x)])
    for _ in range(4):
        x = cat()([c(x, 96, 1), chain(x, (64, 1), (96, 3)),
                   chain(x, (64, 1), (96, 3), (96, 3)), avg(x, 96)])
    x = cat()([c(x, 384, 3, 2, "valid"),
               c(chain(x, (192, 1), (224, 3)), 256, 3, 2, "valid"), L.MaxPooling2D(3, 2)(x)])
    for _ in range(7):
        x = cat()([c(x, 384, 1), chain(x, (192, 1), (224, (1, 7)), (256, (7, 1))),
                   chain(x, (192, 1), (192, (7, 1)), (224, (1, 7)), (224, (7, 1)),
                         (256, (1, 7))), avg(x, 128)])
    x = cat()([c(c(x, 192, 1), 192, 3, 2, "valid"),
               c(chain(x, (256, 1), (256, (1, 7)), (320, (7, 1))), 320, 3, 2, "valid"),
               L.MaxPooling2D(3, 2)(x)])
    for _ in range(3):
        b1 = c(x, 384, 1)
        b2 = chain(x, (384, 1), (448, (3, 1)), (512, (1, 3)))
        x = cat()([c(x, 256, 1), c(b1, 256, (1, 3)), c(b1, 256, (3, 1)),
                   c(b2, 256, (1, 3)), c(b2, 256, (3, 1)), avg(x, 256)])
    x = L.GlobalAveragePooling2D()(x)
    return k.Model(inp, L.Dense(1001, activation="softmax")(x))


def _posenet(k, alpha: float, size: tuple[int, int], output_stride: int):
    """PoseNet's multi-person model: MobileNet v1's convolution body (Howard et al. 2017,
    Table 1: a 3x3/2 conv of 32, then 13 depthwise-separable blocks) with its channels times
    ``alpha``, stopped striding at ``output_stride`` (the later strided blocks dilated
    instead, as PoseNet's own MobileNet does), and four 1x1 heads: 17 keypoint heatmaps, 34
    offsets, 32 forward and 32 backward displacements.
    ``posenet_mobilenet_v1_100_257x257_multi_kpt_stripped``: 1.0 at 257x257, stride 32 (its
    9x9 outputs); the delegate preview's ``multi_person_mobilenet_v1_075_float``: 0.75 at
    353x257 (its 1,088,652-byte float input), stride 16."""
    L = k.layers
    x = inp = k.Input((*size, 3), batch_size=1)
    x = L.Conv2D(int(32 * alpha), 3, strides=2, padding="same", activation="relu6")(x)
    stride, rate = 2, 1
    for filters, step in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                          *[(512, 1)] * 5, (1024, 2), (1024, 1)):
        # tfjs-models' posenet ``toOutputStridedLayers``: at the output stride a block keeps
        # the rate so far and the blocks after it dilate by its stride instead.
        layer_rate = 1
        if stride == output_stride:
            layer_rate, rate, step = rate, rate * step, 1
        stride *= step
        x = L.DepthwiseConv2D(3, strides=step, dilation_rate=layer_rate, padding="same",
                              activation="relu6")(x)
        x = L.Conv2D(int(filters * alpha), 1, activation="relu6")(x)
    return k.Model(inp, [L.Conv2D(n, 1)(x) for n in (17, 34, 32, 32)])


#: EfficientNet-lite's (width, depth, resolution) per variant (tensorflow/tpu,
#: ``efficientnet_lite_builder.efficientnet_lite_params``).
LITE = {0: (1.0, 1.0, 224), 1: (1.0, 1.1, 240), 2: (1.1, 1.2, 260), 3: (1.2, 1.4, 280),
        4: (1.4, 1.8, 300)}


def _efficientnet_lite(k, scaling: tuple[float, float, int]):
    """EfficientNet-lite (tensorflow/tpu ``efficientnet/lite``): B0's MBConv stages (Tan and
    Le 2019, Table 1) without squeeze-and-excite, ReLU6 for swish, batch norm folded; scaled
    by ``scaling`` (width, depth, resolution) except the stem (32), the head (1280) and the
    first and last stages' repeats, which lite keeps fixed."""
    import math

    L = k.layers
    width, depth, size = scaling

    def filters(f: int) -> int:
        scaled = max(8, int(f * width + 4) // 8 * 8)
        return scaled + 8 if scaled < 0.9 * f * width else scaled

    x = inp = k.Input((size, size, 3), batch_size=1)
    x = L.Conv2D(32, 3, strides=2, padding="same", activation="relu6")(x)
    stages = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
    for i, (expand, kernel, stride, out, repeats) in enumerate(stages):
        fixed = i in (0, len(stages) - 1)
        for r in range(repeats if fixed else math.ceil(depth * repeats)):
            inner = x
            if expand != 1:
                inner = L.Conv2D(x.shape[-1] * expand, 1, activation="relu6")(inner)
            inner = L.DepthwiseConv2D(kernel, strides=stride if r == 0 else 1, padding="same",
                                      activation="relu6")(inner)
            inner = L.Conv2D(filters(out), 1)(inner)
            x = L.Add()([x, inner]) if r > 0 or (stride == 1 and
                                                 x.shape[-1] == filters(out)) else inner
    x = L.GlobalAveragePooling2D()(L.Conv2D(1280, 1, activation="relu6")(x))
    return k.Model(inp, L.Dense(1000, activation="softmax")(x))


def _inception_resnet_v2(k):
    return k.applications.InceptionResNetV2(
        weights=None, input_tensor=k.Input((299, 299, 3), batch_size=1))


BUILDERS = {
    "squeezenet": _squeezenet_1_0,
    "inception_v4": _inception_v4,
    "inception_resnet_v2": _inception_resnet_v2,
    "posenet": partial(_posenet, alpha=1.0, size=(257, 257), output_stride=32),
    "posenet_075": partial(_posenet, alpha=0.75, size=(353, 257), output_stride=16),
    **{f"efficientnet_lite{v}": partial(_efficientnet_lite, scaling=LITE[v]) for v in LITE},
}


def model_path(name: str) -> Path:
    """``name`` as a float32 ``.tflite``, converted once and cached (keyed by its builder's
    source). MobileNet v1 is ``bench_latency``'s file of the same architecture."""
    if name == "mobilenet_v1":
        from benchmarks.bench_latency import model_path as tiny_model

        return tiny_model("mobilenet_v1_f32")
    builder = BUILDERS[name]
    # A partial's source is its function's, and its arguments tell the variants apart.
    source = inspect.getsource(getattr(builder, "func", builder)) + inspect.getsource(_conv)
    if isinstance(builder, partial):
        source += repr(builder.keywords)
    target = CACHE_ROOT / f"{name}-{hashlib.sha256(source.encode()).hexdigest()[:12]}.tflite"
    if target.exists():
        return target
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    from tests.zoo import convert_keras

    keras.utils.set_random_seed(0)
    return write_atomic(target, convert_keras(builder(keras), quantize=False))


# --------------------------------------------------------------------------- fit
def fit(rows: list[tuple[GpuFeatures, float]]) -> GpuCost:
    """Non-negative least squares on relative error (each figure counts the same) of
    ``published − CPU ms − boundary copy = sync × crossings + op_dispatch × ops
    + MACs / rate + GPU bytes / bandwidth`` over ``rows`` (features, published ms)."""
    from scipy.optimize import nnls

    a = np.array([[f.crossings, f.gpu_ops, f.gpu_macs / 1e9, f.gpu_bytes / 1e9]
                  for f, _ in rows])
    published = np.array([ms for _, ms in rows])
    # The boundary copy's rate is the profile's (cited there): every figure crosses the same
    # two boundaries of 0.6-1.1 MB, so they cannot fit it.
    transfer = load_profile(PROFILE).target_settings.cost.transfer_bytes_per_second
    known = np.array([(f.cpu_ms or 0.0) + 1e3 * f.boundary_bytes / transfer for f, _ in rows])
    x, _ = nnls(a / published[:, None], (published - known) / published)
    sync, dispatch, ms_per_gmac, ms_per_gb = (float(v) for v in x)
    # A term the fit gave no weight is left out (None), as a profile leaves it unset.
    return GpuCost(sync_ms=sync, op_ms=dispatch,
                   macs_per_second=1e12 / ms_per_gmac if ms_per_gmac else None,
                   memory_bytes_per_second=1e12 / ms_per_gb if ms_per_gb else None,
                   transfer_bytes_per_second=transfer)


# --------------------------------------------------------------------------- the table
@cache
def features(name: str) -> GpuFeatures:
    profile = load_profile(PROFILE)
    model = read_model(model_path(name))
    return gpu_features(model, partition(model, profile), profile)


@dataclass(frozen=True)
class Figure:
    phone: Phone
    model: str
    ms: float


def classes(phones: list[Phone]) -> dict[str, list[Figure]]:
    """Each class's figures: the phones of a class share one set of constants."""
    out: dict[str, list[Figure]] = {}
    for p in phones:
        out.setdefault(p.gpu_class, []).extend(Figure(p, m, ms) for m, ms in p.ms.items())
    return out


def fitted(figures: list[Figure]) -> list[Figure]:
    """The figures a class is fitted to: its phones' that are not ``speed: own``."""
    return [f for f in figures if not f.phone.own_speed]


def class_fit(figures: list[Figure]) -> GpuCost:
    """The constants of the figures' class."""
    return fit([(features(f.model), f.ms) for f in fitted(figures)])


def own_speed_estimates(published: list[float], base: list[float]) -> list[float]:
    """A ``speed: own`` phone's figures, each estimated as ``base`` (the class's constants)
    times the phone's speed factor: the geometric mean of published / base over the phone's
    *other* figures, so a figure never sets its own factor."""
    logs = [math.log(p / b) for p, b in zip(published, base)]
    return [b * math.exp(statistics.fmean(logs[:i] + logs[i + 1:]))
            for i, b in enumerate(base)]


def speed_factor(published: list[float], base: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(p / b) for p, b in zip(published, base)))


def leave_one_out(figures: list[Figure]) -> list[float]:
    """Each figure's estimate from the constants fitted to the rest of its class (all of
    them fitted phones')."""
    return [predict_ms(features(f.model), class_fit([g for g in figures if g is not f]))
            for f in figures]


#: A ``speed: own`` phone needs a figure besides the one left out to set its speed factor.
MIN_OWN_SPEED_FIGURES = 2


def held_out_coverage(figures: list[Figure]) -> int:
    """How many figures fall inside the band made without them: the band (published / LOO
    estimate, lowest to highest) of the other figures, each left out of a fit that also
    leaves this one out, around this one's own leave-one-out estimate."""
    inside = 0
    for f in figures:
        rest = [g for g in figures if g is not f]
        ratios = [g.ms / e for g, e in zip(rest, leave_one_out(rest))]
        estimate = predict_ms(features(f.model), class_fit(rest))
        inside += min(ratios) <= f.ms / estimate <= max(ratios)
    return inside


#: Fewer figures than this leave a class unfitted: a leave-one-out fit then rests on one or
#: two figures for up to four constants.
MIN_FIGURES = 3


def _errors(pairs: list[tuple[Figure, float]]) -> list[float]:
    return [max(e / f.ms, f.ms / e) for f, e in pairs]


def _summary(label: str, pairs: list[tuple[Figure, float]]) -> str:
    errors = _errors(pairs)
    return (f"- {label}: {len(errors)} figures on {len({f.phone.phone for f, _ in pairs})} "
            f"phone(s); leave-one-out error median {statistics.median(errors):.2f}x, worst "
            f"{max(errors):.2f}x, {sum(e <= 2 for e in errors)}/{len(errors)} within 2x")


def _row(name: str, f: Figure, fitted: float, est: float) -> str:
    x = features(f.model)
    return (f"| {name} | {f.phone.phone} ({f.phone.gpu}) | {f.model} | {x.gpu_ops} "
            f"| {x.gpu_macs / 1e9:.2f} | {x.gpu_bytes / 1e6:.0f} | {f.ms:g} | "
            f"{fitted:.1f} | {fitted / f.ms:.2f} | {est:.1f} | {est / f.ms:.2f} |")


def table(phones: list[Phone]) -> str:
    lines = ["| class | phone (GPU) | model | GPU ops | GPU GMACs | GPU MB moved | "
             "published ms | fitted ms | fitted / published | leave-one-out ms | "
             "leave-one-out / published |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    summary = []
    every: list[tuple[Figure, float]] = []
    for name, figures in classes(phones).items():
        fit_on = fitted(figures)
        if len(fit_on) < MIN_FIGURES:
            # Listed, not fitted; what the built-in profile's constants say of it.
            cost = load_profile(PROFILE).target_settings.cost
            for f in figures:
                x = features(f.model)
                lines.append(f"| {name} | {f.phone.phone} ({f.phone.gpu}) | {f.model} | "
                             f"{x.gpu_ops} | {x.gpu_macs / 1e9:.2f} | {x.gpu_bytes / 1e6:.0f} | "
                             f"{f.ms:g} | not fitted | | | |")
                summary.append(f"- {name}: {len(figures)} figure(s), not fitted (a fit needs "
                               f"{MIN_FIGURES}); {PROFILE}'s constants would give "
                               f"{f.model} {predict_ms(x, cost):.1f} ms, published / that "
                               f"{f.ms / predict_ms(x, cost):.2f}")
            continue
        whole = class_fit(figures)
        loo = leave_one_out(fit_on)
        for f, est in zip(fit_on, loo):
            lines.append(_row(name, f, predict_ms(features(f.model), whole), est))
        pairs = list(zip(fit_on, loo))
        every += pairs
        band = (min(f.ms / e for f, e in pairs), max(f.ms / e for f, e in pairs))
        summary.append(f"{_summary(name, pairs)}; published / estimate {band[0]:.2f}-"
                       f"{band[1]:.2f} (the band); held out of its band: "
                       f"{held_out_coverage(fit_on)}/{len(fit_on)} inside")
        own_pairs: list[tuple[Figure, float]] = []
        factors = []
        for phone in dict.fromkeys(f.phone.phone for f in figures if f.phone.own_speed):
            mine = [f for f in figures if f.phone.phone == phone]
            if len(mine) < MIN_OWN_SPEED_FIGURES:
                raise SystemExit(f"{phone} (speed: own) has {len(mine)} figure(s): its speed "
                                 f"factor needs {MIN_OWN_SPEED_FIGURES}, one left out")
            published = [f.ms for f in mine]
            base = [predict_ms(features(f.model), whole) for f in mine]
            factor = speed_factor(published, base)
            factors.append(f"{phone} {factor:.2f}")
            for f, b, est in zip(mine, base, own_speed_estimates(published, base)):
                lines.append(_row(name, f, b * factor, est))
                own_pairs.append((f, est))
        if not own_pairs:
            continue
        every += own_pairs
        inside = sum(band[0] <= f.ms / e <= band[1] for f, e in own_pairs)
        summary.append(f"{_summary(name + ', speed: own phones', own_pairs)}; their speed "
                       f"factors (published / the class's estimate): {', '.join(factors)}; "
                       f"inside the class's band: {inside}/{len(own_pairs)}")
    summary.append(_summary("all predicted figures", every))
    summary.append(_summary("Android figures (the profiles' phones)",
                            [(f, e) for f, e in every if f.phone.os.startswith("Android")]))
    return "\n".join([*lines, "", *summary])


def constants(cost: GpuCost) -> str:
    """The profile's ``gpu`` keys; a rate the fit gave no weight is "unset"."""
    def rate(v: float | None, unit: float, fmt: str) -> str:
        return "unset" if v is None else format(v / unit, fmt)

    return (f"sync: {cost.sync_ms * 1e3:.0f}us  op_dispatch: {cost.op_ms * 1e3:.1f}us  "
            f"macs_per_second: {rate(cost.macs_per_second, 1, '.3g')}  "
            f"memory_bandwidth: {rate(cost.memory_bytes_per_second, 1e6, '.0f')} (MB/s)  "
            f"transfer_bandwidth: {rate(cost.transfer_bytes_per_second, 1e6, '.0f')} (MB/s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true",
                        help="print each phone's constants fitted to all its figures")
    parser.add_argument("--build", action="store_true", help="only convert (and cache) models")
    args = parser.parse_args(argv)
    phones = load_published()
    if args.build:
        for name in sorted({m for p in phones for m in p.ms}):
            print(name, model_path(name), flush=True)
        return 0
    if args.fit:
        for name, figures in classes(phones).items():
            if len(fitted(figures)) >= MIN_FIGURES:
                print(f"{name}: {constants(class_fit(figures))}")
        print(f"{PROFILE} sets {constants(load_profile(PROFILE).target_settings.cost)}")
        return 0
    print(table(phones))
    return 0


if __name__ == "__main__":
    sys.exit(main())
