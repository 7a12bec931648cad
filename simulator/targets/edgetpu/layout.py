"""How many parameter bytes ``edgetpu_compiler`` stores for one mapped operator.

The compiled package's parameters are not the TFLite weights: they are laid out for the
TPU's 4-wide input / 64-wide output compute lanes. Read out of the ``parameters`` of the
public compiled pairs — google-coral/test_data (releases Grouper, compiler 16, and
Frogfish, compiler 15) and ricardodeazambuja/LibrEdgeTPU's templates (compiler 16) —
(``benchmarks/bench_edgetpu_partition.py`` compares every pair; the weights were found byte
for byte in the packages, int8 ones stored with their sign bit flipped as uint8):

- ``matrix`` (CONV_2D, FULLY_CONNECTED with constant weights ``[O, kh, kw, I]``): output
  channels in groups of 64, the last group padded to 64 when O > 64, to a multiple of 16
  when O <= 64; each group holds a per-channel header, then ``kh*kw*pad4(I)`` rows of the
  group's channels × 4 inputs (the input channels padded to 4 at every kernel position).
  mobilenet_v1 (4 widths), mobilenet_v2 (3 heads of 1001/1000-odd classes: one size),
  deeplabv3 (2 widths), posenet, movenet: exact.
- ``per_channel_header``: the header is 4 B per channel (int32 bias) for a per-tensor
  weight scale, 12 B (float32 scale, int32 bias, int32 offset) for per-channel scales
  (movenet, the compiler-16 posenet/bodypix decoders). Per-channel scales that are all
  equal count as one (LibrEdgeTPU's Gabor depthwise: 4 B).
- ``bias_header``: an op without a bias has no int32 bias in its header: 8 B per channel
  with per-channel scales (LibrEdgeTPU dense_256/512/1024: float32 scales then int32
  offsets), nothing with one scale (its tracker FCs: rows only).
- ``four_channels``: O <= 4 with a spatial output keeps 4 channels (header and rows), the
  section padded to 64 B (movenet's and bodypix's 1-channel heads: bias then 12 zero
  bytes, rows of 16 B; LibrEdgeTPU's looming 3×3 convs, its color trackers' 1×1 conv). A
  rank-2 output of 4 channels or fewer fills 16 lanes (the trackers' 1-output FCs: rows of
  one weight lane, three zero-weight lanes and 48 B of padding; their CONCATENATION of two
  [1, 1] tensors).
- ``depthwise_single_input``: a depthwise conv over one input channel (its channel
  multiplier makes its outputs) is laid out as a conv, a ``matrix`` of one input channel
  padded to 4 (LibrEdgeTPU's Gabor bank: 7×7, 1 → 8 channels, 3,200 B in both sizes and
  with or without pooling).
- ``flatten_compaction``: a RESHAPE that moves the positions of a ``[1, H, W, C]`` tensor
  whose channels are off the 4-channel grid into ``[1, N]`` channels, after a TPU op, is a
  16-lane 0/1 matrix over up to 16 positions of ``pad4(C)`` inputs, applied block by block
  (looming: 3×3×1 → 9, 640 B; color trackers: 64×64×1 → 4,096, 1,088 B at both sizes);
  the graph's input (through a QUANTIZE) arrives dense and needs none (bright trackers).
- ``wide_fc_streamed``: a FULLY_CONNECTED over more than 4,096 inputs streams its weights
  every inference even when the cache has room (trackers: 16,384 inputs → 512 KiB
  streamed, 4,096 → cached; the threshold lies between).
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
- ``softmax`` (compiler 16 only: test_data release Grouper, 16.0.384591198): three per-class tables of a 64 B block per 4 classes
  (two int32 tables whose padded classes hold INT_MIN, one float32 table of the input
  scale), 48 B per class padded to 4 classes. keras_lstm_mnist (10 classes): 576 B at the
  end of its package, byte for byte; mobilenet_v1 0.25/0.5/0.75 (1,001 classes): 48,256 B
  = 48,192 + 64, the difference to their compiler-15 twins, which store nothing for it.
  ``softmax_wide``: the 64 B more (a float32 1.0) the 1,001-class ones hold and the
  10-class one does not; devicefit adds it above 64 classes (past one 64-lane group), a
  threshold the two sizes seen do not pin down. ``softmax_from_matrix``: the tables exist
  only when the classes are a conv/FC's output channels (directly or through a RESHAPE that
  moves no position); a SOFTMAX over a flattened image stores none (LibrEdgeTPU's
  trackers: 256, 4,096 and 16,384 positions, from the input or after a 1×1 conv).
- ``channel_selection``: a tensor that CONCATENATION/SPLIT/SPLIT_V along the channels
  assemble, and that something reads (another op, the graph's outputs), is a copy when each
  run of channels it takes starts on the 4-channel grid of its source and of itself;
  otherwise the compiler computes it with a 0/1 selection matrix in the ``matrix`` layout
  (its channels × the channels of its sources, each padded to 4). The chain is traced to the
  tensors no channel op made, so a SPLIT feeding a CONCATENATION costs one matrix per tensor
  read, not per op. tools/split_concat: 3 of its 5 outputs take channels off the grid
  (``input1[1]``, ``input1[2]``, ``[rnn1[0], rnn2[1]]``): 3 × 64 B, its whole package; the
  two at channel 0 of a source (``input1[0]``, ``rnn2[0]``) cost nothing, and so do the
  on-grid concatenations of deeplab_mobilenet_edgetpu_slim (128 + 128) and the
  posenet/bodypix decoders (32 + 32). LibrEdgeTPU's trackers concatenate two [1, 1]
  tensors: one selection of 16 lanes (rank 2) × 2 sources, 192 B. Sizes beyond 4
  channels are the ``matrix`` layout's, not seen; compiler 15 is assumed to do the same.

- ``lstm`` (UNIDIRECTIONAL_SEQUENCE_LSTM, compiler 16), from keras_lstm_mnist alone
  (Grouper; T = 28 steps, I = 28 inputs, H = 20 units, int16 cell): its package's 43,968 B
  cached + 576 B streamed are its FULLY_CONNECTED (9,024 B), its SOFTMAX (576 B) and, for
  the LSTM (4,160 B of TFLite gate weights and biases), 34,368 B + 576 B, every byte placed:
  the four gates as ``matrix`` rows over the concatenated ``[x, h]`` (32 lanes × (4 + 28 +
  20) B each, with the int32 bias header; the weights found byte for byte), and six 0/1
  matrices in the ``matrix`` layout without a header (all 125 ones of the package where the
  layout puts them): 4I × (4 + I) spreading channels 4.. of its input to every 4th lane,
  64 B holding one 1, I × 4I taking every 4th lane back, then 4H × (4 + H), 4I × 4I keeping
  every 4th lane, H × 4H; streamed: 560 int8 zeros (T × H), padded to 64 B. T = I, so
  which of the 28-sized matrices grow with the steps rather than the inputs cannot be told
  from this pair: devicefit takes them as I (they sit on the x side of the gates) and the
  streamed zeros as T × H. Other shapes, CIFG (3 gates), peepholes and projections are
  unverified; a note says so.

Not modelled (``rule == "unmodelled"``): an LSTM whose steps, units or input-to-gate weights
the op does not show, and any LSTM under an earlier compiler: its TFLite constant bytes
stand in, so the figure is low. Another op with constants the table does not know counts
its TFLite bytes (``rule == "tflite"``). The benchmark states the error this leaves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from devicefit.simulator.read.model import Model, Operator, Subgraph
from devicefit.simulator.read.reader import constant_values

#: Rule name → what it says (the evidence is in the module docstring and the benchmark).
RULES: dict[str, str] = {
    "matrix": "conv/FC: 64-channel groups (16-padded below 64), kh*kw*pad4(I) rows each",
    "per_channel_header": "8 B more per output channel (float32 scale, int32 offset) when "
                          "the channels' scales differ",
    "bias_header": "an int32 bias per output channel only when the op has a bias",
    "four_channels": "O <= 4 with a spatial output: 4 channels, the section padded to 64 B",
    "depthwise_single_input": "a depthwise conv over one input channel is laid out as a conv",
    "flatten_compaction": "a RESHAPE of a spatial tensor off the 4-channel grid into channels "
                          "after a TPU op: a 16-lane 0/1 matrix over up to 16 positions",
    "wide_fc_streamed": "a FULLY_CONNECTED over more than 4,096 inputs streams its weights",
    "depthwise": "4-channel groups: header + a 4x4 diagonal block per tap",
    "streamed_operand": "element-wise constant operands streamed, padded to 64 B",
    "shape_operand": "shape ops' int32 constants live in the instructions",
    "softmax": "compiler 16: three tables of 64 B per 4 classes",
    "softmax_from_matrix": "the tables only when the classes are a conv/FC's output channels",
    "softmax_wide": "compiler 16: 64 B more above 64 classes",
    "channel_selection": "channels taken off the 4-channel grid: a 0/1 matrix per tensor read",
    "lstm": "compiler 16, one pair: gate matrices over [x, h] and six 0/1 data-moving matrices",
}

_MATRIX_OPS = frozenset({"CONV_2D", "FULLY_CONNECTED"})
_ELEMENTWISE_OPS = frozenset({"ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"})
#: Ops the compiler stores parameters for that this module does not model (see above).
UNMODELLED = frozenset({"UNIDIRECTIONAL_SEQUENCE_LSTM"})
#: Rules taken from one public compiled model only: a note says so wherever they size an op.
ONE_PAIR_RULES: dict[str, str] = {
    "lstm": "google-coral/test_data keras_lstm_mnist_ptq",
    "depthwise_single_input": "ricardodeazambuja/LibrEdgeTPU's Gabor templates"}
#: A FULLY_CONNECTED over more inputs streams its weights every inference, whatever the
#: cache holds: 16,384 inputs streamed, 4,096 cached (LibrEdgeTPU's tracker templates).
_FC_CACHED_INPUTS_MAX = 4096
#: Positions a flattening RESHAPE's 0/1 matrix covers at most (it is applied block by block).
_COMPACTION_POSITIONS = 16
#: Ops that move channels: what they assemble is traced to the tensors no such op made.
_CHANNEL_OPS = frozenset({"CONCATENATION", "SPLIT", "SPLIT_V"})
#: The first compiler that stores SOFTMAX tables (compiler 15 stores none).
_SOFTMAX_TABLES_FROM = 16
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
class Selection:
    """A tensor the channel ops assemble off the 4-channel grid: its channels and those of
    each source tensor it takes channels from."""

    channels: int
    sources: tuple[int, ...]
    #: Rank of the tensor: a rank-2 one fills 16 lanes even for 4 channels or fewer.
    rank: int = 4


@dataclass(frozen=True)
class LayoutOp:
    """What the layout needs of one mapped op: its kind and constant inputs (in input
    order; for conv/FC/depthwise the first is the weight tensor), its output's channels and
    the channel selections it makes. Built from a model by :func:`stored_ops`, or from the
    numbers the benchmark fixture records."""

    kind: str
    constants: tuple[Constant, ...] = ()
    #: The shape of the op's first output (SOFTMAX's classes, the LSTM's steps and units).
    shape: tuple[int, ...] = ()
    selections: tuple[Selection, ...] = ()
    #: The shape of the op's first input, and the kind of the op that made it ("" for a
    #: graph input), seen through RESHAPE/SQUEEZE ops that move no position (a
    #: ``[1, 1, 1, C]`` → ``[1, C]`` view).
    input_shape: tuple[int, ...] = ()
    source: str = ""

    @property
    def channels(self) -> int:
        return self.shape[-1] if self.shape else 0

    @classmethod
    def of(cls, sg: Subgraph, op: Operator, buffer_sizes: tuple[int, ...] = (),
           stored: bool = False, selections: tuple[Selection, ...] = (),
           source: str = "") -> LayoutOp:
        """The op as the layout sees it; ``stored``: an earlier op stored all its constants
        already, so it has none of its own; ``source``: the kind of the op that made its
        first input."""
        consts = []
        for i in op.inputs:
            if stored or i < 0 or not sg.tensors[i].has_data:
                continue
            t = sg.tensors[i]
            size = buffer_sizes[t.buffer] if t.buffer < len(buffer_sizes) else t.nbytes
            # Per-channel scales that are all equal are one scale to the compiler (gabor's
            # depthwise: 4 B headers).
            consts.append(Constant(t.shape, t.dtype, size,
                                   bool(t.quantization and len(set(t.quantization.scale)) > 1)))
        out = sg.tensors[op.outputs[0]].shape if op.outputs and op.outputs[0] >= 0 else ()
        first = sg.tensors[op.inputs[0]].shape if op.inputs and op.inputs[0] >= 0 else ()
        return cls(op.op_name, tuple(consts), out, selections, first, source)


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


def _header(op: LayoutOp, without: frozenset[str]) -> tuple[int, tuple[str, ...]]:
    """Bytes per output channel ahead of a conv/FC/depthwise's weights, and the rules used:
    an int32 bias (when the op has one), then a float32 scale and an int32 offset when the
    channels' scales differ (4, 8 or 12 B; none for a bias-free per-tensor op)."""
    per_channel = op.constants[0].per_channel and "per_channel_header" not in without
    no_bias = len(op.constants) < 2 and "bias_header" not in without
    return ((0 if no_bias else 4) + (8 if per_channel else 0),
            (*(("per_channel_header",) if per_channel else ()),
             *(("bias_header",) if no_bias else ())))


def _taps(shape: tuple[int, ...]) -> int:
    taps = 1
    for d in shape:
        taps *= d
    return taps


def _lanes(o: int, rank: int, without: frozenset[str]) -> tuple[int, tuple[str, ...]]:
    """Lanes of ``o`` output channels: 4 for a spatial output of 4 channels or fewer."""
    if o <= 4 and rank != 2 and "four_channels" not in without:
        return 4, ("four_channels",)
    return _channels(o), ()


def _matrix(op: LayoutOp, without: frozenset[str], inputs: int | None = None,
            rule: str = "matrix") -> OpParams:
    """``inputs``: the input channels when the weights do not show them (a depthwise
    conv over one channel)."""
    w = op.constants[0]
    o = w.shape[-1] if inputs is not None else w.shape[0]
    header, uses = _header(op, without)
    lanes, four = _lanes(o, len(op.shape), without)
    size = lanes * (header + _taps(w.shape[1:-1]) * _pad(inputs or w.shape[-1], 4))
    fc_inputs = w.shape[-1] if op.kind == "FULLY_CONNECTED" else 0
    if fc_inputs > _FC_CACHED_INPUTS_MAX and "wide_fc_streamed" not in without:
        return OpParams(0, _pad(size, _ALIGN), rule, (rule, *uses, *four, "wide_fc_streamed"))
    return OpParams(_pad(size, _ALIGN), 0, rule, (rule, *uses, *four))


def _depthwise(op: LayoutOp, without: frozenset[str]) -> OpParams:
    w = op.constants[0]
    if op.input_shape[-1:] == (1,) and "depthwise_single_input" not in without:
        return _matrix(op, without, 1, "depthwise_single_input")
    header, uses = _header(op, without)
    return OpParams(_pad(w.shape[-1], 4) * (header + 4 * _taps(w.shape[1:-1])), 0,
                    "depthwise", ("depthwise", *uses))


def _compaction(op: LayoutOp) -> int:
    """The 0/1 matrix of a RESHAPE that moves the positions of a ``[1, H, W, C]`` tensor
    off the 4-channel grid (C not a multiple of 4) into channels, after a TPU op (a graph
    input arrives dense): 16 lanes over up to 16 positions of ``pad4(C)`` inputs (looming:
    3×3 → 9, 640 B; color trackers: 64×64 → 4,096, 1,088 B); 0 when none is needed."""
    shape = op.input_shape
    if len(shape) != 4 or len(op.shape) != 2 or shape[-1] % 4 == 0 or \
            _positions(shape) <= 1 or op.source in ("", "QUANTIZE"):
        return 0
    positions = min(shape[1] * shape[2], _COMPACTION_POSITIONS)
    return _LANES // 4 * (4 + positions * _pad(shape[-1], 4))


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


def _softmax(op: LayoutOp, without: frozenset[str]) -> OpParams:
    if op.source not in _MATRIX_OPS and "softmax_from_matrix" not in without:
        return OpParams(0, 0, "softmax", ("softmax_from_matrix",))
    wide = op.channels > _LANES and "softmax_wide" not in without
    return OpParams(3 * 16 * _pad(op.channels, 4) + (_ALIGN if wide else 0), 0, "softmax",
                    ("softmax", *(("softmax_wide",) if wide else ())))


def _bare(o: int, i: int) -> int:
    """A header-less ``matrix``: ``o`` outputs in lanes, ``pad4(i)`` inputs."""
    return _channels(o) * _pad(i, 4)


def _lstm(op: LayoutOp) -> OpParams | None:
    """keras_lstm_mnist's layout (see the module docstring); None when the op does not
    show its time steps, units and input-to-gate weights."""
    if len(op.shape) != 3 or not op.constants or len(op.constants[0].shape) != 2:
        return None
    steps, h = op.shape[1], op.shape[2]
    i = op.constants[0].shape[1]
    gates = sum(c.shape == (h, i) for c in op.constants)
    cached = (gates * _channels(h) * (4 + _pad(i, 4) + _pad(h, 4))
              + _bare(4 * i, 4 + i) + _ALIGN + _bare(i, 4 * i)
              + _bare(4 * h, 4 + h) + _bare(4 * i, 4 * i) + _bare(h, 4 * h))
    return OpParams(cached, _pad(steps * h, _ALIGN), "lstm", ("lstm",))


def _selection(sel: Selection, without: frozenset[str]) -> tuple[int, tuple[str, ...]]:
    lanes, four = _lanes(sel.channels, sel.rank, without)
    return _pad(lanes * (4 + sum(_pad(c, 4) for c in sel.sources)), _ALIGN), four


def layout_params(op: LayoutOp, without: frozenset[str] = frozenset(),
                  compiler: int = 16) -> OpParams:
    """The compiled parameter bytes of one mapped op by compiler ``compiler`` (the major
    version). ``without``: rules to leave out (the benchmark's leave-one-model-out check
    drops the rules only the held-out model shows); a left-out rule falls back to the
    TFLite bytes (or, for a refinement, the base rule)."""
    tflite = sum(c.nbytes for c in op.constants)
    if op.kind == "UNIDIRECTIONAL_SEQUENCE_LSTM" and compiler >= 16 and \
            "lstm" not in without and (lstm := _lstm(op)) is not None:
        return lstm
    if op.kind in UNMODELLED:
        return OpParams(tflite, 0, "unmodelled")
    if op.selections and "channel_selection" not in without:
        sized = [_selection(s, without) for s in op.selections]
        return OpParams(sum(n for n, _ in sized), 0, "channel_selection",
                        ("channel_selection", *dict.fromkeys(r for _, f in sized for r in f)))
    if op.kind == "SOFTMAX" and compiler >= _SOFTMAX_TABLES_FROM and op.channels and \
            "softmax" not in without:
        return _softmax(op, without)
    has_weights = bool(op.constants) and len(op.constants[0].shape) >= 2
    if op.kind in _MATRIX_OPS and has_weights and "matrix" not in without:
        return _matrix(op, without)
    if op.kind == "DEPTHWISE_CONV_2D" and has_weights and "depthwise" not in without:
        return _depthwise(op, without)
    if op.kind in _ELEMENTWISE_OPS and op.constants and "streamed_operand" not in without:
        return OpParams(0, sum(_streamed(c) for c in op.constants), "streamed_operand",
                        ("streamed_operand",))
    if op.kind == "RESHAPE" and "flatten_compaction" not in without and \
            (compaction := _compaction(op)):
        return OpParams(compaction, 0, "flatten_compaction", ("flatten_compaction",))
    if op.kind in _SHAPE_OPS and op.constants and "shape_operand" not in without and \
            all(c.dtype in ("int32", "int64") for c in op.constants):
        return OpParams(0, 0, "shape_operand", ("shape_operand",))
    return OpParams(tflite, 0, "tflite" if tflite else "")


def _channel_axis(model: Model, sg: Subgraph, op: Operator) -> bool:
    """Whether a channel op moves channels: its axis is the last one, and every tensor it
    moves has that axis with a known size (anything else is left to the other rules)."""
    if op.op_name == "CONCATENATION":
        data, axis = list(op.inputs), op.options.get("axis", 0)
    else:
        if len(op.inputs) < (2 if op.op_name == "SPLIT" else 3):
            return False
        data_input, axis_input = (op.inputs[1], op.inputs[0]) if op.op_name == "SPLIT" \
            else (op.inputs[0], op.inputs[2])
        values = constant_values(model, sg.tensors[axis_input]) if axis_input >= 0 else None
        if values is None or values.size != 1:
            return False
        data, axis = [data_input], int(values.reshape(-1)[0])
    if not data or not op.outputs or any(t < 0 for t in (*data, *op.outputs)):
        return False
    tensors = [sg.tensors[t] for t in (*data, *op.outputs)]
    rank = len(tensors[0].shape)
    return rank > 0 and all(len(t.shape) == rank and t.shape[-1] >= 0 for t in tensors) \
        and isinstance(axis, int) and axis % rank == rank - 1


#: A run of channels: (source tensor, first channel in it, channels, first channel here).
_Run = tuple[int, int, int, int]


def _selections(model: Model, mapped: set[int]) -> dict[int, tuple[Selection, ...]]:
    """The channel selections of the mapped channel ops: each tensor they assemble that is
    read elsewhere, traced through the chain to the tensors no channel op made."""
    sg = model.main
    movers = {i for i in mapped if sg.operators[i].op_name in _CHANNEL_OPS
              and _channel_axis(model, sg, sg.operators[i])}
    runs: dict[int, list[_Run]] = {}

    def of(t: int) -> list[_Run]:
        return runs.get(t) or [(t, 0, sg.tensors[t].shape[-1], 0)]

    for i in sorted(movers):
        op = sg.operators[i]
        if op.op_name == "CONCATENATION":
            here, parts = 0, []
            for t in op.inputs:
                parts += [(src, at, n, here + to) for src, at, n, to in of(t)]
                here += sg.tensors[t].shape[-1]
            runs[op.outputs[0]] = parts
            continue
        source = of(op.inputs[1] if op.op_name == "SPLIT" else op.inputs[0])
        start = 0
        for t in op.outputs:
            end = start + sg.tensors[t].shape[-1]
            runs[t] = [(src, at + max(start - to, 0), min(end, to + n) - max(start, to),
                        max(to - start, 0))
                       for src, at, n, to in source if to < end and to + n > start]
            start = end
    read = set(sg.outputs) | {t for j, op in enumerate(sg.operators) if j not in movers
                              for t in op.inputs}
    out: dict[int, tuple[Selection, ...]] = {}
    for i in sorted(movers):
        sels = tuple(Selection(sg.tensors[t].shape[-1],
                               tuple(sg.tensors[s].shape[-1]
                                     for s in dict.fromkeys(r[0] for r in runs[t])),
                               len(sg.tensors[t].shape))
                     for t in sg.operators[i].outputs
                     if t in read and any(at % 4 or to % 4 for _, at, _, to in runs[t]))
        if sels:
            out[i] = sels
    return out


def stored_ops(model: Model, indices: Iterable[int]) -> dict[int, LayoutOp]:
    """The :class:`LayoutOp` of each op of ``indices`` (main graph, mapped, in order): an op
    whose constants an earlier one of them had has none (weights shared by two ops are
    stored once); the channel selections of the chains of channel ops among them."""
    sg = model.main
    order = list(indices)
    selections = _selections(model, set(order))
    made_by = {t: o for o in sg.operators for t in o.outputs}

    def source(t: int) -> str:
        op = made_by.get(t)
        while op is not None and op.op_name in ("RESHAPE", "SQUEEZE") and op.inputs and \
                _positions(sg.tensors[op.inputs[0]].shape) <= 1:
            op = made_by.get(op.inputs[0])
        return "" if op is None else op.op_name

    seen: set[int] = set()
    out: dict[int, LayoutOp] = {}
    for i in order:
        op = sg.operators[i]
        buffers = {sg.tensors[t].buffer for t in op.inputs if t >= 0 and sg.tensors[t].has_data}
        first = op.inputs[0] if op.inputs else -1
        out[i] = LayoutOp.of(sg, op, model.buffer_sizes, not buffers - seen,
                             selections.get(i, ()), source(first) if first >= 0 else "")
        seen |= buffers
    return out


def _positions(shape: tuple[int, ...]) -> int:
    """Positions of a tensor: its elements over the last (channel) axis."""
    return _elements(shape[:-1]) if shape else 1


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
