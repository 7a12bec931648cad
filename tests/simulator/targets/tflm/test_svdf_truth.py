"""TFLM's own SVDF keyword models (``keyword_scrambled.tflite`` and its ``_8bit`` twin, seven
SVDF each with its variable state): devicefit's start arena against the smallest arena that
starts, recorded on the pinned ``tflite-micro`` wheel (``tests/data/tflm_wheel.json``,
``python -m benchmarks.target_truth --wheel --record``) and on the 32-bit builds
(``tests/data/tflm_builds/``), and re-checked here with the real wheel.

The models come from a git mirror of tflite-micro (``$DEVICEFIT_MIRRORS``); without one these
tests skip. The rule they pin: the wheel packs each operator's parsed options at its struct's
alignment, ``TfLiteSVDFParams`` 12 B (an int, an int-sized enum, a bool) and the wheel's
``TfLiteFullyConnectedParams`` 32 B at 8; with 8 B for SVDF the tail was 32 B short and the
start arena 24 B under the smallest that starts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from benchmarks.target_truth import (
    WHEEL_DATA,
    WHEEL_MODELS,
    compare,
    compare_wheel,
    load_records,
    loader,
    predict,
    wheel_version,
)

WHEEL = json.loads(WHEEL_DATA.read_text())
NAMES = {m.name for m in WHEEL_MODELS}
BYTES = {m.name: m.load() for m in WHEEL_MODELS}
needs_models = pytest.mark.skipif(None in BYTES.values(),
                                  reason="needs a git mirror of tensorflow/tflite-micro "
                                         "($DEVICEFIT_MIRRORS)")


def test_the_wheel_record_is_the_pinned_wheels_and_complete() -> None:
    assert WHEEL["build"]["wheel"] == wheel_version()
    assert {m["name"] for m in WHEEL["models"]} == NAMES
    for m in WHEEL["models"]:
        assert m["head"] + m["tail"] == m["total"] and m["invokes"]
        # the byte-exact smallest lies within the last 16-byte step
        assert m["min_arena_mult16"] - 16 < m["min_arena_bytes"] <= m["min_arena_mult16"]


@needs_models
def test_on_the_wheel_the_start_arena_is_never_under_and_one_step_over_at_most() -> None:
    rows, skipped = compare_wheel(WHEEL)
    assert skipped == [] and {c.model for c in rows} == NAMES
    for c in rows:
        assert c.head_exact, c
        # 16 B: the allowance for the gap after the packed options (tail.py "alignment")
        assert 0 <= c.over <= 16, c
        assert c.tail_over is not None and 0 <= c.tail_over <= 16, c


@needs_models
@pytest.mark.parametrize("build", sorted(load_records()))
def test_on_the_32_bit_builds_the_start_arena_is_never_under(build: str) -> None:
    record = load_records()[build]
    record = dict(record, models=[m for m in record["models"] if m["name"] in NAMES])
    rows, skipped = compare(record, loader())
    assert skipped == [] and {c.model for c in rows} == NAMES
    assert [c for c in rows if c.over < 0 or not c.head_exact] == []
    assert [c for c in rows if c.tail_over is None or c.tail_over < 0] == []


@needs_models
def test_the_real_wheel_starts_at_the_predicted_arena_and_not_below_the_record(
        tmp_path: Path) -> None:
    """The record still holds for this wheel: it refuses one byte under the recorded
    smallest arena, starts there and at devicefit's figure."""
    from benchmarks.bench_corpus import tflm_runs, tflm_wheel_profile

    runs, expected = [], []
    for m in WHEEL["models"]:
        data = BYTES[m["name"]]
        assert data is not None and hashlib.sha256(data).hexdigest() == m["sha256"]
        path = tmp_path / m["name"]
        path.write_bytes(data)
        _, start, _ = predict(data, tflm_wheel_profile(), m["name"])
        for arena, ok in ((m["min_arena_bytes"] - 1, False), (m["min_arena_bytes"], True),
                          (start, True)):
            runs.append((str(path), arena))
            expected.append(ok)
    answers = tflm_runs(runs)
    assert [a["status"] == "ok" for a in answers] == expected, answers


@needs_models
def test_the_tail_is_never_under_on_svdf_and_fc_cut_from_the_model(tmp_path: Path) -> None:
    """The options' packing, operator by operator: the first 1 … 15 operators of
    keyword_scrambled (QUANTIZE, SVDF and FC alternating, then three SVDF, FC, SOFTMAX,
    QUANTIZE), and its FC or SVDF alone, measured by the wheel's RecordingMicroAllocator."""
    from benchmarks.bench_corpus import tflm_runs, tflm_wheel_profile
    from devicefit.simulator.plan.planners import plan_memory
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.read.writer import cut_ops, model_table

    data = BYTES["tflm__keyword_scrambled.tflite"]
    assert data is not None
    table = model_table(data)
    cuts = [list(range(k)) for k in range(1, 16)] + [[2, 4, 6, 8, 12], [1, 3, 5, 7, 9]]
    paths, predicted = [], []
    for cut in cuts:
        path = tmp_path / f"cut_{'_'.join(map(str, cut))}.tflite"
        path.write_bytes(cut_ops(table, 0, cut))
        paths.append(path)
        predicted.append(plan_memory(read_model(path), tflm_wheel_profile()).tail_bytes)
    answers = tflm_runs([(str(p), 1 << 20) for p in paths])
    over = [pred - a["value"]["tail"] for pred, a in zip(predicted, answers, strict=True)]
    # Never under; over by the 16 B allowance, and by 8 more where an odd tensor count
    # leaves the eval-tensor array 8 B short of a 16-byte multiple.
    assert all(0 <= o <= 32 for o in over), list(zip(cuts, over))
