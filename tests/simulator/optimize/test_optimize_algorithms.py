"""The optimizer's algorithms on plain data: order search and offline packing.

Random DAGs (hypothesis, bounded) are checked against brute force over every topological
order, and every packing against an independent overlap check.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from devicefit.simulator.optimize.graph import OpGraph
from devicefit.simulator.optimize.packing import pack
from devicefit.simulator.optimize.reorder import best_order
from devicefit.simulator.plan.lifetimes import lower_bound
from devicefit.simulator.targets.tflm.planner import greedy_plan
from devicefit.simulator.types import Buffer

SIZES = st.integers(1, 40).map(lambda n: 16 * n)


@st.composite
def dags(draw, max_ops: int = 7) -> OpGraph:
    """A random operator DAG: each op reads 1-3 existing tensors and writes 1-2 new ones."""
    n_inputs = draw(st.integers(1, 2))
    tensors = list(range(n_inputs))
    sizes = {t: draw(SIZES) for t in tensors}
    op_inputs, op_outputs, scratch = [], [], []
    for _ in range(draw(st.integers(1, max_ops))):
        ins = draw(st.lists(st.sampled_from(tensors), min_size=1, max_size=3, unique=True))
        outs = []
        for _ in range(draw(st.integers(1, 2))):
            t = len(sizes)
            sizes[t] = draw(SIZES)
            outs.append(t)
        op_inputs.append(tuple(ins))
        op_outputs.append(tuple(outs))
        scratch.append(draw(st.sampled_from([0, 0, 16, 64, 256])))
        tensors += outs
    read = {t for ins in op_inputs for t in ins}
    produced = [t for outs in op_outputs for t in outs]
    outputs = [t for t in produced if t not in read] or produced[-1:]
    return OpGraph(sizes, tuple(op_inputs), tuple(op_outputs), tuple(scratch),
                   tuple(range(n_inputs)), tuple(outputs))


def _all_orders(g: OpGraph):
    return (p for p in itertools.permutations(range(g.n_ops)) if g.is_topological(p))


def _independent_overlaps(buffers: list[Buffer], offsets) -> list[tuple[int, int]]:
    bad = []
    for i, j in itertools.combinations(range(len(buffers)), 2):
        a, b = buffers[i], buffers[j]
        live_together = a.first <= b.last and b.first <= a.last
        share_bytes = offsets[i] < offsets[j] + b.size and offsets[j] < offsets[i] + a.size
        if live_together and share_bytes:
            bad.append((i, j))
    return bad


@settings(max_examples=60, deadline=None)
@given(dags())
def test_order_search_finds_the_lowest_peak_of_every_valid_order(g: OpGraph):
    result = best_order(g)
    assert result.exact
    assert g.is_topological(result.order)
    assert result.peak == g.peak(result.order) == result.bound
    assert result.peak == min(g.peak(o) for o in _all_orders(g))
    assert result.peak >= g.op_floor()


@settings(max_examples=60, deadline=None)
@given(dags(max_ops=10))
def test_offline_plans_never_overlap_live_buffers(g: OpGraph):
    buffers = g.buffers(best_order(g).order)
    packings = pack(buffers)
    assert packings
    for p in packings:
        assert _independent_overlaps(buffers, p.offsets) == []
        assert all(o >= 0 and o % 16 == 0 for o in p.offsets)
        assert p.head == max(o + b.size for o, b in zip(p.offsets, buffers))
        assert p.head >= lower_bound(buffers)
    assert [p.head for p in packings] == sorted({p.head for p in packings})


@settings(max_examples=40, deadline=None)
@given(st.lists(SIZES, min_size=2, max_size=12), st.lists(st.sampled_from([0, 32, 128]),
                                                           min_size=12, max_size=12))
def test_a_chain_packs_at_the_bound(sizes: list[int], scratch: list[int]):
    n = len(sizes) - 1
    g = OpGraph({t: s for t, s in enumerate(sizes)}, tuple((t,) for t in range(n)),
                tuple((t + 1,) for t in range(n)), tuple(scratch[:n]), (0,), (n,))
    buffers = g.buffers(range(n))
    assert pack(buffers)[0].head == lower_bound(buffers) == g.peak(range(n))


def test_packing_beats_tflm_greedy_on_a_chain_with_uneven_tensors():
    # Sizes like chain_int8's: the greedy planner (largest first) strands a gap.
    sizes = [3072, 8192, 4096, 4096, 6144, 1536, 160, 16]
    n = len(sizes) - 1
    g = OpGraph(dict(enumerate(sizes)), tuple((t,) for t in range(n)),
                tuple((t + 1,) for t in range(n)), (0,) * n, (0,), (n,))
    buffers = g.buffers(range(n))
    greedy_head = max(o + b.size for o, b in zip(greedy_plan(buffers), buffers))
    best = pack(buffers)[0]
    assert best.head == lower_bound(buffers) == 12288 < greedy_head
    assert best.method == "two-ended search"


def _fan(branches: int) -> OpGraph:
    """One input, ``branches`` two-op branches (wide then narrow), joined by one op."""
    sizes = {0: 256}
    ins, outs = [], []
    joined = []
    for b in range(branches):
        wide, narrow = 1 + 2 * b, 2 + 2 * b
        sizes[wide], sizes[narrow] = 1024, 64
        ins += [(0,), (wide,)]
        outs += [(wide,), (narrow,)]
        joined.append(narrow)
    # File order: every wide op first, so all wide tensors are live together.
    order = [2 * b for b in range(branches)] + [2 * b + 1 for b in range(branches)]
    ins = [ins[i] for i in order] + [tuple(joined)]
    outs = [outs[i] for i in order] + [(len(sizes),)]
    sizes[len(sizes)] = 64
    return OpGraph(sizes, tuple(ins), tuple(outs), (0,) * len(ins), (0,), outs[-1])


def test_reordering_runs_each_branch_to_its_end():
    g = _fan(4)
    result = best_order(g)
    assert result.exact
    assert g.peak(range(g.n_ops)) == 256 + 4 * 1024
    # Best: one wide tensor at a time, next to the input and the three finished branches.
    assert result.peak == 256 + 1024 + 3 * 64 < g.peak(range(g.n_ops))


def test_a_graph_too_wide_for_the_exact_search_falls_back_to_a_beam():
    g = _fan(12)  # 3^12 reachable sets
    result = best_order(g, budget=1000)
    assert not result.exact
    assert g.is_topological(result.order)
    assert result.bound == g.op_floor() <= result.peak == g.peak(result.order)
    assert result.peak < g.peak(range(g.n_ops))


def test_an_already_optimal_file_order_is_kept():
    g = _fan(3)
    best = best_order(g)
    reordered = OpGraph(g.sizes, tuple(g.op_inputs[i] for i in best.order),
                        tuple(g.op_outputs[i] for i in best.order), g.scratch, g.graph_inputs,
                        g.graph_outputs)
    again = best_order(reordered)
    assert again.order == tuple(range(g.n_ops))
    assert again.peak == best.peak


def _fans(count: int, branches: int) -> OpGraph:
    """``count`` fans (:func:`_fan`) one after the other: each joins into the next's input."""
    one = _fan(branches)
    sizes: dict[int, int] = {0: one.sizes[0]}
    ins: list[tuple[int, ...]] = []
    outs: list[tuple[int, ...]] = []
    for _ in range(count):
        shift = len(sizes) - 1  # the fan's input is the previous fan's output
        sizes.update({t + shift: s for t, s in one.sizes.items() if t})
        ins += [tuple(t + shift for t in op) for op in one.op_inputs]
        outs += [tuple(t + shift for t in op) for op in one.op_outputs]
    return OpGraph(sizes, tuple(ins), tuple(outs), (0,) * len(ins), (0,), outs[-1])


def test_the_step_budget_stops_the_search_with_a_valid_order():
    g = _fans(30, 3)
    whole = best_order(g)
    assert not whole.stopped and whole.placed == g.n_ops
    # Fewer steps than operators: even one state a layer cannot reach the end.
    cut = best_order(g, step_budget=g.n_ops // 2)
    assert cut.stopped and not cut.exact and 0 < cut.placed < g.n_ops
    # It stops at the end of the first layer past the budget: a layer here is a few steps.
    assert g.n_ops // 2 <= cut.steps < g.n_ops // 2 + 4
    assert g.is_topological(cut.order)
    assert cut.peak == g.peak(cut.order) <= g.peak(range(g.n_ops))
    assert cut.bound == g.op_floor() <= cut.peak


def test_a_tight_step_budget_narrows_the_beam_before_it_stops():
    g = _fan(12)
    wide = best_order(g, budget=1000)
    narrow = best_order(g, budget=1000, step_budget=wide.steps // 4)
    assert not wide.stopped and narrow.stopped
    assert narrow.placed == g.n_ops  # it finished: fewer states per layer, not fewer layers
    assert narrow.steps <= wide.steps // 4 + 12 and narrow.states < wide.states
    assert g.is_topological(narrow.order) and narrow.peak == g.peak(narrow.order)
    assert narrow.peak < g.peak(range(g.n_ops))
