"""Estimated vs published on-board latency: how far is devicefit's device estimate off?

Builds the public MLPerf Tiny architectures (DS-CNN keyword spotting, ResNet-8 image
classification, MobileNetV1-0.25 visual wake words, FC auto-encoder) and TFLM's person
detection model with random weights, converts them to int8 with the real TFLite converter
(the benchmark's only TensorFlow use; cached), estimates each one's latency with devicefit's
cost model for a built-in profile, and compares with latencies published for real boards.
Latency depends on shapes, not weight values, so random weights time like trained ones.

    .venv/bin/python benchmarks/bench_latency.py            # ratio table (Markdown)
    .venv/bin/python benchmarks/bench_latency.py --fit stm32l4r5-cortex-m4
        # least-squares cycles/MAC by op kind from that profile's boards' figures

``--fit`` is how the built-in cost models were calibrated, from the rows marked
``calibrates``: with three or more figures for a profile, non-negative least squares for the
cycles/MAC of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (other int8 ops count as
CONV_2D); with fewer, one factor scaling the profile's int8 cycles/MAC. cycles_per_byte and
op_overhead stay at the profile's values. The other rows check the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import inspect
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.latency import estimate_latency  # noqa: E402
from simulator.profiles import Profile, load_profile  # noqa: E402
from simulator.reader import read_model  # noqa: E402
from simulator.simulate import static_report  # noqa: E402

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


BUILDERS = {
    "kws_dscnn": _kws_dscnn,
    "ic_resnet8": _ic_resnet8,
    "vww_mobilenet_v1_025": lambda k: _mobilenet_v1_025(k, 3),
    "person_detection": lambda k: _mobilenet_v1_025(k, 1),
    "ad_autoencoder": _ad_autoencoder,
}


def _cache() -> Path:
    """Cache folder keyed by the builders' source, so editing the rest reuses the models."""
    source = "".join(inspect.getsource(f) for f in (_kws_dscnn, _ic_resnet8, _mobilenet_v1_025,
                                                     _ad_autoencoder))
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
        data = convert_keras(BUILDERS[name](keras), quantize=True, samples=16)
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    return target


# --------------------------------------------------------------------------- published
@dataclass(frozen=True)
class Published:
    board: str
    profile: str
    model: str
    ms: float
    stack: str
    source: str
    #: The board's clock when it differs from the profile's (the same core at another clock).
    clock_hz: float | None = None
    #: True when the figure was used to fit the profile's constants (False: a check).
    calibrates: bool = True


MLPERF_V05_REF = ("github.com/mlcommons/tiny_results_v0.5 closed/reference/results/"
                  "Nucleo-L4R5ZI/<task>/performance/results.txt")
MLPERF_V07_RENESAS = ("github.com/mlcommons/tiny_results_v0.7 closed/renesas/results/"
                      "EK-RA6M4/<task>/performance/results.txt")
ESP_TFLM = "github.com/espressif/esp-tflite-micro README.md, 'Performance Comparison'"

PUBLISHED = [
    # MLPerf Tiny v0.5 reference: NUCLEO-L4R5ZI 120 MHz, TFLM v2.3.1 with CMSIS-NN, mbed
    # (median throughput: 5.497, 1.420, 1.665, 99.487 inferences/s).
    Published("NUCLEO-L4R5ZI (M4F 120 MHz)", "stm32l4r5-cortex-m4", "kws_dscnn", 181.9,
              "TFLM 2.3.1 + CMSIS-NN", MLPERF_V05_REF, calibrates=False),
    Published("NUCLEO-L4R5ZI (M4F 120 MHz)", "stm32l4r5-cortex-m4", "ic_resnet8", 704.2,
              "TFLM 2.3.1 + CMSIS-NN", MLPERF_V05_REF, calibrates=False),
    Published("NUCLEO-L4R5ZI (M4F 120 MHz)", "stm32l4r5-cortex-m4", "vww_mobilenet_v1_025",
              600.6, "TFLM 2.3.1 + CMSIS-NN", MLPERF_V05_REF, calibrates=False),
    Published("NUCLEO-L4R5ZI (M4F 120 MHz)", "stm32l4r5-cortex-m4", "ad_autoencoder", 10.05,
              "TFLM 2.3.1 + CMSIS-NN", MLPERF_V05_REF, calibrates=False),
    # MLPerf Tiny v0.7 Renesas: EK-RA6M4 (Cortex-M33, 200 MHz), tflite-micro + CMSIS-NN
    # (19.774, 4.062, 6.159, 216.772 inferences/s). The M33 runs CMSIS-NN's int8 kernels with
    # the same DSP SIMD MACs (SMLAD) as the M4, and this is a current TFLM: the Cortex-M4
    # profiles are fitted to it at the board's clock. The 2020 L4R5 figures above (TFLM
    # 2.3.1, whose CMSIS-NN depthwise path was far slower) stay as a check.
    Published("EK-RA6M4 (M33 200 MHz)", "stm32l4r5-cortex-m4", "kws_dscnn", 50.57,
              "TFLM 2022 + CMSIS-NN", MLPERF_V07_RENESAS, 200e6),
    Published("EK-RA6M4 (M33 200 MHz)", "stm32l4r5-cortex-m4", "ic_resnet8", 246.2,
              "TFLM 2022 + CMSIS-NN", MLPERF_V07_RENESAS, 200e6),
    Published("EK-RA6M4 (M33 200 MHz)", "stm32l4r5-cortex-m4", "vww_mobilenet_v1_025", 162.4,
              "TFLM 2022 + CMSIS-NN", MLPERF_V07_RENESAS, 200e6),
    Published("EK-RA6M4 (M33 200 MHz)", "stm32l4r5-cortex-m4", "ad_autoencoder", 4.613,
              "TFLM 2022 + CMSIS-NN", MLPERF_V07_RENESAS, 200e6),
    # Espressif: person detection invoke() on ESP32-S3 at 240 MHz with ESP-NN, internal RAM.
    Published("ESP32-S3 (LX7 240 MHz)", "esp32-s3", "person_detection", 54.0,
              "esp-tflite-micro + ESP-NN", ESP_TFLM),
    # A single, weaker source: a blog post without its setup ("MobileNet-v1 (0.25x, 96x96)
    # runs in ~18ms" on STM32H7 at 480 MHz with CMSIS-NN); the only Cortex-M7 TFLM figure
    # found. The M7 profile is scaled to it and marked low-confidence.
    Published("STM32H7 (M7 480 MHz)", "stm32h743-cortex-m7", "person_detection", 18.0,
              "TFLM + CMSIS-NN (blog)", "rksharma.dev/blogs/tflite-micro-stm32h7.html"),
]


def profile_for(row: Published) -> Profile:
    profile = load_profile(row.profile)
    if row.clock_hz is not None:
        profile = dataclasses.replace(
            profile, device=dataclasses.replace(profile.device, clock_hz=row.clock_hz))
    return profile


def estimate_ms(model_name: str, profile: Profile) -> float:
    model = read_model(model_path(model_name))
    return estimate_latency(model, static_report(model, profile).compute.per_op,
                            profile).total_ms


def ratio_table() -> str:
    lines = ["| board | stack | model | MACs | profile | fitted to it | published ms | "
             "estimated ms | estimate / published | leave-one-out |",
             "|---|---|---|---:|---|---|---:|---:|---:|---:|"]
    for row in PUBLISHED:
        profile = profile_for(row)
        model = read_model(model_path(row.model))
        macs = static_report(model, profile).compute.macs
        est = estimate_ms(row.model, profile)
        clock = f" @ {row.clock_hz / 1e6:g} MHz" if row.clock_hz else ""
        loo = leave_one_out(row) if row.calibrates else None
        lines.append(f"| {row.board} | {row.stack} | {row.model} | {macs:,} | "
                     f"{row.profile}{clock} | {'yes' if row.calibrates else 'no'} | {row.ms:g} | "
                     f"{est:.1f} | {est / row.ms:.2f} | "
                     f"{'-' if loo is None else f'{loo / row.ms:.2f}'} |")
    return "\n".join(lines)


FIT_KEYS = ("CONV_2D.int8", "DEPTHWISE_CONV_2D.int8", "FULLY_CONNECTED.int8")


def _cycles(row: Published) -> tuple[dict[str, float], float]:
    """(MACs by FIT_KEYS, cycles not from MACs) of a row's model on its profile."""
    profile = profile_for(row)
    cost = profile.cost_model
    model = read_model(model_path(row.model))
    macs = dict.fromkeys(FIT_KEYS, 0.0)
    fixed = 0.0
    for c in static_report(model, profile).compute.per_op:
        key = f"{c.op}.int8" if f"{c.op}.int8" in FIT_KEYS else "CONV_2D.int8"
        macs[key] += c.macs
        fixed += c.bytes_moved * (cost.cycles_per_byte or 0.0)
        fixed += cost.op_overhead_ms * 1e-3 * profile.device.clock_hz
    return macs, fixed


def fit_rows(rows: list[Published]) -> dict[str, float]:
    """int8 cycles/MAC that best explain ``rows`` (figures of one profile's boards)."""
    from scipy.optimize import nnls

    a, b = [], []
    for row in rows:
        macs, fixed = _cycles(row)
        a.append([macs[k] for k in FIT_KEYS])
        b.append(row.ms * 1e-3 * profile_for(row).device.clock_hz - fixed)
    if len(rows) >= len(FIT_KEYS):
        solution, _ = nnls(np.array(a), np.array(b))
        fitted = dict(zip(FIT_KEYS, solution.tolist(), strict=True))
        fitted["int8"] = fitted["CONV_2D.int8"]
    else:
        current = load_profile(rows[0].profile).cost_model.cycles_per_mac
        model_cycles = np.array(a) @ np.array([current.get(k, current["int8"]) for k in FIT_KEYS])
        scale = float(np.dot(model_cycles, b) / np.dot(model_cycles, model_cycles))
        fitted = {k: v * scale for k, v in current.items() if k.endswith("int8")}
    return {k: round(v, 2) for k, v in fitted.items()}


def fit(profile_name: str) -> dict[str, float]:
    rows = [r for r in PUBLISHED if r.profile == profile_name and r.calibrates]
    if not rows:
        raise SystemExit(f"no published figures calibrate {profile_name}")
    return fit_rows(rows)


def leave_one_out(row: Published) -> float | None:
    """Estimate for ``row`` from constants fitted without it (None: too few other figures)."""
    others = [r for r in PUBLISHED
              if r.profile == row.profile and r.calibrates and r != row]
    if len(others) < len(FIT_KEYS):
        return None
    profile = profile_for(row)
    cycles = {**profile.cost_model.cycles_per_mac, **fit_rows(others)}
    profile = dataclasses.replace(
        profile, cost_model=dataclasses.replace(profile.cost_model, cycles_per_mac=cycles))
    return estimate_ms(row.model, profile)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", metavar="PROFILE", help="print fitted cycles/MAC instead")
    args = parser.parse_args(argv)
    if args.fit:
        for key, value in fit(args.fit).items():
            print(f"{key}: {value}")
    else:
        print(ratio_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
