"""Load the model to convert: Keras 3 ``.keras``, legacy ``.h5``, a SavedModel folder, or a
Keras model already in memory.

``.keras`` files are loaded in Keras' safe mode unless the user says ``--unsafe``: a Lambda
layer carries Python bytecode, and loading it runs code from the file.
"""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import InputError, UsageError

log = logging.getLogger(__name__)

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


@dataclass
class LoadedModel:
    """What the later stages need: a Keras model when there is one, else a SavedModel."""

    source: str
    #: "keras", "h5", "savedmodel" or "memory".
    kind: str
    #: Per-sample input shape (no batch dimension).
    input_shape: tuple[int, ...]
    keras_model: Any = None
    saved_model_dir: Path | None = None

    @property
    def is_keras(self) -> bool:
        return self.keras_model is not None

    def predict(self, x: Any, batch_size: int = 256) -> Any:
        """Float reference outputs (the first output) for ``x``."""
        import numpy as np

        if self.is_keras:
            # Direct calls, not predict(): predict traces a new tf.function per model object
            # and TensorFlow then warns about retracing when several models are converted.
            outs = []
            for start in range(0, len(x), batch_size):
                out = self.keras_model(x[start:start + batch_size], training=False)
                outs.append(np.asarray(out[0] if isinstance(out, (list, tuple)) else out))
            return np.concatenate(outs)
        import tensorflow as tf

        signature = tf.saved_model.load(str(self.saved_model_dir)).signatures["serving_default"]
        name = next(iter(signature.structured_input_signature[1]))
        chunks = []
        for start in range(0, len(x), batch_size):
            outs = signature(**{name: tf.constant(x[start:start + batch_size])})
            chunks.append(next(iter(outs.values())).numpy())
        return np.concatenate(chunks)


def load(model: Any, *, unsafe: bool = False) -> LoadedModel:
    """A path (str/Path) or an in-memory Keras model → :class:`LoadedModel`."""
    import keras

    if isinstance(model, keras.Model):
        return _from_keras(model, "<in-memory model>", "memory")
    if not isinstance(model, (str, Path)):
        raise UsageError(f"cannot convert a {type(model).__name__}: pass a Keras model or a path")
    path = Path(model)
    if not path.exists():
        raise InputError(f"model not found: {path}")
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise InputError(f"{path} is a folder without saved_model.pb: not a SavedModel")
        return _load_saved_model(path)
    if path.suffix.lower() == ".tflite":
        raise InputError(f"{path} is already a .tflite model; convert the Keras/SavedModel it came "
                         f"from, or check it with 'devicefit simulate {path} --profile NAME'")
    if path.suffix.lower() not in KERAS_SUFFIXES:
        raise InputError(
            f"{path}: unsupported model file; give a .keras or .h5 file or a SavedModel folder")
    return _load_keras_file(path, unsafe)


def _load_keras_file(path: Path, unsafe: bool) -> LoadedModel:
    import keras

    _check_container(path)
    try:
        model = keras.models.load_model(path, compile=False, safe_mode=not unsafe)
    except ValueError as exc:
        text = str(exc)
        if "Lambda" in text or "safe_mode" in text or "unsafe" in text.lower():
            raise InputError(
                f"{path}: holds a Lambda layer (Python code); Keras safe mode refuses to load it "
                "(re-run with --unsafe only if you trust the file)") from exc
        raise InputError(f"{path}: not a loadable Keras model: {_first_line(text)}") from exc
    except Exception as exc:  # zip/h5 parse errors come as many types
        raise InputError(f"{path}: not a loadable Keras model: {_first_line(str(exc))}") from exc
    kind = "keras" if path.suffix.lower() == ".keras" else "h5"
    return _from_keras(model, str(path), kind)


def _check_container(path: Path) -> None:
    """Keras' own message for a wrong file is "File not found"; say what is really wrong."""
    if path.suffix.lower() == ".keras" and not zipfile.is_zipfile(path):
        raise InputError(f"{path}: not a Keras model (a .keras file is a zip archive; this one "
                         "is not)")
    if path.suffix.lower() in (".h5", ".hdf5"):
        with open(path, "rb") as f:
            if f.read(8) != HDF5_SIGNATURE:
                raise InputError(f"{path}: not a Keras model (not an HDF5 file)")


def _from_keras(model: Any, source: str, kind: str) -> LoadedModel:
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise InputError(f"{source}: the Keras model is not built (it has no input shape)")
    if len(inputs) != 1:
        raise UsageError(f"{source}: models with {len(inputs)} inputs are not supported; one input")
    shape = tuple(inputs[0].shape[1:])
    if any(d is None for d in shape):
        raise InputError(
            f"{source}: input shape {_shape_str(shape)} has unknown dimensions; a device model "
            "needs a fixed input shape")
    return LoadedModel(source=source, kind=kind, input_shape=tuple(int(d) for d in shape),
                       keras_model=model)


def _load_saved_model(path: Path) -> LoadedModel:
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:
        raise InputError(f"{path}: not a loadable SavedModel: {_first_line(str(exc))}") from exc
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise InputError(f"{path}: the SavedModel has no 'serving_default' signature")
    specs = list(signature.structured_input_signature[1].values())
    if len(specs) != 1:
        raise UsageError(f"{path}: models with {len(specs)} inputs are not supported; one input")
    shape = tuple(specs[0].shape[1:])
    if any(d is None for d in shape):
        raise InputError(f"{path}: input shape {_shape_str(shape)} has unknown dimensions")
    return LoadedModel(source=str(path), kind="savedmodel",
                       input_shape=tuple(int(d) for d in shape), saved_model_dir=path)


def _shape_str(shape: tuple) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
