"""The code runs on the oldest Python that pyproject.toml's ``requires-python`` admits.

No interpreter that old is here (nor in CI); vermin reads every module devicefit installs
or runs (and the demo) and names the newest Python feature each uses (``enum.StrEnum`` is
3.11, for instance). Annotations count as evaluated: :mod:`simulator.report.report` resolves its
type hints at run time. A file that passed is remembered by its contents in
``~/.cache/devicefit/vermin``, so a repeated run checks only what changed.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
#: What the wheel installs (devicefit, sdk, simulator) and what `make demo` runs.
CHECKED = ("devicefit", "sdk", "simulator", "examples")


def declared_minimum() -> str:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    found = re.fullmatch(r">=\s*(\d+\.\d+)", spec.strip())
    assert found, f"requires-python {spec!r}: expected '>=X.Y'"
    return found.group(1)


def vermin(paths: list[Path]) -> subprocess.CompletedProcess:
    """vermin's violations of the declared minimum in ``paths`` (exit 0 and no output: none)."""
    return subprocess.run([str(Path(sys.executable).parent / "vermin"), *OPTIONS,
                           f"-t={declared_minimum()}-", *map(str, paths)],
                          capture_output=True, text=True, timeout=600)


OPTIONS = ("--violations", "--eval-annotations", "--no-tips", "-q")


def test_no_module_needs_a_newer_python_than_requires_python():
    key = f"{version('vermin')} {declared_minimum()} {' '.join(OPTIONS)}"
    cache = Path.home() / ".cache" / "devicefit" / "vermin" / \
        hashlib.sha256(key.encode()).hexdigest()[:16]
    files = sorted(f for folder in CHECKED for f in (ROOT / folder).rglob("*.py"))
    assert len(files) > 100, "the checked folders moved"
    digests = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    unchecked = [f for f in files if not (cache / digests[f]).is_file()]
    if not unchecked:
        return
    done = vermin(unchecked)
    assert (done.returncode, done.stdout.strip()) == (0, ""), \
        f"needs a newer Python than requires-python admits:\n{done.stdout}{done.stderr}"
    cache.mkdir(parents=True, exist_ok=True)
    for f in unchecked:
        (cache / digests[f]).touch()


def test_the_check_sees_a_newer_feature(tmp_path):
    """The same options flag what report.py's StrEnum was (3.11)."""
    module = tmp_path / "uses_3_11.py"
    module.write_text("from enum import StrEnum\n\nclass Color(StrEnum):\n    RED = 'red'\n")
    done = vermin([module])
    assert done.returncode != 0 and "StrEnum" in done.stdout
