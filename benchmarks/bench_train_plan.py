"""Training memory: devicefit's plan of a train signature's arena vs the arena LiteRT places
its tensors in (buffer addresses after one train step, builtin kernels, no delegate), on the
trainable fixture models (tests/trainable_models.py): three choices of what to train × two
batch sizes. Prints a Markdown table (docs/benchmarks.md, "Training memory on the device")."""

from __future__ import annotations

from devicefit.simulator.plan.training import plan_training
from devicefit.simulator.read.reader import read_model
from tests.trainable_models import CHOICES, measured_arena, trainable_path


def main() -> None:
    print("| trained | batch | arena planned | arena measured | plan vs measured "
          "| variables | total planned |")
    print("|---|---|---|---|---|---|---|")
    for choice in CHOICES:
        for batch in (8, 32):
            path = trainable_path(choice, batch)
            plan = plan_training(read_model(path))
            measured = measured_arena(path, batch)
            print(f"| {choice} | {batch} | {plan.arena_bytes:,} B | {measured:,} B | "
                  f"{(plan.arena_bytes - measured) / measured:+.1%} | "
                  f"{plan.variables_bytes:,} B | {plan.total_bytes:,} B |")


if __name__ == "__main__":
    main()
