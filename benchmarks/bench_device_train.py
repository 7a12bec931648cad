"""Benchmark learning on the device: ``devicefit adapt`` on two real data sets.

Each data set is split into a *base* part and a *new user* part by held-out classes: the
base model is trained on the base classes only (its output layer has every class, never
trained on the held-out ones), and the new user's data — every class, including those the
base never saw — is split in half, stratified: adaptation data and held-out evaluation data.

- digits: scikit-learn's 8x8 digits (``examples/digits.py``'s CNN); base = digits 0–7 of
  the training split (8 epochs); new user = the test split (360 images, all ten digits).
- vowels: Japanese Vowels from sktime's wheel (``examples/vowels.py``'s FCN, the task is
  telling 9 speakers apart); base = speakers 1–6 of the training split (20 epochs); new
  user = the test split (370 utterances, all nine speakers).

For each update (biases, last:2, sparse:2) and batch size (8, 32): held-out accuracy before
and after three epochs of SGD at learning rate 0.05 (LiteRT ``infer``), the train signature's
memory measured in LiteRT (the heap it holds and its tensors with builtin kernels; the
process's peak rise with XNNPACK), the time per step on this host (1 thread, median), and
the simulator's plan of the same signature (``simulator.plan.training.plan_training``, which
``adapt`` reports: estimated) and its ratio to the measured heap. Prints a Markdown
table; ``--json FILE`` keeps the figures. The vowels need sktime 1.2.0's wheel (the ``bench``
extra).

    .venv/bin/python benchmarks/bench_device_train.py [--sets digits,vowels] [--batches 8,32]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchmarks.tables import Column, markdown_table  # noqa: E402

UPDATES = ("biases", "last:2", "sparse:2")
#: Classes the base model is trained on, per data set.
BASE_CLASSES = {"digits": 8, "vowels": 6}


def _split_user(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[tuple[np.ndarray, ...], ...]:
    from sklearn.model_selection import train_test_split

    x_a, x_e, y_a, y_e = train_test_split(x, y, test_size=0.5, random_state=seed, stratify=y)
    return (x_a, y_a), (x_e, y_e)


def prepare(name: str, folder: Path) -> tuple[Path, Path, Path]:
    """The base model and the new user's adaptation and evaluation files for ``name``."""
    import keras

    keep = BASE_CLASSES[name]
    if name == "digits":
        from examples.digits import build_cnn, load_digits

        digits = load_digits()
        x_base, y_base, x_user, y_user = (digits.x_train, digits.y_train, digits.x_test,
                                          digits.y_test)
        model, epochs, batch, rate = build_cnn(), 8, 32, 2e-3
    else:
        from examples.vowels import build_fcn, load_vowels

        vowels = load_vowels()
        x_base, y_base, x_user, y_user = (vowels.train.x, vowels.train.y, vowels.test.x,
                                          vowels.test.y)
        model, epochs, batch, rate = build_fcn(), 20, 16, 1e-3
    base = y_base < keep
    model.compile(optimizer=keras.optimizers.Adam(rate), loss="sparse_categorical_crossentropy")
    model.fit(x_base[base], y_base[base], batch_size=batch, epochs=epochs, verbose=0)
    path = folder / f"{name}_base.keras"
    model.save(path)
    (x_a, y_a), (x_e, y_e) = _split_user(x_user, y_user, seed=0)
    np.savez(folder / f"{name}_user.npz", x=x_a, y=y_a)
    np.savez(folder / f"{name}_user_test.npz", x=x_e, y=y_e)
    return path, folder / f"{name}_user.npz", folder / f"{name}_user_test.npz"


def run(model: Path, data: Path, evaluation: Path, update: str, batch: int,
        args: argparse.Namespace, folder: Path) -> dict:
    out = folder / f"{model.stem}-{update.replace(':', '')}-b{batch}.tflite"
    cmd = [sys.executable, "-m", "devicefit", "adapt", str(model), "--profile",
           "android-arm64-cpu", "--update", update, "--batch", str(batch), "--data", str(data),
           "--eval", str(evaluation), "--lr", str(args.lr), "--epochs", str(args.epochs),
           "-o", str(out), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"update": update, "batch": batch, "error": done.stderr.strip()[-300:]}
    return dict(json.loads(done.stdout))


def _kib(value: float) -> str:
    return f"{value / 1024:,.0f} KiB"


#: The table's columns: ``adapt --json``'s figures, measured but for the plan.
COLUMNS = (Column("data"), Column("update"), Column("batch", right=True),
           Column("trained params", right=True), Column("held-out accuracy before → after"),
           Column("train memory measured, builtin kernels: heap / tensors"),
           Column("process peak rise (XNNPACK)", right=True), Column("planned total / heap"),
           Column("ms/step (host)", right=True))


def table(rows: list[dict]) -> list[str]:
    """The Markdown table of the runs; a run ``adapt`` refused says why in its fourth cell."""
    cells = []
    for r in rows:
        if "error" in r:
            cells.append([r["set"], r["update"], r["batch"], f"refused: {r['error']}",
                          *[""] * (len(COLUMNS) - 4)])
            continue
        cells.append([
            r["set"], r["update"], r["batch"], f"{r['trained_parameters']:,}",
            f"{r['accuracy_before']:.1%} → {r['accuracy_after']:.1%}",
            f"{_kib(r['train_heap_bytes'])} / {_kib(r['train_tensor_bytes'])}",
            _kib(r["train_peak_rise_bytes"]),
            f"{_kib(r['planned_bytes'])} / {r['planned_bytes'] / r['train_heap_bytes']:.2f}",
            f"{r['step_seconds_median'] * 1e3:.2f}"])
    return markdown_table(COLUMNS, cells)


def arguments(parser: argparse.ArgumentParser) -> None:
    """The options this benchmark shares with ``bench_device_train_auto.py``."""
    parser.add_argument("--sets", default="digits,vowels")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR",
                        help="keep the base models, data and trainable .tflite files here")
    parser.add_argument("--json", metavar="FILE")


@contextmanager
def work_folder(args: argparse.Namespace, prefix: str) -> Iterator[Path]:
    """``--keep DIR`` (made if missing, left in place), else a temporary folder removed at
    the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments(parser)
    parser.add_argument("--batches", default="8,32")
    parser.add_argument("--updates", default=",".join(UPDATES))
    args = parser.parse_args()
    rows = []
    with work_folder(args, "bench-device-train-") as folder:
        for name in args.sets.split(","):
            model, data, evaluation = prepare(name, folder)
            for update in args.updates.split(","):
                for batch in (int(b) for b in args.batches.split(",")):
                    row = run(model, data, evaluation, update, batch, args, folder)
                    rows.append({"set": name} | row)
                    print(json.dumps(rows[-1]), file=sys.stderr)
    print("\n".join(table(rows)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
