"""``make demo``: train a small real CNN, convert it for microcontrollers, a phone and the
Coral Edge TPU, simulate each on its device profile and print the verdicts.

The microcontroller variants also run in the real TFLite-Micro interpreter (``run=True``),
whose recorded arena head must equal the prediction. Runs in one to two minutes on two
cores; everything it writes goes to ``build/demo/``.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout: `python examples/demo.py`

from devicefit.sdk.console import (  # noqa: E402
    count,
    done,
    make_console,
    native_log,
    progress,
    step,
    table,
)
from devicefit.simulator.infra.units import (  # noqa: E402
    format_estimate,
    format_percent,
    format_points,
    format_size,
    format_time_ms,
)
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.report.views.messages import decimal_budget  # noqa: E402
from devicefit.simulator.simulate import simulate  # noqa: E402
from devicefit.simulator.types import MeasureOptions  # noqa: E402
from examples.digits import load_digits, train_cnn  # noqa: E402

MCU, PHONE = "stm32l4r5-cortex-m4", "android-arm64-cpu"


@dataclass(frozen=True)
class Variant:
    name: str
    profile: str
    options: dict


def variants(train_data: Path) -> list[Variant]:
    return [
        Variant("int8", MCU, {}),
        Variant("int8, 50% channels pruned, fine-tuned", MCU,
                {"prune_channels": 0.5, "train": train_data, "epochs": 4}),
        Variant("int8", "nrf52840-cortex-m4", {}),
        Variant("int8", "esp32-s3", {}),
        Variant("int8", PHONE, {}),
        Variant("int8, 2:4 sparse, fine-tuned", PHONE,
                {"sparsity_pattern": "2:4", "train": train_data, "epochs": 2}),
        Variant("int8, uint8 I/O", "coral-edgetpu", {}),
    ]


def main(out: Path = ROOT / "build" / "demo") -> int:
    # TensorFlow trains here, in this process: its native start-up lines go to a log file
    # (shown if the demo fails), as the CLI's do.
    with native_log() as log, progress():
        try:
            return _demo(out)
        except BaseException:
            log.keep = True
            print(f"TensorFlow's log: {log.path}", file=sys.stderr)
            raise


def _demo(out: Path) -> int:
    from devicefit.sdk.convert import convert

    console = make_console()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    console.print("[bold]1. Train[/bold] a small CNN on scikit-learn's 8x8 digits")
    step("training the CNN (TensorFlow starts)")
    digits = load_digits()
    paths = digits.save_npz(out)
    model = train_cnn(digits)
    model_file = out / "digits_cnn.keras"
    model.save(model_file)
    _, float_acc = model.evaluate(digits.x_test, digits.y_test, verbose=0)
    console.print(f"   {model_file.relative_to(ROOT)}: {model.count_params():,} parameters, "
                  f"test accuracy {float_acc:.2%}")

    console.print("[bold]2. Convert[/bold] for each profile, [bold]3. simulate[/bold] on it")
    rows = []
    todo = variants(paths["train"])
    for i, v in enumerate(todo):
        count(f"converting and simulating: {v.name} for {v.profile}", i, len(todo))
        target = out / f"digits_{i}_{v.profile}.tflite"
        report = convert(model_file, v.profile, target, calibration=paths["train"],
                         eval_data=paths["test"], simulate=False, float_baseline=True,
                         **v.options)
        on_mcu = load_profile(v.profile).runtime.name == "tflm"
        sim = simulate(target, v.profile, run=MeasureOptions(runs=3) if on_mcu else None)
        budgets = {b.name: b for b in sim.budgets}
        m = sim.measured
        # The real interpreter (reference kernels) checks the planner to the byte.
        check = ("-" if m is None or m.arena_head_bytes is None else
                 f"{format_size(m.arena_head_bytes)} "
                 + ("= predicted" if m.head_difference_bytes == 0
                    else f"≠ predicted {format_size(m.predicted_head_bytes)}"))
        rows.append((
            v.profile, v.name, format_size(report.output_bytes),
            f"{report.size_ratio:.2f}x", format_percent(_weight_zeros(report), 0),
            _size_of(sim.memory.flash_bytes, budgets["flash"]), check,
            _size_of(sim.memory.arena_bytes, budgets["arena"]),
            _latency(budgets["latency"]) if "latency" in budgets else "-",
            f"{format_percent(report.accuracy.converted_accuracy)} "
            f"({format_points(-report.accuracy.accuracy_drop_pp)})",
            sim.verdict.upper()))
    done()
    console.print(table("Verdicts", ["profile", "model", ".tflite", "vs float", "zeros",
                                     "flash / budget", "head, host wheel",
                                     "arena / budget",
                                     "latency (est.) / budget", "accuracy", "verdict"], rows))
    console.print("   head, host wheel: the arena head TFLM's host wheel (reference kernels) "
                  "recorded, against devicefit's prediction for that build; arena: the "
                  "profile's own build (its kernels), estimated as simulate estimates it")
    console.print(f"done in {time.perf_counter() - started:.0f} s; files in "
                  f"{os.path.relpath(out)}/ (try: {devicefit_command()} simulate "
                  f"{shlex.quote(os.path.relpath(target))} --profile {v.profile})")
    return 0 if all(r[-1] == "PASS" for r in rows) else 1


def devicefit_command() -> str:
    """``devicefit`` as this shell can run it: the plain name when the one on PATH is this
    interpreter's, else that script's path (``make demo`` runs in .venv without activating
    it, so a bare ``devicefit`` is 'command not found' there)."""
    script = Path(sys.executable).parent / "devicefit"  # not resolved: a venv's python is a link
    on_path = shutil.which("devicefit")
    if on_path is not None and Path(on_path).resolve() == script.resolve():
        return "devicefit"
    if script.is_file():
        return shlex.quote(os.path.relpath(script))
    return f"{shlex.quote(sys.executable)} -m devicefit"


def _latency(budget) -> str:
    """The estimate with its error band, then the budget."""
    return f"{format_estimate(budget.value, 'ms', budget.band)} / {format_time_ms(budget.limit)}"


def _size_of(value: int, budget) -> str:
    """A size and its budget, both in the prefix family the budget was written in (a 50MB
    flash budget in MB, a 256KiB arena in KiB), as every devicefit view prints them."""
    decimal = decimal_budget(budget)
    return f"{format_size(value, decimal)} / {format_size(budget.limit, decimal)}"


def _weight_zeros(report) -> float:
    """Fraction of Conv/FC weights that are zero in the written file."""
    total = sum(math.prod(w.shape) for w in report.weights)
    return sum(w.zero_fraction * math.prod(w.shape) for w in report.weights) / max(total, 1)


if __name__ == "__main__":
    sys.exit(main())
