"""Tensor shapes as the runtime resolves them, for models with dynamic dimensions.

A ``.tflite`` with ``shape_signature`` −1 dimensions stores a placeholder size (usually 1)
in every ``shape`` field along them, and those placeholders are often not even consistent
(openWakeWord's mel-spectrogram stores a one-sample input and a convolution output of width
1 behind a 512-wide kernel). LiteRT ignores them: it resizes the inputs and every operator's
prepare computes its outputs from its inputs. :func:`resolve_shapes` does the same for the
main subgraph without a runtime: from the input shapes the user gives (``--input-shape``) or
the ones the runtime uses (the stored input shapes), it propagates shapes through the
operators (and the values of small integer tensors, so ``SHAPE → STRIDED_SLICE → PACK →
RESHAPE`` chains resolve too). Every stage after it (planner, MACs, latency) reads the
resolved shapes. A dimension no rule can resolve is kept at the stored size and named in
:attr:`ShapesReport.unresolved`; the figures then carry no validated band.

:func:`confirm_with_runtime` asks LiteRT itself (``resize_tensor_input`` +
``allocate_tensors`` + one invoke, in a child process); its shapes win and every
difference from the static answer is reported.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from devicefit.simulator.errors import UsageError
from devicefit.simulator.read.model import Model, Operator, Subgraph, Tensor
from devicefit.simulator.read.reader import constant_ints
from devicefit.simulator.report.report import ShapesReport
from devicefit.simulator.target import TARGETS

if TYPE_CHECKING:
    import numpy as np

Shape = tuple[int, ...]
#: A dimension no rule could compute.
UNKNOWN = -1
#: Integer tensors up to this many elements have their values propagated (shape vectors,
#: axes, sizes); bigger ones are data, not shapes.
MAX_VALUE_ELEMENTS = 64


def shape_notes(r: ShapesReport) -> list[str]:
    """One line each for the report's notes."""
    shapes = ", ".join(f"'{name}' {_text(shape)}" for name, shape in r.inputs)
    if r.changed or r.unresolved:
        lines = [f"dynamic dimensions (-1 in shape_signature): shapes resolved by "
                 f"{r.resolved_by} from the input shape(s) {r.source} ({shapes}); "
                 f"{r.changed} tensor shape(s) differ from the file's placeholders"]
    else:
        lines = [f"dynamic dimensions (-1 in shape_signature): at the input shape(s) "
                 f"{r.source} ({shapes}) every shape is the file's own"]
    if r.unresolved:
        lines.append(f"shapes unresolved for {len(r.unresolved)} tensor(s) (e.g. "
                     f"{'; '.join(r.unresolved[:3])}): their sizes are the file's "
                     f"placeholders and the figures carry no validated band")
    if r.disagreements:
        lines.append(f"devicefit's shape inference and LiteRT disagree on "
                     f"{len(r.disagreements)} tensor(s), LiteRT's shapes are used (e.g. "
                     f"{'; '.join(r.disagreements[:3])})")
    if r.runtime_problem:
        lines.append(f"shapes not confirmed by LiteRT: {r.runtime_problem}")
    return lines


def _text(shape: Sequence[int]) -> str:
    return "x".join("?" if d < 0 else str(d) for d in shape) or "scalar"


# --------------------------------------------------------------------------- --input-shape
_SHAPE_TEXT = re.compile(r"^\s*\d+(\s*[x,]\s*\d+)*\s*$")


def parse_input_shape(text: str) -> tuple[str | None, Shape]:
    """``NAME:1x1280``, ``NAME:1,1280`` or (one input) ``1x1280`` → (name or None, shape).

    Tensor names often contain ``:`` themselves (``serving_default_input:0``), so the shape
    is what follows the last one.
    """
    name, _, dims = text.rpartition(":")
    if not _SHAPE_TEXT.match(dims):
        raise UsageError(f"--input-shape {text!r}: expected [NAME:]DIMS with DIMS like 1x1280 "
                         f"or 1,1280")
    shape = tuple(int(d) for d in re.split(r"[x,]", dims.replace(" ", "")))
    if any(d < 1 for d in shape):
        raise UsageError(f"--input-shape {text!r}: every dimension must be at least 1")
    return (name or None), shape


def input_shapes_for(model: Model, given: Sequence[tuple[str | None, Shape]]) -> dict[int, Shape]:
    """Main-subgraph input tensor index → shape, checked against each input's signature."""
    sg = model.main
    by_name = {sg.tensors[i].name: i for i in sg.inputs}
    names = ", ".join(f"'{n}'" for n in by_name) or "none"
    out: dict[int, Shape] = {}
    for name, shape in given:
        if name is None:
            if len(sg.inputs) != 1:
                raise UsageError(f"--input-shape {_text(shape)}: the model has {len(sg.inputs)} "
                                 f"inputs ({names}); name one as NAME:{_text(shape)}")
            index = sg.inputs[0]
        elif name in by_name:
            index = by_name[name]
        else:
            raise UsageError(f"--input-shape: the model has no input '{name}' (inputs: {names})")
        t = sg.tensors[index]
        signature = t.shape_signature or t.shape
        if len(signature) != len(shape) or any(s >= 0 and s != d for s, d in
                                               zip(signature, shape)):
            raise UsageError(f"--input-shape: input '{t.name}' has shape "
                             f"{list(signature)} (-1: any size); {_text(shape)} does not fit it")
        if index in out:
            raise UsageError(f"--input-shape: input '{t.name}' is given twice")
        out[index] = shape
    return out


# --------------------------------------------------------------------------- shape rules
class _Unresolved(Exception):
    """A rule cannot compute an output: an input or a needed value is unknown."""


@dataclass(frozen=True)
class _Constant:
    """A small integer constant of the file: its values in order, as plain ints. Its array
    is built only where a value rule computes with it, so that NumPy is imported only
    then (most models' shape rules read such constants and compute nothing: a new shape,
    an axis, paddings)."""

    values: tuple[int, ...]
    shape: Shape
    dtype: str

    def array(self) -> np.ndarray:
        import numpy as np

        return np.array(self.values, dtype=self.dtype).reshape(self.shape)


def _array(v: np.ndarray | _Constant | None) -> np.ndarray | None:
    return v.array() if isinstance(v, _Constant) else v


@dataclass(frozen=True)
class _Op:
    """What a rule sees of one operator: its input shapes and known small values."""

    op: Operator
    shapes: list[Shape | None]
    values: list[np.ndarray | _Constant | None]

    def shape(self, k: int) -> Shape:
        s = self.shapes[k] if k < len(self.shapes) else None
        if s is None or any(d < 0 for d in s):
            raise _Unresolved
        return s

    def value(self, k: int) -> np.ndarray:
        v = _array(self.values[k] if k < len(self.values) else None)
        if v is None:
            raise _Unresolved
        return v

    def ints(self, k: int) -> list[int]:
        v = self.values[k] if k < len(self.values) else None
        if isinstance(v, _Constant):
            return list(v.values)
        return [int(x) for x in self.value(k).reshape(-1)]

    def opt(self, key: str, default: Any = 0) -> Any:
        """A builtin option as the reader parsed it (an int, a bool, a string, a list):
        the rule converts what it reads."""
        return self.op.options.get(key, default)


Rule = Callable[[_Op], list[Shape]]


def _same(o: _Op) -> list[Shape]:
    return [o.shape(0)]


def broadcast(*shapes: Shape) -> Shape:
    """NumPy/TFLite broadcasting of ``shapes`` (``numpy.broadcast_shapes``' rule, without
    importing NumPy); raises :class:`_Unresolved` if they clash."""
    out = []
    for dims in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1 or any(d < 0 for d in sizes):
            raise _Unresolved
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


def _broadcast(o: _Op) -> list[Shape]:
    return [broadcast(*(o.shape(k) for k in range(len(o.shapes)) if o.shapes[k] is not None))]


def _window(size: int, kernel: int, stride: int, dilation: int, padding: object) -> int:
    if padding == "SAME":
        return math.ceil(size / stride)
    effective = (kernel - 1) * dilation + 1
    out = (size - effective) // stride + 1
    if out < 1:
        raise _Unresolved
    return out


def _spatial(o: _Op, kh: int, kw: int) -> tuple[int, int, int]:
    n, h, w, _ = o.shape(0)
    pad = o.opt("padding", "SAME")
    oh = _window(h, kh, int(o.opt("stride_h", 1)) or 1, int(o.opt("dilation_hfactor", 1)) or 1,
                 pad)
    ow = _window(w, kw, int(o.opt("stride_w", 1)) or 1, int(o.opt("dilation_wfactor", 1)) or 1,
                 pad)
    return n, oh, ow


def _conv(o: _Op) -> list[Shape]:
    out_c, kh, kw, _ = o.shape(1)
    return [(*_spatial(o, kh, kw), out_c)]


def _depthwise(o: _Op) -> list[Shape]:
    _, kh, kw, channels = o.shape(1)
    return [(*_spatial(o, kh, kw), channels)]


def _pool(o: _Op) -> list[Shape]:
    kh, kw = int(o.opt("filter_height", 1)), int(o.opt("filter_width", 1))
    return [(*_spatial(o, kh, kw), o.shape(0)[3])]


def _fully_connected(o: _Op) -> list[Shape]:
    inp, (units, depth) = o.shape(0), o.shape(1)
    if o.opt("keep_num_dims", False):
        return [(*inp[:-1], units)]
    total = math.prod(inp)
    if not depth or total % depth:
        raise _Unresolved
    return [(total // depth, units)]


def _reshape(o: _Op) -> list[Shape]:
    inp = o.shape(0)
    if len(o.shapes) > 1 and o.shapes[1] == (0,):
        target = []  # to a scalar
    elif len(o.shapes) > 1 and o.shapes[1] is not None:
        target = o.ints(1)
    else:
        target = [int(d) for d in o.opt("new_shape", None) or []]
        if not target:
            raise _Unresolved
    total, known = math.prod(inp), math.prod(d for d in target if d != -1)
    if target.count(-1) == 1:
        if not known or total % known:
            raise _Unresolved
        target[target.index(-1)] = total // known
    if target.count(-1) or math.prod(target) != total:
        raise _Unresolved
    return [tuple(target)]


def _axis(axis: int, rank: int) -> int:
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise _Unresolved
    return axis


def _squeeze(o: _Op) -> list[Shape]:
    inp = o.shape(0)
    dims = {_axis(int(a), len(inp)) for a in o.opt("squeeze_dims", None) or []}
    return [tuple(d for i, d in enumerate(inp) if (i not in dims if dims else d != 1))]


def _expand_dims(o: _Op) -> list[Shape]:
    inp = list(o.shape(0))
    axis = _axis(o.ints(1)[0], len(inp) + 1)
    inp.insert(axis, 1)
    return [tuple(inp)]


def _concatenation(o: _Op) -> list[Shape]:
    shapes = [o.shape(k) for k in range(len(o.shapes))]
    axis = _axis(int(o.opt("axis", 0)), len(shapes[0]))
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


def _reduce(o: _Op) -> list[Shape]:
    inp = o.shape(0)
    axes = {_axis(a, len(inp)) for a in o.ints(1)}
    if o.opt("keep_dims", False):
        return [tuple(1 if i in axes else d for i, d in enumerate(inp))]
    return [tuple(d for i, d in enumerate(inp) if i not in axes)]


def _arg_reduce(o: _Op) -> list[Shape]:
    inp = o.shape(0)
    axis = _axis(o.ints(1)[0], len(inp))
    return [tuple(d for i, d in enumerate(inp) if i != axis)]


def _transpose(o: _Op) -> list[Shape]:
    inp, perm = o.shape(0), o.ints(1)
    if sorted(perm) != list(range(len(inp))):
        raise _Unresolved
    return [tuple(inp[p] for p in perm)]


def _pad(o: _Op) -> list[Shape]:
    inp, pads = o.shape(0), o.ints(1)
    if len(pads) != 2 * len(inp):
        raise _Unresolved
    return [tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(inp))]


#: One axis of a NumPy index: an element, a slice, ``...`` or a new axis.
_Index = int | slice | EllipsisType | None


def _view(shape: Shape) -> np.ndarray:
    """A zero-byte array of ``shape``, to let NumPy's indexing compute a slice's shape."""
    import numpy as np

    return np.broadcast_to(np.zeros((), np.int8), shape)


def _strided_index(o: _Op) -> tuple[_Index, ...]:
    """STRIDED_SLICE's begin/end/strides and masks as a NumPy index (same semantics)."""
    begin, end, strides = o.ints(1), o.ints(2), o.ints(3)
    bits = {k: int(o.opt(k, 0) or 0) for k in ("begin_mask", "end_mask", "ellipsis_mask",
                                               "new_axis_mask", "shrink_axis_mask")}
    index: list[_Index] = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides, strict=True)):
        if bits["ellipsis_mask"] >> i & 1:
            index.append(Ellipsis)
        elif bits["new_axis_mask"] >> i & 1:
            index.append(None)
        elif bits["shrink_axis_mask"] >> i & 1:
            index.append(b)
        else:
            if o.opt("offset", False):
                e = b + e
            index.append(slice(None if bits["begin_mask"] >> i & 1 else b,
                               None if bits["end_mask"] >> i & 1 else e, s or 1))
    return tuple(index)


def _strided_slice(o: _Op) -> list[Shape]:
    return [tuple(_view(o.shape(0))[_strided_index(o)].shape)]


def _slice(o: _Op) -> list[Shape]:
    inp, begin, size = o.shape(0), o.ints(1), o.ints(2)
    return [tuple(d - b if s == -1 else s for d, b, s in zip(inp, begin, size, strict=True))]


def _gather(o: _Op) -> list[Shape]:
    params, indices = o.shape(0), o.shape(1)
    axis = _axis(int(o.opt("axis", 0)), len(params))
    batch = int(o.opt("batch_dims", 0))
    return [(*params[:axis], *indices[batch:], *params[axis + 1:])]


def _gather_nd(o: _Op) -> list[Shape]:
    params, indices = o.shape(0), o.shape(1)
    return [(*indices[:-1], *params[indices[-1]:])]


def _batch_matmul(o: _Op) -> list[Shape]:
    lhs, rhs = o.shape(0), o.shape(1)
    if len(lhs) < 2 or len(rhs) < 2:
        raise _Unresolved
    m = lhs[-1] if o.opt("adj_x", False) else lhs[-2]
    n = rhs[-2] if o.opt("adj_y", False) else rhs[-1]
    return [(*broadcast(lhs[:-2], rhs[:-2]), m, n)]


def _split(o: _Op) -> list[Shape]:
    inp = o.shape(1)
    axis = _axis(o.ints(0)[0], len(inp))
    parts = len(o.op.outputs)
    if not parts or inp[axis] % parts:
        raise _Unresolved
    out = list(inp)
    out[axis] //= parts
    return [tuple(out)] * parts


def _split_v(o: _Op) -> list[Shape]:
    inp, sizes = o.shape(0), o.ints(1)
    axis = _axis(o.ints(2)[0], len(inp))
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = inp[axis] - sum(s for s in sizes if s != -1)
    shapes = []
    for s in sizes:
        out = list(inp)
        out[axis] = s
        shapes.append(tuple(out))
    return shapes


def _pack(o: _Op) -> list[Shape]:
    shape = o.shape(0)
    axis = _axis(int(o.opt("axis", 0)), len(shape) + 1)
    out = list(shape)
    out.insert(axis, len(o.shapes))
    return [tuple(out)]


def _unpack(o: _Op) -> list[Shape]:
    inp = o.shape(0)
    axis = _axis(int(o.opt("axis", 0)), len(inp))
    out = tuple(d for i, d in enumerate(inp) if i != axis)
    return [out] * len(o.op.outputs)


def _resize(o: _Op) -> list[Shape]:
    n, _, _, c = o.shape(0)
    h, w = o.ints(1)
    return [(n, h, w, c)]


def _transpose_conv(o: _Op) -> list[Shape]:
    return [tuple(o.ints(0))]


def _shape(o: _Op) -> list[Shape]:
    return [(len(o.shape(0)),)]


def _fill(o: _Op) -> list[Shape]:
    return [tuple(o.ints(0))]


def _tile(o: _Op) -> list[Shape]:
    return [tuple(d * m for d, m in zip(o.shape(0), o.ints(1), strict=True))]


def _broadcast_to(o: _Op) -> list[Shape]:
    return [broadcast(o.shape(0), tuple(o.ints(1)))]


def _space_to_depth(o: _Op) -> list[Shape]:
    n, h, w, c = o.shape(0)
    b = int(o.opt("block_size", 1)) or 1
    return [(n, h // b, w // b, c * b * b)]


def _depth_to_space(o: _Op) -> list[Shape]:
    n, h, w, c = o.shape(0)
    b = int(o.opt("block_size", 1)) or 1
    return [(n, h * b, w * b, c // (b * b))]


def _sequence_rnn(o: _Op) -> list[Shape]:
    # input [batch, time, features] (or time-major), weights [units, features]: every step out.
    return [(*o.shape(0)[:-1], o.shape(1)[0])]


def _range(o: _Op) -> list[Shape]:
    start, limit, delta = (o.ints(k)[0] for k in range(3))
    if not delta:
        raise _Unresolved
    return [(max(0, math.ceil((limit - start) / delta)),)]


def _rfft2d(o: _Op) -> list[Shape]:
    # The last two axes become fft_length[0] × (fft_length[1] / 2 + 1) complex bins.
    inp, (rows, cols) = o.shape(0), o.ints(1)
    return [(*inp[:-2], rows, cols // 2 + 1)]


def _while(o: _Op) -> list[Shape]:
    # Loop-carried values keep their shapes (LiteRT resizes them if the body changes one).
    return [o.shape(k) for k in range(len(o.shapes))]


def _select(o: _Op) -> list[Shape]:
    return [broadcast(o.shape(0), o.shape(1), o.shape(2))]


_UNARY = (
    "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "LOGISTIC", "TANH", "EXP",
    "LOG", "SQRT", "RSQRT", "ABS", "NEG", "QUANTIZE", "DEQUANTIZE", "CAST", "HARD_SWISH", "ELU",
    "GELU", "SQUARE", "SIN", "COS", "FLOOR", "CEIL", "ROUND", "SIGN", "SOFTMAX", "LOG_SOFTMAX",
    "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION", "LOGICAL_NOT", "ZEROS_LIKE",
    "ONES_LIKE", "CUMSUM", "REVERSE_V2", "IDENTITY", "DENSIFY", "ADD_N")
_BINARY = (
    "ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "POW", "FLOOR_DIV",
    "FLOOR_MOD", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL",
    "LOGICAL_AND", "LOGICAL_OR", "PRELU", "ATAN2", "RIGHT_SHIFT", "BITWISE_XOR")

#: op name → output shapes from input shapes (and known small values).
SHAPE_RULES: dict[str, Rule] = {
    **{name: _same for name in _UNARY},
    **{name: _broadcast for name in _BINARY},
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _depthwise, "TRANSPOSE_CONV": _transpose_conv,
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "L2_POOL_2D": _pool,
    "FULLY_CONNECTED": _fully_connected, "BATCH_MATMUL": _batch_matmul,
    "RESHAPE": _reshape, "SQUEEZE": _squeeze, "EXPAND_DIMS": _expand_dims,
    "CONCATENATION": _concatenation, "TRANSPOSE": _transpose,
    "PAD": _pad, "PADV2": _pad, "MIRROR_PAD": _pad,
    **{name: _reduce for name in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
                                  "REDUCE_ANY", "REDUCE_ALL")},
    "ARG_MAX": _arg_reduce, "ARG_MIN": _arg_reduce,
    "STRIDED_SLICE": _strided_slice, "SLICE": _slice, "GATHER": _gather,
    "GATHER_ND": _gather_nd, "SPLIT": _split, "SPLIT_V": _split_v,
    "PACK": _pack, "UNPACK": _unpack,
    "RESIZE_BILINEAR": _resize, "RESIZE_NEAREST_NEIGHBOR": _resize,
    "SHAPE": _shape, "FILL": _fill, "TILE": _tile, "BROADCAST_TO": _broadcast_to,
    "SPACE_TO_DEPTH": _space_to_depth, "DEPTH_TO_SPACE": _depth_to_space,
    "SELECT": _select, "SELECT_V2": _select, "WHILE": _while,
    "UNIDIRECTIONAL_SEQUENCE_RNN": _sequence_rnn, "RANGE": _range,
    "RFFT2D": _rfft2d,
}


# --------------------------------------------------------------------------- value rules
def _values(o: _Op, shapes: list[Shape]) -> Sequence[np.ndarray | None]:
    """The outputs' values where they are small integer vectors computable from known ones
    (shape arithmetic); None where not."""
    name = o.op.op_name
    if name not in ("SHAPE", "SPLIT", "RANGE") and (not o.values or o.values[0] is None):
        return [None] * len(shapes)  # nothing to compute: no NumPy imported for it
    import numpy as np

    if name == "SHAPE":
        return [np.array(o.shape(0), np.int32)]
    if name == "SPLIT" and o.values[1] is not None:
        return np.split(np.asarray(_array(o.values[1])), len(shapes), axis=o.ints(0)[0])
    if name == "RANGE" and shapes[0][0] <= MAX_VALUE_ELEMENTS:
        start, limit, delta = (o.ints(k)[0] for k in range(3))
        return [np.arange(start, limit, delta, dtype=np.int32)]
    args = [_array(v) for v in o.values]
    if not args or args[0] is None:
        return [None] * len(shapes)
    if name == "STRIDED_SLICE":
        return [np.asarray(args[0][_strided_index(o)])]
    known = [v for v in args if v is not None]
    if name in ("PACK", "CONCATENATION") and len(known) == len(args):
        axis = int(o.opt("axis", 0))
        join = np.stack if name == "PACK" else np.concatenate
        return [join([np.asarray(v) for v in known], axis=axis)]
    if name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CAST"):
        return [np.asarray(args[0]).reshape(shapes[0])]
    if name in _INT_ARITHMETIC and len(known) == len(args):
        return [np.asarray(getattr(np, _INT_ARITHMETIC[name])(known[0], known[1]))]
    if name in _INT_REDUCE:
        arr = np.asarray(args[0])
        axes = tuple(_axis(a, arr.ndim) for a in o.ints(1))
        return [np.asarray(getattr(np, _INT_REDUCE[name])(arr, axis=axes,
                                             keepdims=bool(o.opt("keep_dims", False))))]
    if name == "SPLIT_V":
        ends = np.cumsum([s[_axis(o.ints(2)[0], len(shapes[0]))] for s in shapes])[:-1]
        return np.split(np.asarray(args[0]), ends, axis=o.ints(2)[0])
    if name == "GATHER" and args[1] is not None:
        return [np.take(args[0], args[1], axis=int(o.opt("axis", 0)))]
    return [None] * len(shapes)


#: Integer arithmetic on shape values (SHAPE → ... → RESHAPE/STRIDED_SLICE/RANGE chains).
#: (NumPy's functions by name: NumPy is imported only when one computes.)
_INT_ARITHMETIC = {"ADD": "add", "SUB": "subtract", "MUL": "multiply",
                   "FLOOR_DIV": "floor_divide", "FLOOR_MOD": "mod", "MAXIMUM": "maximum",
                   "MINIMUM": "minimum"}
_INT_REDUCE = {"REDUCE_PROD": "prod", "SUM": "sum", "REDUCE_MAX": "max", "REDUCE_MIN": "min"}


def _small_int(t: Tensor) -> bool:
    return t.dtype in ("int32", "int64") and t.num_elements <= MAX_VALUE_ELEMENTS


# --------------------------------------------------------------------------- resolution
def needs_resolution(model: Model) -> bool:
    """True when the main subgraph has dynamic dimensions (-1 in a ``shape_signature``)."""
    return any(t.is_dynamic for t in model.main.tensors)


def resolve_shapes(model: Model, given: Sequence[tuple[str | None, Shape]] = (), *,
                   confirm: bool = True, timeout_s: float = 60
                   ) -> tuple[Model, ShapesReport | None]:
    """``model`` with the main subgraph's shapes resolved from the input shapes (the given
    ones, else those stored in the file), and how; ``(model, None)`` when there is nothing
    to resolve (no dynamic dimension, no given shape).

    ``confirm``: ask LiteRT too (:func:`confirm_with_runtime`) whenever the answer is not
    simply the file's own shapes (a shape was given, one differs, or one is unresolved):
    a model whose stored shapes already agree with its inputs costs no child process.
    """
    if not given and not needs_resolution(model):
        return model, None
    sg = model.main
    inputs = {i: tuple(max(d, 1) for d in sg.tensors[i].shape) for i in sg.inputs if i >= 0}
    inputs.update(input_shapes_for(model, given))
    shapes, unresolved = infer(model, inputs)
    report = ShapesReport(
        inputs=tuple((sg.tensors[i].name, s) for i, s in inputs.items()),
        source="given (--input-shape)" if given else "stored in the file",
        unresolved=tuple(f"'{sg.tensors[i].name}' {_text(shapes[i])}" for i in unresolved))
    differs = any(shapes[t.index] != t.shape for t in sg.tensors if t.index in shapes)
    if confirm and (given or differs or unresolved):
        shapes, report = confirm_with_runtime(model, inputs, shapes, report, timeout_s)
    return apply_shapes(model, shapes, report)


def confirm_with_runtime(model: Model, inputs: Mapping[int, Shape], shapes: dict[int, Shape],
                         report: ShapesReport, timeout_s: float = 60
                         ) -> tuple[dict[int, Shape], ShapesReport]:
    """The shapes of a runtime that resizes inputs (the first target whose record has a
    ``shapes`` hook: LiteRT, in a child process) where it gives them (they win), and where
    they differ from devicefit's own inference, named in ``disagreements``. A refusal or a
    crash is kept as ``runtime_problem`` and devicefit's shapes stand (also when the
    runtime allocated but did not invoke: shapes that depend on values are only set during
    an invoke)."""
    found = next(((t.title, t.shapes) for t in TARGETS.values() if t.shapes is not None), None)
    if found is None:
        return shapes, dataclasses.replace(report, runtime_problem="no runtime here resizes "
                                                                   "inputs")
    runtime, shapes_of = found
    answer = shapes_of(model.path, inputs, timeout_s)
    if not answer.invoked:
        return shapes, dataclasses.replace(report, runtime_problem=answer.problem)
    sg = model.main
    merged = dict(shapes)
    disagreements = []
    for index, theirs in answer.shapes.items():
        if not 0 <= index < len(sg.tensors) or sg.tensors[index].has_data:
            continue
        ours = shapes.get(index)
        if ours is not None and ours != theirs and all(d >= 0 for d in ours):
            disagreements.append(f"'{sg.tensors[index].name}' devicefit {_text(ours)}, "
                                 f"{runtime} {_text(theirs)}")
        merged[index] = theirs
    unresolved = tuple(f"'{sg.tensors[i].name}' {_text(s)}" for i, s in merged.items()
                       if any(d < 0 for d in s))
    return merged, dataclasses.replace(report, resolved_by=runtime, unresolved=unresolved,
                                       disagreements=tuple(disagreements))


def apply_shapes(model: Model, shapes: Mapping[int, Shape], resolution: ShapesReport
                 ) -> tuple[Model, ShapesReport]:
    """``model`` with ``shapes`` (main subgraph tensor index → shape; unknown dims keep the
    stored size) and ``resolution`` with its count of changed tensors."""
    sg = model.main
    tensors = list(sg.tensors)
    changed = 0
    for i, shape in shapes.items():
        t = tensors[i]
        planned = tuple(s if d < 0 else d for d, s in zip(shape, t.shape)) \
            if len(shape) == len(t.shape) and any(d < 0 for d in shape) else \
            tuple(max(d, 0) for d in shape)
        if planned != t.shape:
            tensors[i] = dataclasses.replace(t, shape=planned)
            changed += 1
    main = dataclasses.replace(sg, tensors=tuple(tensors))
    resolved = dataclasses.replace(model, subgraphs=(main, *model.subgraphs[1:]))
    return resolved, dataclasses.replace(resolution, changed=changed)


def infer(model: Model, inputs: Mapping[int, Shape]) -> tuple[dict[int, Shape], list[int]]:
    """Every main-subgraph tensor's shape from the ``inputs``' shapes, in operator order,
    and the tensors left with an unknown dimension (a -1 in their shape)."""
    sg = model.main
    shapes: dict[int, Shape] = {}
    values: dict[int, np.ndarray | _Constant] = {}
    for t in sg.tensors:
        if t.has_data or not t.is_dynamic:
            shapes[t.index] = t.shape  # constants and static tensors are what the file says
        if t.has_data and _small_int(t) and (v := constant_ints(model, t)) is not None:
            values[t.index] = _Constant(v, t.shape, t.dtype)
    shapes.update(inputs)
    for op in sg.operators:
        _infer_op(sg, op, shapes, values)
    unresolved = [t.index for t in sg.tensors if any(d < 0 for d in shapes.get(t.index, ()))]
    return shapes, unresolved


def _infer_op(sg: Subgraph, op: Operator, shapes: dict[int, Shape],
              values: dict[int, np.ndarray | _Constant]) -> None:
    o = _Op(op, [shapes.get(i) if i >= 0 else None for i in op.inputs],
            [values.get(i) if i >= 0 else None for i in op.inputs])
    rule = SHAPE_RULES.get(op.op_name)
    outs: list[Shape] | None = None
    if rule is not None:
        try:
            outs = rule(o)
            if len(outs) < len(op.outputs) or any(d < 0 for s in outs for d in s):
                outs = None
        except (_Unresolved, ValueError, IndexError, TypeError, ZeroDivisionError,
                OverflowError):
            outs = None
    # Without an answer: a rule that cannot compute means the runtime's prepare would not
    # either (a window wider than its input), so the signature's -1 dims are unknown; so
    # are those of a builtin op no rule covers (its outputs may depend on values). A custom
    # op keeps its stored outputs if no input differs from the file's (as Vela set them for
    # its compiled op), else the rest of its output is unknown too.
    changed = any(i >= 0 and shapes.get(i) != sg.tensors[i].shape for i in op.inputs)
    for k, t in enumerate(op.outputs):
        if t < 0:
            continue
        tensor = sg.tensors[t]
        if outs is not None:
            shapes[t] = outs[k]
        elif changed or (tensor.is_dynamic and not op.is_custom):
            signature = tensor.shape_signature or (UNKNOWN,) * len(tensor.shape)
            shapes[t] = tuple(d if d >= 0 else UNKNOWN for d in signature)
        else:
            shapes[t] = tensor.shape
    if outs is None:
        return
    try:
        found = _values(o, outs)
    except (_Unresolved, ValueError, IndexError, TypeError, OverflowError):
        return
    for t, v in zip(op.outputs, found, strict=False):
        if t >= 0 and v is not None and v.size <= MAX_VALUE_ELEMENTS and v.dtype.kind in "iu":
            values[t] = v
