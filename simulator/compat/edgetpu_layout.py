"""How many parameter bytes ``edgetpu_compiler`` stores for one mapped operator.

The compiled package's parameters are not the TFLite weights: they are laid out for the
TPU's 4-wide input / 64-wide output compute lanes. Read out of the ``parameters`` of the
google-coral/test_data compiled pairs (``benchmarks/bench_edgetpu_partition.py`` compares
every pair; the weights were found byte for byte in the packages, int8 ones stored with
their sign bit flipped as uint8):

- ``matrix`` (CONV_2D, FULLY_CONNECTED with constant weights ``[O, kh, kw, I]``): output
  channels in groups of 64, the last group padded to 64 when O > 64, to a multiple of 16
  when O <= 64; each group holds a per-channel header, then ``kh*kw*pad4(I)`` rows of the
  group's channels × 4 inputs (the input channels padded to 4 at every kernel position).
  mobilenet_v1 (4 widths), mobilenet_v2 (3 heads of 1001/1000-odd classes: one size),
  deeplabv3 (2 widths), posenet, movenet: exact.
- ``per_channel_header``: the header is 4 B per channel (int32 bias) for a per-tensor
  weight scale, 12 B (float32 scale, int32 bias, int32 offset) for per-channel scales
  (movenet, the compiler-16 posenet/bodypix decoders).
- ``four_channels``: O <= 4 keeps 4 channels (header and rows), the section padded to
  64 B (movenet's and bodypix's 1-channel heads: bias then 12 zero bytes, rows of 16 B).
- ``depthwise`` (DEPTHWISE_CONV_2D): channels in groups of 4, each a header and, per
  kernel tap, a 4×4 block whose diagonal holds the taps (all depthwise models).
- ``streamed_operand``: a constant operand of an element-wise op (SUB/MUL/ADD ...) is not
  cached: it goes to the execution-only executable, streamed every inference even when the
  cache has room — per channel as int32 when it varies along the channels only, else as its
  bytes, padded to 64 B; a one-element operand is folded into the instructions (movenet:
  SUB ``[1,1,1,3]`` → 64 B, MUL ``[48,48,1]`` → 2,304 B, scalars → nothing; its package
  streams exactly 2,368 B).
- ``shape_operand``: int32 constants of shape ops (RESHAPE, PAD, RESIZE_*, TILE ...) are
  compiled into the instructions (deeplab, posenet, movenet: no parameter bytes).

Not modelled (``rule == "unmodelled"``: their TFLite constant bytes stand in, so the
figure is low): UNIDIRECTIONAL_SEQUENCE_LSTM (keras_lstm_mnist: 43,968 B compiled for
9,808 B of TFLite), compiler 16's SOFTMAX (48,256 B for 1,001 classes with no TFLite
constant; compiler 15 stores none), SPLIT (tools/split_concat: 192 B of channel-selection
matrices for one SPLIT and two CONCATENATIONs). Another op with constants the table does
not know counts its TFLite bytes (``rule == "tflite"``). The benchmark states the error
this leaves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from devicefit.simulator.model import Model, Operator, Subgraph

#: Rule name → what it says (the evidence is in the module docstring and the benchmark).
RULES: dict[str, str] = {
    "matrix": "conv/FC: 64-channel groups (16-padded below 64), kh*kw*pad4(I) rows each",
    "per_channel_header": "12 B per output channel with per-channel scales, 4 B without",
    "four_channels": "O <= 4: 4 channels, the section padded to 64 B",
    "depthwise": "4-channel groups: header + a 4x4 diagonal block per tap",
    "streamed_operand": "element-wise constant operands streamed, padded to 64 B",
    "shape_operand": "shape ops' int32 constants live in the instructions",
}

_MATRIX_OPS = frozenset({"CONV_2D", "FULLY_CONNECTED"})
_ELEMENTWISE_OPS = frozenset({"ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"})
#: Ops the compiler stores parameters for that this module does not model (see above).
UNMODELLED = frozenset({"UNIDIRECTIONAL_SEQUENCE_LSTM", "SOFTMAX", "SPLIT", "SPLIT_V"})
_SHAPE_OPS = frozenset({"RESHAPE", "PAD", "PADV2", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR",
                        "TILE", "SPLIT", "SPLIT_V", "STRIDED_SLICE", "SLICE", "TRANSPOSE",
                        "MEAN", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION", "GATHER"})
_LANES = 64
_ALIGN = 64


@dataclass(frozen=True)
class Constant:
    """One constant input of an op, as the layout sees it."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    per_channel: bool = False


@dataclass(frozen=True)
class LayoutOp:
    """What the layout needs of one mapped op: its kind and constant inputs (in input
    order; for conv/FC/depthwise the first is the weight tensor). Built from a model by
    :meth:`of`, or from the numbers the benchmark fixture records."""

    kind: str
    constants: tuple[Constant, ...] = ()

    @classmethod
    def of(cls, sg: Subgraph, op: Operator, buffer_sizes: tuple[int, ...] = ()) -> LayoutOp:
        consts = []
        for i in op.inputs:
            if i < 0 or not sg.tensors[i].has_data:
                continue
            t = sg.tensors[i]
            size = buffer_sizes[t.buffer] if t.buffer < len(buffer_sizes) else t.nbytes
            consts.append(Constant(t.shape, t.dtype, size,
                                   bool(t.quantization and t.quantization.per_channel)))
        return cls(op.op_name, tuple(consts))


@dataclass(frozen=True)
class OpParams:
    """An op's compiled parameter bytes: cached on chip (when they fit) and streamed every
    inference whatever the cache holds; ``rule`` is the layout used ("" for none;
    "unmodelled" or "tflite" when its TFLite bytes stand in)."""

    cached: int = 0
    streamed: int = 0
    rule: str = ""
    #: Every rule that shaped the figure (``rule`` and its refinements).
    uses: tuple[str, ...] = ()


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def _channels(o: int) -> int:
    """Output channels as the lanes hold them."""
    return _pad(o, 16) if o <= _LANES else _pad(o, _LANES)


def _matrix(op: LayoutOp, without: frozenset[str]) -> OpParams:
    w = op.constants[0]
    o = w.shape[0]
    taps = 1
    for d in w.shape[1:-1]:
        taps *= d
    per_channel = w.per_channel and "per_channel_header" not in without
    four = o <= 4 and "four_channels" not in without
    lanes = 4 if four else _channels(o)
    size = lanes * ((12 if per_channel else 4) + taps * _pad(w.shape[-1], 4))
    return OpParams(_pad(size, _ALIGN), 0, "matrix", _uses("matrix", per_channel, four))


def _depthwise(op: LayoutOp, without: frozenset[str]) -> OpParams:
    w = op.constants[0]
    taps = 1
    for d in w.shape[1:-1]:
        taps *= d
    per_channel = w.per_channel and "per_channel_header" not in without
    return OpParams(_pad(w.shape[-1], 4) * ((12 if per_channel else 4) + 4 * taps), 0,
                    "depthwise", _uses("depthwise", per_channel))


def _uses(rule: str, per_channel: bool, four: bool = False) -> tuple[str, ...]:
    return (rule, *(("per_channel_header",) if per_channel else ()),
            *(("four_channels",) if four else ()))


def _streamed(c: Constant) -> int:
    if _elements(c.shape) <= 1:
        return 0  # one value: an immediate of the instructions
    per_channel = all(d == 1 for d in c.shape[:-1])
    data = 4 * c.shape[-1] if per_channel else c.nbytes
    return _pad(data, _ALIGN)


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def layout_params(op: LayoutOp, without: frozenset[str] = frozenset()) -> OpParams:
    """The compiled parameter bytes of one mapped op. ``without``: rules to leave out (the
    benchmark's leave-one-model-out check drops the rules only the held-out model shows);
    a left-out rule falls back to the TFLite bytes (or, for a refinement, the base rule)."""
    tflite = sum(c.nbytes for c in op.constants)
    if op.kind in UNMODELLED:
        return OpParams(tflite, 0, "unmodelled")
    has_weights = bool(op.constants) and len(op.constants[0].shape) >= 2
    if op.kind in _MATRIX_OPS and has_weights and "matrix" not in without:
        return _matrix(op, without)
    if op.kind == "DEPTHWISE_CONV_2D" and has_weights and "depthwise" not in without:
        return _depthwise(op, without)
    if op.kind in _ELEMENTWISE_OPS and op.constants and "streamed_operand" not in without:
        return OpParams(0, sum(_streamed(c) for c in op.constants), "streamed_operand",
                        ("streamed_operand",))
    if op.kind in _SHAPE_OPS and op.constants and "shape_operand" not in without and \
            all(c.dtype in ("int32", "int64") for c in op.constants):
        return OpParams(0, 0, "shape_operand", ("shape_operand",))
    return OpParams(tflite, 0, "tflite" if tflite else "")


def stored_ops(model: Model, indices: Iterable[int]) -> dict[int, LayoutOp]:
    """The :class:`LayoutOp` of each op of ``indices`` (main graph, in order) that has
    constants no earlier one of them had: weights shared by two ops are stored once."""
    sg = model.main
    seen: set[int] = set()
    out: dict[int, LayoutOp] = {}
    for i in indices:
        op = sg.operators[i]
        buffers = {sg.tensors[t].buffer for t in op.inputs if t >= 0 and sg.tensors[t].has_data}
        if buffers - seen:
            out[i] = LayoutOp.of(sg, op, model.buffer_sizes)
        seen |= buffers
    return out


def cache_split(params: list[OpParams], cache: int | None) -> list[bool]:
    """Whether each op's cached parameters are cached on chip: in execution order, an op's
    whole or not at all, while they fit ``cache`` (None: no limit); the rest stream."""
    used = 0
    out = []
    for p in params:
        fits = cache is None or used + p.cached <= cache
        used += p.cached if fits else 0
        out.append(fits)
    return out
