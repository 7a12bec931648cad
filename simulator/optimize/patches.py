"""Patch-based execution of a model's first stage with stock TFLite ops (MCUNetV2's idea).

Vision models peak in their first layers: big feature maps, few channels. Running the first
*stage* (the operators before a split point) once per spatial patch of the stage's output
needs only one patch's intermediates at a time. MCUNetV2 (Lin et al., NeurIPS 2021) does this
in its own runtime; here the ``.tflite`` itself is rewritten so the stock TFLite-Micro and
LiteRT interpreters run it:

- for each cell of an R×C grid over the stage's output, every stage tensor is computed on the
  region its consumers need (the halo of their receptive fields, found backwards from the
  cell), clipped to the tensor;
- a consumer that needs less than what was computed reads a ``SLICE``; one whose window
  reaches past the tensor's border (SAME padding) reads a ``PAD`` filled with the input's zero
  point, exactly what the original kernel assumed outside the image (a max pool's with
  -128, which never wins over the real pixel each window holds), and runs ``VALID``;
- stage operators are cloned with their original weights and options; the patch outputs are
  joined back with ``CONCATENATION`` (same quantization: a copy) into the original tensor,
  which the rest of the graph reads unchanged.

Every value is computed from the same inputs with the same integer arithmetic as before, so
int8 outputs are bit-identical; :func:`patch_model` refuses (:class:`PatchRefused`, with the
reason) whatever it cannot keep exact: float stages, ops that depend on the whole tensor
(MEAN, SOFTMAX, FULLY_CONNECTED ...), average pools that would read the border padding.
"""

from __future__ import annotations

import copy
import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from devicefit.simulator.errors import DevicefitError, UsageError
from devicefit.simulator.estimate.compute import op_work
from devicefit.simulator.plan.lifetimes import live_bytes_per_step, lower_bound
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Operator
from devicefit.simulator.read.reader import parse_model
from devicefit.simulator.read.writer import OFFLINE_MEMORY_ALLOCATION, pack, unpack
from devicefit.simulator.targets.tflm.planner import start_arena
from devicefit.simulator.targets.tflm.scratch import tflm_buffers

#: Ops with a spatial window (their receptive field adds a halo).
WINDOW_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D"})
#: Ops whose output element depends only on the same element of their inputs.
ELEMENTWISE_OPS = frozenset({
    "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "RELU", "RELU6",
    "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "PRELU", "HARD_SWISH", "LOGISTIC", "TANH",
    "QUANTIZE", "ABS", "NEG"})
#: TFLM's CONCATENATION takes at most this many inputs (``kMaxInputNum``).
MAX_CONCAT_INPUTS = 10


class PatchRefused(DevicefitError):
    """The rewrite cannot be exact (or does not apply) for this model, grid or split."""

    exit_code = 2


@dataclass(frozen=True)
class Region:
    """Half-open rows ``[y0, y1)`` and columns ``[x0, x1)`` of a NHWC tensor; may reach past
    the tensor's border (that part is padding)."""

    y0: int
    y1: int
    x0: int
    x1: int

    @property
    def height(self) -> int:
        return self.y1 - self.y0

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    def clip(self, h: int, w: int) -> Region:
        return Region(max(self.y0, 0), min(self.y1, h), max(self.x0, 0), min(self.x1, w))

    def union(self, other: Region) -> Region:
        return Region(min(self.y0, other.y0), max(self.y1, other.y1),
                      min(self.x0, other.x0), max(self.x1, other.x1))


@dataclass(frozen=True)
class PatchPlan:
    """Where to split and how: the stage is ``operators[:split]`` in file order."""

    split: int
    rows: int
    cols: int
    #: The tensor leaving the stage (what the patches are concatenated back into).
    cut_tensor: int

    @property
    def grid(self) -> str:
        return f"{self.rows}x{self.cols}"


def split_points(model: Model) -> tuple[list[int], str]:
    """Split points ``k`` (stage = first ``k`` operators) that a patch rewrite can handle,
    and, when the list is empty or stops early, why no later split works."""
    sg = model.main
    produced: set[int] = set()
    points: list[int] = []
    reason = ""
    for k, op in enumerate(sg.operators):
        problem = _unsupported(model, op)
        if problem:
            reason = f"operator {k} ({op.op_name}) {problem}"
            break
        produced.update(t for t in op.outputs if t >= 0)
        if _cut_tensor(model, k + 1, produced) is not None:
            points.append(k + 1)
    else:
        reason = "every operator is patchable, but the last stage would cover the whole model"
    if points and points[-1] == len(sg.operators):
        points.pop()
    return points, reason


def _unsupported(model: Model, op: Operator) -> str:
    """Why ``op`` cannot run patch by patch exactly ('' when it can)."""
    sg = model.main
    if op.op_name not in WINDOW_OPS | ELEMENTWISE_OPS:
        return "depends on more than a local window of its input (not patchable)"
    if len(op.outputs) != 1:
        return "has several outputs"
    out = sg.tensors[op.outputs[0]]
    # A dynamic batch (-1 in the signature) is fine: the interpreters run the shape, 1.
    sig = out.shape_signature or out.shape
    if len(out.shape) != 4 or out.shape[0] != 1 or any(d < 0 for d in sig[1:]):
        return f"outputs shape {list(sig)}, not a static 1×H×W×C feature map"
    if op.op_name in WINDOW_OPS and any(t >= 0 and not sg.tensors[t].has_data
                                        for t in op.inputs[1:]):
        return "has weights computed at run time (each patch would need them whole)"
    for t in (*op.inputs, op.outputs[0]):
        if t < 0:
            continue
        tensor = sg.tensors[t]
        if tensor.has_data:
            # A constant operand broadcasts per channel; one with a spatial extent would
            # have to be cut per patch too.
            if op.op_name in ELEMENTWISE_OPS and any(d != 1 for d in tensor.shape[-3:-1]):
                return f"reads a constant {list(tensor.shape)} over the whole feature map"
            continue
        if tensor.dtype != "int8":
            return (f"computes in {tensor.dtype}: patches are proven exact for int8 stages "
                    "only")
        if op.op_name in ELEMENTWISE_OPS and tensor.shape != out.shape:
            return f"broadcasts a {list(tensor.shape)} feature map (needs the whole tensor)"
    return ""


def _cut_tensor(model: Model, split: int, produced: set[int]) -> int | None:
    """The single feature map the first ``split`` ops hand to the rest, if there is one."""
    sg = model.main
    crossing = {t for op in sg.operators[split:] for t in op.inputs if t in produced}
    crossing |= {t for t in sg.outputs if t in produced}
    if len(crossing) != 1:
        return None
    t = next(iter(crossing))
    shape = sg.tensors[t].shape
    return t if len(shape) == 4 and shape[1] * shape[2] > 1 else None


def plan_for(model: Model, split: int, rows: int, cols: int) -> PatchPlan:
    """Check ``split`` and the grid against the model; :class:`PatchRefused` says why not."""
    points, reason = split_points(model)
    if split not in points:
        raise PatchRefused(f"cannot split the model after operator {split - 1}: "
                           + (reason if split > (points[-1] if points else 0) else
                              "more than one feature map crosses that point"))
    produced = {t for op in model.main.operators[:split] for t in op.outputs}
    cut = _cut_tensor(model, split, produced)
    assert cut is not None  # split_points checked it
    _, h, w, _ = model.main.tensors[cut].shape
    if not (1 <= rows <= min(h, MAX_CONCAT_INPUTS) and 1 <= cols <= min(w, MAX_CONCAT_INPUTS)):
        raise PatchRefused(f"a {rows}x{cols} grid does not fit the stage output "
                           f"({h}×{w}; at most {MAX_CONCAT_INPUTS} patches per side)")
    if rows * cols < 2:
        raise PatchRefused("a 1x1 grid is the original model")
    return PatchPlan(split, rows, cols, cut)


def _bands(n: int, parts: int) -> list[tuple[int, int]]:
    edges = [round(i * n / parts) for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


@dataclass(frozen=True)
class _Window:
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    pad_top: int
    pad_left: int


def _window(model: Model, op: Operator) -> _Window:
    """The op's effective kernel, stride and leading padding, as TFLite computes them."""
    sg = model.main
    o = op.options
    if op.op_name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        f = sg.tensors[op.inputs[1]].shape
        kh = (f[1] - 1) * int(o.get("dilation_hfactor", 1)) + 1
        kw = (f[2] - 1) * int(o.get("dilation_wfactor", 1)) + 1
    else:
        kh, kw = int(o["filter_height"]), int(o["filter_width"])
    sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
    _, ih, iw, _ = sg.tensors[op.inputs[0]].shape
    _, oh, ow, _ = sg.tensors[op.outputs[0]].shape
    if o.get("padding") == "SAME":  # TFLite: total = (out-1)*stride + k - in, half before
        top = max((oh - 1) * sh + kh - ih, 0) // 2
        left = max((ow - 1) * sw + kw - iw, 0) // 2
    else:
        top = left = 0
    return _Window(kh, kw, sh, sw, top, left)


def _needed(model: Model, op: Operator, out: Region) -> Region:
    """The region of the op's (feature-map) inputs that ``out`` reads."""
    if op.op_name not in WINDOW_OPS:
        return out
    w = _window(model, op)
    return Region(out.y0 * w.stride_h - w.pad_top, (out.y1 - 1) * w.stride_h - w.pad_top + w.kernel_h,
                  out.x0 * w.stride_w - w.pad_left,
                  (out.x1 - 1) * w.stride_w - w.pad_left + w.kernel_w)


class _Builder:
    """Appends tensors, constants, operators and opcodes to an unpacked ``ModelT``."""

    def __init__(self, mt: schema.ModelT) -> None:
        self.mt = mt
        self.sg = mt.subgraphs[0]
        self.ops: list[schema.OperatorT] = []
        self.constants: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        # New feature maps point at an empty buffer (by convention buffer 0; made if not).
        empty = [i for i, buf in enumerate(mt.buffers) if buf.data is None or not len(buf.data)]
        if not empty:
            mt.buffers.append(schema.BufferT())
            empty = [len(mt.buffers) - 1]
        self.empty_buffer = empty[0]

    def opcode(self, builtin: int, version: int) -> int:
        for i, code in enumerate(self.mt.operatorCodes):
            if max(code.builtinCode, code.deprecatedBuiltinCode) == builtin:
                code.version = max(code.version, version)
                return i
        code = schema.OperatorCodeT()
        code.builtinCode, code.deprecatedBuiltinCode = builtin, min(builtin, 127)
        code.version = version
        self.mt.operatorCodes.append(code)
        return len(self.mt.operatorCodes) - 1

    def feature_map(self, like: int, h: int, w: int, name: str) -> int:
        src = self.sg.tensors[like]
        t = schema.TensorT()
        t.shape = [1, h, w, int(src.shape[3])]
        t.type, t.buffer, t.name = src.type, self.empty_buffer, name
        t.quantization = copy.deepcopy(src.quantization)
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def int32_constant(self, values: Sequence[int], shape: list[int]) -> int:
        """A constant int32 tensor, shared by every op that needs the same values (patches
        repeat their slice sizes and paddings; each tensor costs flash)."""
        key = (tuple(values), tuple(shape))
        if key not in self.constants:
            buf = schema.BufferT()
            buf.data = np.frombuffer(struct.pack(f"<{len(values)}i", *values), dtype=np.uint8)
            self.mt.buffers.append(buf)
            t = schema.TensorT()
            t.shape, t.type, t.buffer = list(shape), schema.TensorType.INT32, \
                len(self.mt.buffers) - 1
            t.name = "patch/" + "_".join(str(v) for v in values)
            self.sg.tensors.append(t)
            self.constants[key] = len(self.sg.tensors) - 1
        return self.constants[key]

    def add(self, opcode: int, inputs: list[int], outputs: list[int], options_type: int,
            options: object) -> None:
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = opcode, inputs, outputs
        op.builtinOptionsType, op.builtinOptions = options_type, options
        self.ops.append(op)

    def slice(self, src: int, begin: Sequence[int], size: Sequence[int], name: str) -> int:
        out = self.feature_map(src, size[1], size[2], name)
        self.add(self.opcode(schema.BuiltinOperator.SLICE, 2),
                 [src, self.int32_constant(begin, [4]), self.int32_constant(size, [4])], [out],
                 schema.BuiltinOptions.SliceOptions, schema.SliceOptionsT())
        return out

    def pad(self, src: int, pads: Sequence[int], h: int, w: int, name: str,
            lowest: bool = False) -> int:
        """``PAD`` fills with the tensor's zero point (int8): the value a SAME-padded
        convolution assumed outside the image. With ``lowest``, ``PADV2`` fills with -128,
        which no max-pool window can pick over a real value (each window holds one)."""
        out = self.feature_map(src, h, w, name)
        paddings = self.int32_constant(pads, [4, 2])
        if not lowest:
            self.add(self.opcode(schema.BuiltinOperator.PAD, 2), [src, paddings], [out],
                     schema.BuiltinOptions.PadOptions, schema.PadOptionsT())
            return out
        buf = schema.BufferT()
        buf.data = np.array([np.iinfo(np.int8).min], dtype=np.int8).view(np.uint8)
        self.mt.buffers.append(buf)
        value = schema.TensorT()
        value.shape, value.type, value.buffer, value.name = [1], schema.TensorType.INT8, \
            len(self.mt.buffers) - 1, f"{name}/value"
        value.quantization = copy.deepcopy(self.sg.tensors[src].quantization)  # LiteRT checks
        self.sg.tensors.append(value)
        self.add(self.opcode(schema.BuiltinOperator.PADV2, 2),
                 [src, paddings, len(self.sg.tensors) - 1], [out],
                 schema.BuiltinOptions.PadV2Options, schema.PadV2OptionsT())
        return out

    def concat(self, inputs: list[int], axis: int, out: int) -> None:
        options = schema.ConcatenationOptionsT()
        options.axis = axis
        options.fusedActivationFunction = schema.ActivationFunctionType.NONE
        self.add(self.opcode(schema.BuiltinOperator.CONCATENATION, 2), inputs, [out],
                 schema.BuiltinOptions.ConcatenationOptions, options)


def patch_model(data: bytes, model: Model, plan: PatchPlan) -> bytes:
    """The model with its first ``plan.split`` operators run patch by patch (see module doc).

    Operators are written patch by patch, row-major, each row's patches joined (along W)
    right after its last patch, the rows joined (along H) at the end. An offline arena plan
    in the input is dropped: tensor indices change; the optimizer writes a new one.
    """
    sg = model.main
    stage = sg.operators[:plan.split]
    mt = unpack(data)
    b = _Builder(mt)
    _, _, w, _ = sg.tensors[plan.cut_tensor].shape
    consts = {t.index for t in sg.tensors if t.has_data}
    row_outputs = []
    for r, row_cells in enumerate(_cells(model, plan)):
        cells = [_emit_patch(b, model, stage, consts, plan.cut_tensor, cell, f"patch{r}_{c}")
                 for c, cell in enumerate(row_cells)]
        if len(cells) == 1:
            row_outputs.append(cells[0])
        else:
            row = plan.cut_tensor if plan.rows == 1 else \
                b.feature_map(plan.cut_tensor, row_cells[0].height, w, f"patch{r}/row")
            b.concat(cells, 2, row)
            row_outputs.append(row)
    if plan.rows > 1:
        b.concat(row_outputs, 1, plan.cut_tensor)
    rest = [mt.subgraphs[0].operators[i] for i in range(plan.split, len(sg.operators))]
    mt.subgraphs[0].operators = b.ops + rest
    if mt.metadata:
        mt.metadata = [m for m in mt.metadata
                       if _text(m.name) != OFFLINE_MEMORY_ALLOCATION] or None
    _drop_unused_tensors(mt)
    return pack(mt)


@dataclass(frozen=True)
class _PatchRegions:
    #: Stage tensor → the region this patch computes of it (inside the tensor).
    computed: dict[int, Region]
    #: (op position in the stage, input slot) → the region that op reads (may reach into
    #: the border padding).
    reads: dict[tuple[int, int], Region]


def _patch_regions(model: Model, stage: Sequence[Operator], consts: set[int], cut: int,
                   cell: Region) -> _PatchRegions:
    """Walk the stage backwards from ``cell`` of ``cut``: each tensor is computed on the
    union of what its readers need (their receptive fields), clipped to the tensor."""
    sg = model.main
    reads: dict[tuple[int, int], Region] = {}
    computed: dict[int, Region] = {cut: cell}
    produced = {op.outputs[0] for op in stage}
    for k in range(len(stage) - 1, -1, -1):
        op = stage[k]
        t = op.outputs[0]
        if t not in computed:
            continue  # nothing downstream of this patch reads it
        need = _needed(model, op, computed[t])
        for slot, src in enumerate(op.inputs):
            if src < 0 or src in consts:
                continue
            reads[(k, slot)] = need
            _, sh, sw, _ = sg.tensors[src].shape
            clipped = need.clip(sh, sw)
            if src in produced:
                computed[src] = computed[src].union(clipped) if src in computed else clipped
    return _PatchRegions(computed, reads)


def _cells(model: Model, plan: PatchPlan) -> list[list[Region]]:
    _, h, w, _ = model.main.tensors[plan.cut_tensor].shape
    return [[Region(y0, y1, x0, x1) for x0, x1 in _bands(w, plan.cols)]
            for y0, y1 in _bands(h, plan.rows)]


def stage_mac_ratio(model: Model, plan: PatchPlan) -> tuple[int, int]:
    """(MACs of the stage run whole, MACs of the stage run as ``plan``'s patches).

    Every stage op's MACs are proportional to its output area (:mod:`simulator.estimate.compute`'s
    rules for windows and element-wise ops), so this is exact without building the graph.
    """
    sg = model.main
    stage = sg.operators[:plan.split]
    per_op = {w.op_index: w.macs for w in op_work(model)}
    consts = {t.index for t in sg.tensors if t.has_data}
    whole = sum(per_op[op.index] for op in stage)
    patched = 0.0
    for row in _cells(model, plan):
        for cell in row:
            computed = _patch_regions(model, stage, consts, plan.cut_tensor, cell).computed
            for op in stage:
                region = computed.get(op.outputs[0])
                if region is not None:
                    _, h, w, _ = sg.tensors[op.outputs[0]].shape
                    patched += per_op[op.index] * region.height * region.width / (h * w)
    return whole, round(patched)


def _emit_patch(b: _Builder, model: Model, stage: Sequence[Operator], consts: set[int],
                cut: int, cell: Region, name: str) -> int:
    """Append one patch's operators; return the tensor holding ``cell`` of ``cut``."""
    sg = model.main
    regions = _patch_regions(model, stage, consts, cut, cell)
    computed, reads = regions.computed, regions.reads
    produced = {op.outputs[0] for op in stage}
    # Forwards: clone each needed op on its region, slicing and padding what it reads.
    local: dict[int, int] = {}  # original tensor → this patch's tensor
    for k, op in enumerate(stage):
        t = op.outputs[0]
        if t not in computed:
            continue
        region = computed[t]
        inputs = []
        for slot, src in enumerate(op.inputs):
            if (k, slot) not in reads:
                inputs.append(src)
                continue
            # A read of a tensor the stage produces made _patch_regions compute it.
            have = computed[src] if src in produced else \
                Region(0, sg.tensors[src].shape[1], 0, sg.tensors[src].shape[2])
            inputs.append(_read(b, model, local.get(src, src), src, have, reads[(k, slot)],
                                op, f"{name}/op{k}_in{slot}"))
        out = b.feature_map(t, region.height, region.width, f"{name}/t{t}")
        clone = copy.deepcopy(b.sg.operators[op.index])
        clone.inputs, clone.outputs = inputs, [out]
        if op.op_name in WINDOW_OPS:
            clone.builtinOptions.padding = schema.Padding.VALID
        b.ops.append(clone)
        local[t] = out
    # The cut tensor may have been computed beyond the cell for a reader inside the stage.
    return _read(b, model, local[cut], cut, computed[cut], cell, None, f"{name}/out")


def _read(b: _Builder, model: Model, tensor: int, original: int, have: Region, need: Region,
          reader: Operator | None, name: str) -> int:
    """``tensor`` (holding ``have`` of ``original``) cut and padded to ``need``."""
    shape = model.main.tensors[original].shape
    inside = need.clip(shape[1], shape[2])
    if inside != have:
        tensor = b.slice(tensor, [0, inside.y0 - have.y0, inside.x0 - have.x0, 0],
                         [1, inside.height, inside.width, shape[3]], name + "/slice")
    if inside != need:
        op = reader.op_name if reader is not None else ""
        if reader is not None and op == "AVERAGE_POOL_2D":
            raise PatchRefused(f"operator {reader.index} (AVERAGE_POOL_2D) has SAME padding "
                               "at the image border: it averages over the real pixels only, "
                               "a padded patch would count the padding (not exact)")
        pads = [0, 0, inside.y0 - need.y0, need.y1 - inside.y1,
                inside.x0 - need.x0, need.x1 - inside.x1, 0, 0]
        tensor = b.pad(tensor, pads, need.height, need.width, name + "/pad",
                       lowest=op == "MAX_POOL_2D")
    return tensor


def _text(name: str | bytes | None) -> str:
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)


def _drop_unused_tensors(mt: schema.ModelT) -> None:
    """Remove the replaced stage's tensors (no operator reads or writes them any more)."""
    sg = mt.subgraphs[0]
    used = {t for op in sg.operators for t in (*op.inputs, *op.outputs,
                                                *(op.intermediates or [])) if t >= 0}
    used |= set(sg.inputs) | set(sg.outputs)
    keep = [i for i in range(len(sg.tensors)) if i in used]
    remap = {old: new for new, old in enumerate(keep)}
    sg.tensors = [sg.tensors[i] for i in keep]

    def fix(refs: list[int] | None) -> list[int] | None:
        return None if refs is None else [remap[t] if t >= 0 else t for t in refs]

    for op in sg.operators:
        op.inputs, op.outputs, op.intermediates = fix(op.inputs), fix(op.outputs), \
            fix(op.intermediates)
    sg.inputs, sg.outputs = fix(sg.inputs), fix(sg.outputs)
    for sig in mt.signatureDefs or []:
        for io in (*(sig.inputs or []), *(sig.outputs or [])):
            io.tensorIndex = remap[io.tensorIndex]




#: Default limit on the extra multiply-accumulates the halo recomputation may cost.
DEFAULT_MAX_MAC_OVERHEAD = 0.20
#: Largest patches per side the automatic search tries (more patches: more halo and ops).
MAX_AUTO_SIDE = 6
#: Candidates planned for real (packing can stay above a candidate's bound, so the best
#: bound is not always the best head).
TRIED = 3
#: What the search minimises. ``arena``: the arena TFLM needs to start (head + tail + what
#: it needs while loading), since every cloned operator keeps its own OpData and per-channel
#: arrays in the tail; a patched graph is then only kept when that arena is smaller than the
#: plain offline plan's. ``head``: the head alone (the tensor arena MCUNetV2 reports; for a
#: head placed in memory of its own, TFLM's two-buffer allocator), the whole arena may grow.
OBJECTIVES = ("arena", "head")


@dataclass(frozen=True)
class ArenaFigures:
    """One file's TFLM arena: head, tail and the arena it needs to start, on one build."""

    head_bytes: int
    tail_bytes: int
    #: The smallest arena TFLM starts in (predicted: ``arena_required_bytes``, at least head
    #: + tail; measured: head + tail as the RecordingMicroAllocator counts them).
    start_bytes: int
    #: The build the figures are for ("predicted, 4-byte pointers, cmsis-nn kernels" ...).
    build: str

    @property
    def whole_bytes(self) -> int:
        return self.head_bytes + self.tail_bytes


@dataclass(frozen=True)
class PatchCandidate:
    """One (split, grid) the search weighed: its compute overhead and, when built (within
    the MAC limit), its peak of live bytes in the order written (the head an offline plan
    reaches for it) and the arena TFLM would need with that head."""

    split: int
    grid: str
    mac_overhead_pct: float
    within_limit: bool
    bound_bytes: int | None = None
    arena_bytes: int | None = None


@dataclass(frozen=True)
class PatchReport:
    """What ``--patches`` chose, and the head vs overhead pairs it chose from (each step of
    the optimizer gives a new one: :meth:`with_choice`, :meth:`without_patches`,
    ``dataclasses.replace``)."""

    requested: str
    objective: str
    max_mac_overhead_pct: float
    #: Whole-tensor execution's best-order bound: what patches have to beat.
    bound_whole_tensor_bytes: int
    #: The arena of the plain offline plan (no patches, always a candidate) and of the best
    #: patched graph planned (kept or not), predicted for the profile's build and, after
    #: verification, measured in TFLM (the host wheel).
    plain_arena: ArenaFigures | None = None
    patched_arena: ArenaFigures | None = None
    #: Which patched graph ``patched_arena`` is: its grid and split point.
    patched_grid: str | None = None
    patched_split: int | None = None
    plain_measured: ArenaFigures | None = None
    patched_measured: ArenaFigures | None = None
    grid: str | None = None
    #: The stage is the first ``split`` operators of the original file.
    split: int | None = None
    cut_tensor: str | None = None
    operators_before: int = 0
    operators_after: int = 0
    macs_before: int = 0
    macs_after: int = 0
    #: The .tflite's size (flash) before/after: every patch adds operators and tensors.
    model_bytes_before: int = 0
    model_bytes_after: int = 0
    #: Estimated on-device latency (the profile's cost model) before/after, when it has one.
    estimated_ms_before: float | None = None
    estimated_ms_after: float | None = None
    candidates: list[PatchCandidate] = field(default_factory=list)
    #: Why no patched model was kept (None when one was).
    refused: str | None = None

    @property
    def mac_overhead_pct(self) -> float:
        return 100.0 * (self.macs_after - self.macs_before) / self.macs_before \
            if self.macs_before else 0.0

    def with_choice(self, choice: PatchChoice, model: Model) -> PatchReport:
        """This report with ``choice`` (of ``model``) as the patched graph kept."""
        return dataclasses.replace(
            self, grid=choice.plan.grid, split=choice.plan.split,
            cut_tensor=model.main.tensors[choice.plan.cut_tensor].name,
            operators_after=len(choice.model.main.operators), macs_after=_macs(choice.model))

    def without_patches(self, reason: str) -> PatchReport:
        """This report with no patched graph kept, and why (the candidates stay, for the
        record)."""
        return dataclasses.replace(
            self, refused=reason, grid=None, split=None, cut_tensor=None,
            operators_after=self.operators_before, macs_after=self.macs_before,
            estimated_ms_after=self.estimated_ms_before,
            model_bytes_after=self.model_bytes_before)


@dataclass(frozen=True)
class PatchChoice:
    plan: PatchPlan
    data: bytes
    model: Model
    #: Peak of live bytes in the written order: the head if the packing reaches it.
    bound: int


def parse_grid(text: str) -> tuple[int, int] | None:
    """``auto`` → None; ``RxC`` → (R, C); anything else is a usage error."""
    if text == "auto":
        return None
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--patches takes 'auto' or a grid 'RxC' such as 3x3, not {text!r}") \
            from None
    if rows < 1 or cols < 1 or rows * cols < 2:
        raise UsageError(f"--patches {text}: a grid needs at least 2 patches")
    return rows, cols


def _macs(model: Model) -> int:
    return sum(w.macs for w in op_work(model))


def build_name(profile: Profile) -> str:
    """The build a prediction for ``profile`` is for."""
    return (f"predicted, {profile.runtime.pointer_bytes}-byte pointers, "
            f"{profile.runtime.kernels} kernels")


def predicted_start(model: Model, profile: Profile, head: int) -> int:
    """The arena TFLM needs to start ``model`` on ``profile``'s build once an offline plan
    gives it a head of ``head``: simulate's start-arena model with that head (or the build's
    own peak, when its kernels' scratch buffers, placed online, need more)."""
    buffers = tflm_buffers(model, pointer_bytes=profile.runtime.pointer_bytes,
                           kernels=profile.runtime.kernels)
    return start_arena(model, buffers, profile).required(max(head, lower_bound(buffers)))


@dataclass(frozen=True)
class PatchSettings:
    requested: str
    max_mac_overhead: float = DEFAULT_MAX_MAC_OVERHEAD
    objective: str = "arena"


def search_patches(data: bytes, model: Model, settings: PatchSettings, profile: Profile,
                   whole_head: int, bound_whole_tensor: int, plain: ArenaFigures
                   ) -> tuple[list[PatchChoice], PatchReport]:
    """Build every (split, grid) candidate within the MAC limit; return the best
    :data:`TRIED` by ``settings.objective`` (ties: the smaller overhead), best first.

    A candidate's head is taken as the peak of live bytes in its written (patch-by-patch)
    order, which the offline packing reaches or nearly reaches: the caller plans the first
    few for real, keeps the best and records it with :meth:`PatchReport.choose`.
    ``whole_head`` is what whole-tensor execution reaches, ``plain`` that plan's arena
    (the baseline every candidate is weighed against);
    ``settings.requested`` is ``auto`` or a fixed ``RxC`` grid.
    """
    if settings.objective not in OBJECTIVES:
        raise UsageError(f"patch objective {settings.objective!r}: one of "
                         f"{', '.join(OBJECTIVES)}")
    grid = parse_grid(settings.requested)
    limit = settings.max_mac_overhead
    macs_before = _macs(model)
    report = PatchReport(settings.requested, settings.objective, round(100 * limit, 2),
                         bound_whole_tensor, plain_arena=plain,
                         operators_before=len(model.main.operators), macs_before=macs_before)
    if len(model.subgraphs) > 1:
        return [], report.without_patches("models with control flow (several subgraphs) are "
                                          "not patched")
    points, reason = split_points(model)
    if not points:
        return [], report.without_patches(f"no first stage to patch: {reason}")
    candidates: list[PatchCandidate] = []
    by_arena = settings.objective == "arena"
    grids = [grid] if grid else [(r, c) for r in range(1, MAX_AUTO_SIDE + 1)
                                 for c in range(1, MAX_AUTO_SIDE + 1)
                                 if r * c >= 2 and abs(r - c) <= 1]
    best: tuple[int, float] | None = None
    ranked: list[tuple[tuple[int, float], PatchChoice]] = []
    errors: list[str] = []  # splits or grids that do not apply
    refusals: list[str] = []  # candidates within the limit that cannot be exact
    live = live_bytes_per_step(tflm_buffers(model))
    least_floor = whole_head
    for split in points:
        plans = []
        for rows, cols in grids:
            try:
                plans.append(plan_for(model, split, rows, cols))
            except PatchRefused as exc:
                if grid:  # in auto mode a grid too fine for one split is just skipped
                    errors.append(str(exc))
        if not plans:
            continue
        # Operators after the stage run as before: their peak is a floor for this split,
        # and joining the patches holds the stage output twice. More operators only add
        # to the tail, so the plain plan's tail is a floor for the patched graph's.
        cut_bytes = model.main.tensors[plans[0].cut_tensor].nbytes
        floor = max([2 * cut_bytes, *live[split + 1:]])
        least_floor = min(least_floor, floor)
        if floor >= whole_head or (best is not None and
                                   floor + (plain.tail_bytes if by_arena else 0) >= best[0]):
            continue
        for plan in plans:
            stage_whole, stage_patched = stage_mac_ratio(model, plan)
            overhead = (stage_patched - stage_whole) / macs_before if macs_before else 0.0
            if overhead > limit + 1e-12:
                candidates.append(PatchCandidate(split, plan.grid, round(100 * overhead, 2),
                                                 False))
                continue
            try:
                out = patch_model(data, model, plan)
            except PatchRefused as exc:
                refusals.append(str(exc))
                continue
            patched = parse_model(out, "<patched>")
            peak = lower_bound(tflm_buffers(patched))
            arena = predicted_start(patched, profile, peak)
            candidates.append(PatchCandidate(split, plan.grid, round(100 * overhead, 2), True,
                                             peak, arena))
            key = (arena if by_arena else peak, overhead)
            ranked.append((key, PatchChoice(plan, out, patched, peak)))
            if best is None or key < best:
                best = key
    report = dataclasses.replace(report, candidates=candidates)
    if best is None:
        return [], report.without_patches(
            refusals[0] if refusals else
            f"no split and grid stays within +{100 * limit:g} % MACs (the least "
            f"overhead found: +{min(c.mac_overhead_pct for c in candidates):g} %)"
            if candidates else errors[0] if errors else
            f"no split can beat whole-tensor execution's head of {whole_head:,} bytes: after "
            f"every split, the operators left (or joining the patches) need at least "
            f"{least_floor:,}")
    return [choice for _, choice in sorted(ranked, key=lambda kc: kc[0])[:TRIED]], report
