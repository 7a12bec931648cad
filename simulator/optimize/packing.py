"""Offline memory plan: arena offsets for buffers with known lifetimes, tighter than greedy.

Packing buffers with lifetimes into the smallest arena is dynamic storage allocation
(NP-hard), but its lower bound is easy: the most bytes live at one step. The planner tries
a portfolio and keeps every distinct result, best first:

- first-fit in several orders (TFLM's size-descending greedy is one of them);
- a search for a plan at the bound: buffers are placed in the order they come alive, each
  against the top or bottom of a free hole, preferring the side whose neighbour lives
  longest (the arena's ends live forever), backtracking (node-limited) when none fits. On a
  chain this puts consecutive tensors at opposite ends and reaches the bound at once;
- otherwise a local search over first-fit orders: move one buffer elsewhere in the order,
  keep the move if the head does not grow, until the bound or the move budget.

Every plan is verified (:func:`simulator.plan.planners.base.check_plan`: no two buffers live at
the same step overlap) before it is returned.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from devicefit.simulator.plan.lifetimes import lower_bound
from devicefit.simulator.plan.planners.base import check_plan
from devicefit.simulator.plan.planners.index import PlacedIndex
from devicefit.simulator.types import Buffer

#: Offsets stay multiples of TFLM's buffer alignment (buffer sizes already are).
ALIGN = 16
#: Search nodes before the two-ended search gives up on packing at the bound.
DEFAULT_NODE_LIMIT = 5_000
#: Local-search moves: at most MAX_MOVES, fewer for many buffers (MOVE_BUDGET / buffers²).
MAX_MOVES = 2_000
MOVE_BUDGET = 10_000_000
_FOREVER = 1 << 62


@dataclass(frozen=True)
class Packing:
    #: ``offsets[i]`` is the offset of the i-th buffer given to :func:`pack`.
    offsets: tuple[int, ...]
    head: int
    method: str


def first_fit(buffers: Sequence[Buffer], order: Sequence[int]) -> list[int]:
    """Place buffers in ``order``, each at the lowest offset clear of the placed buffers
    whose lifetimes meet its own (found by an interval index, not a scan of every placed
    buffer: that was quadratic, minutes over tens of thousands of buffers)."""
    placed = PlacedIndex(buffers)
    offsets = [0] * len(buffers)
    for i in order:
        b = buffers[i]
        pos = 0
        for lo, hi in placed.spans(b):
            if pos + b.size <= lo:
                break
            pos = max(pos, hi)
        offsets[i] = pos
        placed.add(b, pos)
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
        self.pos: list[int] = []
        #: live[k]: the positions j < k in ``order`` whose buffer is still live when
        #: ``order[k]``'s starts (built from live[k - 1], as buffers come alive in order).
        self.live: list[list[int]] = []

    def run(self, height: int) -> list[int] | None:
        """Offsets that fit under ``height``, or None if none was found within the limit."""
        self.height, self.pos = height, []
        if len(self.order) > self.node_limit:  # a node per buffer placed: it cannot finish
            return None
        # Depth-first with an explicit stack (models can have more buffers than Python's
        # recursion limit): one list of untried candidates per placed buffer.
        untried = [self._candidates(0)] if self.order else []
        nodes = 0
        while len(self.pos) < len(self.order):
            if not untried[-1]:
                untried.pop()
                if not untried:
                    return None
                self.pos.pop()
                continue
            nodes += 1
            if nodes > self.node_limit:
                return None
            self.pos.append(untried[-1].pop(0))
            if len(self.pos) < len(self.order):
                untried.append(self._candidates(len(self.pos)))
        offsets = [0] * len(self.buffers)
        for i, p in zip(self.order, self.pos):
            offsets[i] = p
        return offsets

    def _candidates(self, k: int) -> list[int]:
        """Bottom and top of every free hole big enough, best first: next to the neighbour
        that stays live longest, so the space freed later joins a larger hole."""
        b = self.buffers[self.order[k]]
        placed = ((self.pos[j], self.buffers[self.order[j]]) for j in self._live(k))
        busy = sorted((p, p + q.size, q.last) for p, q in placed)
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

    def _live(self, k: int) -> list[int]:
        # Buffers placed so far came alive no later than order[k]: one that ended before an
        # earlier buffer started has ended before this one starts too.
        while len(self.live) <= k:
            m = len(self.live)
            start = self.buffers[self.order[m]].first
            before = [*self.live[m - 1], m - 1] if m else []
            self.live.append([j for j in before if self.buffers[self.order[j]].last >= start])
        return self.live[k]


def pack(buffers: Sequence[Buffer], node_limit: int = DEFAULT_NODE_LIMIT,
         moves: int | None = None, seed: int = 0) -> list[Packing]:
    """Distinct verified packings of ``buffers`` (ignoring their offline offsets), smallest
    head first. Buffer sizes should be multiples of :data:`ALIGN`, as TFLM's are.

    Deterministic: the local search draws its moves from a generator seeded with ``seed``.
    """
    results: dict[int, Packing] = {}
    bound = _align_up(lower_bound(buffers))

    def keep(offsets: list[int], method: str) -> int:
        head = check_plan(buffers, offsets, f"offline plan ({method})")
        results.setdefault(head, Packing(tuple(offsets), head, method))
        return head

    starts: list[tuple[int, list[int]]] = []  # (head, first-fit order)
    for name, key in _FIRST_FIT_ORDERS.items():
        order = sorted(range(len(buffers)), key=lambda i: key(buffers[i]))
        starts.append((keep(first_fit(buffers, order), name), order))
    if min(results, default=0) > bound:
        found = _Search(buffers, node_limit).run(bound)
        if found is not None:
            keep(found, "two-ended search")
    if min(results, default=0) > bound:
        start = min(starts, key=lambda s: s[0])[1]
        if moves is None:  # each move costs a first-fit pass, quadratic in the buffers
            moves = min(MAX_MOVES, MOVE_BUDGET // max(len(buffers), 1) ** 2)
        keep(_local_search(buffers, start, bound, moves, random.Random(seed)),
             "first-fit local search")
    return [results[h] for h in sorted(results)]


def _head(buffers: Sequence[Buffer], offsets: Sequence[int]) -> int:
    return max((o + b.size for o, b in zip(offsets, buffers)), default=0)


def _local_search(buffers: Sequence[Buffer], order: list[int], bound: int, moves: int,
                  rng: random.Random) -> list[int]:
    """Move one buffer to another place in the first-fit order; keep the move when the head
    does not grow (sideways moves let the search cross plateaus). Stops at the bound."""
    best = first_fit(buffers, order)
    head = _head(buffers, best)
    for _ in range(moves):
        if head <= bound or len(order) < 2:
            break
        trial = order[:]
        trial.insert(rng.randrange(len(trial)), trial.pop(rng.randrange(len(trial))))
        offsets = first_fit(buffers, trial)
        if _head(buffers, offsets) <= head:
            order, best, head = trial, offsets, _head(buffers, offsets)
    return best


def _align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
