"""A seeded subset of benchmarks/bench_fuzz.py (about 250 cases): every command, every input
family, no defect. The full campaign (10,000+ cases) is the benchmark; figures in
docs/benchmarks.md "Hostile inputs".
"""

from __future__ import annotations

from collections import Counter

from benchmarks.bench_fuzz import CLASSES, case_count, generate, run

SEED = 24


def test_seeded_fuzz_subset_finds_no_defect():
    scale = 0.025
    assert case_count(scale) >= 200
    summary = run(generate(SEED, scale), workers=1)
    counts = summary["counts"]
    total: Counter = Counter()
    for row in counts.values():
        total.update(row)
    assert total["cases"] == case_count(scale)
    defects = {c: total[c] for c in CLASSES if total[c]}
    assert defects == {}, summary["examples"]
    # The cases reach every command and both sides of the gate, not only refusals.
    assert {"simulate", "simulate --run", "profiles", "check", "optimize", "signals"} <= set(counts)
    assert total["exit 0"] and total["exit 1"] and total["exit 2"]
