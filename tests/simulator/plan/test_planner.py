"""The TFLM arena planner: unit cases, and predicted head == the real TFLM head, to the byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicefit.simulator.errors import InputError, RuntimeFailure
from devicefit.simulator.plan.lifetimes import (
    Buffer,
    align_up,
    live_bytes_per_step,
    lower_bound,
    op_steps,
)
from devicefit.simulator.plan.planners.base import PlanError, check_plan
from devicefit.simulator.profiles import load_profile, with_runtime
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.read.writer import reorder_operators, set_offline_plan
from devicefit.simulator.run.runtimes import run_model
from devicefit.simulator.targets.litert.planner import best_fit_plan, litert_buffers
from devicefit.simulator.targets.tflm.planner import greedy_plan, plan_tflm
from devicefit.simulator.targets.tflm.scratch import tflm_buffers
from tests.zoo import model_path

SINE = (Path(__import__("tflite_micro").__file__).parent / "python" / "tflite_micro"
        / "sine_float.tflite")
#: Zoo models the TFLM wheel runs (unet_int8 up-samples with TILE, which TFLM lacks).
TFLM_ZOO = ["chain_int8", "chain_float32", "residual_int8", "inception_int8", "mlp_int8",
            "dynamic_float32", "large_params_int8", "unet_tconv_int8", "two_heads_int8",
            "gap_float32", "if_float32", "leaky_mid_int8", "grouped_conv_int8", "dynamic_int8",
            "branches_int8", "edgetpu_limits_int8", "mobilenet_v1_96_int8",
            "mobilenet_v2_96_int8", "deep_mlp_int8"]
#: The tail is an estimate, fitted to the wheel: how far from it the tests allow it to be.
TAIL_TOLERANCE_BYTES = 96


def _buf(size: int, first: int, last: int, offline: int | None = None) -> Buffer:
    return Buffer(tensor=0, name=f"b{size}_{first}_{last}", size=size, first=first, last=last,
                  offline_offset=offline)


def _predicted_head(path: Path) -> int:
    buffers = tflm_buffers(read_model(path))
    return check_plan(buffers, greedy_plan(buffers))


# --------------------------------------------------------------------------- greedy unit cases
def test_greedy_places_largest_first_and_reuses_gaps() -> None:
    # a chain: 0→1→2→3, each tensor live for two steps
    bufs = [_buf(64, 0, 1), _buf(128, 1, 2), _buf(32, 2, 3), _buf(16, 3, 4)]
    offsets = greedy_plan(bufs)
    assert offsets == [128, 0, 128, 0]
    assert check_plan(bufs, offsets) == 192 == lower_bound(bufs)


def test_greedy_ties_go_to_the_last_added_buffer_first() -> None:
    # Equal sizes, all live together: TFLM places the one added last at offset 0.
    bufs = [_buf(32, 0, 2), _buf(32, 0, 2), _buf(32, 0, 2)]
    assert greedy_plan(bufs) == [64, 32, 0]


def test_greedy_takes_the_first_gap_that_fits_not_the_best() -> None:
    bufs = [_buf(100, 0, 0), _buf(60, 0, 5), _buf(50, 1, 1), _buf(40, 1, 1)]
    # 100@0 (step 0), 60 live 0-5 goes at 100; 50 and 40 (step 1) fit in the 100-byte gap.
    assert greedy_plan(bufs) == [0, 100, 0, 50]


def test_offline_buffers_keep_their_offsets_and_online_ones_avoid_them() -> None:
    bufs = [_buf(64, 0, 3, offline=32), _buf(48, 1, 2), _buf(16, 0, 0)]
    offsets = greedy_plan(bufs)
    assert offsets[0] == 32
    assert offsets[2] == 0  # fits below the offline buffer
    assert offsets[1] == 96
    check_plan(bufs, offsets)


def test_check_plan_rejects_overlapping_live_buffers() -> None:
    bufs = [_buf(64, 0, 2), _buf(64, 1, 3)]
    with pytest.raises(PlanError, match="overlap"):
        check_plan(bufs, [0, 32])
    assert check_plan(bufs, [0, 64]) == 128
    # the same bytes at steps that never meet are fine
    assert check_plan([_buf(64, 0, 1), _buf(64, 2, 3)], [0, 0]) == 64


def test_overlapping_offline_offsets_are_placed_as_the_file_says() -> None:
    # Vela aliases its scratch area with the NPU op's input/output; TFLM does not check.
    bufs = [_buf(64, 0, 2, offline=0), _buf(64, 1, 3, offline=16), _buf(32, 0, 3)]
    offsets = greedy_plan(bufs)
    assert offsets == [0, 16, 80]
    assert check_plan(bufs, offsets) == 112


def test_live_bytes_and_lower_bound() -> None:
    bufs = [_buf(16, 0, 1), _buf(32, 1, 2), _buf(48, 2, 2)]
    assert live_bytes_per_step(bufs) == [16, 48, 80]
    assert lower_bound(bufs) == 80
    assert lower_bound([]) == 0


def test_litert_best_fit_prefers_the_tightest_gap() -> None:
    # Two gaps open at step 3: 128 bytes at 0 and 64 bytes at 192 (64-byte aligned offsets).
    bufs = [_buf(128, 0, 2), _buf(64, 0, 9), _buf(64, 0, 2), _buf(64, 0, 9), _buf(64, 3, 4)]
    assert best_fit_plan(bufs)[:4] == [0, 128, 192, 256]
    assert best_fit_plan(bufs)[4] == 192


# --------------------------------------------------------------------------- against real TFLM
@pytest.mark.parametrize("name", [*TFLM_ZOO, "sine"])
def test_predicted_arena_matches_real_tflm(name: str) -> None:
    """Head exactly; tail never under, within the tolerance (64-bit host, reference kernels)."""
    path = SINE if name == "sine" else model_path(name)
    real = run_model(path, "tflm")
    assert _predicted_head(path) == real.arena_head_bytes
    wheel = with_runtime(load_profile("stm32l4r5-cortex-m4"), kernels="reference",
                         pointer_bytes=8)
    tail = plan_tflm(read_model(path), wheel).tail_bytes
    assert 0 <= tail - real.arena_tail_bytes <= TAIL_TOLERANCE_BYTES


def test_scratch_buffers_are_planned_after_tensors_in_request_order() -> None:
    model = read_model(model_path("two_heads_int8"))
    buffers = tflm_buffers(model)
    kinds = [b.kind for b in buffers]
    assert kinds == sorted(kinds, key=lambda k: k != "tensor")  # tensors first
    expected = []
    for op in model.main.operators:  # Prepare order: file order, each kernel's own order
        if op.op_name == "REDUCE_MAX":
            expected += [(op.index, "iterator"), (op.index, "axes")]
        elif op.op_name == "MEAN":
            expected += [(op.index, "accumulators"), (op.index, "iterator"), (op.index, "axes")]
    scratch = [b for b in buffers if b.kind == "scratch"]
    assert [(b.op, b.name.split()[-1]) for b in scratch] == expected
    assert all(b.first == b.last for b in scratch)


def test_control_flow_subgraphs_are_planned_inside_the_if() -> None:
    model = read_model(model_path("if_float32"))
    assert len(model.subgraphs) == 3
    buffers = tflm_buffers(model)
    assert {b.subgraph for b in buffers} == {0, 1, 2}
    if_index = next(op.index for op in model.main.operators if op.op_name == "IF")
    first, last = op_steps(model)[if_index]
    assert last - first == 2 + sum(len(sg.operators) for sg in model.subgraphs[1:])


def _alternative_topological_order(model) -> list[int]:
    """A valid execution order other than the file's: always run the highest-index ready op."""
    sg = model.main
    producer = {t: op.index for op in sg.operators for t in op.outputs}
    deps = {op.index: {producer[t] for t in op.inputs if t in producer} for op in sg.operators}
    done: list[int] = []
    while len(done) < len(deps):
        ready = [i for i in deps if i not in done and deps[i] <= set(done)]
        done.append(max(ready))
    return done


def test_reordered_model_head_matches_prediction_with_order(tmp_path: Path) -> None:
    path = model_path("inception_int8")
    model = read_model(path)
    order = _alternative_topological_order(model)
    assert order != sorted(order)
    reordered = tmp_path / "reordered.tflite"
    reordered.write_bytes(reorder_operators(path.read_bytes(), order))
    buffers = tflm_buffers(model, order)
    predicted = check_plan(buffers, greedy_plan(buffers))
    assert predicted == _predicted_head(reordered)
    assert predicted == run_model(reordered, "tflm").arena_head_bytes


def test_offline_plan_is_honoured_like_tflm(tmp_path: Path) -> None:
    """Place every planned tensor end to end (a valid, wasteful plan); leave one online."""
    path = model_path("residual_int8")
    model = read_model(path)
    planned = [b for b in tflm_buffers(model) if b.kind == "tensor"]
    offsets = [-1] * len(model.main.tensors)
    end = 0
    for b in planned[:-1]:
        offsets[b.tensor] = end
        end += b.size
    out = tmp_path / "offline.tflite"
    out.write_bytes(set_offline_plan(path.read_bytes(), offsets))
    buffers = tflm_buffers(read_model(out))
    assert [b.offline_offset is not None for b in buffers if b.kind == "tensor"] == \
        [True] * (len(planned) - 1) + [False]
    predicted = check_plan(buffers, greedy_plan(buffers))
    assert predicted >= end > _predicted_head(path)
    assert predicted == run_model(out, "tflm").arena_head_bytes


def test_litert_plan_is_valid_and_above_the_lower_bound() -> None:
    for name in ("chain_int8", "inception_int8", "two_heads_int8"):
        buffers = litert_buffers(read_model(model_path(name)))
        head = check_plan(buffers, best_fit_plan(buffers))
        assert head >= lower_bound(buffers) > 0
        assert all(o % 64 == 0 for o in best_fit_plan(buffers))


_LITERT_ADDRESSES = """
import json, sys
from ai_edge_litert.interpreter import Interpreter, OpResolverType
it = Interpreter(model_path=sys.argv[1],
                 experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
it.allocate_tensors()
out = {}
for d in it.get_tensor_details():
    a = it.tensor(d["index"])()
    out[d["index"]] = [a.__array_interface__["data"][0], a.nbytes]
print(json.dumps(out))
"""


@pytest.mark.parametrize("name", ["chain_int8", "residual_int8", "inception_int8"])
def test_litert_estimate_spans_the_same_arena_as_litert(name: str) -> None:
    """LiteRT (reference kernels, in a child process) places the arena tensors over the same
    extent devicefit predicts on these models. Not in general: kernel temporaries, which
    the inference plan does not model, can push tensors up (two_heads_int8: +128 B)."""
    path = model_path(name)
    proc = subprocess.run([sys.executable, "-c", _LITERT_ADDRESSES, str(path)],
                          capture_output=True, text=True, timeout=120, check=True)
    real = {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    buffers = litert_buffers(read_model(path))
    offsets = best_fit_plan(buffers)
    base = min(real[b.tensor][0] for b in buffers)
    extent = max(real[b.tensor][0] - base + real[b.tensor][1] for b in buffers)
    assert extent == check_plan(buffers, offsets)


def test_cmsis_nn_scratch_buffers_follow_cmsis_nn() -> None:
    model = read_model(model_path("inception_int8"))
    sizes = {(b.op, b.name.split(" ", 3)[-1]): b.size
             for b in tflm_buffers(model, kernels="cmsis-nn") if b.kind == "scratch"}
    convs = {op.index: op for op in model.main.operators if op.op_name == "CONV_2D"}
    for index, op in convs.items():
        f = model.main.tensors[op.inputs[1]]
        key = (index, "CONV_2D im2col (CMSIS-NN)")
        if f.shape[1:3] == (1, 1):
            assert key not in sizes  # 1x1 convolutions need no im2col
        else:
            cols = f.shape[1] * f.shape[2] * f.shape[3]
            assert sizes[key] == align_up(2 * (cols + -cols % 4) * 2)
    plan = plan_tflm(model, with_runtime(load_profile("stm32l4r5-cortex-m4"), kernels="cmsis-nn"))
    # A Cortex-M4 CMSIS-NN build is recorded (tests/data/tflm_builds/): the head is checked.
    assert "arena_head" in plan.exact and plan.head_bytes >= lower_bound(plan.buffers)
    assert any("verified against: 32-bit build measured" in n for n in plan.notes)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 12), st.integers(0, 6)),
                min_size=1, max_size=24))
def test_greedy_plans_are_always_valid(specs: list[tuple[int, int, int]]) -> None:
    """Random sizes and lifetimes: no overlap between live buffers, head >= lower bound, and
    never worse than stacking everything."""
    bufs = [_buf(align_up(16 * size), first, first + span) for size, first, span in specs]
    for plan in (greedy_plan(bufs), best_fit_plan(bufs)):
        head = check_plan(bufs, plan)
        assert lower_bound(bufs) <= head <= sum(b.size for b in bufs) + 64 * len(bufs)


def test_an_order_that_is_not_a_permutation_is_rejected() -> None:
    model = read_model(model_path("mlp_int8"))
    with pytest.raises(InputError, match="permutation"):
        tflm_buffers(model, [0, 0, 1])


def _starts(path: Path, arena: int) -> bool:
    """Does real TFLM (child process) create the interpreter in exactly ``arena`` bytes?"""
    try:
        return run_model(path, "tflm", arena_size=arena).arena_size_used == arena
    except RuntimeFailure:
        return False


@pytest.mark.parametrize(("name", "why"), [
    ("deep_mlp_int8", "400 tensors: the planner's temporary arrays outgrow the 80-byte head"),
    ("large_params_int8", "a 2048-channel dense layer's zero points, copied during Prepare"),
])
def test_arena_to_start_covers_what_tflm_needs_while_loading(name: str, why: str) -> None:
    """head + tail is too small for TFLM to start these models; the predicted minimum is
    enough."""
    path = model_path(name)
    profile = with_runtime(load_profile("stm32l4r5-cortex-m4"), kernels="reference",
                           pointer_bytes=8)
    plan = plan_tflm(read_model(path), profile)
    assert plan.arena_required_bytes > plan.arena_bytes + 2048, why
    assert _starts(path, align_up(plan.arena_required_bytes))
    assert not _starts(path, align_up(plan.arena_bytes))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8), st.integers(0, 4),
                          st.integers(0, 6)), min_size=1, max_size=12))
def test_check_plan_finds_exactly_the_clashing_pairs(specs: list[tuple[int, ...]]) -> None:
    bufs = [_buf(16 * size, first, first + span) for size, first, span, _ in specs]
    offsets = [16 * slot for *_, slot in specs]
    clash = any(a.size and b.size and a.first <= b.last and b.first <= a.last
                and oa < ob + b.size and ob < oa + a.size
                for i, (a, oa) in enumerate(zip(bufs, offsets, strict=True))
                for b, ob in list(zip(bufs, offsets, strict=True))[i + 1:])
    if clash:
        with pytest.raises(PlanError):
            check_plan(bufs, offsets)
    else:
        assert check_plan(bufs, offsets) == max(o + b.size for b, o in
                                                zip(bufs, offsets, strict=True))
