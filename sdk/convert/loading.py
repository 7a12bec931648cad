"""Load the model to convert: Keras 3 ``.keras``, legacy ``.h5``, a SavedModel folder, or a
Keras model already in memory.

``.keras`` files are loaded in Keras' safe mode unless the user says ``--unsafe``: a Lambda
layer carries Python bytecode, and loading it runs code from the file. A SavedModel's graph
is inspected before TensorFlow loads (and so runs) any of it: ops that touch files, the
network, Python or the process are refused unless ``--unsafe`` (Keras' word for the same
trust decision).
"""

from __future__ import annotations

import json
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import InputError, UsageError
from devicefit.simulator.read.reader import HDF5_SIGNATURE

log = logging.getLogger(__name__)

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")


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
    #: The loaded SavedModel object (loaded once: loading traces every function again).
    saved_model: Any = None

    @property
    def variables(self) -> tuple:
        """The SavedModel's variables (for the float32 size); empty for Keras models."""
        return tuple(getattr(self.saved_model, "variables", ()))

    @property
    def is_keras(self) -> bool:
        return self.keras_model is not None

    def predict(self, x: Any, batch_size: int = 32) -> Any:
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

        signature = self.saved_model.signatures["serving_default"]
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
    path = check_file(model, unsafe=unsafe)
    if path.is_dir():
        return _load_saved_model(path, unsafe)
    return _load_keras_file(path, unsafe)


def check_file(model: str | Path, *, unsafe: bool = False) -> Path:
    """``model`` as a path that looks like a model this module can load, checked from its
    name, first bytes and (``.keras``) its config only: no TensorFlow. The CLI checks here
    before it starts the TensorFlow process, so a wrong file is refused at once, not after
    seconds of imports; Keras' own loading stays the judge of what passes."""
    path = Path(model)
    if not path.exists():
        raise InputError(f"model not found: {path}")
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise InputError(f"{path} is a folder without saved_model.pb: not a SavedModel")
        if why := _not_protobuf(path / "saved_model.pb"):
            raise InputError(f"{path}: saved_model.pb is not a SavedModel protobuf: {why}")
        return path
    if path.suffix.lower() == ".tflite":
        raise InputError(f"{path} is already a .tflite model; convert the Keras/SavedModel it came "
                         f"from, check it with 'devicefit simulate {path} --profile NAME', or "
                         "quantize a float32 .tflite with --weights int4 or auto")
    if path.suffix.lower() not in KERAS_SUFFIXES:
        raise InputError(
            f"{path}: unsupported model file; give a .keras or .h5 file or a SavedModel folder")
    _check_container(path)
    if not unsafe and path.suffix.lower() == ".keras" and _has_python_lambda(path):
        raise _lambda_refused(path)
    return path


#: A .keras file's config.json larger than this is left to Keras to read.
_CONFIG_LIMIT = 64 << 20


def _keras_config(path: Path) -> Any:
    """The .keras file's ``config.json``, or None where it cannot be read here (Keras'
    loader then says what is wrong)."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("config.json")
            if info.file_size > _CONFIG_LIMIT:
                return None
            return json.loads(archive.read(info))
    except (KeyError, OSError, ValueError, zipfile.BadZipFile):
        return None


def keras_input_shape(path: Path) -> tuple[int, ...] | None:
    """The per-sample input shape a ``.keras`` file's config declares, when the model has
    exactly one input of fixed size (None otherwise: the TensorFlow process finds it)."""
    if path.suffix.lower() != ".keras":
        return None
    config = _keras_config(path)
    if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
        return None
    body = config["config"]
    layers = [layer for layer in body.get("layers") or [] if isinstance(layer, dict)]
    inputs = [layer for layer in layers if layer.get("class_name") == "InputLayer"]
    if len(inputs) != 1 or not isinstance(inputs[0].get("config"), dict):
        return None
    shape = inputs[0]["config"].get("batch_shape")
    if not isinstance(shape, list) or len(shape) < 2:
        return None
    dims = shape[1:]
    return tuple(dims) if all(isinstance(d, int) and d > 0 for d in dims) else None


def _has_python_lambda(path: Path) -> bool:
    """True when the .keras file's config holds a serialized Python lambda: the object
    (``"class_name": "__lambda__"``) Keras refuses to deserialize in safe mode."""
    config = _keras_config(path)
    if config is None:
        return False
    stack = [config]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("class_name") == "__lambda__":
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _lambda_refused(path: Path) -> InputError:
    return InputError(f"{path}: holds a Lambda layer (Python code); Keras safe mode refuses to "
                      "load it (re-run with --unsafe only if you trust the file)")


def _load_keras_file(path: Path, unsafe: bool) -> LoadedModel:
    import keras

    try:
        model = keras.models.load_model(path, compile=False, safe_mode=not unsafe)
    except ValueError as exc:
        text = str(exc)
        if "Lambda" in text or "safe_mode" in text or "unsafe" in text.lower():
            raise _lambda_refused(path) from exc
        raise InputError(f"{path}: not a loadable Keras model: {_first_line(text)}") from exc
    except Exception as exc:  # zip/h5 parse errors come as many types
        raise InputError(f"{path}: not a loadable Keras model: {_first_line(str(exc))}") from exc
    kind = "keras" if path.suffix.lower() == ".keras" else "h5"
    return _from_keras(model, str(path), kind)


def _not_protobuf(path: Path) -> str | None:
    """Why ``path`` is not protobuf wire format, or None. It is read as a message with no
    fields (every field then is an unknown one, kept unparsed), so only what every protobuf
    parser refuses is refused here; whether it is a SavedModel stays TensorFlow's to judge
    (:func:`side_effect_ops` parses it in the TensorFlow process). Without protobuf (it
    comes with TensorFlow) the TensorFlow process says it."""
    try:
        from google.protobuf import empty_pb2
        from google.protobuf.message import DecodeError
    except ImportError:
        return None
    try:
        empty_pb2.Empty().ParseFromString(path.read_bytes())
    except DecodeError as exc:
        return str(exc).rsplit(": ", 1)[-1].lower()
    return None


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
    import keras

    try:
        inputs = model.inputs
    except AttributeError:
        inputs = None
    if not inputs:
        if not isinstance(model, (keras.Sequential, keras.Model)) or \
                type(model).__name__ not in ("Functional", "Sequential"):
            raise InputError(
                f"{source}: a subclassed Keras model ({type(model).__name__}) has no static "
                "graph to convert; rebuild it with the Functional API or Sequential, or export "
                "it with model.export(DIR) and convert that SavedModel folder")
        raise InputError(f"{source}: the Keras model is not built (it has no input shape); "
                         "call it once on an input or give its first layer an input shape")
    if len(inputs) != 1:
        raise UsageError(f"{source}: models with {len(inputs)} inputs are not supported; one input")
    shape = tuple(inputs[0].shape[1:])
    if any(d is None for d in shape):
        raise InputError(
            f"{source}: input shape {_shape_str(shape)} has unknown dimensions; a device model "
            "needs a fixed input shape")
    return LoadedModel(source=source, kind=kind, input_shape=tuple(int(d) for d in shape),
                       keras_model=model)


def _load_saved_model(path: Path, unsafe: bool) -> LoadedModel:
    import tensorflow as tf

    if not unsafe:
        risky = side_effect_ops(path)
        if risky:
            listed = ", ".join(f"{op} (in {fn})" for op, fn in risky[:5])
            raise InputError(
                f"{path}: the SavedModel's graph has ops that act outside the model: {listed}"
                f"{' …' if len(risky) > 5 else ''}; refused before running any of it (re-run "
                "with --unsafe only if you trust the model)")
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
                       input_shape=tuple(int(d) for d in shape), saved_model_dir=path,
                       saved_model=loaded)


#: Ops that read or write files, talk to the network, run Python or change the process.
SIDE_EFFECT_OPS = frozenset({
    "WriteFile", "ReadFile", "MatchingFiles", "Save", "SaveV2", "SaveSlices", "Restore",
    "RestoreV2", "RestoreSlice", "MergeV2Checkpoints", "ImmutableConst", "PyFunc",
    "PyFuncStateless", "EagerPyFunc", "InitializeTableFromTextFile",
    "InitializeTableFromTextFileV2", "LoadAndRemapMatrix", "GenerateVocabRemapping",
    "TFRecordReader", "TFRecordReaderV2", "TextLineReader", "TextLineReaderV2",
    "WholeFileReader", "WholeFileReaderV2", "FixedLengthRecordReader",
    "FixedLengthRecordReaderV2", "IdentityReader", "IdentityReaderV2", "LMDBReader",
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "SaveDataset", "SaveDatasetV2", "LoadDataset",
    "DatasetToTFRecord", "ExperimentalDatasetToTFRecord", "SqlDataset", "ExperimentalSqlDataset",
    "LMDBDataset", "ExperimentalLMDBDataset", "Rpc", "TryRpc", "RpcClient", "RpcCall",
    "RpcServer", "RpcServerStart", "RpcServerRegister", "DecodeProtoV2", "EncodeProto",
    "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3", "DebugNanCount",
    "DebugNumericSummary", "DebugNumericSummaryV2", "CollectiveReduce", "CollectiveGather",
    "CollectiveBcastSend", "CollectiveBcastRecv", "CollectiveReduceV2", "CollectiveGatherV2",
    "_Send", "_Recv", "_HostSend", "_HostRecv", "Send", "Recv",
})
#: Prefixes of op families with side effects (summaries write event files).
SIDE_EFFECT_PREFIXES = ("Write", "CreateSummary", "FlushSummary", "CloseSummary",
                        "ImportEvent", "ExperimentalSleep", "Sleep")
#: Ops TensorFlow's own saver functions use to write/read the variables checkpoint.
SAVER_OPS = frozenset({"SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename",
                       "StringJoin", "StaticRegexFullMatch"})


def side_effect_ops(path: Path) -> list[tuple[str, str]]:
    """(op, function) pairs in ``path/saved_model.pb`` with effects outside the model.

    Read from the protobuf, nothing executed. Every graph node and library function counts,
    except the saver functions TensorFlow attaches to restore variables (reached only from
    the ``saver_def``), where the checkpoint ops are expected.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString((path / "saved_model.pb").read_bytes())
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InputError(f"{path}: saved_model.pb is not a SavedModel protobuf: "
                         f"{_first_line(str(exc))}") from exc
    found: list[tuple[str, str]] = []
    for meta in saved.meta_graphs:
        functions = {f.signature.name: f for f in meta.graph_def.library.function}
        saver_roots = {meta.saver_def.restore_op_name.split(":")[0],
                       meta.saver_def.save_tensor_name.split(":")[0]}
        saver_nodes = [n for n in meta.graph_def.node if n.name in saver_roots]
        other_nodes = [n for n in meta.graph_def.node if n.name not in saver_roots]
        saver_only = _reachable(saver_nodes, functions) - _reachable(other_nodes, functions)
        for node in other_nodes:
            if _has_side_effect(node.op):
                found.append((node.op, "the graph"))
        for name, fn in functions.items():
            allowed = SAVER_OPS if name in saver_only else frozenset()
            found += [(n.op, name) for n in fn.node_def
                      if _has_side_effect(n.op) and n.op not in allowed]
    return found


def _has_side_effect(op: str) -> bool:
    return op in SIDE_EFFECT_OPS or op.startswith(SIDE_EFFECT_PREFIXES)


def _reachable(nodes: list, functions: dict) -> set[str]:
    """Names of the library functions ``nodes`` call, transitively."""
    seen: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        for value in node.attr.values():
            names = [value.func.name] if value.HasField("func") else []
            names += [f.name for f in value.list.func]
            for name in names:
                if name in functions and name not in seen:
                    seen.add(name)
                    stack.extend(functions[name].node_def)
    return seen


def _shape_str(shape: tuple) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
