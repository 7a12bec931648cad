"""An estimate of LiteRT's CPU tensor arena (``ArenaPlanner`` + ``SimpleMemoryArena``).

LiteRT (the TFLite interpreter) plans non-constant, non-variable tensors in one arena:
- lifetimes in node numbers: graph inputs and variables are allocated at node 0; an op's
  outputs at the op's node; a tensor is freed at the node whose input use drops its
  reference count to 0; graph inputs (kept by ``preserve_inputs``), graph outputs, variables
  and outputs nobody reads are never freed;
- in place: some kernels' output takes an input's buffer (:func:`in_place_outputs`), which
  then lives until the output's last use;
- order: tensors that live through the whole run first (by index), then by size descending,
  then by allocation node;
- placement: *best fit* — of the gaps between already-placed, time-overlapping tensors that
  are large enough, the smallest; else after the last of them; offsets 64-byte aligned
  (``kDefaultTensorAlignment``).

What it does not see, and why the figure is an estimate: kernel temporaries (im2col and
the like, requested in ``Prepare``), the memory of delegates (XNNPACK packs weights and has
its own workspace; the Edge TPU keeps parameters on the device), and the interpreter's heap.
:func:`plan_subgraph` (a signature's subgraph, for the training plan) adds the kernels'
buffers :func:`kernel_buffers` knows, ruy's workspace and a measured per-operator figure for
the interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devicefit.simulator.plan.lifetimes import align_up, live_bytes_per_step
from devicefit.simulator.plan.planners.base import check_plan
from devicefit.simulator.plan.planners.index import PlacedIndex
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import DTYPE_BYTES, Model, Operator, Subgraph, Tensor
from devicefit.simulator.types import Buffer, MemoryPlan

LITERT_ALIGNMENT = 64


def litert_buffers(model: Model, order: Sequence[int] | None = None, subgraph: int = 0,
                   temporaries: bool = False) -> list[Buffer]:
    """A subgraph's arena tensors with LiteRT's lifetimes, in LiteRT's placement order (each
    subgraph has an arena of its own: the main one runs inference, a signature's its method).

    Steps are LiteRT node numbers (operator ``order[k]`` is node ``k``); a tensor that is
    never freed lives to step ``len(operators)``. ``temporaries``: also the kernels'
    temporaries :func:`kernel_buffers` places in the arena, live at their operator's node
    alone.
    """
    sg = model.subgraphs[subgraph]
    ops = [sg.operators[i] for i in order] if order is not None else list(sg.operators)
    end = len(ops)
    refs = [0] * len(sg.tensors)
    for t in (*sg.outputs, *sg.inputs):
        if t >= 0:
            refs[t] += 1  # outputs are never overwritten; preserve_inputs keeps inputs
    for op in ops:
        for t in op.inputs:
            if t >= 0:
                refs[t] += 1
    shared = in_place_outputs(sg, ops, refs)
    alloc: dict[int, int] = {}
    dealloc: dict[int, int] = {}
    for t in sg.inputs:
        if t >= 0:
            alloc.setdefault(t, 0)
    for tensor in sg.tensors:
        if tensor.is_variable:
            alloc.setdefault(tensor.index, 0)
    # A shared output's uses count on the tensor whose buffer it shares.
    refs = [r if t not in shared else 0 for t, r in enumerate(refs)]
    for op in ops:
        for t in op.inputs:
            if t in shared:
                refs[shared[t]] += 1
    for node, op in enumerate(ops):
        for t in op.outputs:
            if t >= 0:
                alloc.setdefault(t, node)
        for t in op.inputs:
            if t >= 0:
                t = shared.get(t, t)
                refs[t] -= 1
                if refs[t] == 0 and t in alloc:
                    dealloc[t] = node

    def arena(t: int) -> bool:
        tensor = sg.tensors[t]
        return not tensor.has_data and not tensor.is_variable and t not in shared

    nbytes = {t: sg.tensors[t].num_elements * DTYPE_BYTES.get(sg.tensors[t].dtype, 0)
              for t in alloc if arena(t)}
    names = {t: sg.tensors[t].name for t in nbytes}
    requested_by: dict[int, int] = {}
    if temporaries:
        # LiteRT adds a kernel's temporaries after the file's tensors, node by node: they
        # are placed by the same order, keyed by the index LiteRT gives them.
        temps = ((node, op, kb) for node, op in enumerate(ops)
                 for kb in kernel_buffers(sg, op) if kb.place == ARENA)
        for t, (node, op, kb) in enumerate(temps, start=len(sg.tensors)):
            alloc[t], dealloc[t], nbytes[t] = node, node, kb.size
            names[t], requested_by[t] = f"{op.op_name} {kb.what}", op.index

    def whole_run(t: int) -> bool:
        return alloc[t] == 0 and t not in dealloc

    candidates = sorted(nbytes, key=lambda t: (0, t, 0, 0) if whole_run(t)
                        else (1, -nbytes[t], alloc[t], t))
    return [Buffer(tensor=-1 if t in requested_by else t, name=names[t], size=nbytes[t],
                   first=alloc[t], last=dealloc.get(t, end),
                   kind="scratch" if t in requested_by else "tensor", subgraph=subgraph,
                   op=requested_by.get(t, -1)) for t in candidates if nbytes[t] > 0]


#: Kernels LiteRT registers as able to write their output over an input's buffer
#: (``TfLiteRegistration::inplace_operator``: add.cc, sub.cc, mul.cc, div.cc,
#: activations.cc's SOFTMAX, dynamic_update_slice.cc; reshape.cc, squeeze.cc,
#: expand_dims.cc, bitcast.cc leave the data unmodified): how many leading inputs may be
#: shared, and whether the kernel changes the data.
_IN_PLACE = {"ADD": (2, True), "SUB": (2, True), "MUL": (2, True), "DIV": (2, True),
             "SOFTMAX": (1, True), "DYNAMIC_UPDATE_SLICE": (1, True),
             "RESHAPE": (1, False), "SQUEEZE": (1, False), "EXPAND_DIMS": (1, False),
             "BITCAST": (1, False)}


def in_place_outputs(sg: Subgraph, ops: Sequence[Operator], refs: Sequence[int]
                     ) -> dict[int, int]:
    """Output → the tensor whose arena buffer it shares, as ``ArenaPlanner::
    IdentifyInPlaceTensors`` decides in node order. ``refs``: each tensor's uses by the
    nodes, plus one for a subgraph input or output. An output shares an input of an in-place
    kernel that is an arena tensor (not a constant, a variable or a subgraph input) unless
    it is a subgraph output; a kernel that changes the data also needs the input the same
    size, above 4 bytes, with no other use, and the buffer's owner with no other use."""
    inputs, outputs = set(sg.inputs), set(sg.outputs)
    shared: dict[int, int] = {}
    for op in ops:
        rule = _IN_PLACE.get(op.op_name)
        if rule is None or not op.outputs or op.outputs[0] < 0 or op.outputs[0] in outputs:
            continue
        out = sg.tensors[op.outputs[0]]
        count, changes = rule
        for t in op.inputs[:count]:
            if t < 0 or t in inputs:
                continue
            x = sg.tensors[t]
            if x.has_data or x.is_variable or x.dtype == "resource":
                continue
            if changes and (x.nbytes != out.nbytes or x.nbytes <= 4 or refs[t] > 1):
                continue
            owner = shared.get(t, t)
            if changes and refs[owner] > 1:
                break  # LiteRT stops at the first shareable input
            shared[out.index] = owner
            break
    return shared


#: Where a kernel's buffer lives: planned in the arena with the tensors, live at the op's
#: node alone (``kTfLiteArenaRw``); in LiteRT's persistent arena for as long as the
#: interpreter (``kTfLiteArenaRwPersistent``); or a dynamic tensor the kernel mallocs and
#: keeps (``kTfLiteDynamic``).
ARENA, PERSISTENT, DYNAMIC = "arena", "persistent", "dynamic"

#: Hybrid kernels (float input, quantized weights) quantize the input on the fly.
_QUANTIZED_WEIGHTS = ("int8", "uint8", "int4")


@dataclass(frozen=True)
class KernelBuffer:
    """A buffer a kernel asks LiteRT for in ``Prepare`` (a temporary of its node)."""

    what: str
    size: int
    place: str


def kernel_buffers(sg: Subgraph, op: Operator) -> list[KernelBuffer]:
    """The buffers LiteRT's builtin kernels request for ``op`` in ``Prepare`` (single-threaded
    CPU, no delegate), for the kernels a training graph leans on; each rule cites the kernel
    (LiteRT ``tflite/kernels/``) it comes from. Other kernels' temporaries are not known."""
    if len(op.inputs) < 2 or min(op.inputs[:2]) < 0 or not op.outputs or op.outputs[0] < 0:
        return []  # not a kernel these rules know (a hostile file's operator)
    if op.op_name == "TRANSPOSE_CONV":
        return _transpose_conv(sg, op)
    x, w, y = sg.tensors[op.inputs[0]], sg.tensors[op.inputs[1]], sg.tensors[op.outputs[0]]
    if x.dtype != "float32":
        return []
    hybrid = w.dtype in _QUANTIZED_WEIGHTS
    if op.op_name == "CONV_2D" and len(x.shape) == len(w.shape) == len(y.shape) == 4:
        return _conv(op, x, w, y, hybrid)
    if op.op_name == "FULLY_CONNECTED" and hybrid and w.dtype != "int4" and len(w.shape) == 2:
        # fully_connected.cc PrepareImpl, is_hybrid (the int4 path packs its own): the
        # input quantized to int8, per batch row a scale and an offset, int32 accumulators,
        # and the weights' row sums, kept (persistent).
        batch, units = x.num_elements // max(w.shape[1], 1), w.shape[0]
        return [KernelBuffer("quantized input", x.num_elements, ARENA),
                KernelBuffer("scaling factors", 4 * batch, ARENA),
                KernelBuffer("accumulators", 4 * units * batch, ARENA),
                KernelBuffer("input offsets", 4 * batch, ARENA),
                KernelBuffer("row sums", 4 * units, PERSISTENT)]
    if op.op_name == "BATCH_MATMUL":
        # batch_matmul.cc: the transposed lhs always; the rhs in the arena unless it is a
        # constant, which the kernel transposes once into memory of its own.
        return [KernelBuffer("transposed lhs", x.nbytes, ARENA),
                *([] if w.has_data else [KernelBuffer("transposed rhs", w.nbytes, ARENA)])]
    return []


def _conv(op: Operator, x: Tensor, w: Tensor, y: Tensor, hybrid: bool) -> list[KernelBuffer]:
    """conv.cc Prepare, generic optimized kernel (one thread): im2col unless the kernel is
    1x1 with unit strides and dilations, of the weights' type when hybrid (int4 unpacked to
    int8); hybrid adds the quantized input, a scale per input row, int32 accumulators and,
    per-channel weights, an offset per input row and the filters' row sums (persistent)."""
    o = op.options
    steps = (o.get("stride_w", 1), o.get("stride_h", 1), o.get("dilation_wfactor", 1),
             o.get("dilation_hfactor", 1))
    taps = w.shape[1] * w.shape[2] * w.shape[3]
    out_pixels = y.shape[0] * y.shape[1] * y.shape[2]
    im2col = [] if w.shape[1] == w.shape[2] == 1 and set(steps) == {1} else [
        KernelBuffer("im2col", out_pixels * taps * (1 if hybrid else DTYPE_BYTES[x.dtype]),
                     ARENA)]
    if not hybrid:
        return im2col
    groups = x.shape[3] // max(w.shape[3], 1)
    rows = x.shape[0] * x.shape[1] * x.shape[2] * groups
    scales = w.quantization.scale if w.quantization is not None else ()
    per_channel = len(set(scales)) > 1
    return [*im2col, KernelBuffer("quantized input", x.num_elements, ARENA),
            KernelBuffer("scaling factors", 4 * rows, ARENA),
            KernelBuffer("accumulators", 4 * w.shape[0] * out_pixels, ARENA),
            *([KernelBuffer("input offsets", 4 * rows, ARENA),
               KernelBuffer("row sums", 4 * w.shape[0], PERSISTENT)] if per_channel else [])]


def _transpose_conv(sg: Subgraph, op: Operator) -> list[KernelBuffer]:
    """transpose_conv.cc Prepare, generic optimized kernel: col2im (input rows x the
    filters' taps, float) and the weights transposed OHWI→HWOI are dynamic tensors the
    kernel keeps; float input with int8 weights (hybrid) adds the quantized input and a
    scale and an offset per input row in the arena."""
    if len(op.inputs) < 3 or op.inputs[2] < 0:
        return []
    w, x = sg.tensors[op.inputs[1]], sg.tensors[op.inputs[2]]
    if x.dtype != "float32" or len(x.shape) != 4 or len(w.shape) != 4:
        return []
    col2im = x.shape[1] * x.shape[2] * w.shape[0] * w.shape[1] * w.shape[2]
    kept = [KernelBuffer("col2im", 4 * col2im, DYNAMIC),
            KernelBuffer("transposed weights", w.nbytes, DYNAMIC)]
    if w.dtype != "int8":
        return kept
    rows = x.num_elements // max(w.shape[3], 1)
    return [*kept, KernelBuffer("quantized input", x.num_elements, ARENA),
            KernelBuffer("scaling factors", 4 * rows, ARENA),
            KernelBuffer("input offsets", 4 * rows, ARENA)]


#: Heap LiteRT takes per operator of a subgraph when a signature first allocates and runs
#: it, beyond the tensors, the kernels' buffers and ruy's workspace: the nodes' kernel data
#: (``OpData``), temporaries' tensor records and shapes, ``ArenaPlanner``'s per-tensor and
#: per-node tables, glibc's chunk headers. Measured (glibc ``mallinfo2``, LiteRT 2.3.0,
#: x86-64) on the trainable fixture models of tests/trainable_models.py, not on the models
#: it is checked against: the median over their six train steps of the heap the plan did not
#: explain, per operator (504–565 B; ``benchmarks/bench_train_plan.py`` prints each).
INTERPRETER_BYTES_PER_OP = 512

#: ruy's ``Allocator`` rounds every request up to this (``kMinimalAlignment``).
_RUY_ALIGNMENT = 64


def _gemm_operands(sg: Subgraph, op: Operator) -> tuple[int, int, int] | None:
    """(rows, depth, cols) of the int8 matrix product a hybrid CONV_2D or FULLY_CONNECTED
    hands to ``cpu_backend_gemm``: the weights (LHS) times the quantized input or its
    im2col (RHS); None for other operators."""
    if op.op_name not in ("CONV_2D", "FULLY_CONNECTED") or len(op.inputs) < 2 or \
            min(op.inputs[:2]) < 0 or not op.outputs or op.outputs[0] < 0:
        return None
    x, w, y = sg.tensors[op.inputs[0]], sg.tensors[op.inputs[1]], sg.tensors[op.outputs[0]]
    if x.dtype != "float32" or w.dtype not in ("int8", "uint8"):
        return None
    if op.op_name == "CONV_2D" and len(w.shape) == len(y.shape) == 4:
        return w.shape[0], w.shape[1] * w.shape[2] * w.shape[3], \
            y.shape[0] * y.shape[1] * y.shape[2]
    if op.op_name == "FULLY_CONNECTED" and len(w.shape) == 2 and w.shape[1] > 0:
        return w.shape[0], w.shape[1], x.num_elements // w.shape[1]
    return None


def ruy_workspace(sg: Subgraph) -> int:
    """Bytes ruy's main ``Allocator`` holds after the subgraph's hybrid matrix products
    ran once, in node order. Each product packs both operands (``PreparePackedMatrices``:
    data, rows padded to 8 and depth to 4, then int32 sums per row or column); what does not
    fit in the buffer is allocated aside, and ``FreeAll`` grows the buffer by exactly that
    (ruy/allocator.cc), so the figure depends on the order, not only on the largest product.
    ruy runs the int8 products of LiteRT's x86-64 and arm64 builds; the float ones go to ruy
    only where LiteRT is built with it (arm64), which this does not count."""
    size = 0
    for op in sg.operators:
        gemm = _gemm_operands(sg, op)
        if gemm is None:
            continue
        rows, depth, cols = (-(-v // m) * m for v, m in zip(gemm, (8, 4, 8), strict=True))
        used, aside = 0, 0
        for request in (rows * depth, 4 * rows, cols * depth, 4 * cols):
            request = align_up(request, _RUY_ALIGNMENT)
            if used + request <= size:
                used += request
            else:
                aside += request
        size += aside
    return size


def best_fit_plan(buffers: Sequence[Buffer], alignment: int = LITERT_ALIGNMENT) -> list[int]:
    """Offsets ``SimpleMemoryArena::Allocate`` gives ``buffers``, allocated in this order."""
    offsets: list[int] = []
    # Only the placed buffers that overlap in time matter, in offset order: the index gives
    # just those (see simulator/plan/planners/index.py).
    placed = PlacedIndex(buffers, alignment)
    for b in buffers:
        best, best_fit, current = None, None, 0
        for start, end in placed.spans(b):
            aligned = align_up(current, alignment)
            # LiteRT measures the fit from the unaligned end of the previous buffer.
            if aligned + b.size <= start and (best_fit is None or start - aligned < best_fit):
                best, best_fit = aligned, start - current
            current = max(current, end)
            if best_fit == 0:
                break
        offset = best if best is not None else align_up(current, alignment)
        offsets.append(offset)
        placed.add(b, offset)
    return offsets


def plan_litert(model: Model, profile: Profile, order: Sequence[int] | None = None) -> MemoryPlan:
    """LiteRT's CPU arena for ``model`` (estimate; see the module docstring)."""
    delegates = ", ".join(profile.runtime.delegates) or "none"
    return _plan(model, 0, order, temporaries=False,
                 note=f"kernel temporaries and delegate memory (delegates: {delegates}) "
                      f"not included")


def plan_subgraph(model: Model, subgraph: int) -> MemoryPlan:
    """The arena LiteRT gives subgraph ``subgraph`` when a signature runs it (each subgraph
    has an arena of its own), on the CPU with the builtin kernels, kernel temporaries
    included where :func:`kernel_buffers` knows them (estimate). The kernels' buffers
    outside the arena are the tail's ``kernel persistent`` (LiteRT's persistent arena, each
    64-byte aligned), ``kernel dynamic`` (tensors the kernels malloc and keep), ``ruy
    workspace`` (:func:`ruy_workspace`) and ``interpreter`` (its per-operator structures,
    :data:`INTERPRETER_BYTES_PER_OP`, measured)."""
    return _plan(model, subgraph, None, temporaries=True,
                 note="the buffers of the CONV_2D, FULLY_CONNECTED (hybrid), TRANSPOSE_CONV "
                      "and BATCH_MATMUL kernels and ruy's workspace for the hybrid products "
                      "included, other kernels' not")


def _plan(model: Model, subgraph: int, order: Sequence[int] | None, *, temporaries: bool,
          note: str) -> MemoryPlan:
    buffers = litert_buffers(model, order, subgraph, temporaries)
    offsets = best_fit_plan(buffers)
    head = check_plan(buffers, offsets, "LiteRT arena plan")
    live = live_bytes_per_step(buffers)
    sg = model.subgraphs[subgraph]
    variables = sum(align_up(t.nbytes, LITERT_ALIGNMENT) for t in sg.tensors if t.is_variable)
    tail = {"variables": variables}
    if temporaries:
        kept = [kb for op in sg.operators for kb in kernel_buffers(sg, op)]
        tail |= {"kernel persistent": sum(align_up(kb.size, LITERT_ALIGNMENT) for kb in kept
                                          if kb.place == PERSISTENT),
                 "kernel dynamic": sum(kb.size for kb in kept if kb.place == DYNAMIC),
                 "ruy workspace": ruy_workspace(sg),
                 "interpreter": INTERPRETER_BYTES_PER_OP * len(sg.operators)}
    return MemoryPlan(
        planner="litert-arena",
        buffers=tuple(buffers),
        offsets=tuple(offsets),
        head_bytes=head,
        tail_bytes=sum(tail.values()),
        lower_bound_bytes=max(live, default=0),
        live_bytes=tuple(live),
        op_steps={op: (k, k) for k, op in enumerate(
            order if order is not None else range(len(sg.operators)))},
        tail_breakdown=tail,
        exact=(),
        estimated=("arena_head", "arena_tail", "lower_bound", "timeline"),
        notes=(f"LiteRT arena: tensors planned like ArenaPlanner (64-byte aligned, best fit); "
               f"{note}",),
    )
