"""A model Vela refuses to compile is a finding about the model on that device, not bad
input: the real Vela (ethos-u-vela 5.2.0, its Regor core) refuses a float HARD_SWISH
("IFM has to be 8bit") instead of leaving it to the Cortex-M, and devicefit reports it in
every view with verdict fail and exit 1; ``check`` fails that target and runs the others.
What is bad input (not a .tflite, a Vela configuration the profile gets wrong) stays one
line, exit 2. The public MediaPipe model that does the same: tests/public_models/
test_corpus_ethos_u.py.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.commands.convert import verdict_line
from devicefit.sdk.convert.report import ConversionReport, ConversionSettings
from devicefit.simulator.errors import CompileRefusal
from devicefit.simulator.infra.escape import markdown
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views import render
from devicefit.simulator.report.views.text import refusal_lines
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import read_report
from devicefit.simulator.targets.ethos_u.vela import refusal
from tests.tflite_builder import hard_swish_model

PROFILE = "ethos-u55-128"
#: What Vela 5.2.0 says about hard_swish_model(), as devicefit records it.
REFUSAL = CompileRefusal(
    compiler="Vela 5.2.0",
    message="Compilation failed: Error: HARD_SWISH 'hard_swish' Does not have valid TFLite "
            "Semantics.\n - IFM has to be 8bit\n   IFM type=FLOAT32, \nFailed to parse TFLite "
            "file",
    op="HARD_SWISH", tensor="hard_swish", op_index=1, subgraph=0,
    reason="IFM has to be 8bit", detail="IFM type=FLOAT32",
    advice="Vela names only the first operator it refuses; the NPU takes int8/int16 only: "
           f"quantize the model (devicefit convert --profile {PROFILE})")
NOT_CHECKED = "no compiled model: Vela 5.2.0 could not compile it"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("refused") / "hard_swish.tflite"
    path.write_bytes(hard_swish_model())
    return path


@pytest.fixture(scope="module")
def report(model) -> Report:
    return simulate(model, PROFILE)


def test_cli_exit_1_and_the_json_report_with_velas_reason(model, capsys):
    assert main(["simulate", str(model), "--profile", PROFILE, "--json"]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    data = json.loads(out)
    assert (data["verdict"], data["status"]) == ("fail", "fail")
    assert data["compile_refusal"] == {
        "compiler": "Vela 5.2.0", "message": REFUSAL.message, "op": "HARD_SWISH",
        "tensor": "hard_swish", "op_index": 1, "subgraph": 0, "reason": "IFM has to be 8bit",
        "detail": "IFM type=FLOAT32", "advice": REFUSAL.advice}
    # What the file itself tells is there; no figure of the compiled model is made up.
    assert data["model"]["size_bytes"] == model.stat().st_size
    assert data["model"]["op_types"] == {"RELU": 1, "HARD_SWISH": 1}
    assert data["compute"]["macs"] == 2 * 8 * 8 * 4
    assert data["memory"] is None and data["latency"] is None
    assert data["compatibility"] is None and data["budgets"] == []
    assert data["unchecked_budgets"] == dict.fromkeys(("flash", "arena", "latency"), NOT_CHECKED)


def test_the_text_view_names_the_operator_and_velas_words(model, capsys):
    assert main(["simulate", str(model), "--profile", PROFILE]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert ("Not compiled: Vela 5.2.0 could not compile the model\n"
            "  op 1 HARD_SWISH (output 'hard_swish'): IFM has to be 8bit (IFM type=FLOAT32)\n"
            f"  next: {REFUSAL.advice}\n") in out
    assert "Memory (planner" not in out
    assert f"  - arena budget not checked: {NOT_CHECKED}" in out
    assert out.endswith("Verdict: FAIL (not compiled; not checked: flash, arena, latency)\n")


def test_the_report_round_trips_and_every_view_shows_the_refusal(report):
    assert report.compile_refusal == REFUSAL and not report.ok
    assert read_report(json.loads(render("json", report))) == report
    md = render("markdown", report)
    assert md.startswith("## ❌ devicefit:")
    assert f"\n- {markdown(REFUSAL.line())}\n" in md
    suite = ET.fromstring(render("junit", report)).find("testsuite")
    cases = {tc.get("name"): tc for tc in suite.findall("testcase")}
    failure = cases["compile"].find("failure")
    assert failure.get("type") == "CompilerRefused" and failure.get("message") == REFUSAL.line()
    assert failure.text == REFUSAL.message
    assert all(cases[f"budget.{b}"].find("skipped") is not None
               for b in ("flash", "arena", "latency"))
    assert (suite.get("failures"), suite.get("skipped")) == ("1", "3")
    page = render("html", report)
    assert "<h3>Not compiled: Vela 5.2.0 could not compile the model</h3>" in page
    assert "op 1 HARD_SWISH (output &#x27;hard_swish&#x27;): IFM has to be 8bit" in page
    assert 'class="timeline"' not in page and 'class="layout"' not in page
    assert render("png", report).startswith(b"\x89PNG")
    assert [row.op for row in report.layers] == ["RELU", "HARD_SWISH"]


def test_convert_names_the_refusal_in_its_verdict_line(report, model):
    """``convert``'s line for a written model Vela then refuses (its simulation is this
    report): the reason, not "see the report"."""
    settings = ConversionSettings(PROFILE, "ethos-u", "model.keras", "keras", "float32",
                                  "float32", per_channel=False)
    done = ConversionReport(source="model.keras", output=str(model), profile=PROFILE,
                            runtime="ethos-u", settings=settings,
                            output_bytes=model.stat().st_size, simulation=report,
                            verdict=report.verdict.value,
                            unchecked_budgets={str(k): v for k, v in
                                               report.unchecked_budgets.items()})
    figures, word = verdict_line(done)
    assert word == f"[bold red]FAIL: {REFUSAL.line()}[/bold red]"
    assert figures.startswith(f"simulated on {PROFILE}: flash unchecked ({NOT_CHECKED})")


def test_check_fails_the_target_and_runs_the_others(model, tmp_path, capsys):
    """The same file on a TFLM profile (which runs a float HARD_SWISH) passes beside it:
    the run goes on, and exits 1, not 2."""
    (tmp_path / "m.tflite").write_bytes(model.read_bytes())
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"models:\n  - path: m.tflite\n"
                       f"    profiles: [{PROFILE}, stm32l4r5-cortex-m4]\n")
    results, md = tmp_path / "r.json", tmp_path / "s.md"
    code = main(["check", str(project), "--results", str(results), "--markdown", str(md)])
    out = capsys.readouterr().out
    assert code == 1
    assert f"m @ {PROFILE}: {REFUSAL.line()}" in " ".join(out.split())
    data = json.loads(results.read_text())
    (ethos, tflm) = data["results"]
    assert (ethos["status"], ethos["error"], tflm["status"]) == ("fail", None, "pass")
    assert ethos["report"]["compile_refusal"]["reason"] == "IFM has to be 8bit"
    assert ethos["unchecked_budgets"]["arena"] == NOT_CHECKED
    assert f"| ❌ | m | {PROFILE} | not checked | not checked | not checked |" in md.read_text()
    # The shard's result reads back whole: merging it judges it the same.
    assert main(["check", "merge", str(results)]) == 1


def test_diff_shows_no_memory_figure_for_the_refused_side(model, capsys):
    assert main(["diff", str(model), "--profile", PROFILE, "--profile",
                 "stm32l4r5-cortex-m4", "--json"]) == 0
    figures = {f["name"]: f for f in json.loads(capsys.readouterr().out)["figures"]}
    assert figures["arena"]["a"] is None and figures["arena"]["b"] > 0
    assert figures["MACs"]["a"] == figures["MACs"]["b"] == 2 * 8 * 8 * 4


def test_bad_input_stays_exit_2(tmp_path, model, capsys):
    """Not a .tflite; a section the profile's own Vela ``.ini`` lacks (Vela rejects it
    before it reads the model, so the refusal is never reached): one line each, exit 2."""
    bad = tmp_path / "bad.tflite"
    bad.write_text("not a model")
    assert main(["simulate", str(bad), "--profile", PROFILE]) == 2
    err = capsys.readouterr().err
    assert err.startswith("devicefit: error: ") and "not a .tflite model" in err
    assert len(err.splitlines()) == 1
    [package] = importlib.util.find_spec("ethosu").submodule_search_locations
    shutil.copy(Path(package, "config_files", "Arm", "vela.ini"), tmp_path / "mine.ini")
    user = tmp_path / "user.yaml"
    user.write_text(f"extends: {PROFILE}\nethos_u:\n  config_file: mine.ini\n"
                    f"  system_config: No_Such_Section\n")
    assert main(["simulate", str(model), "--profile", str(user)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("devicefit: error: Vela 5.2.0 failed (exit 1): ")
    assert "No_Such_Section" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_a_refusal_naming_no_operator_keeps_velas_words():
    """Regor's other refusals name no operator (its message for a graph output no operator
    writes): the first line is the reason, and the text view shows the whole message."""
    said = ("Compilation failed: Output tensor orphan does not have any writers.\n"
            "Failed to parse TFLite file")
    found = refusal("5.2.0", said)
    assert (found.op, found.op_index, found.reason) == \
        (None, None, "Output tensor orphan does not have any writers.")
    assert found.line() == ("Vela 5.2.0 could not compile the model: Output tensor orphan "
                            "does not have any writers.")
    assert refusal_lines(found)[1:4] == [
        "  Vela 5.2.0 said:",
        "    Compilation failed: Output tensor orphan does not have any writers.",
        "    Failed to parse TFLite file"]
