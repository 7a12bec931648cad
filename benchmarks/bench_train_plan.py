"""Training memory: devicefit's plan of a train signature's arena vs the arena LiteRT places
its tensors in (buffer addresses after one train step, builtin kernels, no delegate), and
the plan's total against the heap LiteRT allocated in that step (glibc's mallinfo2), on the
trainable fixture models (tests/trainable_models.py): three choices of what to train × two
batch sizes. Prints a Markdown table (docs/benchmarks.md, "Training memory on the device")."""

from __future__ import annotations

from devicefit.simulator.plan.training import plan_training
from devicefit.simulator.read.reader import read_model
from tests.trainable_models import CHOICES, measure_train_step, trainable_path


def main() -> None:
    print("| trained | batch | arena planned | arena measured | plan vs measured "
          "| variables | total planned | heap of the step (measured) | total / heap |")
    print("|---|---|---|---|---|---|---|---|---|")
    for choice in CHOICES:
        for batch in (8, 32):
            path = trainable_path(choice, batch)
            plan = plan_training(read_model(path))
            measured = measure_train_step(path, batch)
            arena, heap = measured["arena"], measured["heap"]
            print(f"| {choice} | {batch} | {plan.arena_bytes:,} B | {arena:,} B | "
                  f"{(plan.arena_bytes - arena) / arena:+.1%} | "
                  f"{plan.variables_bytes:,} B | {plan.total_bytes:,} B | {heap:,} B | "
                  f"{plan.total_bytes / heap:.2f} |")


if __name__ == "__main__":
    main()
