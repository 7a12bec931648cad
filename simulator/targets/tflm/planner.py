"""TFLite-Micro's arena: its greedy memory planner reproduced exactly, and a tail estimate.

The head (the planned, reusable part of the arena) is exact: :func:`greedy_plan` follows
``GreedyMemoryPlanner::CalculateOffsetsIfNeeded`` step by step, on the buffers and lifetimes
of :func:`simulator.targets.tflm.scratch.tflm_buffers`. The tail (persistent allocations:
tensor and node structs, kernel data) is an estimate per pointer width and kernel flavour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.estimate.cores import Core, find_core
from devicefit.simulator.plan.lifetimes import align_up, live_bytes_per_step, op_steps
from devicefit.simulator.plan.planners.base import check_plan
from devicefit.simulator.plan.planners.index import PlacedIndex
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.targets.tflm.scratch import (
    ESTIMATED,
    KERNEL_SCRATCH,
    SOURCES,
    flavour,
    tflm_buffers,
    verified_against,
)
from devicefit.simulator.targets.tflm.tail import (
    TailEstimate,
    estimate_tail,
    params_layout,
    prepare_peak,
    struct_sizes,
)
from devicefit.simulator.types import Buffer, MemoryPlan


def greedy_plan(buffers: Sequence[Buffer]) -> list[int]:
    """Offsets TFLM's greedy planner gives ``buffers`` (handed to it in this order).

    Offline-planned buffers keep their offsets and are placed first, in the order given.
    The online ones are taken largest first; among equal sizes the one added *last* comes
    first (TFLM fills its sort array from the back, then bubble-sorts it stably). Each goes
    into the first gap, between already-placed buffers whose lifetimes overlap its own and
    walked in offset order, that is big enough; else after the last of them.
    """
    n = len(buffers)
    if n == 0:
        return []
    offline = [i for i in range(n) if buffers[i].offline_offset is not None]
    online = [i for i in reversed(range(n)) if buffers[i].offline_offset is None]
    online.sort(key=lambda i: -buffers[i].size)  # Python's sort is stable, like TFLM's
    offsets = [-1] * n
    # TFLM walks every placed buffer in offset order; the index hands over only those that
    # overlap in time, which gives the same offsets (see simulator/plan/planners/index.py).
    placed = PlacedIndex(buffers)
    for i in offline + online:
        b = buffers[i]
        if b.offline_offset is not None:
            offset = b.offline_offset
        else:
            offset = 0
            for start, end in placed.spans(b):
                if start - offset >= b.size:
                    break
                offset = max(offset, end)
        offsets[i] = offset
        placed.add(b, offset)
    return offsets



#: ``GreedyMemoryPlanner::per_buffer_size()``: requirements (4 ints), sorted size and id,
#: offset-list entry (3 ints), offset.
_PLANNER_BYTES_PER_BUFFER = 16 + 4 + 4 + 12 + 4
#: Room TFLM reserves for scratch-buffer requests beyond those made (``kMaxScratchBuffersPerOp``).
_SCRATCH_REQUEST_HEADROOM = 12


def planning_bytes(model: Model, buffers: Sequence[Buffer], pointer_bytes: int) -> int:
    """Head-side memory TFLM needs *while* it plans (``CommitStaticMemoryPlan``), freed after.

    At that moment the head holds the scratch-buffer requests, then come the temporary
    ``AllocationInfo`` array (one per tensor of every subgraph and per scratch buffer), the
    subgraph offsets, and the greedy planner's own arrays (one entry per planned buffer). For
    models with many tensors and small activations (a deep MLP) this exceeds the final head,
    and an arena of head + tail fails to initialize.
    """
    n_scratch = sum(1 for b in buffers if b.kind == "scratch")
    n_tensors = sum(len(sg.tensors) for sg in model.subgraphs)
    request = struct_sizes(pointer_bytes)["scratch_request"]
    allocation_info = 4 * pointer_bytes if pointer_bytes >= 8 else 24
    return (align_up((n_scratch + _SCRATCH_REQUEST_HEADROOM) * request)
            + align_up(pointer_bytes * len(model.subgraphs))
            + align_up(allocation_info * (n_tensors + n_scratch))
            + _PLANNER_BYTES_PER_BUFFER * len(buffers))


def _core(profile: Profile) -> Core | None:
    """The profile's ``device.cpu`` in the core registry; None when unset or unknown."""
    try:
        return find_core(profile.device.cpu) if profile.device.cpu else None
    except ProfileError:
        return None


def kernel_flavour(profile: Profile) -> str:
    """The profile's kernel library as the scratch and tail tables know it: CMSIS-NN's
    sizes depend on the core's extension (``device.cpu`` → none / DSP / MVE), ESP-NN's on
    the chip (S3, P4, generic)."""
    kernels = profile.runtime.kernels
    if kernels not in ("cmsis-nn", "esp-nn"):
        return kernels
    core = _core(profile)
    return flavour(kernels, core.simd if core else None, core.name if core else None)


def options_layout(profile: Profile) -> str:
    """How the profile's build lays out TFLM's parsed builtin options (the pointer width and
    the core family, :func:`simulator.targets.tflm.tail.params_layout`)."""
    core = _core(profile)
    return params_layout(profile.runtime.pointer_bytes, core.family if core else None)


@dataclass(frozen=True)
class StartArena:
    """What TFLM needs beside the head to start: the tail, and the room it takes while it
    loads (planning, the kernels' Prepare) and frees afterwards."""

    tail: TailEstimate
    planning_bytes: int
    prepare_bytes: int

    def required(self, head: int) -> int:
        """The smallest arena TFLM starts in once its head is ``head`` bytes (simulate's
        ``arena_required_bytes``; the optimizer weighs candidate heads with it)."""
        # The interpreter allocates the input/output TfLiteTensors and pointer arrays only
        # after planning (micro_interpreter.cc AllocateTensors: FinishModelAllocation, then
        # input_tensors_/output_tensors_), so while it plans the tail is that much shorter.
        late = sum(self.tail.breakdown[k] for k in ("io_tensors", "io_pointers",
                                                    "io_quantization"))
        return max(head + self.tail.total, self.planning_bytes + self.tail.total - late,
                   self.prepare_bytes)


def start_arena(model: Model, buffers: Sequence[Buffer], profile: Profile) -> StartArena:
    """The tail and load-time room of ``model`` on ``profile``'s build (pointer width, kernel
    library), ``buffers`` being its :func:`tflm_buffers` for that build."""
    pointer, kernels = profile.runtime.pointer_bytes, kernel_flavour(profile)
    n_scratch = sum(1 for b in buffers if b.kind == "scratch")
    tail = estimate_tail(model, pointer_bytes=pointer, kernels=kernels, n_scratch=n_scratch,
                         layout=options_layout(profile))
    return StartArena(tail, planning_bytes(model, buffers, pointer),
                      prepare_peak(model, tail.total, pointer_bytes=pointer,
                                   n_scratch=n_scratch, kernels=kernels))


def plan_tflm(model: Model, profile: Profile, order: Sequence[int] | None = None) -> MemoryPlan:
    """TFLM's arena for ``model`` on ``profile``: exact head, estimated tail."""
    kernels = kernel_flavour(profile)
    pointer = profile.runtime.pointer_bytes
    buffers = tflm_buffers(model, order, pointer_bytes=pointer, kernels=kernels)
    offsets = greedy_plan(buffers)
    head = check_plan(buffers, offsets, "TFLM greedy plan")
    live = live_bytes_per_step(buffers)
    start = start_arena(model, buffers, profile)
    tail = start.tail
    exact: list[str] = []
    estimated = ["arena_tail", "arena_required"]
    notes = [tail.note]
    basis = verified_against(kernels, pointer)
    if basis != ESTIMATED:
        exact += ["arena_head", "lower_bound", "timeline"]
        notes.append(f"head: tensors planned exactly, '{kernels}' scratch buffers sized from "
                     f"the kernel sources; verified against: {basis}")
    else:
        estimated += ["arena_head", "lower_bound", "timeline"]
        if kernels in KERNEL_SCRATCH:
            source = SOURCES.get(kernels.split(":")[0], "the kernel sources")
            notes.append(f"head: tensors planned exactly; '{kernels}' scratch buffers sized "
                         f"from the kernel sources for {pointer * 8}-bit pointers; verified "
                         f"against: estimated ({source})")
        else:
            notes.append(f"head: tensors planned exactly, but '{kernels}' kernels request "
                         "scratch buffers devicefit sizes as the reference kernels do; the "
                         "real head can be larger; verified against: estimated")
    required = start.required(head)
    if required > head + tail.total:
        notes.append(f"TFLM needs {required - head - tail.total:,} B more while it loads "
                     f"(kernels' Prepare, planning; freed afterwards): the arena must be at "
                     f"least {required:,} B")
    return MemoryPlan(
        planner="tflm-greedy",
        required_bytes=required,
        buffers=tuple(buffers),
        offsets=tuple(offsets),
        head_bytes=head,
        tail_bytes=tail.total,
        lower_bound_bytes=max(live, default=0),
        live_bytes=tuple(live),
        op_steps=op_steps(model, order),
        tail_breakdown=tail.breakdown,
        exact=tuple(exact),
        estimated=tuple(estimated),
        notes=tuple(notes),
    )
