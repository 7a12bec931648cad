"""The recorded TFLM target builds (``tests/data/tflm_builds/*.json``) and devicefit's static
prediction against them; no checkout needed (``benchmarks/bench_target_builds.py --tflm``
re-measures).

The models written by code here are regenerated (the recorded sha256 proves the bytes are
the measured ones); corpus models are compared where the corpus cache has them, repository
models where a git mirror of their repository is at ``$DEVICEFIT_MIRRORS``.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.target_truth import (
    BUILDS,
    DATA,
    Comparison,
    TruthModel,
    build_config,
    compare,
    load_records,
    summarize,
    truth_models,
)

RECORDS = load_records()
OK_FIELDS = ("head", "tail", "total", "min_arena_mult16", "tail_breakdown", "planner_buffers",
             "planned_tensors", "scratch", "output_hash")


def test_every_recorded_build_is_a_known_build_with_its_pins():
    assert RECORDS, f"no recorded builds in {DATA}"
    for name, record in RECORDS.items():
        b = record["build"]
        config = build_config(name)
        assert (b["cpu"], b["kernels"]) == (config.cpu, config.kernels)
        for key in ("tflm_commit", "toolchain", "qemu", "how_run", "third_party"):
            assert b[key], f"{name}: build.{key} is empty"
        assert (b["cmsis_nn_commit"] is not None) == (b["kernels"] == "cmsis-nn")


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_recorded_models_are_complete(name):
    models = RECORDS[name]["models"]
    assert len({m["name"] for m in models}) == len(models)
    for m in models:
        assert len(m["sha256"]) == 64 and m["size"] > 0 and m["status"]
        if m["status"] != "ok":
            # a model the build cannot run says why: the ops it lacks or TFLM's message
            assert m["unsupported_ops"] or m["message"], m["name"]
            continue
        assert all(m.get(k) is not None for k in OK_FIELDS), m["name"]
        assert m["head"] + m["tail"] == m["total"]
        assert m["min_arena_mult16"] % 16 == 0 and m["min_arena_invokes"]
        assert sum(c["bytes"] for c in m["tail_breakdown"].values()) <= m["tail"]
        assert m["scratch"] == [b[0] for b in m["planner_buffers"][m["planned_tensors"]:]]


def test_loader_refuses_a_file_that_is_not_a_record(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"models": []}))
    with pytest.raises(ValueError, match="not a recorded TFLM build"):
        load_records(tmp_path)


def test_models_built_in_code_regenerate_the_recorded_bytes():
    import hashlib

    built = {m.name: m for m in truth_models(with_corpus=False) if "function" in m.source}
    seen = 0
    for record in RECORDS.values():
        for entry in record["models"]:
            if entry["name"] in built:
                data = built[entry["name"]].load()
                assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["name"]
                seen += 1
    assert seen, "no model built in code is recorded"


def test_a_model_the_build_lacks_an_op_for_is_a_named_finding():
    for record in RECORDS.values():
        for entry in record["models"]:
            if entry["name"] == "built__custom_op_unknown":
                assert entry["status"] == "unsupported"
                assert entry["unsupported_ops"] == ["DevicefitNoSuchOp"]


def test_comparison_arithmetic():
    c = Comparison("m", "b", measured_head=100, predicted_head=100, min_arena=496,
                   predicted_start=480)
    assert c.head_exact and c.over == -16
    s = summarize([c, Comparison("n", "b", 10, 12, 100, 356)])
    assert s.models == 2 and s.head_exact == 1 and s.under == ("m (-16 B)",)
    assert s.median_over == 120 and s.max_over == 256
    # The recorded tail holds the recording allocator's 104 B, which devicefit's does not.
    t = Comparison("t", "b", 10, 10, 100, 100, measured_tail=1908, predicted_tail=1800)
    assert c.tail_over is None and t.tail_over == 1800 - (1908 - 104)
    s = summarize([c, t])
    assert s.tail_under == ("t (-4 B)",) and s.median_tail_over == s.max_tail_over == -4


def test_a_model_whose_bytes_changed_is_left_out_not_compared():
    record = {"build": {"name": BUILDS[0].name}, "models": [
        {"name": "x", "status": "ok", "sha256": "0" * 64, "head": 1, "min_arena_mult16": 16}]}
    rows, skipped = compare(record, lambda entry: b"other bytes")
    assert rows == [] and skipped == ["x: bytes differ from the recorded sha256"]


def _built_only(entry: dict) -> bytes | None:
    """Models this test can regenerate anywhere (CI has no mirror and maybe no corpus)."""
    src = entry["source"]
    return TruthModel(entry["name"], src).load() if "function" in src else None


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_predicted_head_is_exact_on_the_models_built_in_code(name):
    rows, _ = compare(RECORDS[name], _built_only)
    assert rows, f"{name}: no model built in code ran on the build"
    assert [c.model for c in rows if not c.head_exact] == []


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_predicted_start_arena_is_never_under_the_smallest_working_arena(name):
    rows, _ = compare(RECORDS[name], _built_only)
    summary = summarize(rows)
    assert summary.under == (), f"{name}: devicefit's start arena is under on {summary.under}"
    assert summary.tail_under == (), f"{name}: devicefit's tail is under on {summary.tail_under}"
