"""Benchmark the Keras conversion without the SavedModel export (sdk/convert/traced.py).

In one process, each model is built fresh (same seed, same Keras names) and converted by
``quantize.to_tflite`` twice per round, interleaved: through ``from_keras_model``'s SavedModel
export (``export=True``, the fallback) and the way ``to_tflite`` converts it by default (the
traced call where :func:`traced.traceable` allows, else the same export). Reported per model:
the path taken, whether the two files are the same bytes, the median time of each and the
ratio new/old (a ratio: both measured in the same run on the same loaded machine). Exits 1
if a model that takes the traced path writes a different file.

``--phases`` also times, on the export path, where a conversion spends its time (timers
around TensorFlow's and Keras' own calls): the batch-1 clone, the export's tracing and
writing, the reload of the SavedModel (GraphDef, then ``tf.saved_model.load``), the MLIR
conversion (which imports the SavedModel once more), calibration + quantization, and the
final serialization. The rest of the wall time is "other" (the converter's own bookkeeping).

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_conversion [--repeat 3] [--phases]
        [--models digits,mbv2,...] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from devicefit.sdk.convert import loading, quantize, traced  # noqa: E402
from devicefit.sdk.search.candidate import candidate  # noqa: E402
from devicefit.sdk.search.families import builder  # noqa: E402

#: (scheme, I/O type, per-channel) of each model's conversion; ``--schemes`` sweeps the
#: rest on one model.
INT8 = ("int8", "int8", True)
SCHEMES = (INT8, ("int8", "int8", False), ("int8", "float32", True), ("int8", "uint8", True),
           ("int16x8", "int16", True), ("int16x8", "float32", True), ("float16", "float32", True),
           ("dynamic", "float32", True), ("float32", "float32", True))


def _family(name: str, **params: Any) -> Callable[[], Any]:
    return lambda: builder(name)(candidate(name, **params).params)


def _digits() -> Any:
    from examples.digits import build_cnn

    return build_cnn()


def _layers_mix() -> Any:
    """One model of the listed layers the families and the digits CNN do not use."""
    import keras

    L = keras.layers
    inp = keras.Input((16, 16, 3))
    a = L.LeakyReLU(0.1)(L.Conv2D(8, 3, padding="same")(L.Resizing(16, 16)(inp)))
    b = L.UpSampling2D(2)(L.AveragePooling2D(2)(a))
    c = L.Conv2DTranspose(4, 3, strides=2, padding="same")(L.Concatenate()([a, b]))
    d = L.GlobalMaxPooling2D()(L.MaxPooling2D(4)(c))
    e = L.Activation("tanh")(L.Flatten()(L.Reshape((2, 2))(d)))
    head = keras.Sequential([keras.Input((4,)), L.Dropout(0.1), L.Dense(3)], name="head")
    return keras.Model(inp, L.Softmax()(head(e)))


def _lstm() -> Any:
    import keras

    inp = keras.Input((10, 4))
    return keras.Model(inp, keras.layers.Dense(3)(keras.layers.LSTM(8)(inp)))


def _mobilenet() -> Any:
    """Keras' own MobileNet v1 (an architecture nobody here wrote; random weights)."""
    import keras

    return keras.applications.MobileNet(input_shape=(96, 96, 3), alpha=0.25, weights=None,
                                        classes=10)


MODELS: dict[str, Callable[[], Any]] = {
    "digits": _digits,
    "mbv2": _family("mbv2", input_shape=(48, 48, 3), width=0.35, depth=(1, 2, 3, 2),
                    expansion=4),
    "mbv2-96": _family("mbv2", input_shape=(96, 96, 3), width=0.5, depth=(1, 2, 3, 2),
                       expansion=4),
    "dscnn": _family("dscnn", input_shape=(49, 10, 1)),
    "cnn1d": _family("cnn1d", input_shape=(64, 3)),
    "mlp": _family("mlp", input_shape=(64, 3)),
    "layers-mix": _layers_mix,
    "lstm": _lstm,
    "mobilenet-v1": _mobilenet,
}


def _fresh(name: str) -> Any:
    """The model built as on the first build of a process: Keras' name counters reset."""
    import keras

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    return MODELS[name]()


def convert(name: str, settings: quantize.QuantSettings, *, export: bool) -> tuple[bytes, float]:
    model = _fresh(name)
    calibration = None
    if settings.needs_calibration:
        calibration = np.random.default_rng(0).standard_normal(
            (4, *model.input_shape[1:])).astype(np.float32)
    started = time.perf_counter()
    tflite = quantize.to_tflite(loading.load(model), settings, calibration, export=export)
    return tflite, time.perf_counter() - started


def compare(name: str, scheme: tuple[str, str, bool], repeat: int) -> dict[str, Any]:
    settings = quantize.QuantSettings(*scheme)
    old, new, same = [], [], True
    for _ in range(repeat):
        before, t_old = convert(name, settings, export=True)
        after, t_new = convert(name, settings, export=False)
        old.append(t_old)
        new.append(t_new)
        same = same and before == after
    batch = quantize.batch_of_one(loading.load(_fresh(name)))
    per_tensor = "" if settings.per_channel else " per-tensor"
    return {"model": name, "scheme": f"{settings.scheme}/{settings.io_type}{per_tensor}",
            "path": "traced" if traced.traceable(batch) else "export",
            "same_bytes": same, "size": len(after), "old_s": round(statistics.median(old), 2),
            "new_s": round(statistics.median(new), 2),
            "ratio": round(statistics.median(new) / statistics.median(old), 2)}


@contextmanager
def phase_timers() -> Iterator[dict[str, float]]:
    """Seconds spent in each of TensorFlow's and Keras' conversion calls while open."""
    # The class keras.export.ExportArchive() builds under the TensorFlow backend.
    from keras.src.export.saved_model_export_archive import SavedModelExportArchive
    from tensorflow.lite.python import lite

    spent: dict[str, float] = collections.defaultdict(float)
    targets = [
        (quantize, "batch_of_one", "clone on a batch-1 input"),
        (SavedModelExportArchive, "write_out", "export: write the SavedModel"),
        (lite.TFLiteConverterBaseV2, "_load_saved_model", "reload: GraphDef"),
        (lite, "_load", "reload: tf.saved_model.load"),
        (lite, "_convert_graphdef", "MLIR conversion (imports the SavedModel)"),
        (lite.TFLiteConverterBase, "_quantize", "calibration + quantization"),
        (lite, "_deduplicate_readonly_buffers", "serialization"),
    ]
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in targets]
    for (owner, attr, label), (_, _, original) in zip(targets, originals, strict=True):
        setattr(owner, attr, _timed(original, label, spent))
    try:
        yield spent
    finally:
        for owner, attr, original in originals:
            setattr(owner, attr, original)


def _timed(fn: Callable[..., Any], label: str, spent: dict[str, float]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - started
    return timed


def phases(name: str) -> dict[str, float]:
    with phase_timers() as spent:
        _, total = convert(name, quantize.QuantSettings(*INT8), export=True)
    figures = {label: round(seconds, 2) for label, seconds in spent.items()}
    figures["other"] = round(total - sum(spent.values()), 2)
    figures["total"] = round(total, 2)
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--schemes", default="cnn1d",
                    help="the model every scheme/I-O type is compared on ('' for none)")
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    convert("mlp", quantize.QuantSettings(*INT8), export=True)  # TensorFlow warmed up
    rows = [compare(name, INT8, args.repeat) for name in names]
    if args.schemes:
        rows += [compare(args.schemes, scheme, args.repeat) for scheme in SCHEMES[1:]]
    for r in rows:
        print(f"{r['model']:13} {r['scheme']:27} {r['path']:6} same bytes {r['same_bytes']!s:5} "
              f"{r['size']:>8} B  old {r['old_s']:6.2f} s  new {r['new_s']:6.2f} s  "
              f"new/old {r['ratio']:.2f}", flush=True)
    figures: dict[str, Any] = {"rows": rows}
    if args.phases:
        figures["phases"] = {name: phases(name) for name in names}
        for name, spent in figures["phases"].items():
            print(name, json.dumps(spent))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if any(r["path"] == "traced" and not r["same_bytes"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
