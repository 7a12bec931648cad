"""The files the docs' examples name, in one place: what ``make demo`` writes to
``build/demo/`` and what the README tour's ``devicefit convert`` writes (``digits.tflite``).

The tour's conversion runs TensorFlow (tens of seconds), so it runs once and is kept under
``tests/artifacts/docs/`` with what it printed, keyed by the command, the digits example and
the devicefit source it ran (a change to the converter, the simulator or a view runs it
again); a file lock makes parallel test workers share it. The docs checker takes the
recorded output for that command instead of converting again, and
``tests/sdk/convert/test_convert_cli.py`` asserts on the same run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.paths import ROOT, TESTS

CACHE = TESTS / "artifacts" / "docs"
DEMO = Path("build") / "demo"
#: The README tour's first step, as the README shows it (``--report`` is added when it runs:
#: the convert CLI test reads the report; the printed output is the same).
TOUR_CONVERT = ("devicefit convert build/demo/digits_cnn.keras --profile stm32l4r5-cortex-m4 "
                "--calibration build/demo/digits_train.npz --eval build/demo/digits_test.npz "
                "-o digits.tflite")
REPORT = "convert.json"


@dataclass(frozen=True)
class Recorded:
    """A command run once for the docs: its exit code and printed lines."""

    code: int
    lines: tuple[str, ...]


def _key() -> str:
    h = hashlib.sha256(TOUR_CONVERT.encode())
    sources = [ROOT / "examples" / "digits.py", *sorted((ROOT / "sdk").rglob("*.py")),
               *sorted((ROOT / "simulator").rglob("*.py")),
               *sorted((ROOT / "device_profiles").glob("*.yaml"))]
    for path in sources:
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def _demo_files(folder: Path) -> None:
    """``make demo``'s model and data (the model trained once: examples/digits.py)."""
    from examples.digits import cached_cnn, load_digits

    demo = folder / DEMO
    demo.mkdir(parents=True, exist_ok=True)
    shutil.copy(cached_cnn(TESTS / "artifacts" / "convert"), demo / "digits_cnn.keras")
    load_digits().save_npz(demo)


def tour_conversion() -> Path:
    """The folder holding the tour's ``digits.tflite``, ``convert.json`` and ``output.json``
    (exit code and printed lines), converting on first use."""
    from tests.doccheck import run_cli, working_dir

    cache = CACHE / _key()
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cache / "output.json").exists():
            with tempfile.TemporaryDirectory(prefix="devicefit-docs-") as tmp:
                folder = Path(tmp)
                _demo_files(folder)
                with working_dir(folder):
                    code, lines = run_cli([*shlex.split(TOUR_CONVERT), "--report", REPORT])
                staged = CACHE / f".{cache.name}.{os.getpid()}"
                staged.mkdir()
                for name in ("digits.tflite", REPORT):
                    if (folder / name).exists():
                        shutil.copy(folder / name, staged / name)
                (staged / "output.json").write_text(json.dumps({"code": code, "lines": lines}))
                shutil.rmtree(cache, ignore_errors=True)
                os.replace(staged, cache)
    return cache


def recorded_tour() -> Recorded:
    data = json.loads((tour_conversion() / "output.json").read_text())
    return Recorded(data["code"], tuple(data["lines"]))


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    """A folder laid out as a checkout after ``make demo`` and the tour's conversion, where
    the docs' commands run."""
    converted = tour_conversion()
    with tempfile.TemporaryDirectory(prefix="devicefit-docs-") as tmp:
        folder = Path(tmp)
        _demo_files(folder)
        shutil.copy(converted / "digits.tflite", folder / "digits.tflite")
        yield folder


#: Commands the docs checker takes from a recorded run instead of running them again.
def recorded() -> dict[str, Recorded]:
    return {" ".join(shlex.split(TOUR_CONVERT)): recorded_tour()}
