"""Operator reordering: the valid execution order with the lowest peak of live bytes.

Dynamic programming over the sets of operators already executed (Liberis & Lane,
arXiv:1910.05110). What is live between two steps depends only on *which* operators have
run, not on their order, so the best peak to reach a set is memoised on the set (a bitmask).
The search goes forward one step at a time: every state of one layer holds sets of the same
size. When a layer grows beyond its share of the state budget the search keeps the most
promising ones (lowest peak so far, then fewest live bytes) and the result is no longer
proven optimal; it then reports :meth:`OpGraph.op_floor` as the bound every order must reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicefit.simulator.optimize.graph import OpGraph

#: States the search may keep over all layers; a layer beyond ``budget / operators`` states
#: (at least :data:`MIN_BEAM`) is cut to that many: the search becomes a beam search.
DEFAULT_BUDGET = 100_000
MIN_BEAM = 256


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


@dataclass
class _State:
    peak: int
    alive: int
    #: Operators whose inputs are all computed and that have not run yet (a bitmask).
    ready: int
    parent: int
    op: int


class _Tables:
    """Bitmask views of the graph the search evaluates in its inner loop."""

    def __init__(self, graph: OpGraph) -> None:
        n = graph.n_ops
        prod = graph.producers()
        self.pred_mask = [0] * n
        self.succ: list[list[int]] = [[] for _ in range(n)]
        for op, ins in enumerate(graph.op_inputs):
            for t in ins:
                if t in prod and not self.pred_mask[op] >> prod[t] & 1:
                    self.pred_mask[op] |= 1 << prod[t]
                    self.succ[prod[t]].append(op)
        self.start_ready = sum(1 << op for op in range(n) if not self.pred_mask[op])
        consumers: dict[int, int] = {}
        for op, ins in enumerate(graph.op_inputs):
            for t in ins:
                consumers[t] = consumers.get(t, 0) | (1 << op)
        outputs = set(graph.graph_outputs)
        self.out_bytes = [sum(graph.sizes[t] for t in outs) for outs in graph.op_outputs]
        self.step_extra = [o + s for o, s in zip(self.out_bytes, graph.scratch)]
        # Outputs that stay live after their producer's step: read later or a graph output.
        self.kept = [[(graph.sizes[t], consumers.get(t, 0), t in outputs) for t in outs]
                     for outs in graph.op_outputs]
        # Inputs an operator may free: (size, all readers) unless they are graph outputs.
        self.freed = [[(graph.sizes[t], consumers[t]) for t in ins if t not in outputs]
                      for ins in graph.op_inputs]
        self.start_alive = sum(graph.sizes[t] for t in graph.graph_inputs
                               if t in consumers or t in outputs)
        self.start_peak = sum(graph.sizes[t] for t in graph.graph_inputs)

    def ready_after(self, ready: int, op: int, done: int) -> int:
        """Ready set once ``op`` has run (``done`` includes ``op``)."""
        ready &= ~(1 << op)
        for s in self.succ[op]:
            if not self.pred_mask[s] & ~done:
                ready |= 1 << s
        return ready

    def after(self, alive: int, op: int, done: int) -> int:
        """Live bytes between steps once ``op`` has run (``done`` includes ``op``)."""
        for size, readers, is_output in self.kept[op]:
            if is_output or readers & ~done:
                alive += size
        for size, readers in self.freed[op]:
            if not readers & ~done:
                alive -= size
        return alive


def best_order(graph: OpGraph, budget: int = DEFAULT_BUDGET) -> OrderResult:
    """The topological order of ``graph`` with the lowest peak (ties: the file order's)."""
    n = graph.n_ops
    beam = max(MIN_BEAM, budget // max(n, 1))
    file_order = tuple(range(n))
    if n == 0:
        return OrderResult((), graph.peak(()), True, graph.peak(()), 0)
    tab = _Tables(graph)
    full = (1 << n) - 1
    states: dict[int, _State] = {0: _State(tab.start_peak, tab.start_alive, tab.start_ready,
                                           -1, -1)}
    layer = [0]
    exact = True
    visited = 1
    for _ in range(n):
        nxt: dict[int, _State] = {}
        for done in layer:
            st = states[done]
            ready = st.ready
            # Ascending op index: among equal peaks the earliest-in-file op wins, so the file
            # order survives whenever it is optimal.
            while ready:
                bit = ready & -ready
                ready ^= bit
                op = bit.bit_length() - 1
                peak = max(st.peak, st.alive + tab.step_extra[op])
                new = done | bit
                cur = nxt.get(new)
                if cur is None or peak < cur.peak:
                    nxt[new] = _State(peak, tab.after(st.alive, op, new),
                                      tab.ready_after(st.ready, op, new), done, op)
        if len(nxt) > beam:
            exact = False
            kept = sorted(nxt, key=lambda m: (nxt[m].peak, nxt[m].alive))[:beam]
            nxt = {m: nxt[m] for m in kept}
        visited += len(nxt)
        states.update(nxt)
        layer = list(nxt)
    order = _backtrack(states, full)
    peak = states[full].peak
    file_peak = graph.peak(file_order)
    if file_peak <= peak:  # the beam may have dropped the file order; never do worse
        order, peak = file_order, file_peak
    bound = peak if exact else graph.op_floor()
    return OrderResult(order, peak, exact, bound, visited)


def _backtrack(states: dict[int, _State], full: int) -> tuple[int, ...]:
    order: list[int] = []
    mask = full
    while mask:
        st = states[mask]
        order.append(st.op)
        mask = st.parent
    return tuple(reversed(order))
