"""An estimate of LiteRT's CPU tensor arena (``ArenaPlanner`` + ``SimpleMemoryArena``).

LiteRT (the TFLite interpreter) plans non-constant, non-variable tensors in one arena:
- lifetimes in node numbers: graph inputs and variables are allocated at node 0; an op's
  outputs at the op's node; a tensor is freed at the node whose input use drops its
  reference count to 0; graph inputs (kept by ``preserve_inputs``), graph outputs, variables
  and outputs nobody reads are never freed;
- order: tensors that live through the whole run first (by index), then by size descending,
  then by allocation node;
- placement: *best fit* — of the gaps between already-placed, time-overlapping tensors that
  are large enough, the smallest; else after the last of them; offsets 64-byte aligned
  (``kDefaultTensorAlignment``).

What it does not see, and why the figure is an estimate: kernel temporaries (im2col and
the like, requested in ``Prepare``), the memory of delegates (XNNPACK packs weights and has
its own workspace; the Edge TPU keeps parameters on the device), and the interpreter's heap.
"""

from __future__ import annotations

from collections.abc import Sequence

from devicefit.simulator.plan.lifetimes import align_up, live_bytes_per_step
from devicefit.simulator.plan.planners.base import check_plan
from devicefit.simulator.plan.planners.index import PlacedIndex
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import DTYPE_BYTES, Model, Operator, Subgraph
from devicefit.simulator.types import Buffer, MemoryPlan

LITERT_ALIGNMENT = 64


def litert_buffers(model: Model, order: Sequence[int] | None = None, subgraph: int = 0,
                   temporaries: bool = False) -> list[Buffer]:
    """A subgraph's arena tensors with LiteRT's lifetimes, in LiteRT's placement order (each
    subgraph has an arena of its own: the main one runs inference, a signature's its method).

    Steps are LiteRT node numbers (operator ``order[k]`` is node ``k``); a tensor that is
    never freed lives to step ``len(operators)``. ``temporaries``: also the kernels'
    temporaries of :func:`kernel_temporaries`, live at their operator's node alone.
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
    alloc: dict[int, int] = {}
    dealloc: dict[int, int] = {}
    for t in sg.inputs:
        if t >= 0:
            alloc.setdefault(t, 0)
    for tensor in sg.tensors:
        if tensor.is_variable:
            alloc.setdefault(tensor.index, 0)
    for node, op in enumerate(ops):
        for t in op.outputs:
            if t >= 0:
                alloc.setdefault(t, node)
        for t in op.inputs:
            if t >= 0:
                refs[t] -= 1
                if refs[t] == 0 and t in alloc:
                    dealloc[t] = node

    def arena(t: int) -> bool:
        tensor = sg.tensors[t]
        return not tensor.has_data and not tensor.is_variable

    nbytes = {t: sg.tensors[t].num_elements * DTYPE_BYTES.get(sg.tensors[t].dtype, 0)
              for t in alloc if arena(t)}
    names = {t: sg.tensors[t].name for t in nbytes}
    requested_by: dict[int, int] = {}
    if temporaries:
        # LiteRT adds a kernel's temporaries after the file's tensors, node by node: they
        # are placed by the same order, keyed by the index LiteRT gives them.
        temps = ((node, op, what, size) for node, op in enumerate(ops)
                 for what, size in kernel_temporaries(sg, op))
        for t, (node, op, what, size) in enumerate(temps, start=len(sg.tensors)):
            alloc[t], dealloc[t], nbytes[t] = node, node, size
            names[t], requested_by[t] = f"{op.op_name} {what}", op.index

    def whole_run(t: int) -> bool:
        return alloc[t] == 0 and t not in dealloc

    candidates = sorted(nbytes, key=lambda t: (0, t, 0, 0) if whole_run(t)
                        else (1, -nbytes[t], alloc[t], t))
    return [Buffer(tensor=-1 if t in requested_by else t, name=names[t], size=nbytes[t],
                   first=alloc[t], last=dealloc.get(t, end),
                   kind="scratch" if t in requested_by else "tensor", subgraph=subgraph,
                   op=requested_by.get(t, -1)) for t in candidates if nbytes[t] > 0]


def kernel_temporaries(sg: Subgraph, op: Operator) -> list[tuple[str, int]]:
    """(what, bytes) of the arena temporaries LiteRT's float kernels request for ``op`` in
    ``Prepare``, for the kernels a training graph leans on: a convolution's im2col (a
    kernel larger than 1x1 or a stride or dilation above 1) and a batched matmul's
    transposed operands (the left one always; the right one in the arena unless it is a
    constant, which the kernel transposes once into memory of its own)."""
    if len(op.inputs) < 2 or min(op.inputs[:2]) < 0 or not op.outputs or op.outputs[0] < 0:
        return []  # not a kernel these rules know (a hostile file's operator)
    x, w, y = sg.tensors[op.inputs[0]], sg.tensors[op.inputs[1]], sg.tensors[op.outputs[0]]
    if x.dtype != "float32":
        return []
    if op.op_name == "CONV_2D" and len(x.shape) == len(w.shape) == len(y.shape) == 4:
        o = op.options
        steps = (o.get("stride_w", 1), o.get("stride_h", 1), o.get("dilation_wfactor", 1),
                 o.get("dilation_hfactor", 1))
        if w.shape[1] == w.shape[2] == 1 and set(steps) == {1}:
            return []  # a 1x1 convolution multiplies the input as it is
        col = y.shape[0] * y.shape[1] * y.shape[2] * w.shape[1] * w.shape[2] * x.shape[3]
        return [("im2col", col * DTYPE_BYTES[x.dtype])]
    if op.op_name == "BATCH_MATMUL":
        return [("transposed lhs", x.nbytes),
                *([] if w.has_data else [("transposed rhs", w.nbytes)])]
    return []


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
    included where :func:`kernel_temporaries` knows them (estimate)."""
    return _plan(model, subgraph, None, temporaries=True,
                 note="the temporaries of the CONV_2D and BATCH_MATMUL kernels included, "
                      "other kernels' not")


def _plan(model: Model, subgraph: int, order: Sequence[int] | None, *, temporaries: bool,
          note: str) -> MemoryPlan:
    buffers = litert_buffers(model, order, subgraph, temporaries)
    offsets = best_fit_plan(buffers)
    head = check_plan(buffers, offsets, "LiteRT arena plan")
    live = live_bytes_per_step(buffers)
    sg = model.subgraphs[subgraph]
    variables = sum(align_up(t.nbytes, LITERT_ALIGNMENT) for t in sg.tensors if t.is_variable)
    return MemoryPlan(
        planner="litert-arena",
        buffers=tuple(buffers),
        offsets=tuple(offsets),
        head_bytes=head,
        tail_bytes=variables,
        lower_bound_bytes=max(live, default=0),
        live_bytes=tuple(live),
        op_steps={op: (k, k) for k, op in enumerate(
            order if order is not None else range(len(sg.operators)))},
        tail_breakdown={"variables": variables},
        exact=(),
        estimated=("arena_head", "arena_tail", "lower_bound", "timeline"),
        notes=(f"LiteRT arena: tensors planned like ArenaPlanner (64-byte aligned, best fit); "
               f"{note}",),
    )
