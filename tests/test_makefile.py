"""The Makefile's two installs: `make demo` installs what the demo imports (the `convert`
extra) and not the developer's tools; `make test` (lint, typecheck, docs) installs both, and
its install counts as the demo's. Read with `make -n` (what make would run), nothing installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def planned(target: str, venv: Path) -> list[str]:
    done = subprocess.run(["make", "-n", "--no-print-directory", target, f"VENV={venv}"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "pip install" in line and "--upgrade pip" not in line]


def stamps(venv: Path) -> list[str]:
    """The stamp files the install rules leave, as make -n prints their `touch`."""
    return [line for line in planned("lint", venv) if line.startswith("touch ")]


def test_the_demo_installs_the_convert_extra_alone(tmp_path):
    (install,) = installs(planned("demo", tmp_path / "venv"))
    assert install.endswith("-e '.[convert]'"), install


def test_the_developer_install_adds_the_dev_extra(tmp_path):
    for target in ("lint", "typecheck", "docs"):
        (install,) = installs(planned(target, tmp_path / "venv"))
        assert install.endswith("-e '.[convert,dev]'"), (target, install)


def test_after_the_developer_install_the_demo_installs_nothing(tmp_path):
    venv = tmp_path / "venv"
    (touch,) = stamps(venv)
    for stamp in touch.split()[1:]:  # the developer's install marks the demo's done too
        Path(stamp).parent.mkdir(parents=True, exist_ok=True)
        Path(stamp).touch()
    assert planned("demo", venv) == [f"{venv}/bin/python examples/demo.py"]
    assert not installs(planned("lint", venv))


def test_after_the_demo_install_the_developer_install_still_runs(tmp_path):
    venv = tmp_path / "venv"
    demo_touch = [line for line in planned("demo", venv) if line.startswith("touch ")]
    (stamp,) = demo_touch[0].split()[1:]
    Path(stamp).parent.mkdir(parents=True, exist_ok=True)
    Path(stamp).touch()
    assert planned("demo", venv) == [f"{venv}/bin/python examples/demo.py"]
    (install,) = installs(planned("lint", venv))
    assert install.endswith("-e '.[convert,dev]'")
