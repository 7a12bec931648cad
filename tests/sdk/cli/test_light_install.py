"""The light install (``pip install devicefit``, no extras) in a real venv without
TensorFlow: every command that needs an extra ends in one line naming it, exit 2.

The venv is made once per machine and pyproject.toml: ``python -m venv``, then ``pip
install`` of this project's wheel without extras (pip resolves the declared dependencies
from its cache; about 5 s of CPU, nothing is built from source). It is kept in
``~/.cache/devicefit/light-install/<hash of pyproject.toml and the Python>``. The commands
run this checkout's code on the venv's packages (``PYTHONPATH`` is the checkout, as in every
CLI test): the installed copy of devicefit is only as new as the wheel it was made from,
the packages around it are what a light install has. Warm, the test costs a few CLI starts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from devicefit import __version__
from devicefit.simulator.errors import EXTRAS
from tests.paths import ROOT
from tests.tflite_builder import conv_time_model

PYPROJECT = ROOT / "pyproject.toml"


def _light_venv() -> Path:
    key = hashlib.sha256(PYPROJECT.read_bytes() + sys.version.encode()).hexdigest()[:16]
    home = Path.home() / ".cache" / "devicefit" / "light-install"
    venv = home / key
    if (venv / "ready").is_file():
        return venv
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f"{key}.lock", "w") as lock:  # pytest-xdist workers build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / "ready").is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        wheels = venv / "wheel"

        def run(*cmd: str | Path) -> None:
            done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
            assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stderr[-3000:]}"

        # This pip installs into the new venv (--python), which then needs none of its own;
        # no .pyc compiling up front: the tests import a small part of what is installed.
        run(sys.executable, "-m", "venv", "--without-pip", venv)
        # hatchling from the dev extra builds the wheel here, without an isolated build env.
        run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
            "--no-build-isolation", "--wheel-dir", wheels, ROOT)
        run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
            "--quiet", "--no-compile", *sorted(wheels.glob("devicefit-*.whl")))
        (venv / "ready").write_text("")
    return venv


@pytest.fixture(scope="module")
def light_venv() -> Path:
    return _light_venv()


#: Each needs an extra; none may reach the point of reading its (absent) files.
COMMANDS = {
    "convert": (["convert", "model.keras", "--profile", "esp32-s3", "-o", "out.tflite"],
                "devicefit convert needs TensorFlow", "convert"),
    "fit": (["fit", "model.keras", "--profile", "esp32-s3", "--train", "train.npz",
             "--eval", "test.npz", "-o", "out.tflite"], "devicefit fit needs TensorFlow",
            "convert"),
    "fit --export": (["fit", "--storage", "sqlite:///fit.db", "--study", "s", "--export",
                      "-o", "out.tflite"], "devicefit fit --export needs optuna", "study"),
    "plan-batch": (["plan-batch", "model.keras", "--no-calibrate"],
                   "devicefit plan-batch needs TensorFlow", "convert"),
    "search": (["search", "--family", "mlp", "--profile", "esp32-s3", "--screen"],
               "devicefit search needs TensorFlow", "convert"),
    "adapt": (["adapt", "model.keras", "--profile", "android-arm64-cpu", "--update", "biases",
               "--batch", "8", "--data", "new.npz", "--eval", "held.npz", "-o", "out.tflite"],
              "devicefit adapt needs TensorFlow", "convert"),
    "--plot": (["simulate", "{model}", "--profile", "esp32-s3", "--no-probe", "--plot",
                "out.png"], "--plot needs matplotlib", "plot"),
    "ethos-u": (["simulate", "{model}", "--profile", "ethos-u55-128", "--no-probe"],
                "the Ethos-U target needs Arm's Vela compiler (ethos-u-vela)", "ethos-u"),
}

#: One process runs the commands in turn (each CLI start is ~0.5 s): it reports what each
#: printed and returned, and what the venv can import.
DRIVER = """
import contextlib, importlib.util, io, json, sys
from devicefit.sdk.cli import main
out = {"importable": [m for m in ("tensorflow", "keras", "optuna", "matplotlib", "ethosu")
                      if importlib.util.find_spec(m) is not None]}
for name, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except BaseException as exc:  # a traceback here is the defect under test
            code = repr(exc)
    out[name] = [code, err.getvalue()]
print(json.dumps(out))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_commands_that_need_an_extra_name_it_in_one_line(light_venv, tmp_path):
    (tmp_path / "model.keras").write_bytes(b"PK\x03\x04")  # never opened: the check is first
    model = tmp_path / "conv.tflite"
    model.write_bytes(conv_time_model())
    argvs = {name: [a.replace("{model}", str(model)) for a in argv]
             for name, (argv, _, _) in COMMANDS.items()}
    done = subprocess.run([str(light_venv / "bin" / "python"), "-c", DRIVER, json.dumps(argvs)],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["importable"] == [], "the light venv has an extra installed"
    # pip installed the light venv's devicefit from this wheel: the hint names it (devicefit
    # is on no package index).
    (wheel,) = (light_venv / "wheel").glob("devicefit-*.whl")
    for name, (_, says, extra) in COMMANDS.items():
        code, stderr = results[name]
        assert (code, stderr.splitlines()) == (2, [
            f"devicefit: error: {says}, which the light install leaves out: "
            f"pip install '{wheel}[{extra}]'" + (" (or use --html)" if extra == "plot"
                                                  else "")]), name
    assert not list(tmp_path.glob("out.*"))


def test_the_console_script_of_the_light_install_has_a_version(light_venv):
    """The entry point pip wrote runs; --version says the version the wheel's metadata
    has (hatch reads it from devicefit/__init__.py)."""
    done = subprocess.run([str(light_venv / "bin" / "devicefit"), "--version"],
                          capture_output=True, text=True, env=_env(), timeout=120)
    installed = subprocess.run(
        [str(light_venv / "bin" / "python"), "-c",
         "import importlib.metadata as m; print(m.version('devicefit'))"],
        capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    assert installed == __version__
    assert (done.returncode, done.stdout, done.stderr) == (0, f"devicefit {installed}\n", "")


def test_every_optional_module_belongs_to_its_extra():
    """errors.EXTRAS names, for each optional module, an extra of pyproject.toml that
    installs it (directly, or through the distribution it comes with)."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    brings = {"TensorFlow": "tensorflow", "scikit-learn": "scikit-learn", "optuna": "optuna",
              "matplotlib": "matplotlib", "psycopg2": "psycopg2-binary",
              "Arm's Vela compiler (ethos-u-vela)": "ethos-u-vela",
              "AI Edge Quantizer (ai-edge-quantizer)": "ai-edge-quantizer"}
    for module, (extra, distribution) in EXTRAS.items():
        names = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in extras[extra]}
        assert brings[distribution] in names, (module, extra)
