"""The Markdown table the device-training benchmarks print (benchmarks/tables.py), held to
lines those benchmarks printed before they shared it."""

from __future__ import annotations

from benchmarks import bench_device_train, bench_device_train_auto
from benchmarks.tables import Column, markdown_table

KIB = 1024


def test_the_header_the_alignment_row_and_a_line_per_row() -> None:
    assert markdown_table([Column("a"), Column("n", right=True)], [["x", 1], ["", "2"]]) == [
        "| a | n |", "| --- | ---: |", "| x | 1 |", "|  | 2 |"]
    assert markdown_table([Column("a")], []) == ["| a |", "| --- |"]


def test_a_device_training_run_and_a_refused_one() -> None:
    # A row of `bench_device_train.py --sets digits --updates biases --batches 8 --epochs 1`
    # (adapt --json), and the line it printed.
    run = {"set": "digits", "update": "biases", "batch": 8, "trained_parameters": 186,
           "accuracy_before": 0.8, "accuracy_after": 0.8055555555555556,
           "train_heap_bytes": 515248, "train_tensor_bytes": 377504,
           "train_peak_rise_bytes": 2412544, "planned_bytes": 511440,
           "step_seconds_median": 0.00029697900390601717}
    refused = {"set": "vowels", "update": "sparse:9", "batch": 32, "error": "no such update"}
    lines = bench_device_train.table([run, refused])
    assert lines[1] == "| --- | --- | ---: | ---: | --- | --- | ---: | --- | ---: |"
    assert lines[2:] == [
        "| digits | biases | 8 | 186 | 80.0% → 80.6% | 503 KiB / 369 KiB | 2,356 KiB | "
        "499 KiB / 0.99 | 0.30 |",
        "| vowels | sparse:9 | 32 | refused: no such update |  |  |  |  |  |"]
    assert all(line.count("|") == len(bench_device_train.COLUMNS) + 1 for line in lines)


#: The vowels table of docs/benchmarks.md ("Choosing what to train", main at 35f2b5b), as
#: bench_device_train_auto.py printed it before it shared the printer.
PRINTED = """\
**vowels**, budget 3,935 KiB (the candidates' median plan); auto chose `last:3` (exit 0, \
measured heap 2,494 KiB), the best that fits on held-out data is `last:3`: gap **0.0 pp**

| update | planned (estimated) | fits | validation accuracy (auto's) | held-out accuracy after |
| --- | ---: | --- | ---: | ---: |
| biases | 1,657 KiB | yes | 67.4% | 67.6% |
| last:1 | 1,138 KiB | yes | 79.1% | 88.1% |
| last:3 ← auto | 2,467 KiB | yes | 86.0% | 95.1% |
| last:5 | 4,481 KiB | no |  |  |"""


def test_the_auto_table_as_it_was_printed() -> None:
    """Rows of that table, rebuilt from the figures they show."""
    plans = {"biases": 1657, "last:1": 1138, "last:3": 2467, "last:5": 4481}
    validation = {"biases": 0.674, "last:1": 0.791, "last:3": 0.86}
    held_out = {"biases": 0.676, "last:1": 0.881, "last:3": 0.951}
    row = {"set": "vowels", "budget_bytes": 3935 * KIB, "exit": 0, "chosen": "last:3",
           "chosen_heap_bytes": 2494 * KIB, "best": "last:3", "gap_pp": 0.0,
           "plans": {u: kib * KIB for u, kib in plans.items()}, "validation": validation,
           "held_out": held_out}
    assert bench_device_train_auto.table(row) == PRINTED
