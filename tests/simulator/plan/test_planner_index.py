"""The indexed planners give exactly the offsets of the literal (quadratic) walks they replace.

The references below are the planners as TFLM and LiteRT write them: for each buffer, every
placed buffer in offset order. Random buffer sets include shared lifetimes (blocks), zero
sizes, offline offsets and never-used tensors (lifetime -1), the cases the index shortcuts.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devicefit.simulator.plan.lifetimes import align_up
from devicefit.simulator.plan.planners.base import overlaps_in_time
from devicefit.simulator.targets.litert.planner import best_fit_plan
from devicefit.simulator.targets.tflm.planner import greedy_plan
from devicefit.simulator.types import Buffer


def _greedy_reference(buffers: list[Buffer]) -> list[int]:
    n = len(buffers)
    offline = [i for i in range(n) if buffers[i].offline_offset is not None]
    online = [i for i in reversed(range(n)) if buffers[i].offline_offset is None]
    online.sort(key=lambda i: -buffers[i].size)
    offsets = [-1] * n
    placed: list[int] = []
    for i in offline + online:
        b = buffers[i]
        if b.offline_offset is not None:
            offset = b.offline_offset
        else:
            offset = 0
            for j in placed:
                if not overlaps_in_time(b, buffers[j]):
                    continue
                if offsets[j] - offset >= b.size:
                    break
                offset = max(offset, offsets[j] + buffers[j].size)
        offsets[i] = offset
        k = len(placed)
        while k > 0 and offsets[placed[k - 1]] > offset:
            k -= 1
        placed.insert(k, i)
    return offsets


def _best_fit_reference(buffers: list[Buffer], alignment: int = 64) -> list[int]:
    offsets: list[int] = []
    placed: list[int] = []
    for i, b in enumerate(buffers):
        best, best_fit, current = None, None, 0
        for j in placed:
            if not overlaps_in_time(b, buffers[j]):
                continue
            aligned = align_up(current, alignment)
            gap_end = offsets[j]
            if aligned + b.size <= gap_end and (best_fit is None or gap_end - aligned < best_fit):
                best, best_fit = aligned, gap_end - current
            current = max(current, offsets[j] + buffers[j].size)
            if best_fit == 0:
                break
        offset = best if best is not None else align_up(current, alignment)
        offsets.append(offset)
        k = len(placed)
        while k > 0 and offsets[placed[k - 1]] > offset:
            k -= 1
        placed.insert(k, i)
    return offsets


LIFETIMES = [(-1, -1), (0, 0), (0, 3), (1, 2), (2, 2), (2, 5), (4, 6), (0, 6)]
# Built once: a strategy made inside the draw loop is validated and labelled again at every
# draw, which cost hypothesis more than the planners' own work.
_COUNTS = st.integers(0, 40)
_LIFETIMES = st.sampled_from(LIFETIMES)
_ALIGNED_SIZES = st.sampled_from([0, 16, 32, 48, 64, 160])
_SIZES = st.integers(0, 200)
_OFFLINE = st.sampled_from([None, None, None, 0, 64, 96])


@st.composite
def buffer_sets(draw, aligned: bool, offline: bool):
    count = draw(_COUNTS)
    out = []
    for i in range(count):
        first, last = draw(_LIFETIMES)
        size = draw(_ALIGNED_SIZES if aligned else _SIZES)
        fixed = draw(_OFFLINE) if offline else None
        out.append(Buffer(tensor=i, name=f"t{i}", size=size, first=first, last=last,
                          offline_offset=fixed))
    return out


@settings(max_examples=400, deadline=None)
@given(buffer_sets(aligned=True, offline=True))
def test_greedy_plan_matches_tflm_literal_walk(buffers):
    assert greedy_plan(buffers) == _greedy_reference(buffers)


@settings(max_examples=400, deadline=None)
@given(buffer_sets(aligned=False, offline=False))
def test_best_fit_plan_matches_litert_literal_walk(buffers):
    assert best_fit_plan(buffers) == _best_fit_reference(buffers)


def _clashes_reference(buffers: list[Buffer], offsets: list[int]) -> bool:
    return any(a.size and b.size and overlaps_in_time(a, b)
               and offsets[i] < offsets[j] + b.size and offsets[j] < offsets[i] + a.size
               for i, a in enumerate(buffers) for j, b in enumerate(buffers) if i < j)


@settings(max_examples=400, deadline=None)
@given(buffer_sets(aligned=True, offline=False),
       st.lists(st.sampled_from([0, 16, 32, 64, 100]), min_size=40, max_size=40))
def test_plan_check_finds_exactly_the_clashing_plans(buffers, offsets):
    from devicefit.simulator.plan.planners.base import PlanError, check_plan

    offsets = offsets[:len(buffers)]
    try:
        check_plan(buffers, offsets)
        found = False
    except PlanError:
        found = True
    assert found == _clashes_reference(buffers, offsets)
