"""A seeded subset of benchmarks/bench_fuzz_calibrate.py (about 100 cases): every reader
calibrate uses, no defect. The full campaign (5,000+ cases) is the benchmark; figures in
docs/benchmarks.md "Calibrate's readers under fuzzing"."""

from __future__ import annotations

from collections import Counter

from benchmarks.bench_fuzz import CLASSES, run
from benchmarks.bench_fuzz_calibrate import case_count, generate, wrong_exit_1

SEED = 50


def test_seeded_calibrate_fuzz_subset_finds_no_defect() -> None:
    scale = 0.02
    summary = run(generate(SEED, scale), workers=1)
    counts = summary["counts"]
    total: Counter = Counter()
    for row in counts.values():
        total.update(row)
    assert total["cases"] == case_count(scale) >= 100
    assert {c: total[c] for c in CLASSES if total[c]} == {}, summary["examples"]
    # Bad input is exit 2, never 1 ("a budget failed") nor a signal.
    assert wrong_exit_1(summary) == total["exit other"] == 0, summary["examples"]
    assert {"micro-log", "micro-csv", "benchmark-model", "bench-json", "latency-table",
            "profile-keys", "special-paths", "largest"} <= set(counts)
    # Not only refusals: mutants that stay valid are calibrated.
    assert total["exit 0"] and total["exit 2"]
