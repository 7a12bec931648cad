"""Ask the pinned runtimes which ops and type combinations their kernels accept.

``python -m tests.op_probe --write`` regenerates ``simulator/targets/tflm/tflm_support.json``
(the tflite-micro wheel) and ``simulator/targets/litert/litert_support.json`` (ai-edge-litert: the
same one-op models through its builtin kernels and through XNNPACK);
``python -m tests.op_probe --sample`` re-probes a few cases and prints them as JSON (the
test suite compares them with the stored table). Run it in a child process: it loads TFLM.

What is probed:

- **builtin ops**: one model per builtin code, registered or not (:func:`probe_model`);
  for LiteRT also per version, which it checks at load (TFLM ignores versions);
- **custom ops**: every identifier in the wheel's native library is tried as a custom code,
  so the table lists what the resolver really registers (TFLM's Signal library, its
  detection post-process), not names copied by hand;
- **zero points**: int8 weights and int16 activations are symmetric as the converter writes
  them; which kernels refuse a non-zero zero point (LiteRT's int8 conv does, TFLM's not);
- **constant inputs**: which shape-like inputs (FILL's dims, SPLIT's axis, RESIZE_*'s size
  ...) a kernel refuses when they are not constant;
- **type combinations**: for each op template below and each combination of activation and
  weight types, a one-op model with valid shapes, options and quantization is created,
  allocated (the kernels' ``Prepare``) and invoked (some kernels check types only in
  ``Eval``), each in a forked child so a kernel that crashes only fails its own case. The
  wheel's own message is kept for a refused case ("Hybrid models are not supported ...").
  A kernel that accepts a combination but returns NaN/Inf on all-ones inputs does not
  handle it either (TFLM's float LSTM reads int8 weights as floats).

A template whose every combination fails is a broken template, not a finding: the probe
stops with an error rather than write a table that fails supported models.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
from ai_edge_litert import schema_py_generated as fb

from devicefit.simulator.read.model import WEIGHTS_INPUT
from devicefit.simulator.read.reader import parse_model
from devicefit.simulator.read.writer import pack
from devicefit.simulator.targets.litert.ops import SUPPORT_FILE as LITERT_SUPPORT_FILE
from devicefit.simulator.targets.tflm.ops import SUPPORT_FILE, signature
from tests.tflite_builder import _buffer, _model, _opcode, _operator, _tensor, probe_model

TYPES = {"float32": fb.TensorType.FLOAT32, "float16": fb.TensorType.FLOAT16,
         "int32": fb.TensorType.INT32, "uint8": fb.TensorType.UINT8,
         "int64": fb.TensorType.INT64, "int16": fb.TensorType.INT16,
         "int8": fb.TensorType.INT8, "int4": fb.TensorType.INT4, "bool": fb.TensorType.BOOL}
NUMPY = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "uint8": np.uint8,
         "int64": np.int64, "int16": np.int16, "int8": np.int8, "int4": np.int8,
         "bool": np.bool_}
QUANTIZED = {"int8", "uint8", "int16", "int4"}


@dataclass(frozen=True)
class T:
    """One tensor of a probe model: shape, dtype, constant data (None: an activation)."""

    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None
    scale: float = 0.05
    zero_point: int = 0
    #: A variable tensor (an LSTM's state): no data, not a graph input, kept across invokes.
    variable: bool = False
    #: Quantization parameters on an int32 activation (QUANTIZE's int32 output has them).
    quantized: bool = False

    def fill(self) -> np.ndarray:
        return np.ones(self.shape, NUMPY[self.dtype])


def const(shape: tuple[int, ...], dtype: str, scale: float = 0.05,
          values: list | None = None) -> T:
    data = (np.array(values, NUMPY[dtype]).reshape(shape) if values is not None
            else np.ones(shape, NUMPY[dtype]))
    return T(shape, dtype, data, scale)


def _bias_type(act: str) -> str:
    return {"int16": "int64", "float32": "float32", "float16": "float32"}.get(act, "int32")


def single_op(code: int, inputs: list[T | None], outputs: list[T], options_type: int = 0,
              options=None) -> bytes:
    """A model of one ``code`` op; ``None`` inputs are optional inputs left out (-1)."""
    tensors, buffers, indices = [], [], []
    for t in [*inputs, *outputs]:
        if t is None:
            indices.append(-1)
            continue
        ft = fb.TensorT()
        ft.name, ft.shape, ft.type = f"t{len(tensors)}", list(t.shape), TYPES[t.dtype]
        ft.buffer, ft.isVariable = 0, t.variable
        if t.data is not None:
            data = t.data
            if t.dtype == "int4":  # two 4-bit values a byte, low nibble first
                flat = (data.reshape(-1).astype(np.uint8) & 0xF)
                flat = np.append(flat, 0) if flat.size % 2 else flat
                data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)
            buffers.append(_buffer(data))
            ft.buffer = len(buffers)
        if t.dtype in QUANTIZED or t.quantized or (t.dtype in ("int32", "int64")
                                                   and t.data is not None and t.scale != 1.0):
            q = fb.QuantizationParametersT()
            q.scale, q.zeroPoint = [t.scale], [t.zero_point]
            ft.quantization = q
        indices.append(len(tensors))
        tensors.append(ft)
    n_in = len(inputs)
    sg = fb.SubGraphT()
    sg.tensors = tensors
    sg.operators = [_operator(0, indices[:n_in], indices[n_in:], options_type, options)]
    sg.inputs = [i for i, t in zip(indices[:n_in], inputs)
                 if t is not None and t.data is None and not t.variable]
    sg.outputs = indices[n_in:]
    m = fb.ModelT()
    m.version, m.operatorCodes, m.subgraphs = 3, [_opcode(code)], [sg]
    m.buffers = [_buffer(), *buffers]
    return pack(m)


def _opts(cls, **fields):
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


B, OPT = fb.BuiltinOperator, fb.BuiltinOptions
#: (activation, weights) pairs tried on ops with a weights input. The int8/int16 pairs are
#: what the converter writes; float32+int8 is dynamic-range ("hybrid"); int4 is packed.
WEIGHTED = [("float32", "float32"), ("float32", "int8"), ("int8", "int8"), ("int16", "int8"),
            ("int8", "int4"), ("uint8", "uint8"), ("float32", "float16")]
ACTIVATIONS = ["float32", "int8", "int16", "uint8", "int32"]


def _conv(a: str, w: str) -> tuple:
    bias = const((2,), _bias_type(a), 0.05 * 0.05 if a in QUANTIZED else 1.0)
    return ([T((1, 4, 4, 2), a), const((2, 3, 3, 2), w), bias], [T((1, 4, 4, 2), a)],
            OPT.Conv2DOptions, _opts(fb.Conv2DOptionsT, padding=fb.Padding.SAME, strideW=1,
                                   strideH=1, dilationWFactor=1, dilationHFactor=1))


def _depthwise(a: str, w: str) -> tuple:
    bias = const((2,), _bias_type(a), 0.05 * 0.05 if a in QUANTIZED else 1.0)
    return ([T((1, 4, 4, 2), a), const((1, 3, 3, 2), w), bias], [T((1, 4, 4, 2), a)],
            OPT.DepthwiseConv2DOptions,
            _opts(fb.DepthwiseConv2DOptionsT, padding=fb.Padding.SAME, strideW=1, strideH=1,
                  depthMultiplier=1, dilationWFactor=1, dilationHFactor=1))


def _fully_connected(a: str, w: str) -> tuple:
    bias = const((3,), _bias_type(a), 0.05 * 0.05 if a in QUANTIZED else 1.0)
    return ([T((1, 4), a), const((3, 4), w), bias], [T((1, 3), a)],
            OPT.FullyConnectedOptions, _opts(fb.FullyConnectedOptionsT))


def _transpose_conv(a: str, w: str) -> tuple:
    shape = const((4,), "int32", 1.0, [1, 4, 4, 2])
    bias = const((2,), _bias_type(a), 0.05 * 0.05 if a in QUANTIZED else 1.0)
    return ([shape, const((2, 3, 3, 2), w), T((1, 4, 4, 2), a), bias], [T((1, 4, 4, 2), a)],
            OPT.TransposeConvOptions,
            _opts(fb.TransposeConvOptionsT, padding=fb.Padding.SAME, strideW=1, strideH=1))


def _batch_matmul(a: str, w: str) -> tuple:
    return ([T((1, 2, 3), a), const((1, 3, 4), w)], [T((1, 2, 4), a)],
            OPT.BatchMatMulOptions, _opts(fb.BatchMatMulOptionsT))


def _lstm(a: str, w: str) -> tuple:
    """UNIDIRECTIONAL_SEQUENCE_LSTM, batch 1, 2 steps, 3 inputs, 4 units, no peepholes,
    projection or layer norm. Float activations only: an integer LSTM also needs gate
    intermediates with calibrated scales, which a probe cannot invent."""
    units, steps, width = 4, 2, 3
    def weights(cols: int) -> T:
        return const((units, cols), w)
    state = [T((1, units), a, variable=True) for _ in range(2)]
    inputs = ([T((1, steps, width), a)] + [weights(width) for _ in range(4)]
              + [weights(units) for _ in range(4)] + [None] * 3
              + [const((units,), "float32", 1.0) for _ in range(4)] + [None, None]
              + state + [None] * 4)
    return (inputs, [T((1, steps, units), a)], OPT.UnidirectionalSequenceLSTMOptions,
            _opts(fb.UnidirectionalSequenceLSTMOptionsT,
                  fusedActivationFunction=fb.ActivationFunctionType.TANH))


def _embedding(a: str, w: str) -> tuple:
    return ([T((2,), "int32"), const((4, 3), w)], [T((2, 3), a)], 0, None)


def _unary(a: str) -> tuple:
    return [T((1, 4), a)], [T((1, 4), a)], 0, None


def _probability(a: str) -> T:
    """The output TFLM's softmax/logistic kernels demand: scale 1/256 and zero point -128
    for int8 (0 for uint8), 1/32768 and 0 for int16."""
    if a == "int16":
        return T((1, 4), a, scale=1 / 32768)
    return T((1, 4), a, scale=1 / 256, zero_point=-128 if a == "int8" else 0)


def _softmax(a: str) -> tuple:
    out = _probability(a)
    return [T((1, 4), a)], [out], OPT.SoftmaxOptions, _opts(fb.SoftmaxOptionsT, beta=1.0)


def _logistic(a: str) -> tuple:
    return [T((1, 4), a)], [_probability(a)], 0, None


def _binary(options_type: int = 0, options_cls=None) -> Callable[[str], tuple]:
    def build(a: str) -> tuple:
        return ([T((1, 4), a), T((1, 4), a)], [T((1, 4), a)], options_type,
                options_cls() if options_cls else None)
    return build


def _pool(a: str) -> tuple:
    return ([T((1, 4, 4, 2), a)], [T((1, 2, 2, 2), a)], OPT.Pool2DOptions,
            _opts(fb.Pool2DOptionsT, padding=fb.Padding.VALID, strideW=2, strideH=2,
                  filterWidth=2, filterHeight=2))


def _reduce(a: str) -> tuple:
    return ([T((1, 4, 4, 2), a), const((2,), "int32", 1.0, [1, 2])], [T((1, 1, 1, 2), a)],
            OPT.ReducerOptions, _opts(fb.ReducerOptionsT, keepDims=True))


def _reshape(a: str) -> tuple:
    return ([T((1, 4), a), const((2,), "int32", 1.0, [2, 2])], [T((2, 2), a)], 0, None)


def _concat(a: str) -> tuple:
    return ([T((1, 2), a), T((1, 2), a)], [T((1, 4), a)], OPT.ConcatenationOptions,
            _opts(fb.ConcatenationOptionsT, axis=1))


def _pad(a: str) -> tuple:
    return ([T((1, 4), a), const((2, 2), "int32", 1.0, [0, 0, 1, 1])], [T((1, 6), a)], 0, None)


def _leaky(a: str) -> tuple:
    return [T((1, 4), a)], [T((1, 4), a)], OPT.LeakyReluOptions, _opts(fb.LeakyReluOptionsT,
                                                                     alpha=0.2)


#: op → (template, the type combinations to try). Weighted templates take (activation,
#: weights); the others one activation type.
WEIGHTED_OPS: dict[str, Callable[[str, str], tuple]] = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _depthwise, "FULLY_CONNECTED": _fully_connected,
    "TRANSPOSE_CONV": _transpose_conv, "BATCH_MATMUL": _batch_matmul,
    "EMBEDDING_LOOKUP": _embedding,
}
#: Ops whose probe template builds float activations only (see the template).
FLOAT_ONLY = {"UNIDIRECTIONAL_SEQUENCE_LSTM": _lstm}
ACTIVATION_OPS: dict[str, Callable[[str], tuple]] = {
    "ADD": _binary(OPT.AddOptions, fb.AddOptionsT), "SUB": _binary(OPT.SubOptions, fb.SubOptionsT),
    "MUL": _binary(OPT.MulOptions, fb.MulOptionsT), "MAXIMUM": _binary(), "MINIMUM": _binary(),
    "SQUARED_DIFFERENCE": _binary(), "DIV": _binary(OPT.DivOptions, fb.DivOptionsT),
    "FLOOR_DIV": _binary(OPT.FloorDivOptions, fb.FloorDivOptionsT),
    "FLOOR_MOD": _binary(OPT.FloorModOptions, fb.FloorModOptionsT),
    "RELU": _unary, "RELU6": _unary, "TANH": _logistic, "LOGISTIC": _logistic,
    "HARD_SWISH": _unary, "ABS": _unary, "RSQRT": _unary, "SQRT": _unary, "EXP": _unary,
    "NEG": _unary, "ELU": _unary, "LEAKY_RELU": _leaky, "SOFTMAX": _softmax,
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "MEAN": _reduce, "SUM": _reduce,
    "REDUCE_MAX": _reduce, "RESHAPE": _reshape, "CONCATENATION": _concat, "PAD": _pad,
}


def _conversion(code_name: str, src: str, dst: str) -> tuple:
    src_t = const((4,), src) if code_name == "DEQUANTIZE" else T((4,), src)
    # A QUANTIZE to int32 (int16 → int32 at a 16x8 model's edge) writes a quantized int32.
    return [src_t], [T((4,), dst, quantized=code_name == "QUANTIZE" and dst == "int32")], 0, None


#: (op, input type, output type) of the type-converting ops (CAST: MoveNet's first op is a
#: uint8 → int8 CAST, which TFLM refuses at invoke).
CONVERSIONS = [("DEQUANTIZE", s, "float32") for s in ("int8", "int16", "uint8", "float16")] + [
    ("QUANTIZE", s, d) for s, d in (("float32", "int8"), ("float32", "int16"),
                                    ("float32", "uint8"), ("int8", "int8"), ("int16", "int8"),
                                    ("int8", "int16"), ("uint8", "int8"), ("int8", "uint8"),
                                    ("int16", "int16"), ("int16", "int32"))] + [
    ("CAST", s, d) for s, d in (("uint8", "int8"), ("uint8", "float32"), ("int8", "float32"),
                                ("int16", "float32"), ("int32", "float32"), ("float32", "int32"),
                                ("float32", "int8"), ("float32", "uint8"), ("int8", "int32"))]


def _shape_like(values: list[int], constant: bool, shape: tuple[int, ...] | None = None) -> T:
    shape = shape if shape is not None else (len(values),)
    return const(shape, "int32", 1.0, values) if constant else T(shape, "int32", scale=1.0)


F = "float32"
#: Ops with a shape-like input (dims, axis, size ...): (template taking "is that input
#: constant", the input's index). TFLM plans with static shapes, so some kernels need it
#: constant ("Non-constant >dims< tensor is not supported").
SHAPE_INPUT_OPS: dict[str, tuple[Callable[[bool], tuple], int]] = {
    "FILL": (lambda c: ([_shape_like([1, 4], c), const((), F, 1.0, 1.0)], [T((1, 4), F)],
                        0, None), 0),
    "EXPAND_DIMS": (lambda c: ([T((4,), F), _shape_like([0], c)], [T((1, 4), F)], 0, None), 1),
    "RESIZE_BILINEAR": (lambda c: ([T((1, 2, 2, 1), F), _shape_like([4, 4], c)],
                                   [T((1, 4, 4, 1), F)], OPT.ResizeBilinearOptions,
                                   _opts(fb.ResizeBilinearOptionsT)), 1),
    "RESIZE_NEAREST_NEIGHBOR": (lambda c: ([T((1, 2, 2, 1), F), _shape_like([4, 4], c)],
                                           [T((1, 4, 4, 1), F)],
                                           OPT.ResizeNearestNeighborOptions,
                                           _opts(fb.ResizeNearestNeighborOptionsT)), 1),
    "BROADCAST_TO": (lambda c: ([T((1, 4), F), _shape_like([2, 4], c)], [T((2, 4), F)],
                                0, None), 1),
    "SPLIT": (lambda c: ([_shape_like([1], c, ()), T((1, 4), F)], [T((1, 2), F), T((1, 2), F)],
                         OPT.SplitOptions, _opts(fb.SplitOptionsT, numSplits=2)), 0),
    "SPLIT_V": (lambda c: ([T((1, 4), F), const((2,), "int32", 1.0, [2, 2]),
                            _shape_like([1], c, ())], [T((1, 2), F), T((1, 2), F)],
                           OPT.SplitVOptions, _opts(fb.SplitVOptionsT, numSplits=2)), 2),
    "RESHAPE": (lambda c: ([T((1, 4), F), _shape_like([2, 2], c)], [T((2, 2), F)], 0, None), 1),
    "PAD": (lambda c: ([T((1, 4), F), _shape_like([0, 0, 1, 1], c, (2, 2))], [T((1, 6), F)],
                       0, None), 1),
    "MEAN": (lambda c: ([T((1, 4, 4, 2), F), _shape_like([1, 2], c)], [T((1, 1, 1, 2), F)],
                        OPT.ReducerOptions, _opts(fb.ReducerOptionsT, keepDims=True)), 1),
}


def _with_zero_point(data: bytes, tensors: list[int], zero_point: int) -> bytes:
    m = fb.ModelT.InitFromPackedBuf(data, 0)
    for t in tensors:
        m.subgraphs[0].tensors[t].quantization.zeroPoint = [zero_point]
    return pack(m)


def zero_point_cases() -> list[tuple[str, str, bytes]]:
    """(op, what, model): int8 weights with zero point 5 (the converter writes 0: symmetric
    weights), and every int16 activation with zero point 3 (16x8 activations are
    symmetric)."""
    out = []
    for name, build in WEIGHTED_OPS.items():
        if name == "EMBEDDING_LOOKUP":
            continue  # its int8 values are a lookup table, not filter weights
        data = single_op(getattr(B, name), *build("int8", "int8"))
        model = parse_model(data)
        weights = model.main.operators[0].inputs[WEIGHTS_INPUT[name]]
        out.append((name, "weights:int8", _with_zero_point(data, [weights], 5)))
    for name, build in ACTIVATION_OPS.items():
        data = single_op(getattr(B, name), *build("int16"))
        sg = parse_model(data).main
        activations = [t.index for t in sg.tensors if t.dtype == "int16" and not t.has_data]
        out.append((name, "activations:int16", _with_zero_point(data, activations, 3)))
    return out


def zero_points(runtime: str = "tflm") -> dict[str, dict[str, str]]:
    """``{op: {"weights:int8" | "activations:int16": "ok" | why refused}}`` (see
    :func:`zero_point_cases`); simulator/targets/tflm/ops.py's ``zero_point_refusal`` reads it."""
    table: dict[str, dict[str, str]] = {}
    for name, what, data in zero_point_cases():
        table.setdefault(name, {})[what] = try_model(data, runtime)
    return table


def constant_inputs() -> dict[str, dict[str, str]]:
    """``{op: {input index: "ok" | why it must be constant}}``; a template whose constant
    variant is refused is broken (the probe stops)."""
    table: dict[str, dict[str, str]] = {}
    for name, (build, index) in SHAPE_INPUT_OPS.items():
        code = getattr(B, name)
        baseline = try_model(single_op(code, *build(True)))
        if baseline != "ok":
            raise SystemExit(f"probe template {name} is refused with a constant input: {baseline}")
        answer = try_model(single_op(code, *build(False)))
        # Only a refusal at prepare is about constness; later failures come from the probe's
        # all-ones data in the shape input.
        table[name] = {str(index): answer if answer.startswith("prepare:") else "ok"}
    return table


def cases() -> list[tuple[str, bytes]]:
    """Every (op, model) the probe tries, in a stable order."""
    out = []
    for name, build in WEIGHTED_OPS.items():
        for a, w in WEIGHTED:
            out.append((name, single_op(getattr(B, name), *build(a, w))))
    for name, build in FLOAT_ONLY.items():
        for a, w in WEIGHTED:
            if a == "float32":
                out.append((name, single_op(getattr(B, name), *build(a, w))))
    for name, build in ACTIVATION_OPS.items():
        for a in ACTIVATIONS:
            out.append((name, single_op(getattr(B, name), *build(a))))
    for name, src, dst in CONVERSIONS:
        out.append((name, single_op(getattr(B, name), *_conversion(name, src, dst))))
    return out


# --------------------------------------------------------------------------- running (child)
_PATH_PREFIX = re.compile(r"^\S*tensorflow/lite/micro/\S+\.cc(:\d+)?\s*")
_NOISE = ("Node ", "Failed to", "TFLM failed", "Interpreter invocation failed")


def _message(lines: list[str]) -> str:
    """The kernel's own complaint, without file paths and the interpreter's follow-ups."""
    kept = [_PATH_PREFIX.sub("", ln.strip()) for ln in lines if ln.strip()]
    useful = [ln for ln in kept if not ln.startswith(_NOISE)] or kept
    return " ".join(useful[:2]) or "refused without a message"


def try_model(data: bytes, runtime: str = "tflm") -> str:
    """"ok", or "<stage>: why" when the runtime refuses ``data`` (stage: prepare, invoke or
    crash; allocate + one invoke, in a forked child). ``runtime``: "tflm", "litert" (builtin
    kernels) or "xnnpack" (LiteRT's default resolver with the XNNPACK delegate)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_end)
        verdict = _run(data) if runtime == "tflm" else _run_litert(data, runtime == "xnnpack")
        os.write(write_end, verdict.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        text = f.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"crash: the kernel dies with signal {os.WTERMSIG(status)}"
    return text or "no answer from the probe child"


def _run(data: bytes) -> str:
    from tflite_micro.python.tflite_micro import runtime

    from devicefit.simulator.targets.tflm.runner import capture_fd2

    model = parse_model(data)
    with capture_fd2() as err:
        try:
            interpreter = runtime.Interpreter.from_bytes(data, arena_size=1 << 16)
        except (RuntimeError, ValueError) as exc:
            interpreter, failed = None, exc
    if interpreter is None:
        return "prepare: " + _message(err or [str(failed)])
    sg = model.main
    for i, index in enumerate(sg.inputs):
        t = sg.tensors[index]
        interpreter.set_input(np.ones(t.shape, NUMPY[t.dtype]), i)
    failed = None
    with capture_fd2() as err:
        try:
            interpreter.invoke()
        except RuntimeError as exc:
            failed = exc
    if failed is not None:
        return "invoke: " + _message(err or [str(failed)])
    return _finite([np.asarray(interpreter.get_output(i)) for i in range(len(sg.outputs))])


def _finite(outputs: list[np.ndarray]) -> str:
    if any(o.dtype.kind == "f" and not np.all(np.isfinite(o)) for o in outputs):
        # Accepted, but the kernel read the weights as another type (a hybrid LSTM).
        return "invoke: runs but returns NaN/Inf: the kernel does not handle these types"
    return "ok"


def _run_litert(data: bytes, xnnpack: bool) -> str:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from devicefit.simulator.targets.tflm.runner import capture_fd2

    resolver = (OpResolverType.AUTO if xnnpack
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    stage = "prepare"
    with capture_fd2():  # LiteRT's INFO lines; its errors are in the exception
        try:
            interpreter = Interpreter(model_content=data,
                                      experimental_op_resolver_type=resolver)
            interpreter.allocate_tensors()
            stage = "invoke"
            for d in interpreter.get_input_details():
                interpreter.set_tensor(d["index"], np.ones(d["shape"], d["dtype"]))
            interpreter.invoke()
        except (RuntimeError, ValueError) as exc:
            return f"{stage}: " + " ".join(str(exc).split())[:300]
    return _finite([np.asarray(interpreter.get_tensor(d["index"]))
                    for d in interpreter.get_output_details()])


def registered_builtins() -> list[str]:
    from tflite_micro.python.tflite_micro import runtime

    from devicefit.simulator.targets.tflm.runner import capture_fd2

    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    found = []
    for code, name in sorted(names.items()):
        if name in ("CUSTOM", "PLACEHOLDER_FOR_GREATER_OP_CODES"):
            continue
        with capture_fd2() as err:
            try:
                runtime.Interpreter.from_bytes(probe_model(code), arena_size=1 << 16)
            except (RuntimeError, AttributeError):
                # AttributeError: the wheel's Python wrapper reads VAR_HANDLE options first.
                pass
        if "Didn't find op for builtin opcode" not in " ".join(err):
            found.append(name)
    return sorted(found)


def _custom_probe(custom: str) -> bytes:
    """A custom op, then TOPK_V2 (no TFLM kernel): TFLM resolves ops in order, so the error
    names TOPK_V2 exactly when the custom op was found."""
    return _model([_opcode(B.CUSTOM, custom), _opcode(B.TOPK_V2)],
                  [_tensor("t", (1,), fb.TensorType.FLOAT32, 0)], [],
                  [_operator(0, [], []), _operator(1, [], [])], [0], [0])


def registered_customs(names: list[str] | None = None) -> list[str]:
    """Custom op codes the wheel's resolver registers, among ``names`` (default: every
    identifier-like string in the wheel's native library)."""
    from tflite_micro.python.tflite_micro import runtime

    from devicefit.simulator.targets.tflm.runner import capture_fd2

    if names is None:
        library = Path(runtime.__file__).with_name("_runtime.so").read_bytes()
        names = sorted({m.decode() for m in re.findall(rb"[A-Za-z][A-Za-z0-9_-]{3,40}(?=\0)",
                                                       library)})
    found = []
    for name in names:
        with capture_fd2() as err:
            try:
                runtime.Interpreter.from_bytes(_custom_probe(name), arena_size=1 << 16)
            except RuntimeError:
                pass
        if "'TOPK_V2'" in " ".join(err):
            found.append(name)
    return sorted(found)


def combinations(selected: list[tuple[str, bytes]], runtime: str = "tflm"
                 ) -> dict[str, dict[str, str]]:
    """``{op: {signature: "ok" | why refused}}`` for the probe cases."""
    table: dict[str, dict[str, str]] = {}
    for name, data in selected:
        model = parse_model(data)
        sig = signature(model.main, model.main.operators[0])
        table.setdefault(name, {})[sig] = try_model(data, runtime)
    return table


def all_combinations(runtime: str = "tflm") -> dict[str, dict[str, str]]:
    table = combinations(cases(), runtime)
    broken = [op for op, sigs in table.items() if all(v != "ok" for v in sigs.values())]
    if broken:
        raise SystemExit(f"probe templates refused in every combination (fix the template): "
                         f"{', '.join(broken)}: {[table[b] for b in broken]}")
    return table


def wheel_version() -> str:
    return metadata.version("tflite-micro")


def litert_op_versions(limit: int = 30) -> dict[str, int]:
    """``{builtin op: highest version LiteRT's resolver registers}`` (0: none). LiteRT looks
    every op's (code, version) up when it loads a file, so a one-op model per version
    answers it; TFLM ignores versions."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    found: dict[str, int] = {}
    for code, name in sorted(names.items()):
        if name in ("CUSTOM", "PLACEHOLDER_FOR_GREATER_OP_CODES"):
            continue
        found[name] = 0
        for version in range(1, limit + 1):
            oc = _opcode(code)
            oc.version = version
            data = _model([oc], [_tensor("t", (1,), fb.TensorType.FLOAT32, 0)], [],
                          [_operator(0, [0], [0])], [0], [0])
            try:
                Interpreter(model_content=data, experimental_op_resolver_type=(
                    OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
            except (RuntimeError, ValueError) as exc:
                if "Didn't find op for builtin opcode" in str(exc):
                    continue
            found[name] = version
    return found


def litert_version() -> str:
    return metadata.version("ai-edge-litert")


def probe_litert() -> dict:
    """LiteRT's answers for the same one-op models: its builtin kernels, and its default
    resolver with XNNPACK (which takes what it implements and leaves the rest to them)."""
    return {"wheel": f"ai-edge-litert {litert_version()}",
            "regenerate": "python -m tests.op_probe --write",
            "op_versions": litert_op_versions(),
            "builtin": all_combinations("litert"), "xnnpack": all_combinations("xnnpack"),
            "zero_points": {"builtin": zero_points("litert"), "xnnpack": zero_points("xnnpack")}}


def probe_all() -> dict:
    return {"wheel": f"tflite-micro {wheel_version()}", "kernels": "reference",
            "regenerate": "python -m tests.op_probe --write",
            "builtin_ops": registered_builtins(), "custom_ops": registered_customs(),
            "combinations": all_combinations(), "constant_inputs": constant_inputs(),
            "zero_points": zero_points()}


#: The cases the test suite re-probes (with every builtin code and a few custom codes): one
#: per kind of finding the table drives.
SAMPLE = [("CONV_2D", ("float32", "int8")), ("CONV_2D", ("int8", "int8")),
          ("FULLY_CONNECTED", ("int16", "int8")), ("TRANSPOSE_CONV", ("float32", "int8")),
          ("UNIDIRECTIONAL_SEQUENCE_LSTM", ("float32", "int8"))]


def sample() -> dict:
    templates = {**WEIGHTED_OPS, **FLOAT_ONLY}
    picked = [(n, single_op(getattr(B, n), *templates[n](*types))) for n, types in SAMPLE]
    picked.append(("DEQUANTIZE", single_op(B.DEQUANTIZE,
                                           *_conversion("DEQUANTIZE", "float16", "float32"))))
    build, index = SHAPE_INPUT_OPS["FILL"]
    fill = try_model(single_op(B.FILL, *build(False)))
    [conv_zp] = [data for name, what, data in zero_point_cases()
                 if (name, what) == ("CONV_2D", "weights:int8")]
    return {"wheel": f"tflite-micro {wheel_version()}", "builtin_ops": registered_builtins(),
            "litert_wheel": f"ai-edge-litert {litert_version()}",
            "conv_weights_zero_point": {rt: try_model(conv_zp, rt) for rt in ("tflm", "litert")},
            "litert": {kind: combinations(picked, kind) for kind in ("litert", "xnnpack")},
            "constant_inputs": {"FILL": {str(index): fill}},
            "custom_ops": registered_customs(["SignalWindow", "SignalFftAutoScale",
                                              "Convolution2DTransposeBias", "ethos-u"]),
            "combinations": combinations(picked)}


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        from devicefit.simulator.infra.fileio import write_atomic

        write_atomic(SUPPORT_FILE, json.dumps(probe_all(), indent=1, sort_keys=True) + "\n")
        write_atomic(LITERT_SUPPORT_FILE,
                     json.dumps(probe_litert(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {SUPPORT_FILE} and {LITERT_SUPPORT_FILE}")
    elif sys.argv[1:] == ["--sample"]:
        print(json.dumps(sample()))
    elif sys.argv[1:] == ["--print"]:
        print(json.dumps(probe_all(), indent=1, sort_keys=True))
    else:
        raise SystemExit("usage: python -m tests.op_probe --write | --sample | --print")
