"""Which buffers TFLite-Micro plans in the arena head, and when each one is live.

Reproduces TFLM's own rules (``micro_allocation_info.cc``) so the planner downstream can
reproduce its arena head to the byte:

- a tensor is planned when its buffer holds no data, it is not ``is_variable`` (unless the
  offline plan places it) and its byte size is > 0; size = elements × type size (int4 counts
  one byte per element), rounded up to 16 bytes;
- steps ("allocation scopes"): subgraph inputs are created and last used at the scope the
  subgraph starts in (0 for the main graph); each operator opens a new scope; its outputs are
  created at the first op that writes them; its inputs and outputs are last used at that op;
  subgraph outputs live to the subgraph's last scope; control-flow ops (IF, WHILE,
  CALL_ONCE) mark their subgraphs recursively inside their own scope;
- buffers are handed to the planner in TFLM's order: every tensor of every subgraph by
  (subgraph, tensor index), then the kernels' scratch buffers in the order the kernels
  requested them during ``Prepare`` (subgraph by subgraph, operators in file order).

Scratch buffers are the kernels' own, so the caller gives them (TFLM's, per kernel flavour:
:mod:`simulator.targets.tflm.scratch`).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from devicefit.simulator.errors import InputError, ModelFormatError
from devicefit.simulator.infra.limits import check_ops
from devicefit.simulator.read.model import DTYPE_BYTES, Model, Operator, Subgraph, Tensor
from devicefit.simulator.types import Buffer, ScratchRequest, ScratchRequests

#: ``MicroArenaBufferAlignment()``: every head buffer is padded to a multiple of this.
TFLM_ALIGNMENT = 16
OFFLINE_METADATA = "OfflineMemoryAllocation"
#: Offset value in the offline plan meaning "let the online planner place it".
ONLINE = -1
#: Deepest control-flow nesting followed (a corrupt file could otherwise exhaust the stack).
MAX_NESTING = 64


def align_up(n: int, alignment: int = TFLM_ALIGNMENT) -> int:
    return (n + alignment - 1) // alignment * alignment


def tflm_tensor_bytes(t: Tensor) -> int:
    """``TfLiteEvalTensorByteLength``: elements × type size, int4 as one byte per element."""
    return t.num_elements * DTYPE_BYTES.get(t.dtype, 0)


# --------------------------------------------------------------------------- offline plan
def offline_offsets(model: Model) -> list[int] | None:
    """Offsets from the ``OfflineMemoryAllocation`` metadata (one per tensor of every
    subgraph, ``-1`` = online), or None when the model has no such entry."""
    raw = model.metadata.get(OFFLINE_METADATA)
    if raw is None:
        return None
    total = sum(len(sg.tensors) for sg in model.subgraphs)
    if len(raw) < 12 or len(raw) % 4:
        raise ModelFormatError(f"{model.path}: {OFFLINE_METADATA} metadata is {len(raw)} bytes, "
                               "expected int32 [version, subgraph, count, offsets...]")
    count = struct.unpack_from("<i", raw, 8)[0]
    if count != total or len(raw) < 12 + 4 * count:
        raise ModelFormatError(
            f"{model.path}: {OFFLINE_METADATA} metadata lists {count} offsets, but the model has "
            f"{total} tensors (TFLM refuses such a model); regenerate the offline plan")
    offsets = list(struct.unpack_from(f"<{count}i", raw, 12))
    bad = [o for o in offsets if o < ONLINE]
    if bad:
        raise ModelFormatError(f"{model.path}: {OFFLINE_METADATA} metadata has negative offset "
                               f"{bad[0]} (only -1, 'plan online', may be negative)")
    return offsets


# --------------------------------------------------------------------------- lifetimes
@dataclass
class _Call:
    """One call of a subgraph, in scopes relative to the scope the call starts in.

    TFLM marks a subgraph again at every call, so the scopes of a graph whose subgraphs call
    each other twice per level number 2**depth. Every call of one subgraph has the same
    relative shape, and a tensor's lifetime only needs the first call (``first_created`` is
    set once) and the last (``last_used`` is overwritten): each subgraph is analysed once and
    only the first and last scope it is entered at are propagated.
    """

    size: int = 0  # scopes the call opens
    first: dict[int, int] = field(default_factory=dict)  # tensor → first created
    last: dict[int, int] = field(default_factory=dict)  # tensor → last used
    sites: list[tuple[int, int]] = field(default_factory=list)  # (subgraph called, scope)
    #: (op position, op index, request, first, last) of each kernel's scratch request.
    scratch: list[tuple[int, int, ScratchRequest, int, int]] = field(default_factory=list)
    steps: dict[int, tuple[int, int]] = field(default_factory=dict)  # op index → scopes


class _Marker:
    """Walks the graph like ``AllocationInfoBuilder::MarkAllocationLifetimes``, once per
    subgraph (see :class:`_Call`)."""

    def __init__(self, model: Model, order: Sequence[int] | None,
                 scratch: ScratchRequests) -> None:
        self.model = model
        self.order = order
        self.scratch = scratch
        self.calls: dict[int, _Call] = {}
        self.active: list[int] = []
        #: Subgraphs after all they call (reversed: callers before callees).
        self.postorder: list[int] = []

    def operators(self, sg_index: int) -> list[Operator]:
        ops = self.model.subgraphs[sg_index].operators
        if sg_index != 0 or self.order is None:
            return list(ops)
        return [ops[i] for i in self.order]

    def call(self, sg_index: int) -> _Call:
        if sg_index in self.calls:
            return self.calls[sg_index]
        if sg_index in self.active:
            raise ModelFormatError(f"{self.model.path}: subgraph {sg_index} calls itself")
        if len(self.active) >= MAX_NESTING:
            raise ModelFormatError(f"{self.model.path}: control flow nested more than "
                                   f"{MAX_NESTING} subgraphs deep")
        if not 0 <= sg_index < len(self.model.subgraphs):
            raise ModelFormatError(f"{self.model.path}: a control-flow op calls subgraph "
                                   f"{sg_index}, but the model has {len(self.model.subgraphs)}")
        self.active.append(sg_index)
        sg = self.model.subgraphs[sg_index]
        c = _Call()
        scope = 0

        def created(t: int) -> None:
            c.first.setdefault(t, scope)

        def used(t: int) -> None:
            c.last[t] = scope

        for t in sg.inputs:
            created(t)
            used(t)
        for position, op in enumerate(self.operators(sg_index)):
            scope += 1
            for t in op.outputs:
                if t >= 0:
                    created(t)
            start = scope
            for child in _called_subgraphs(op):
                scope += 1
                c.sites.append((child, scope))
                scope += self.call(child).size
            for t in (*op.inputs, *op.outputs):
                if t >= 0:
                    used(t)
            c.steps[op.index] = (start, scope)
            for req in self.scratch(sg, op):
                c.scratch.append((position, op.index, req, start, scope))
        for t in sg.outputs:
            created(t)
            used(t)
        c.size = scope
        self.active.pop()
        self.calls[sg_index] = c
        self.postorder.append(sg_index)
        return c

    def mark(self) -> None:
        """Analyse the main graph and everything it calls; fill ``first``, ``last``,
        ``scratch_buffers`` and ``main_steps`` in absolute scopes."""
        main = self.call(0)
        check_ops(self.model.path, main.size, "operators executed (control flow expanded)")
        entry_first, entry_last = {0: 0}, {0: 0}
        for caller in reversed(self.postorder):
            for child, scope in self.calls[caller].sites:
                first, last = entry_first[caller] + scope, entry_last[caller] + scope
                entry_first[child] = min(entry_first.get(child, first), first)
                entry_last[child] = max(entry_last.get(child, last), last)
        self.first = [[-1] * len(sg.tensors) for sg in self.model.subgraphs]
        self.last = [[-1] * len(sg.tensors) for sg in self.model.subgraphs]
        #: (subgraph, op position, op index, request, first, last), sortable into the order
        #: kernels request them: ``Prepare`` runs subgraph by subgraph, ops in file order,
        #: not in execution order. One per request, however often its subgraph runs.
        self.scratch_buffers: list[tuple[int, int, int, ScratchRequest, int, int]] = []
        for sg_index, c in self.calls.items():
            lo, hi = entry_first[sg_index], entry_last[sg_index]
            for t, scope in c.first.items():
                self.first[sg_index][t] = lo + scope
            for t, scope in c.last.items():
                self.last[sg_index][t] = hi + scope
            self.scratch_buffers += [(sg_index, position, op_index, req, lo + start, hi + end)
                                     for position, op_index, req, start, end in c.scratch]
        #: Main-graph operator index → (first, last) step it spans.
        self.main_steps = main.steps


def _called_subgraphs(op: Operator) -> list[int]:
    o = op.options
    if op.op_name == "IF":
        return [o.get("then_subgraph_index", -1), o.get("else_subgraph_index", -1)]
    if op.op_name == "WHILE":
        return [o.get("cond_subgraph_index", -1), o.get("body_subgraph_index", -1)]
    if op.op_name == "CALL_ONCE":
        return [o.get("init_subgraph_index", -1)]
    return []


def _check_order(model: Model, order: Sequence[int] | None) -> None:
    if order is None:
        return
    n = len(model.main.operators)
    if sorted(order) != list(range(n)):
        raise InputError(f"operator order must be a permutation of 0..{n - 1}, got {list(order)}")


def arena_buffers(model: Model, order: Sequence[int] | None,
                  scratch: ScratchRequests) -> list[Buffer]:
    """Every buffer TFLM plans in the arena head, in the order TFLM hands them to its planner.

    ``order`` executes the main subgraph's operators in that order (None: file order);
    operator ``order[k]`` then runs at step ``k + 1``. Scratch buffers are those ``scratch``
    gives for each operator: the kernels' requests, which the target knows
    (:func:`simulator.targets.tflm.scratch.tflm_buffers` passes TFLM's for a kernel flavour).
    """
    _check_order(model, order)
    marker = _Marker(model, order, scratch)
    marker.mark()
    offline = offline_offsets(model)
    buffers: list[Buffer] = []
    flat = 0
    for sg in model.subgraphs:
        intermediates = _intermediates(sg)
        for t in sg.tensors:
            off = offline[flat] if offline is not None else ONLINE
            flat += 1
            nbytes = tflm_tensor_bytes(t)
            loaded = t.has_data and not t.data_after_flatbuffer
            needs = not loaded and not t.is_variable and nbytes > 0
            if t.is_variable and off != ONLINE:
                needs = True  # TFLM lets the offline plan place variable tensors
            if not needs:
                continue
            if t.index in intermediates:
                raise ModelFormatError(f"{model.path}: intermediate tensor {t.index} "
                                       f"'{t.name}' has {nbytes} bytes; TFLM only accepts "
                                       "empty intermediates")
            buffers.append(Buffer(
                tensor=t.index, name=t.name, size=align_up(nbytes),
                first=marker.first[sg.index][t.index], last=marker.last[sg.index][t.index],
                offline_offset=None if off == ONLINE else off, subgraph=sg.index))
    # sorted() is stable: one op's requests keep their order.
    for sg_index, _, op_index, req, first, last in sorted(marker.scratch_buffers,
                                                          key=lambda r: r[:2]):
        op_name = model.subgraphs[sg_index].operators[op_index].op_name
        buffers.append(Buffer(
            tensor=-1, name=f"scratch: op {op_index} {op_name} {req.what}",
            size=align_up(req.size), first=first, last=last, kind="scratch",
            subgraph=sg_index, op=op_index))
    return buffers


def op_steps(model: Model, order: Sequence[int] | None = None) -> dict[int, tuple[int, int]]:
    """Main-graph operator index → (first, last) step it spans, in execution order."""
    _check_order(model, order)
    marker = _Marker(model, order, lambda *_: [])
    marker.mark()
    return marker.main_steps


def _intermediates(sg: Subgraph) -> set[int]:
    return {t for op in sg.operators for t in op.intermediates if t >= 0}


def live_bytes_per_step(buffers: Sequence[Buffer]) -> list[int]:
    """Bytes live at each step 0..last step (a buffer counts at every step in [first, last]).

    Buffers an offline plan places count the bytes they cover together: Vela's plan puts an
    ``ethos-u`` op's input and output inside its scratch area on purpose, and the sum of
    their sizes would exceed the arena that holds them."""
    if not buffers:
        return []
    steps = max(b.last for b in buffers) + 1
    # Differences then a running sum: linear in buffers + steps, whatever the lifetimes.
    change = [0] * (steps + 1)
    offline = []
    for b in buffers:
        if b.last < max(b.first, 0):
            continue
        if b.offline_offset is not None:
            offline.append(b)
            continue
        change[max(b.first, 0)] += b.size
        change[b.last + 1] -= b.size
    live = list(itertools.accumulate(change[:-1]))
    if offline:
        for step, extra in enumerate(_covered_per_step(offline, steps)):
            live[step] += extra
    return live


def _covered_per_step(buffers: Sequence[Buffer], steps: int) -> list[int]:
    """Bytes of the arena the offline-placed ``buffers`` live at each step cover (their
    union, not their sum)."""
    covered = []
    for step in range(steps):
        spans = sorted((b.offline_offset or 0, (b.offline_offset or 0) + b.size)
                       for b in buffers if max(b.first, 0) <= step <= b.last)
        total, end = 0, 0
        for lo, hi in spans:
            lo = max(lo, end)
            if hi > lo:
                total += hi - lo
                end = hi
        covered.append(total)
    return covered


def lower_bound(buffers: Sequence[Buffer]) -> int:
    """No planner can use less than the most bytes live at one step."""
    return max(live_bytes_per_step(buffers), default=0)
