"""Benchmark ``devicefit adapt --update auto``: its choice under a training-memory budget
that excludes full fine-tuning, against the best choice that fits, on held-out data.

The data sets, base models and new-user splits are ``bench_device_train.py``'s (digits by
held-out digits, Japanese Vowels by held-out speakers). Per data set:

1. ``adapt --update auto`` with an unbounded budget: every candidate's planned memory
   (the simulator's ``plan_training``, estimated) and validation accuracy.
2. The budget: the median of those plans, so that full fine-tuning (``last:n``, the largest
   plan) and about half the candidates are out.
3. ``adapt --update auto`` under it: the choice, its held-out accuracy on ``--eval`` and
   its measured heap.
4. ``adapt --update X`` for every other candidate that fits the budget: its held-out
   accuracy, so the best that fits is known (the oracle auto cannot see: it never reads
   ``--eval``).

Prints a Markdown table per data set and the gap (the best fitting candidate's held-out
accuracy minus auto's, in percentage points); ``--json FILE`` keeps the figures. The vowels
need sktime 1.2.0's wheel (the ``bench`` extra).

    .venv/bin/python benchmarks/bench_device_train_auto.py [--sets digits,vowels]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_device_train import (  # noqa: E402
    _kib,
    arguments,
    prepare,
    work_folder,
)
from benchmarks.tables import Column, markdown_table  # noqa: E402

PHONE = "android-arm64-cpu"
#: A data set's table: a row per candidate update.
COLUMNS = (Column("update"), Column("planned (estimated)", right=True), Column("fits"),
           Column("validation accuracy (auto's)", right=True),
           Column("held-out accuracy after", right=True))


def adapt(model: Path, data: Path, evaluation: Path, update: str, args: argparse.Namespace,
          out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    cmd = [sys.executable, "-m", "devicefit", "adapt", str(model), "--profile", PHONE,
           "--update", update, "--batch", str(args.batch), "--data", str(data), "--eval",
           str(evaluation), "--lr", str(args.lr), "--epochs", str(args.epochs), "-o", str(out),
           "--json", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr[-500:]}")
    return done.returncode, json.loads(done.stdout)


def bench(name: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    model, data, evaluation = prepare(name, folder)
    out = folder / f"{name}-auto.tflite"
    _, unbounded = adapt(model, data, evaluation, "auto", args, out, "--train-memory", "1024GiB")
    plans = {c["update"]: c["planned_bytes"] for c in unbounded["auto"]["candidates"]
             if c["planned_bytes"] is not None}
    budget = int(statistics.median(plans.values()))
    code, auto = adapt(model, data, evaluation, "auto", args, out, "--train-memory",
                       f"{budget}B")
    held_out = {auto["update"]: auto["accuracy_after"]} if "update" in auto else {}
    for update, plan in plans.items():
        if plan <= budget and update not in held_out:
            _, single = adapt(model, data, evaluation, update, args,
                              folder / f"{name}-{update.replace(':', '')}.tflite")
            held_out[update] = single["accuracy_after"]
    best = max(held_out, key=lambda u: (held_out[u], -plans[u]))
    validation = {c["update"]: c["validation_accuracy"] for c in auto["auto"]["candidates"]}
    return {"set": name, "budget_bytes": budget, "exit": code, "chosen": auto["auto"]["chosen"],
            "chosen_heap_bytes": auto.get("train_heap_bytes"), "best": best,
            "accuracy_before": auto.get("accuracy_before"), "plans": plans,
            "validation": validation, "held_out": held_out,
            "gap_pp": 100 * (held_out[best] - held_out[auto["auto"]["chosen"]])}


def table(row: dict[str, Any]) -> str:
    lines = [f"**{row['set']}**, budget {_kib(row['budget_bytes'])} (the candidates' median "
             f"plan); auto chose `{row['chosen']}` (exit {row['exit']}, measured heap "
             f"{_kib(row['chosen_heap_bytes'])}), the best that fits on held-out data is "
             f"`{row['best']}`: gap **{row['gap_pp']:.1f} pp**",
             ""]
    cells = []
    for update, plan in row["plans"].items():
        val = row["validation"].get(update)
        held = row["held_out"].get(update)
        cells.append([f"{update}{' ← auto' if update == row['chosen'] else ''}", _kib(plan),
                      "yes" if plan <= row["budget_bytes"] else "no",
                      "" if val is None else f"{val:.1%}", "" if held is None else f"{held:.1%}"])
    lines += markdown_table(COLUMNS, cells)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments(parser)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    rows = []
    with work_folder(args, "bench-device-train-auto-") as folder:
        for name in args.sets.split(","):
            rows.append(bench(name, args, folder))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print("\n\n".join(table(row) for row in rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
