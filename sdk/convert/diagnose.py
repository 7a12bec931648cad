"""Turn what TensorFlow says when a conversion fails into one line a user can act on.

The converter raises ``ConverterError`` with dozens of lines of MLIR locations; a native crash
leaves only a signal number and (with :mod:`faulthandler`) a Python stack in the log. Both are
reduced here to: the stage, the TensorFlow op, the Keras layer it came from, and what to do.
Pure text processing, no TensorFlow import, so the parent process can use it too.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable

from devicefit.simulator.errors import DevicefitError

# 'tf.ResizeBicubic' op is neither a custom op nor a flex op
_NOT_BUILTIN = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")
# TF Select ops: ResizeBicubic, Cumprod
_SELECT_OPS = re.compile(r"TF Select ops: ([\w, ]+)")
# fused["ResizeBicubic:", "functional_1/resizing_1/resize/ResizeBicubic@__inference_f_105"]
_LOCATION = re.compile(r'fused\["(\w+):", "([^"@]+)')
# 'tf.TensorListReserve' op requires element_shape to be static
_OP_ERROR = re.compile(r"'(?:tf|tfl)\.(\w+)' op ([^\n]+)")
#: Where in TensorFlow's stack a crash happened → the stage to name (innermost first).
_CRASH_STAGES = (("calibrator.py", "calibration (running the model on calibration samples)"),
                 ("_quantize", "int8/int16 quantization of the calibrated model"),
                 ("convert_graphdef", "MLIR conversion to TFLite"),
                 ("convert_saved_model", "MLIR conversion to TFLite"),
                 ("saved_model", "exporting/loading the SavedModel"))
#: Layer classes whose conversion TensorFlow handles with special (fragile) code paths.
SPECIAL_LAYERS = ("LSTM", "GRU", "SimpleRNN", "RNN", "Bidirectional", "ConvLSTM1D",
                  "ConvLSTM2D", "ConvLSTM3D", "TimeDistributed", "MultiHeadAttention")


class ConversionError(DevicefitError):
    """TensorFlow refused, crashed on or hung on the model (exit 2: the input is the cause)."""


def ops_and_layers(text: str, layers: Iterable[str] = ()) -> list[tuple[str, str | None]]:
    """(TensorFlow op, Keras layer or None) pairs the converter complained about, in order."""
    names = list(layers)
    found: list[tuple[str, str | None]] = []
    for op, path in _LOCATION.findall(text):
        pair = (op, layer_of(path, names))
        if pair not in found and (_NOT_BUILTIN.search(text) is None
                                  or op in _NOT_BUILTIN.findall(text)
                                  or op in _error_ops(text)):
            found.append(pair)
    seen = {op for op, _ in found}
    for op in [*_NOT_BUILTIN.findall(text), *_select_ops(text)]:
        if op not in seen:
            found.append((op, None))
            seen.add(op)
    return found


def _select_ops(text: str) -> list[str]:
    m = _SELECT_OPS.search(text)
    return [o.strip() for o in m.group(1).split(",") if o.strip()] if m else []


def _error_ops(text: str) -> set[str]:
    return {op for op, _ in _OP_ERROR.findall(text)}


def layer_of(path: str, layers: list[str]) -> str | None:
    """The Keras layer a TensorFlow node or tensor name belongs to, if any:
    ``model/dense_1/MatMul`` → ``dense_1``. Tracing adds ``_1`` suffixes to scopes
    (``dense_2_1`` is layer ``dense_2``), and fused tensors join names with ``;``."""
    parts = path.split(";")[0].split("/")[:-1]
    for part in reversed(parts):
        name = part
        while True:
            if name in layers:
                return name
            stripped = re.sub(r"_\d+$", "", name)
            if stripped == name:
                break
            name = stripped
    return None


def converter_error(text: str, layers: Iterable[str], runtime: str, profile: str) -> str:
    """One line for a ``ConverterError`` (without the log path; the caller adds it)."""
    pairs = ops_and_layers(text, layers)
    where = ", ".join(f"tf.{op}" + (f" (layer {layer})" if layer else "") for op, layer in pairs)
    flex = _NOT_BUILTIN.search(text) or "TF Select" in text or "ERROR_NEEDS_FLEX_OPS" in text
    if flex and pairs:
        return (f"{where}: no TFLite builtin op exists for "
                f"{'it' if len(pairs) == 1 else 'them'}; it would need TF Select (Flex) "
                f"kernels, which the {runtime} runtime of profile {profile} does not have. "
                "Replace the layer with one TFLite supports")
    if "tensor list" in text.lower() or "TensorList" in text:
        return (f"{where or 'a recurrent layer'}: the converter cannot lower this layer's "
                "TensorList loop to TFLite ops (an RNN/LSTM with a dynamic shape or "
                "unroll=False); give the model a fixed input shape or use unroll=True")
    ops = _OP_ERROR.search(text)
    if ops:
        return f"tf.{ops.group(1)}" + (f" in layer {pairs[0][1]}" if pairs and pairs[0][1]
                                       else "") + f": {ops.group(2).strip()}"
    return first_error_line(text)


def first_error_line(text: str) -> str:
    """The first line that reads like an error, MLIR location prefixes removed."""
    for line in text.splitlines():
        if "error" in line.lower():
            line = re.sub(r"^.*?error: (loc\(.*?\)\): )?", "", line).strip()
            line = re.sub(r"loc\(.*\):\s*", "", line).strip()
            if line:
                return line[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:300] if lines else "the converter failed without a message"


def crash(returncode: int, stage: str, log_text: str, layers: dict[str, str]) -> str:
    """One line for a child that died of a signal (``returncode`` < 0) in ``stage``."""
    sig = -returncode
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    where = next((label for frame in _innermost_frames(log_text)
                  for key, label in _CRASH_STAGES if key in frame), None)
    special = [f"{n} ({cls})" for n, cls in layers.items() if cls in SPECIAL_LAYERS]
    text = f"TensorFlow crashed ({name}) in stage '{stage}'"
    if where:
        text += f", during {where}"
    if special:
        text += (f"; the model has layers TensorFlow converts through special code: "
                 f"{', '.join(special[:4])}: rebuild those layers with fixed shapes (and "
                 "unroll=True for recurrent ones), or try another --scheme")
    return text


def _innermost_frames(log_text: str) -> list[str]:
    """The frames faulthandler printed for the crashing thread, innermost first."""
    block = log_text.rsplit("Fatal Python error", 1)[-1]
    return [f"{path} {fn}" for path, fn in
            re.findall(r'File "([^"]+)", line \d+ in (\w+)', block)]
