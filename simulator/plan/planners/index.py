"""Which already-placed buffers a new one must avoid, found without a scan of all of them.

TFLM's greedy planner and LiteRT's arena walk, for each buffer they place, every placed
buffer in offset order and skip those whose lifetime does not overlap. Reproduced literally
that is quadratic: 20,000 operators took a minute, 100,000 tensors no operator uses (TFLM
still plans them) hours. Two facts keep the result identical while the work shrinks:

* the walk only reads the (offset, end) of the time-overlapping buffers in offset order, and
  two with the same offset can be read in either order (the first cannot fit a gap the
  second would); so an interval index over lifetimes hands over just those, sorted;
* buffers with the *same* lifetime that the planner put end to end (a stack of tensors no
  operator touches, or any clique) form one solid block: a walk for a buffer of non-zero
  size reads the block exactly as it reads its members, so the block is one entry. A
  zero-size buffer can stop inside a block, so it reads the members.

Lifetimes are ranked (compressed) before indexing, so a model whose control flow expands to
a huge number of steps costs no more than one with few.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from devicefit.simulator.types import Buffer


@dataclass
class Block:
    """Placed buffers with one lifetime, end to end in memory: ``[lo, hi)``."""

    lo: int
    hi: int
    #: (offset, end) of each member, for walks by zero-size buffers.
    members: list[tuple[int, int]] = field(default_factory=list)


class PlacedIndex:
    """Placed buffers by lifetime, for "which of them overlap this lifetime" queries.

    ``alignment``: a member joins a block when it starts where the block ends rounded up
    to it (LiteRT aligns offsets, not sizes; TFLM's sizes are already aligned: 1).
    """

    def __init__(self, buffers: Sequence[Buffer], alignment: int = 1) -> None:
        self.alignment = alignment
        self.times = sorted({t for b in buffers for t in (b.first, b.last)})
        self.size = max(1, len(self.times))
        #: Segment tree node → blocks whose lifetime covers the node's whole time range.
        self.cover: dict[int, list[int]] = {}
        #: (first rank, block id), to find lifetimes that start inside a query.
        self.starts = SortedList()
        self.blocks: list[Block] = []
        #: lifetime → {block end: block id} and {block start: block id}, to extend blocks.
        self.by_end: dict[tuple[int, int], dict[int, int]] = {}
        self.by_start: dict[tuple[int, int], dict[int, int]] = {}

    def _rank(self, t: int) -> int:
        return bisect.bisect_left(self.times, t)

    def _insert(self, node: int, lo: int, hi: int, a: int, b: int, block: int) -> None:
        if b < lo or hi < a:
            return
        if a <= lo and hi <= b:
            self.cover.setdefault(node, []).append(block)
            return
        mid = (lo + hi) // 2
        self._insert(2 * node, lo, mid, a, b, block)
        self._insert(2 * node + 1, mid + 1, hi, a, b, block)

    def _stab(self, t: int) -> Iterator[int]:
        node, lo, hi = 1, 0, self.size - 1
        while True:
            yield from self.cover.get(node, ())
            if lo == hi:
                return
            mid = (lo + hi) // 2
            node, lo, hi = (2 * node, lo, mid) if t <= mid else (2 * node + 1, mid + 1, hi)

    def spans(self, b: Buffer) -> list[tuple[int, int]]:
        """(start, end) of what a planner's walk for ``b`` reads, in offset order: the blocks
        overlapping ``b`` in time, or their members when ``b`` has size zero (it can stop
        inside a block)."""
        blocks = self.overlapping(b)
        if b.size:
            return [(blk.lo, blk.hi) for blk in blocks]
        return sorted(m for blk in blocks for m in blk.members)

    def overlapping(self, b: Buffer) -> list[Block]:
        """Blocks whose lifetime overlaps ``b``'s, in offset order."""
        first, last = self._rank(b.first), self._rank(b.last)
        ids = list(self._stab(first))
        ids += [i for _, i in self.starts.irange((first + 1, -1), (last, len(self.blocks)))]
        return sorted((self.blocks[i] for i in ids), key=lambda blk: blk.lo)

    def add(self, b: Buffer, offset: int) -> None:
        """Record ``b`` placed at ``offset``: joins a block of its lifetime it touches."""
        key = (b.first, b.last)
        end = offset + b.size
        ends, starts = self.by_end.setdefault(key, {}), self.by_start.setdefault(key, {})
        if b.size:
            for hi in range(offset, offset - self.alignment, -1):
                if hi in ends and _align(hi, self.alignment) >= offset:
                    return self._extend_up(ends[hi], hi, offset, end, ends)
            if self.alignment == 1 and end in starts:
                block_id = starts.pop(end)
                block = self.blocks[block_id]
                block.lo = offset
                block.members.append((offset, end))
                starts[offset] = block_id
                return None
        block_id = len(self.blocks)
        self.blocks.append(Block(offset, end, [(offset, end)]))
        if b.size:
            ends[end] = block_id
            starts[offset] = block_id
        # A stab finds it from queries that start inside its lifetime; the start list from
        # queries that start before it.
        first, last = self._rank(b.first), self._rank(b.last)
        self._insert(1, 0, self.size - 1, first, last, block_id)
        self.starts.add((first, block_id))
        return None

    def _extend_up(self, block_id: int, old_hi: int, offset: int, end: int,
                   ends: dict[int, int]) -> None:
        block = self.blocks[block_id]
        del ends[old_hi]
        block.hi = end
        block.members.append((offset, end))
        ends[end] = block_id


def _align(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment
