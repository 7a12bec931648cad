"""Training memory: devicefit's plan of a train signature against what LiteRT allocated for
one step of it (builtin kernels, no delegate, one thread), each measured in a fresh process.

- The trainable fixture models (tests/trainable_models.py, float, three choices × two batch
  sizes): the planned arena against the span LiteRT placed the tensors over, the planned
  total against the heap the step took (glibc ``mallinfo2``), and the heap the plan leaves
  unexplained without its ``interpreter`` part, per operator: the figure
  ``INTERPRETER_BYTES_PER_OP`` (simulator/targets/litert/planner.py) is these rows' median.
- ``--models DIR``: the models ``devicefit adapt`` wrote (``*-b<batch>.tflite``, as
  ``benchmarks/bench_device_train.py --keep DIR`` keeps them: frozen weights int8, so hybrid
  kernels): the planned total against the heap ``devicefit adapt`` measures
  (``devicefit.sdk.devtrain.litert measure``), with the plan's parts outside the arena.

Prints Markdown tables (docs/benchmarks.md, "Training memory on the device").

    .venv/bin/python benchmarks/bench_train_plan.py [--models DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.tables import Column, markdown_table
from devicefit.simulator.plan.training import plan_training
from devicefit.simulator.read.reader import read_model
from tests.trainable_models import CHOICES, measure_train_step, trainable_path

#: The fixtures' table: a row per trained part and batch size.
FIXTURE_COLUMNS = tuple(Column(t) for t in (
    "trained", "batch", "arena planned", "arena measured", "plan vs measured", "total planned",
    "heap of the step (measured)", "total / heap",
    "heap not planned without `interpreter`, per operator"))


def fixtures() -> None:
    rows = []
    for choice in CHOICES:
        for batch in (8, 32):
            path = trainable_path(choice, batch)
            plan = plan_training(read_model(path))
            measured = measure_train_step(path, batch)
            arena, heap = measured["arena"], measured["heap"]
            ops = len(read_model(path).subgraphs[plan.subgraph].operators)
            rest = (heap - plan.total_bytes + plan.parts["interpreter"]) / ops
            rows.append([choice, batch, f"{plan.arena_bytes:,} B", f"{arena:,} B",
                         f"{(plan.arena_bytes - arena) / arena:+.1%}",
                         f"{plan.total_bytes:,} B", f"{heap:,} B",
                         f"{plan.total_bytes / heap:.3f}", f"{rest:,.0f} B"])
    print("\n".join(markdown_table(FIXTURE_COLUMNS, rows)))


def _heap(model: Path) -> int:
    """The heap ``devicefit adapt`` measures for the train step (a fresh LiteRT child)."""
    sig = read_model(model).signature("train")
    assert sig is not None
    shape = read_model(model).subgraphs[sig.subgraph].tensors[dict(sig.inputs)["x"]].shape
    with tempfile.TemporaryDirectory(prefix="bench-train-plan-") as tmp:
        folder = Path(tmp)
        request, result = folder / "request.json", folder / "measure.json"
        request.write_text(json.dumps({"model": str(model), "x_shape": list(shape),
                                       "threads": 1, "xnnpack": False, "result": str(result)}))
        subprocess.run([sys.executable, "-m", "devicefit.sdk.devtrain.litert", "measure",
                        str(request)], check=True, capture_output=True, timeout=300)
        return int(json.loads(result.read_text())["heap_bytes"])


#: The adapted models' table: a row per model ``bench_device_train.py`` kept.
ADAPTED_COLUMNS = (Column("model"), *(Column(t, right=True) for t in (
    "batch", "arena planned", "kernels outside the arena (persistent + dynamic)",
    "ruy workspace", "interpreter", "total planned", "heap of the step (measured)",
    "total / heap")))


def adapted(folder: Path) -> None:
    rows = []
    for path in sorted(folder.glob("*-b*.tflite")):
        plan = plan_training(read_model(path))
        heap = _heap(path)
        p = plan.parts
        name, batch = path.stem.rsplit("-b", 1)
        rows.append([name, batch, f"{plan.arena_bytes:,} B",
                     f"{p['kernel persistent'] + p['kernel dynamic']:,} B",
                     f"{p['ruy workspace']:,} B", f"{p['interpreter']:,} B",
                     f"{plan.total_bytes:,} B", f"{heap:,} B", f"{plan.total_bytes / heap:.3f}"])
    print("\n".join(markdown_table(ADAPTED_COLUMNS, rows)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, metavar="DIR",
                        help="also the trainable models kept by bench_device_train.py --keep")
    args = parser.parse_args()
    fixtures()
    if args.models is not None:
        print()
        adapted(args.models)


if __name__ == "__main__":
    main()
