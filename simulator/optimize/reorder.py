"""Operator reordering: the valid execution order with the lowest peak of live bytes.

Dynamic programming over the sets of operators already executed (Liberis & Lane,
arXiv:1910.05110). What is live between two steps depends only on *which* operators have
run, not on their order, so the best peak to reach a set is memoised on the set (a bitmask).
The search goes forward one step at a time: every state of one layer holds sets of the same
size. When a layer grows beyond its share of the state budget the search keeps the most
promising ones (lowest peak so far, then fewest live bytes) and the result is no longer
proven optimal; it then reports :meth:`OpGraph.op_floor` as the bound every order must reach.

The whole search is bounded by a step budget (one step: a state extended by one operator),
so a large graph gets an answer in seconds whatever its width. A layer keeps no more states
than the steps left allow for the layers left (at this layer's steps per state), so a long
graph narrows its beam instead of running out; and past the budget the search stops at the
end of a layer, takes that layer's most promising state and runs the operators left in file
order (valid: the file order is topological). A search the budget never narrowed is the
search without one. Counting steps, not seconds, keeps the answer the same on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicefit.simulator.optimize.graph import OpGraph

#: States the search may keep over all layers; a layer beyond ``budget / operators`` states
#: (at least :data:`MIN_BEAM`) is cut to that many: the search becomes a beam search.
DEFAULT_BUDGET = 100_000
MIN_BEAM = 256
#: Steps (a state extended by one operator) the whole search may take; it stops at the
#: first layer's end past them. A few seconds of Python (docs/benchmarks.md "Scale").
DEFAULT_STEP_BUDGET = 500_000


@dataclass(frozen=True)
class OrderResult:
    order: tuple[int, ...]
    #: Peak live bytes (scratch included) of ``order``.
    peak: int
    #: True when the search visited every reachable state: ``peak`` is the best possible.
    exact: bool
    #: A peak no order can beat: ``peak`` when exact, else the per-operator floor.
    bound: int
    states: int
    #: Steps the search took, and the budget it had.
    steps: int = 0
    step_budget: int = DEFAULT_STEP_BUDGET
    #: True when the step budget cut the search: it narrowed the beam, or (``placed`` <
    #: the operators) stopped the search, the others then running in file order.
    stopped: bool = False
    placed: int = 0


@dataclass
class _State:
    peak: int
    alive: int
    #: Operators whose inputs are all computed and that have not run yet (a bitmask,
    #: relative to the layer's base like the done sets).
    ready: int
    #: The state this one was reached from and the operator run to get here, as indexes
    #: into :func:`best_order`'s history: a layer's bitmasks are dropped once the next
    #: layer is built (n states of n-bit masks were quadratic memory: 2.9 GB at 100k ops).
    parent: int
    op: int


class _Tables:
    """The graph as the search's inner loop reads it. Operators are listed by index, never
    as bitmasks: a mask per operator with a bit near its own index is quadratic memory
    over a long graph (40,000 operators: 200 MB); only the search's sets are masks.

    The sets are relative to a base: every operator below it has run in every state of the
    layer, and bit ``i`` stands for operator ``base + i``. A mask of all n operators made
    each step cost O(n) (a shift or copy of an n-bit integer): cubic time over a long graph
    (20,000 operators: 11 minutes); relative masks are as wide as the layer's spread."""

    def __init__(self, graph: OpGraph) -> None:
        n = graph.n_ops
        prod = graph.producers()
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.succ: list[list[int]] = [[] for _ in range(n)]
        for op, ins in enumerate(graph.op_inputs):
            for t in ins:
                if t in prod and prod[t] not in self.preds[op]:
                    self.preds[op].append(prod[t])
                    self.succ[prod[t]].append(op)
        self.start_ready = sum(1 << op for op in range(n) if not self.preds[op])
        consumers: dict[int, list[int]] = {}
        for op, ins in enumerate(graph.op_inputs):
            for t in ins:
                consumers.setdefault(t, []).append(op)
        outputs = set(graph.graph_outputs)
        self.out_bytes = [sum(graph.sizes[t] for t in outs) for outs in graph.op_outputs]
        self.step_extra = [o + s for o, s in zip(self.out_bytes, graph.scratch)]
        # Outputs that stay live after their producer's step: read later or a graph output.
        self.kept = [[(graph.sizes[t], consumers.get(t, []), t in outputs) for t in outs]
                     for outs in graph.op_outputs]
        # Inputs an operator may free: (size, all readers) unless they are graph outputs.
        self.freed = [[(graph.sizes[t], consumers[t]) for t in ins if t not in outputs]
                      for ins in graph.op_inputs]
        self.start_alive = sum(graph.sizes[t] for t in graph.graph_inputs
                               if t in consumers or t in outputs)
        self.start_peak = sum(graph.sizes[t] for t in graph.graph_inputs)

    def ready_after(self, ready: int, op: int, done: int, base: int) -> int:
        """Ready set once ``op`` has run (``done`` includes ``op``)."""
        ready &= ~(1 << (op - base))
        for s in self.succ[op]:
            if all(p < base or done >> (p - base) & 1 for p in self.preds[s]):
                ready |= 1 << (s - base)
        return ready

    def after(self, alive: int, op: int, done: int, base: int) -> int:
        """Live bytes between steps once ``op`` has run (``done`` includes ``op``)."""
        for size, readers, is_output in self.kept[op]:
            if is_output or not all(r < base or done >> (r - base) & 1 for r in readers):
                alive += size
        for size, readers in self.freed[op]:
            if all(r < base or done >> (r - base) & 1 for r in readers):
                alive -= size
        return alive


def best_order(graph: OpGraph, budget: int = DEFAULT_BUDGET,
               step_budget: int = DEFAULT_STEP_BUDGET) -> OrderResult:
    """The topological order of ``graph`` with the lowest peak (ties: the file order's),
    searched within ``step_budget`` steps."""
    n = graph.n_ops
    beam = max(MIN_BEAM, budget // max(n, 1))
    file_order = tuple(range(n))
    if n == 0:
        return OrderResult((), graph.peak(()), True, graph.peak(()), 0, 0, step_budget)
    tab = _Tables(graph)
    layer: dict[int, _State] = {0: _State(tab.start_peak, tab.start_alive, tab.start_ready,
                                          -1, -1)}
    #: (parent index, op) of every state kept, in the order kept; a layer's state at
    #: position k of its dict has index ``first + k``.
    history: list[tuple[int, int]] = [(-1, -1)]
    first = 0
    exact = True
    visited = 1
    steps = 0
    base = 0
    placed = 0
    narrowed = False
    while placed < n and steps < step_budget:
        placed += 1
        layer_steps = steps
        nxt: dict[int, _State] = {}
        for k, (done, st) in enumerate(layer.items()):
            here = first + k
            ready = st.ready
            steps += ready.bit_count()
            # Ascending op index: among equal peaks the earliest-in-file op wins, so the file
            # order survives whenever it is optimal.
            while ready:
                bit = ready & -ready
                ready ^= bit
                op = base + bit.bit_length() - 1
                peak = max(st.peak, st.alive + tab.step_extra[op])
                new = done | bit
                cur = nxt.get(new)
                if cur is None or peak < cur.peak:
                    nxt[new] = _State(peak, tab.after(st.alive, op, new, base),
                                      tab.ready_after(st.ready, op, new, base), here, op)
        per_state = max(1, (steps - layer_steps) // len(layer))
        allowed = max(1, (step_budget - steps) // max(1, n - placed) // per_state)
        if len(nxt) > min(beam, allowed):
            exact = False
            narrowed = narrowed or allowed < min(beam, len(nxt))
            kept = sorted(nxt, key=lambda m: (nxt[m].peak, nxt[m].alive))[:min(beam, allowed)]
            nxt = {m: nxt[m] for m in kept}
        visited += len(nxt)
        first = len(history)
        history += [(st.parent, st.op) for st in nxt.values()]
        # Operators every state has run leave the masks: shifting all keys alike keeps
        # them distinct and in the same dict order, so the search is unchanged.
        shift = min(_lowest_unset(m) for m in nxt)
        if shift:
            base += shift
            for st in nxt.values():
                st.ready >>= shift
            nxt = {m >> shift: st for m, st in nxt.items()}
        layer = nxt
    file_peak = graph.peak(file_order)
    if placed < n:
        # The layer's most promising state (the beam's own ranking), then the file order.
        states = list(layer.values())
        k = min(range(len(states)), key=lambda i: (states[i].peak, states[i].alive))
        prefix = _backtrack(history, first + k)
        rest = set(range(n)).difference(prefix)
        order = (*prefix, *sorted(rest))
        peak = graph.peak(order)
    else:
        (last,) = layer.values()  # the one state where every operator has run
        order, peak = _backtrack(history, first), last.peak
    if file_peak <= peak:  # the beam may have dropped the file order; never do worse
        order, peak = file_order, file_peak
    exact = exact and placed == n
    bound = peak if exact else graph.op_floor()
    return OrderResult(order, peak, exact, bound, visited, steps, step_budget,
                       narrowed or placed < n, placed)


def _lowest_unset(mask: int) -> int:
    """Index of the lowest 0 bit of ``mask``."""
    return (~mask & (mask + 1)).bit_length() - 1


def _backtrack(history: list[tuple[int, int]], index: int) -> tuple[int, ...]:
    order: list[int] = []
    while index > 0:
        index, op = history[index]
        order.append(op)
    return tuple(reversed(order))
