"""What every arena planner returns, and the check every plan passes before anyone reads it."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from sortedcontainers import SortedList

from devicefit.simulator.types import Buffer


class PlanError(AssertionError):
    """A planner produced overlapping live buffers: a bug in devicefit, never user input."""


def overlaps_in_time(a: Buffer, b: Buffer) -> bool:
    return a.first <= b.last and b.first <= a.last


def check_plan(buffers: Sequence[Buffer], offsets: Sequence[int], what: str = "plan") -> int:
    """Verify no two buffers live at the same step share a byte; return the head size.

    Two offline-planned buffers (offsets from the model file) may share bytes: TFLM places
    them as given without checking, and Vela does it on purpose (the Ethos-U op's scratch
    area contains the regions of its input and output). Only an online buffer clashing with
    anything is a planner bug.
    """
    if len(buffers) != len(offsets):
        raise PlanError(f"{what}: {len(buffers)} buffers but {len(offsets)} offsets")
    # Sweep in time. The live online buffers, kept in offset order, never overlap one another
    # (or the sweep has stopped), so a buffer that starts clashes with one of them only if it
    # clashes with its neighbour below or above in that order: n log n, not n^2.
    live = SortedList()  # (offset, end, buffer id) of live online buffers of non-zero size
    offline: list[int] = []  # live offline buffers of non-zero size
    expiry: list[tuple[int, int]] = []  # heap of (last step, buffer id)
    for i in sorted(range(len(buffers)), key=lambda k: buffers[k].first):
        a, start = buffers[i], offsets[i]
        if start < 0:
            raise PlanError(f"{what}: buffer '{a.name}' has negative offset {start}")
        while expiry and expiry[0][0] < a.first:
            ended = heapq.heappop(expiry)[1]
            if buffers[ended].offline_offset is None:
                live.discard((offsets[ended], offsets[ended] + buffers[ended].size, ended))
            else:
                offline.remove(ended)
        if not a.size:
            continue
        entry = (start, start + a.size, i)
        k = live.bisect_left(entry)
        # Offline buffers may overlap each other, so they are kept apart from the sweep's
        # disjoint online set and checked one by one (a file holds few of them).
        near: list[int | None] = [live[k - 1][2] if k else None,
                                  live[k][2] if k < len(live) else None]
        if a.offline_offset is None:
            near += offline
        for j in near:
            if j is not None and start < offsets[j] + buffers[j].size and offsets[j] < entry[1]:
                raise PlanError(f"{what}: '{buffers[j].name}' [{offsets[j]}, "
                                f"{offsets[j] + buffers[j].size}) and '{a.name}' [{start}, "
                                f"{entry[1]}) overlap while both are live")
        if a.offline_offset is None:
            live.add(entry)
        else:
            offline.append(i)
        heapq.heappush(expiry, (a.last, i))
    return max((o + b.size for b, o in zip(buffers, offsets, strict=True)), default=0)

