"""Offline memory plan: arena offsets for buffers with known lifetimes, tighter than greedy.

Packing buffers with lifetimes into the smallest arena is dynamic storage allocation
(NP-hard), but its lower bound is easy: the most bytes live at one step. The planner tries
a portfolio and keeps every distinct result, best first:

- first-fit in several orders (TFLM's size-descending greedy is one of them);
- a search at a target height ``H``: buffers are placed in the order they come alive, each
  against the top or bottom of a free hole, preferring the side whose neighbour lives
  longest (the arena's ends live forever). On a chain this puts consecutive tensors at
  opposite ends and reaches the bound; elsewhere it backtracks (node-limited) and ``H``
  is bisected between the bound and the best first-fit result.

Every plan is verified (:func:`simulator.planners.base.check_plan`: no two buffers live at
the same step overlap) before it is returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.lifetimes import Buffer, lower_bound
from simulator.planners.base import check_plan, overlaps_in_time

#: Offsets stay multiples of TFLM's buffer alignment (buffer sizes already are).
ALIGN = 16
#: Search nodes per target height before the search gives up on that height.
DEFAULT_NODE_LIMIT = 20_000
_FOREVER = 1 << 62


@dataclass(frozen=True)
class Packing:
    #: ``offsets[i]`` is the offset of the i-th buffer given to :func:`pack`.
    offsets: tuple[int, ...]
    head: int
    method: str


def first_fit(buffers: Sequence[Buffer], order: Sequence[int]) -> list[int]:
    """Place buffers in ``order``, each at the lowest offset clear of the placed buffers
    whose lifetimes meet its own."""
    placed: list[int] = []
    offsets = [0] * len(buffers)
    for i in order:
        b = buffers[i]
        busy = sorted((offsets[j], offsets[j] + buffers[j].size)
                      for j in placed if overlaps_in_time(b, buffers[j]))
        pos = 0
        for lo, hi in busy:
            if pos + b.size <= lo:
                break
            pos = max(pos, hi)
        offsets[i] = pos
        placed.append(i)
    return offsets


_FIRST_FIT_ORDERS = {
    "first-fit by size": lambda b: (-b.size, b.first),
    "first-fit by lifetime": lambda b: (-(b.last - b.first), -b.size, b.first),
    "first-fit by area": lambda b: (-b.size * (b.last - b.first + 1), b.first),
    "first-fit by start": lambda b: (b.first, -b.last, -b.size),
}


class _Search:
    """Time-ordered placement against hole ends under a height cap, with backtracking."""

    def __init__(self, buffers: Sequence[Buffer], node_limit: int) -> None:
        self.buffers = buffers
        self.order = sorted(range(len(buffers)),
                            key=lambda i: (buffers[i].first, -buffers[i].last, -buffers[i].size))
        self.node_limit = node_limit
        self.height = 0
        self.nodes = 0
        self.pos: list[int] = []

    def run(self, height: int) -> list[int] | None:
        """Offsets that fit under ``height``, or None if none was found within the limit."""
        self.height, self.nodes, self.pos = height, 0, []
        if not self._place(0):
            return None
        offsets = [0] * len(self.buffers)
        for i, p in zip(self.order, self.pos):
            offsets[i] = p
        return offsets

    def _candidates(self, k: int) -> list[int]:
        """Bottom and top of every free hole big enough, best first: next to the neighbour
        that stays live longest, so the space freed later joins a larger hole."""
        b = self.buffers[self.order[k]]
        placed = (self.buffers[i] for i in self.order[:k])
        # Buffers placed so far came alive no later than b: those still live when b starts.
        busy = sorted((p, p + q.size, q.last) for p, q in zip(self.pos, placed) if q.last >= b.first)
        scored: list[tuple[int, int]] = []
        below_end, below_life = 0, _FOREVER
        for lo, hi, life in [*busy, (self.height, self.height, _FOREVER)]:
            if lo - below_end >= b.size:
                scored.append((-below_life, below_end))
                if lo - b.size != below_end:
                    scored.append((-life, lo - b.size))
            if hi > below_end:
                below_end, below_life = hi, life
        return [p for _, p in sorted(scored)]

    def _place(self, k: int) -> bool:
        if k == len(self.order):
            return True
        for p in self._candidates(k):
            self.nodes += 1
            if self.nodes > self.node_limit:
                return False
            self.pos.append(p)
            if self._place(k + 1):
                return True
            self.pos.pop()
        return False


def pack(buffers: Sequence[Buffer], node_limit: int = DEFAULT_NODE_LIMIT) -> list[Packing]:
    """Distinct verified packings of ``buffers`` (ignoring their offline offsets), smallest
    head first. Buffer sizes should be multiples of :data:`ALIGN`, as TFLM's are."""
    results: dict[int, Packing] = {}

    def keep(offsets: list[int] | None, method: str) -> None:
        if offsets is not None:
            head = check_plan(buffers, offsets, f"offline plan ({method})")
            results.setdefault(head, Packing(tuple(offsets), head, method))

    for name, key in _FIRST_FIT_ORDERS.items():
        keep(first_fit(buffers, sorted(range(len(buffers)), key=lambda i: key(buffers[i]))),
             name)
    search = _Search(buffers, node_limit)
    # Try the bound itself first (chains reach it), then bisect the height between the
    # bound (infeasible so far) and the best plan found (feasible).
    lo, hi = _align_up(lower_bound(buffers)), min(results, default=0)
    mid = lo
    while lo < hi:
        found = search.run(mid)
        keep(found, "two-ended search")
        if found is not None:
            hi = max(p + b.size for p, b in zip(found, buffers))
        else:
            lo = _align_up(mid + 1)
        mid = max(lo, _align_down((lo + hi) // 2))
    return [results[h] for h in sorted(results)]


def _align_down(n: int) -> int:
    return n // ALIGN * ALIGN


def _align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
