"""The shipped CI examples run green as they are: the GitHub workflows (plain and sharded),
the GitLab job, the composite action (``action.yml``) and the pre-commit hook.

A small interpreter runs the workflows' own steps in a copy of the repository's example
folder: ``run:`` scripts with bash as GitHub does (``-eo pipefail``), ``${{ … }}``
expressions and ``if:`` conditions of the forms the files use (an unknown one fails the
test), ``uses: ./`` by running ``action.yml``'s composite steps. Steps that need GitHub's
own services (checkout, setup-python, artifacts, the JUnit publisher) are not run: the jobs
share one folder here, which is what the artifact steps hand over. ``pip install`` lines are
not run either (the test must not change the environment): the test checks that each
installs devicefit from the checkout (a path), never a version that is not published.
``devicefit`` is this checkout's CLI, through a shim on ``PATH``.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from tests.paths import ROOT, TESTS

EXAMPLES = ROOT / "examples" / "ci"
#: Actions the interpreter skips, and why it may: see the module docstring.
GITHUB_SERVICES = ("actions/checkout@", "actions/setup-python@", "actions/upload-artifact@",
                   "actions/download-artifact@", "mikepenz/action-junit-report@")
_PIP = re.compile(r'python -m pip install(?: --[\w-]+)* ("[^"]*"|\S+)')
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

pytestmark = pytest.mark.slow  # the example's models are built with TensorFlow


class Runner:
    """One checkout of the examples and the environment the steps run in."""

    def __init__(self, root: Path, models: Path | None) -> None:
        self.root = root
        (root / "examples").mkdir(parents=True)
        # As a clone has it: the committed baseline, not the models (built, or given).
        shutil.copytree(EXAMPLES, root / "examples" / "ci",
                        ignore=shutil.ignore_patterns("models", "__pycache__"))
        if models is not None:
            shutil.copytree(models, root / "examples" / "ci" / "models")
        for name in ("action.yml", ".pre-commit-hooks.yaml"):
            shutil.copy(ROOT / name, root / name)
        shims = root.parent / f"{root.name}-bin"
        shims.mkdir()
        # Scripts, not symlinks: a venv's python finds its packages from its own path.
        for name, module in (("python", None), ("devicefit", "devicefit.sdk.cli")):
            run = f'"{sys.executable}"' + (f" -m {module}" if module else "")
            (shims / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
            (shims / name).chmod(0o755)
        self.env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
                    "PYTHONPATH": str(ROOT), "GITHUB_STEP_SUMMARY": str(root / "summary.md")}
        self.installs: list[str] = []
        self.outputs: list[str] = []

    def sh(self, script: str, env: dict[str, str] | None = None) -> dict[str, str]:
        """Run a step's script; returns what it wrote to $GITHUB_OUTPUT."""
        env = {**self.env, **(env or {})}
        out = self.root / "github-output"
        out.write_text("")
        env["GITHUB_OUTPUT"] = str(out)

        def skip_install(m: re.Match) -> str:
            self.installs.append(os.path.expandvars(_unquote(m.group(1)).replace(
                "$DEVICEFIT_SOURCE", env.get("DEVICEFIT_SOURCE", "$DEVICEFIT_SOURCE"))
                .replace("$GITHUB_ACTION_PATH", env.get("GITHUB_ACTION_PATH", "?"))))
            return "true"
        script = _PIP.sub(skip_install, script)
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                              cwd=self.root, env=env, capture_output=True, text=True,
                              timeout=900)
        self.outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
        return dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)

    def steps(self, steps: list[dict], ctx: dict[str, Any], env: dict[str, str]) -> None:
        for step in steps:
            if "if" in step and not self.condition(step["if"], ctx):
                continue
            step_env = {**env, **{k: self.expand(str(v), ctx)
                                  for k, v in step.get("env", {}).items()}}
            if "run" in step:
                outputs = self.sh(self.expand(step["run"], ctx), step_env)
                if "id" in step:
                    ctx.setdefault("steps", {})[step["id"]] = {"outputs": outputs}
            elif step["uses"] == "./":
                self.action({k: self.expand(str(v), ctx)
                             for k, v in step.get("with", {}).items()}, step_env)
            else:
                assert step["uses"].startswith(GITHUB_SERVICES), step["uses"]

    def action(self, given: dict[str, str], env: dict[str, str]) -> dict[str, Any]:
        """``uses: ./``: the composite action at the checkout's root."""
        spec = yaml.safe_load((self.root / "action.yml").read_text())
        assert spec["runs"]["using"] == "composite"
        unknown = set(given) - set(spec["inputs"])
        assert not unknown, unknown
        ctx: dict[str, Any] = {"inputs": {name: given.get(name, str(i.get("default", "")))
                                          for name, i in spec["inputs"].items()}}
        self.steps(spec["runs"]["steps"], ctx, {**env, "GITHUB_ACTION_PATH": "."})
        return ctx

    def expand(self, text: str, ctx: dict[str, Any]) -> str:
        return _EXPR.sub(lambda m: str(self.value(m.group(1), ctx)), text)

    def value(self, expr: str, ctx: dict[str, Any]) -> Any:
        node: Any = ctx
        for part in expr.split("."):
            assert isinstance(node, dict) and part in node, f"unknown expression {expr!r}"
            node = node[part]
        return node

    def condition(self, text: str, ctx: dict[str, Any]) -> bool:
        results = []
        for term in (t.strip() for t in text.split("&&")):
            if term == "always()":
                results.append(True)
            elif m := re.fullmatch(r"hashFiles\('([^']+)'\) == ''", term):
                results.append(not glob.glob(str(self.root / m.group(1))))
            elif m := re.fullmatch(r"([\w.-]+) == '([^']*)'", term):
                results.append(str(self.value(m.group(1), ctx)) == m.group(2))
            else:
                raise AssertionError(f"condition the test does not know: {term!r}")
        return all(results)

    def workflow(self, path: Path) -> None:
        spec = yaml.safe_load(path.read_text())
        env = {k: str(v) for k, v in spec.get("env", {}).items()}
        for job in spec["jobs"].values():
            matrix = job.get("strategy", {}).get("matrix", {})
            assert set(matrix) <= {"shard"}, matrix
            for shard in matrix.get("shard", [None]):
                self.steps(job["steps"], {"matrix": {"shard": shard}}, env)

    def gitlab(self, path: Path) -> None:
        job = yaml.safe_load(path.read_text())["devicefit-check"]
        variables = {k: str(v) for k, v in job["variables"].items()}
        for line in job["script"]:
            self.sh(line, variables)

    def check_installs(self) -> None:
        """Every install is devicefit from this checkout, with or without an extra."""
        assert self.installs
        for target in self.installs:
            path, _, extra = target.partition("[")
            assert not re.search(r"==|>=|@", path), target
            assert extra in ("", "convert]"), target
            project = tomllib.loads(((ROOT / path).resolve() / "pyproject.toml").read_text())
            assert project["project"]["name"] == "devicefit", target


def _unquote(word: str) -> str:
    return shlex.split(word)[0] if word.startswith('"') else word


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's models, built by the sharded workflow's ``models`` job (the script the
    example ships), once for all test workers: cached under ``tests/artifacts/`` by the hash
    of the script and the workflow, like :mod:`tests.zoo`'s models."""
    spec = yaml.safe_load((EXAMPLES / "github-actions-sharded.yml").read_text())
    job = yaml.safe_dump([spec["env"], spec["jobs"]["models"]["steps"]]).encode()
    key = hashlib.sha256((EXAMPLES / "build_models.py").read_bytes() + job).hexdigest()[:12]
    cache = TESTS / "artifacts" / "ci-models" / key
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache.exists():
            runner = Runner(tmp_path_factory.mktemp("models") / "checkout", None)
            runner.steps(spec["jobs"]["models"]["steps"], {}, spec["env"])
            runner.check_installs()
            shutil.copytree(runner.root / "examples" / "ci" / "models", cache)
    assert sorted(p.name for p in cache.glob("*.tflite")) == [
        "anomaly_int8.tflite", "kws_int8.tflite", "person_detect_int8.tflite"]
    return cache


BASELINE = "examples/ci/devicefit-baseline.json"
#: What the summaries say when the shipped example is checked against its committed baseline.
COMPARED = f"6 of 6 target(s) compared with baseline {BASELINE}: no regressions"


def _figures_unchanged(summary: str) -> None:
    """Every target's figures equal the committed baseline's: a change that moves them (a
    planner fix, a new cost table) must refresh the file, or the example gates stale figures."""
    rows = [line for line in summary.splitlines() if line.startswith("| ✅")]
    assert len(rows) == 6 and all(row.endswith("| unchanged |") for row in rows), (
        f"refresh the example's baseline: build the models (python examples/ci/build_models.py)"
        f", then devicefit check examples/ci/devicefit.yaml --update-baseline\n{summary}")


def test_github_workflow_with_the_composite_action(tmp_path, models):
    """As shipped: compared with the committed baseline, which the run leaves as it was."""
    runner = Runner(tmp_path / "checkout", models)
    committed = (ROOT / BASELINE).read_bytes()
    runner.workflow(EXAMPLES / "github-actions.yml")
    runner.check_installs()
    assert (runner.root / BASELINE).read_bytes() == committed
    assert "no baseline yet" not in "".join(runner.outputs)
    junit = (runner.root / "reports" / "devicefit-junit.xml").read_text()
    assert 'failures="0"' in junit and 'errors="0"' in junit and "timestamp=" in junit
    assert junit.count('name="regression.') == 6 * 3  # flash, arena, latency per target
    summary = (runner.root / "summary.md").read_text()  # the job summary
    assert f"**Regressions**: {COMPARED}" in summary
    _figures_unchanged(summary)


def test_the_shipped_ci_fails_a_regression_and_names_it(tmp_path, models):
    """The kws arena grew 10 % over the committed figure (the rule allows 5 %)."""
    runner = Runner(tmp_path / "checkout", models)
    baseline = runner.root / BASELINE
    data = json.loads(baseline.read_text())
    entry = data["models"]["kws"]["stm32l4r5-cortex-m4"]
    entry["arena_bytes"] = round(entry["arena_bytes"] / 1.1)
    baseline.write_text(json.dumps(data))
    with pytest.raises(AssertionError, match='exit "1"'):
        runner.workflow(EXAMPLES / "github-actions.yml")
    summary = (runner.root / "summary.md").read_text()
    assert f"6 of 6 target(s) compared with baseline {BASELINE}: 1 regression(s)" in summary
    assert "**kws** on `stm32l4r5-cortex-m4`: regression: arena grew from" in summary


def test_the_shipped_ci_refuses_to_run_without_its_baseline(tmp_path, models):
    """A baseline written inside the runner would be lost: the gate stops instead (exit 2)."""
    runner = Runner(tmp_path / "checkout", models)
    (runner.root / BASELINE).unlink()
    with pytest.raises(AssertionError, match='exit "2"'):
        runner.workflow(EXAMPLES / "github-actions.yml")
    assert "baseline file not found" in "".join(runner.outputs)
    assert not (runner.root / BASELINE).exists()


def test_sharded_workflow_merges_four_shards(tmp_path, models):
    runner = Runner(tmp_path / "checkout", models)
    spec = yaml.safe_load((EXAMPLES / "github-actions-sharded.yml").read_text())
    del spec["jobs"]["models"]  # built once by the fixture, the same steps
    (runner.root / "wf.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    runner.workflow(runner.root / "wf.yml")
    runner.check_installs()
    assert len(list((runner.root / "shards").glob("shard-*.json"))) == 4
    junit = (runner.root / "reports" / "devicefit-junit.xml").read_text()
    assert junit.count("<testsuite ") == 6 and 'failures="0"' in junit
    # Each shard compared its targets with the committed baseline; the merge says so once.
    assert f"**Regressions**: {COMPARED}" in (runner.root / "summary.md").read_text()


def test_gitlab_job(tmp_path, models):
    runner = Runner(tmp_path / "checkout", models)
    runner.gitlab(EXAMPLES / "gitlab-ci.yml")
    runner.check_installs()
    summary = (runner.root / "reports" / "devicefit-summary.md").read_text()
    assert COMPARED in summary


def test_action_fails_the_step_with_the_gates_exit_code(tmp_path, models):
    """A budget that fails makes the action's last step fail, after the reports exist."""
    runner = Runner(tmp_path / "checkout", models)
    project = runner.root / "examples" / "ci" / "devicefit.yaml"
    project.write_text(project.read_text().replace("latency: 100ms", "latency: 1ms"))
    with pytest.raises(AssertionError, match='exit "1"'):
        runner.action({"project": str(project.relative_to(runner.root))}, {})
    assert (runner.root / "devicefit-reports" / "junit.xml").is_file()
    assert "exceeds its 1.00 ms budget" in (runner.root / "summary.md").read_text()


def test_pre_commit_hook(tmp_path, models):
    from pre_commit.clientlib import load_manifest

    runner = Runner(tmp_path / "checkout", models)
    (hook,) = load_manifest(str(runner.root / ".pre-commit-hooks.yaml"))
    assert hook["language"] == "python" and not hook["pass_filenames"]
    # language: python installs this repository: its console script must be the entry.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert shlex.split(hook["entry"])[0] in scripts
    files = re.compile(hook["files"])
    assert files.search("examples/ci/models/kws_int8.tflite")
    assert files.search("examples/ci/devicefit.yaml") and not files.search("README.md")
    runner.sh(shlex.join([*shlex.split(hook["entry"]), "examples/ci/devicefit.yaml"]))
