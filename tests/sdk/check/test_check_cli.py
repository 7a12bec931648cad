"""``devicefit check`` end to end on real zoo models: exit codes, JUnit, Markdown, JSON, baselines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from tests.paths import ROOT
from tests.zoo import model_path

LOOSE = "{flash: 100MB, arena: 100MB, latency: 100s}"


@pytest.fixture(scope="module")
def models() -> dict[str, Path]:
    return {n: model_path(n) for n in ("chain_int8", "mlp_int8", "residual_int8")}


def _write(folder: Path, text: str, models: dict[str, Path]) -> Path:
    for name, src in models.items():
        shutil.copy(src, folder / f"{name}.tflite")
    f = folder / "devicefit.yaml"
    f.write_text(text)
    return f


def _project(tmp_path: Path, models: dict[str, Path], chain_budgets: str = LOOSE,
             extra: str = "", top: str = "") -> Path:
    return _write(tmp_path, f"""{top}
defaults:
  budgets: {LOOSE}
  regression: {{arena: 5%, flash: 0%, latency: 10%}}
models:
  - path: chain_int8.tflite
    profiles:
      - stm32l4r5-cortex-m4
      - {{name: nrf52840-cortex-m4, budgets: {chain_budgets}}}
  - path: mlp_int8.tflite
    profiles: [android-arm64-cpu]
{extra}""", models)


def _junit(path: Path) -> dict[tuple[str, str], ET.Element]:
    """(suite name, testcase name) → testcase, after checking the counts add up."""
    root = ET.parse(path).getroot()
    cases = {}
    for suite in root.iter("testsuite"):
        tcs = suite.findall("testcase")
        assert int(suite.get("tests")) == len(tcs)
        assert int(suite.get("failures")) == sum(tc.find("failure") is not None for tc in tcs)
        for tc in tcs:
            cases[suite.get("name"), tc.get("name")] = tc
    assert int(root.get("tests")) == len(cases)
    return cases


def test_passing_project(tmp_path, models, capsys):
    f = _project(tmp_path, models)
    out = tmp_path / "reports"
    code = main(["check", str(f), "--junit", str(out / "junit.xml"),
                 "--markdown", str(out / "summary.md")])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "3 passed, 0 failed, 0 errors" in text
    cases = _junit(out / "junit.xml")
    suites = {s for s, _ in cases}
    assert suites == {"chain_int8 @ stm32l4r5-cortex-m4", "chain_int8 @ nrf52840-cortex-m4",
                      "mlp_int8 @ android-arm64-cpu"}
    for suite in suites:
        assert {"budget.flash", "budget.arena"} <= {n for s, n in cases if s == suite}
    assert all(tc.find("failure") is None for tc in cases.values())
    md = (out / "summary.md").read_text()
    assert md.startswith("## ✅ devicefit check: all 3 passed")
    assert "| ✅ | mlp_int8 | android-arm64-cpu |" in md


def test_failing_budget_exit_1_and_junit_failure(tmp_path, models, capsys):
    f = _project(tmp_path, models, chain_budgets="{arena: 1KiB}")
    junit = tmp_path / "junit.xml"
    code = main(["check", str(f), "--junit", str(junit), "--markdown", str(tmp_path / "s.md")])
    text = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in text and "arena" in text and "exceeds its 1,024 B budget" in text
    cases = _junit(junit)
    failed = {k for k, tc in cases.items() if tc.find("failure") is not None}
    assert failed == {("chain_int8 @ nrf52840-cortex-m4", "budget.arena")}
    failure = cases["chain_int8 @ nrf52840-cortex-m4", "budget.arena"].find("failure")
    assert "exceeds its 1,024 B budget by" in failure.get("message")
    lines = dict(line.split(": ", 1) for line in failure.text.splitlines())
    # Exact figures with thousands separators: "margin: -15,408 B (-15.0 KiB)".
    limit, value, margin = (float(lines[k].split()[0].replace(",", ""))
                            for k in ("limit", "value", "margin"))
    assert limit == 1024 and value > limit and margin == pytest.approx(limit - value)
    md = (tmp_path / "s.md").read_text()
    assert md.startswith("## ❌ devicefit check: 1 failed of 3")
    assert "**chain_int8** on `nrf52840-cortex-m4`: arena" in md


def test_a_shard_checks_without_a_missing_baseline_and_says_how_to_write_it(tmp_path, models,
                                                                           capsys):
    f = _project(tmp_path, models, top="baseline: baseline.json")
    assert main(["check", str(f), "--shard", "1/2", "--results", str(tmp_path / "1.json")]) == 0
    assert "a shard cannot write it" in capsys.readouterr().err
    assert not (tmp_path / "baseline.json").exists()


def test_baseline_update_then_regression(tmp_path, models, capsys):
    f = _project(tmp_path, models, top="baseline: baseline.json")
    baseline = tmp_path / "baseline.json"
    # A missing file given on the command line is an error (a typo, most likely)...
    assert main(["check", str(f), "--baseline", str(tmp_path / "typo.json")]) == 2
    assert "baseline file not found" in capsys.readouterr().err
    # ... the project's first run writes the file its 'baseline:' key names, and says so.
    assert main(["check", str(f)]) == 0
    shown = capsys.readouterr()
    assert f"{baseline}: no baseline yet, so this run writes it" in shown.err
    assert (f"regressions: baseline {baseline} written by this run (3 target(s)); regressions "
            f"are compared with it from the next run") in shown.out
    first = baseline.read_text()
    assert main(["check", str(f), "--update-baseline"]) == 0
    assert baseline.read_text() == first  # the same figures as an explicit update
    data = json.loads(baseline.read_text())
    entry = data["models"]["chain_int8"]["stm32l4r5-cortex-m4"]
    assert entry["arena_bytes"] > 0 and entry["flash_bytes"] > 0 and entry["latency_ms"] > 0
    # Unchanged models: every rule checked and passing (flash may not grow at all).
    junit = tmp_path / "junit.xml"
    assert main(["check", str(f), "--junit", str(junit)]) == 0
    cases = _junit(junit)
    assert {n for s, n in cases if n.startswith("regression.")} == {
        "regression.arena", "regression.flash", "regression.latency"}
    assert not any(tc.find("skipped") is not None for tc in cases.values())
    # The arena of one target 'was' 20% smaller: it now grew by 25% > 5%.
    entry["arena_bytes"] = int(entry["arena_bytes"] * 0.8)
    baseline.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["check", str(f), "--junit", str(junit), "--markdown", str(tmp_path / "s.md")]) == 1
    out = capsys.readouterr().out
    assert "regression: arena grew from" in out
    assert "next: a growth you intended is accepted with 'devicefit check --update-baseline'" \
        in out.replace("\n", " ")
    # Both summaries say what was compared with which file.
    compared = f"3 of 3 target(s) compared with baseline {baseline}: 1 regression(s)"
    assert f"regressions: {compared}" in out
    assert f"**Regressions**: {compared}" in (tmp_path / "s.md").read_text()
    failed = {k for k, tc in _junit(junit).items() if tc.find("failure") is not None}
    assert failed == {("chain_int8 @ stm32l4r5-cortex-m4", "regression.arena")}
    failure = _junit(junit)["chain_int8 @ stm32l4r5-cortex-m4", "regression.arena"].find("failure")
    assert "+25.0%" in failure.get("message") and "baseline: " in failure.text


def test_new_target_missing_from_baseline_is_skipped_not_failed(tmp_path, models, capsys):
    f = _project(tmp_path, models)
    baseline = str(tmp_path / "b" / "base.json")
    assert main(["check", str(f), "--update-baseline", "--baseline", baseline]) == 0
    f2 = _project(tmp_path, models, extra="  - {path: residual_int8.tflite, "
                                          "profiles: [stm32h743-cortex-m7]}\n")
    junit = tmp_path / "junit.xml"
    assert main(["check", str(f2), "--junit", str(junit), "--baseline", baseline]) == 0
    case = _junit(junit)["residual_int8 @ stm32h743-cortex-m7", "regression.arena"]
    assert "not in the baseline" in case.find("skipped").get("message")
    capsys.readouterr()
    assert main(["check", str(f2), "--json", "--baseline", baseline]) == 0
    assert json.loads(capsys.readouterr().out)["comparison"] == {
        "path": baseline, "written": False, "targets": 4, "compared": 3, "regressions": 0}


def test_config_errors_exit_2_listing_all(tmp_path, models, capsys):
    f = _write(tmp_path, "models:\n  - {path: nope.tflite, profiles: [esp32-s4]}\n"
                         "  - {path: chain_int8.tflite, profiles: [esp32-s3], budgets: {ram: 1}}\n",
               {"chain_int8": models["chain_int8"]})
    assert main(["check", str(f), "--junit", str(tmp_path / "j.xml")]) == 2
    err = capsys.readouterr().err
    assert "3 problems" in err
    for words in ("model file not found", "unknown profile 'esp32-s4'", "budgets.ram"):
        assert words in err
    assert not (tmp_path / "j.xml").exists()


def test_corrupt_model_is_an_error_the_others_still_run(tmp_path, models, capsys):
    f = _project(tmp_path, models, extra="  - {path: broken.tflite, profiles: [esp32-s3]}\n")
    # The TFL3 identifier survives the cut, so only the full read in simulate finds it.
    (tmp_path / "broken.tflite").write_bytes(models["chain_int8"].read_bytes()[:200])
    junit = tmp_path / "junit.xml"
    assert main(["check", str(f), "--junit", str(junit), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["summary"] == {"pass": 3, "at-risk": 0, "fail": 0, "error": 1}
    assert data["results"][0]["report"]["memory"]["arena_bytes"] > 0
    error = _junit(junit)["broken @ esp32-s3", "simulate"].find("error")
    assert "broken.tflite" in error.get("message")


def test_parallel_jobs_give_the_same_result(tmp_path, models, capsys):
    f = _project(tmp_path, models, chain_budgets="{arena: 1KiB}")
    results = []
    for jobs in ("1", "2"):
        assert main(["check", str(f), "--json", "--jobs", jobs]) == 1
        data = json.loads(capsys.readouterr().out)
        for r in data["results"]:
            r.pop("seconds")
        results.append([(r["model"], r["profile"], r["status"], r["budgets"])
                        for r in data["results"]])
    assert results[0] == results[1]


@pytest.mark.parametrize("args, words", [
    (["--update-baseline"], "--update-baseline needs a file"),
    (["--junit", "{f}"], "would replace an input, the project file"),
    (["--markdown", "{model}"], "would replace an input, the model"),
], ids=["no-baseline-path", "junit-over-project", "markdown-over-model"])
def test_usage_errors(tmp_path, models, capsys, args, words):
    f = _write(tmp_path, "models: [{path: chain_int8.tflite, profiles: [esp32-s3]}]\n",
               {"chain_int8": models["chain_int8"]})
    args = [a.format(f=f, model=tmp_path / "chain_int8.tflite") for a in args]
    assert main(["check", str(f), *args]) == 2
    assert words in capsys.readouterr().err


def test_check_never_imports_tensorflow(tmp_path, models):
    """A CI runner without the convert extra: TensorFlow (and Keras) cannot be imported."""
    f = _project(tmp_path, models)
    blocked = tmp_path / "blocked"
    marker = tmp_path / "tf-import-attempted"
    for name in ("tensorflow", "keras"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r})\n"
            f"raise ImportError('{name} is not installed in this test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(ROOT)])}
    script = ("import sys; from devicefit.sdk.cli import main; code = main(sys.argv[1:]); "
              "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules; "
              "sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", script, "check", str(f), "--run"],
                          env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    assert not marker.exists(), marker.read_text()


def test_unsupported_operator_is_a_junit_failure(tmp_path, capsys):
    """unet_int8 up-samples with an op TFLM has no kernel for: the gate must say which."""
    f = _write(tmp_path, f"models:\n  - path: unet_int8.tflite\n    profiles: [esp32-s3]\n"
                         f"    budgets: {LOOSE}\n", {"unet_int8": model_path("unet_int8")})
    junit = tmp_path / "junit.xml"
    assert main(["check", str(f), "--junit", str(junit)]) == 1
    assert "tflm cannot run this model: unsupported" in capsys.readouterr().out
    failed = {k: tc for k, tc in _junit(junit).items() if tc.find("failure") is not None}
    assert list(failed) == [("unet_int8 @ esp32-s3", "compatibility")]
    assert failed["unet_int8 @ esp32-s3", "compatibility"].find("failure").text.startswith("op ")


def test_budget_without_a_figure_is_skipped_not_passed(tmp_path, models, capsys):
    """A profile without a cost model has no latency estimate: its latency budget must show
    as not checked (a skipped JUnit test), never as a pass."""
    (tmp_path / "bare.yaml").write_text("name: bare\ndevice: {class: mobile-cpu}\n"
                                        "runtime: {name: litert}\n"
                                        "budgets: {latency: 10ms, arena: 1MiB}\n")
    f = _write(tmp_path, "models: [{path: mlp_int8.tflite, profiles: [bare.yaml]}]\n",
               {"mlp_int8": models["mlp_int8"]})
    junit, md = tmp_path / "junit.xml", tmp_path / "s.md"
    assert main(["check", str(f), "--junit", str(junit), "--markdown", str(md)]) == 0
    assert "note: latency budget not checked" in capsys.readouterr().out
    cases = _junit(junit)
    assert cases["mlp_int8 @ bare", "budget.latency"].find("skipped") is not None
    assert cases["mlp_int8 @ bare", "budget.arena"].find("skipped") is None
    assert "<summary>Not checked</summary>" in md.read_text()


def test_html_has_the_project_table_and_a_section_per_target(tmp_path, models, capsys):
    f = _project(tmp_path, models, chain_budgets="{arena: 1KiB}")
    page = tmp_path / "check.html"
    assert main(["check", str(f), "--html", str(page)]) == 1
    html = page.read_text()
    assert html.count('<rect id="peak-step"') == 3  # one memory timeline per model x profile
    for heading in ("chain_int8 on stm32l4r5-cortex-m4", "chain_int8 on nrf52840-cortex-m4",
                    "mlp_int8 on android-arm64-cpu"):
        assert f"<h2>{heading} " in html
    assert "exceeds its 1,024 B budget" in html  # the failing target's problem in the table
    assert "<p>Regressions: no baseline: the regression rules were not checked</p>" in html


def test_large_projects_keep_details_for_their_problems_only(tmp_path, capsys):
    """Scale: a thousand full reports were 108 MB of results and a 136 MB page. With
    --details problems (auto beyond 100 targets) a passing target keeps its summary:
    every budget figure and verdict, no memory plan or per-operator rows; a failing one
    keeps everything, and check merge reads both back."""
    from devicefit.sdk.cli import main
    from tests import hostile

    model = tmp_path / "m.tflite"
    model.write_bytes(hostile.relu_chain(6))
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"models:\n  - path: {model}\n    profiles: [esp32-s3, "
                       f"{{name: stm32l4r5-cortex-m4, budgets: {{arena: 16B}}}}]\n")
    results, page = tmp_path / "r.json", tmp_path / "r.html"
    assert main(["check", str(project), "--details", "problems", "--results", str(results),
                 "--html", str(page)]) == 1
    doc = json.loads(results.read_text())
    passing, failing = doc["results"]
    assert (passing["status"], passing["detailed"]) == ("pass", False)
    assert passing["report"]["memory"]["plan"] == [] and passing["report"]["layers"] == []
    assert passing["report"]["memory"]["arena_required_bytes"] > 0  # figures stay
    assert (failing["status"], failing["detailed"]) == ("fail", True)
    assert failing["report"]["memory"]["plan"] and failing["report"]["layers"]
    html = page.read_text()
    assert "1 passing target(s) are in the table only" in html
    assert "<h2>m on stm32l4r5-cortex-m4" in html and "<h2>m on esp32-s3" not in html
    capsys.readouterr()
    assert main(["check", "merge", str(results), "--json"]) == 1
    merged = json.loads(capsys.readouterr().out)
    assert [r["detailed"] for r in merged["results"]] == [False, True]
