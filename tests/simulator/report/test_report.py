"""The typed report: JSON out with a schema version and back to the same objects (also from
version 1 reports), one judgement per report from the budget registry, and the views as a
registry of renderers."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.judge.verdict import BUDGETS, judge
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.report import SCHEMA_VERSION, LatencyReport, Report
from devicefit.simulator.report.views import VIEWS, render
from devicefit.simulator.simulate import simulate, static_report
from devicefit.simulator.target import read_report
from devicefit.simulator.targets.edgetpu.partition import EdgeTpuReport
from devicefit.simulator.types import Basis, BudgetName, MeasureOptions, Status
from tests.zoo import model_path


@pytest.mark.parametrize(("name", "profile"), [("residual_int8", "stm32l4r5-cortex-m4"),
                                               ("leaky_mid_int8", "coral-edgetpu"),
                                               ("chain_float32", "android-arm64-cpu")])
def test_json_round_trip_gives_back_the_same_typed_report(name, profile):
    report = simulate(model_path(name), profile)
    data = json.loads(render("json", report))
    assert data["schema_version"] == SCHEMA_VERSION
    back = read_report(data)
    assert back == report
    assert isinstance(back.latency, LatencyReport)
    assert all(isinstance(b.status, Status) and isinstance(b.basis, Basis)
               for b in back.budgets)
    if profile == "coral-edgetpu":  # the target's own section comes back typed
        assert isinstance(back.compatibility.section, EdgeTpuReport)
        assert data["compatibility"]["edgetpu"]["mapped_ops"] == back.compatibility.section.mapped_ops


def test_a_run_report_round_trips_with_its_measured_section():
    report = simulate(model_path("chain_int8"), "stm32l4r5-cortex-m4",
                      run=MeasureOptions(runs=2))
    back = read_report(json.loads(render("json", report)))
    assert back == report
    assert back.measured.cross_check.bit_exact is True
    assert back.latency.host_ms.runs == 2


def test_a_version_1_report_still_reads():
    """Written before the sections were typed: no schema_version, the target named in the
    latency basis, the bench figure under measured."""
    data = simulate(model_path("leaky_mid_int8"), "coral-edgetpu").to_dict()
    del data["schema_version"], data["unchecked_budgets"]
    data["latency"]["basis"] = "edgetpu split"
    back = read_report(data)
    assert back.latency.basis == "target split"
    assert back.compatibility.section.mapped_ops == data["compatibility"]["edgetpu"]["mapped_ops"]


def test_a_newer_schema_version_is_refused_with_a_clear_error():
    data = simulate(model_path("residual_int8"), "stm32l4r5-cortex-m4").to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match=rf"report schema_version {SCHEMA_VERSION + 1} is "
                                         rf"newer than this devicefit reads \({SCHEMA_VERSION}\)"):
        read_report(data)


def test_keys_of_the_same_version_that_no_field_names_are_dropped():
    """An addition of a newer devicefit of the same version (a section, a figure in one, a
    field of a target's section) and the derived ``status`` are not kept: the report reads
    back as the one this version wrote, and writes out as it."""
    report = simulate(model_path("leaky_mid_int8"), "coral-edgetpu")
    data = report.to_dict()
    data["energy"] = {"joules": 0.1}
    data["memory"]["arena_colour"] = "blue"
    data["compatibility"]["edgetpu"]["tpu_temperature"] = 40
    back = read_report(data)
    assert back == report
    assert back.to_dict() == report.to_dict()
    assert "energy" not in back.to_dict() and "status" in back.to_dict()


def test_judge_runs_once_on_the_whole_report():
    profile = load_profile("stm32l4r5-cortex-m4")
    unjudged = static_report(read_model(model_path("residual_int8")), profile)
    assert unjudged.budgets == [] and not unjudged.ok
    judged = judge(unjudged, profile)
    # Every budget the profile sets (an MCU sets no GPU memory and no training budget).
    assert [b.name for b in judged.budgets] == [b.name for b in BUDGETS
                                                 if b.limit(profile) is not None]
    assert len(judged.budgets) == 3
    assert judged.verdict == Status.PASS and unjudged.budgets == []  # a new report
    with pytest.raises(ValueError, match="judged already"):
        judge(judged, profile)


def test_a_budget_without_a_figure_is_unchecked_and_fails_only_when_strict(tmp_path):
    """A profile whose cost table covers no op of the model has no latency estimate."""
    yaml = tmp_path / "no-cost.yaml"
    yaml.write_text("name: no-cost\nextends: stm32l4r5-cortex-m4\n"
                    "cost_model: {cycles_per_mac: {FULLY_CONNECTED.int8: 1}}\n"
                    "budgets: {latency: 10ms}\n")
    lenient = simulate(model_path("residual_int8"), str(yaml))
    assert BudgetName.LATENCY in lenient.unchecked_budgets and lenient.ok
    # The target's own reason, not a generic "no estimate".
    assert ("latency budget not checked: no latency estimate: the profile's "
            "cost_model.cycles_per_mac cover(s) no ADD.int8, CONV_2D.int8, MEAN.int8"
            in lenient.notes), lenient.notes
    strict = simulate(model_path("residual_int8"), str(yaml), strict=True)
    assert strict.verdict == Status.FAIL and "latency" not in [b.name for b in strict.budgets]


def test_the_formats_table_names_every_view_module():
    """views.FORMATS (which lets a command import one view) and the modules defining VIEW
    agree, binary flag included."""
    import importlib
    import pkgutil

    from devicefit.simulator.report import views

    found = {}
    for info in pkgutil.iter_modules(views.__path__):
        view = getattr(importlib.import_module(f"{views.__name__}.{info.name}"), "VIEW", None)
        if view is not None:
            assert view.name == info.name
            found[view.name] = view.binary
    assert found == views.FORMATS
    assert views.TEXT_FORMATS == ["csv", "html", "json", "junit", "markdown", "text"]


def test_every_view_is_registered_and_renders_a_report():
    report = simulate(model_path("chain_int8"), "nrf52840-cortex-m4")
    assert {"text", "json", "html", "png", "junit", "markdown", "csv"} <= set(VIEWS)
    outputs = {name: render(name, report) for name in VIEWS}
    assert outputs["png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert outputs["text"].rstrip().endswith("Verdict: PASS")
    assert outputs["html"].startswith("<!DOCTYPE html>")
    assert '<testcase classname="devicefit.nrf52840-cortex-m4" name="budget.arena"' \
        in outputs["junit"]
    assert outputs["markdown"].startswith("## ✅ devicefit: `chain_int8.tflite`")
    rows = list(csv.DictReader(io.StringIO(outputs["csv"])))
    assert [int(r["op_index"]) for r in rows] == [c.op_index for c in report.compute.per_op]
    assert sum(int(r["macs"]) for r in rows) == report.compute.macs
    assert max(int(r["live_bytes"]) for r in rows) == report.memory.lower_bound_bytes


def test_markdown_and_junit_views_name_a_failed_budget(tmp_path):
    yaml = tmp_path / "tiny.yaml"
    yaml.write_text("name: tiny\nextends: stm32l4r5-cortex-m4\nbudgets: {arena: 1KiB}\n")
    report = simulate(model_path("chain_int8"), str(yaml))
    assert not report.ok
    assert "arena" in render("markdown", report) and "exceeds its 1,024 B budget" in \
        render("markdown", report)
    assert 'type="BudgetExceeded"' in render("junit", report)


def test_every_view_prints_a_missed_budget_in_one_style(tmp_path):
    """Issue 32 saw ``margin -273547 us`` (a negative time fell into the us branch), JUnit
    ``margin: -55632.6 bytes`` and ``6912 B`` beside ``6,912 B``."""
    yaml = tmp_path / "tight.yaml"
    yaml.write_text("name: tight\nextends: stm32l4r5-cortex-m4\n"
                    "budgets: {arena: 1KiB, latency: 1ms}\n")
    report = simulate(model_path("chain_int8"), str(yaml), probe=False)
    arena, latency = (next(b for b in report.budgets if b.name == n) for n in ("arena", "latency"))
    late = report.latency.estimated_device_ms - 1.0
    text = render("text", report)
    assert f"margin -{late:.2f} ms" in text and f"margin -{arena.value - 1024:,.0f} B" in text
    assert " us" not in text.split("Budgets")[1]
    markdown = render("markdown", report)
    assert f"| -{late:.2f} ms |" in markdown and "| 1,024 B |" in markdown
    junit = render("junit", report)
    assert f"margin: -{late:,.3f} ms" in junit
    assert f"margin: -{arena.value - 1024:,.0f} B (-{(arena.value - 1024) / 1024:.1f} KiB)" in junit
    assert f"exceeds its 1.00 ms budget by {late:.2f} ms" in junit
    assert latency.margin < 0 and not report.ok


def test_a_budget_written_in_decimal_units_prints_in_them(capsys):
    """The phone's 50MB flash budget printed as 47.7 MiB, which reads as another budget."""
    report = simulate(model_path("mlp_int8"), "android-arm64-cpu", probe=False)
    flash = next(b for b in report.budgets if b.name == "flash")
    assert flash.limit == 50_000_000
    text = render("text", report)
    assert "of  50,000,000 B (50.0 MB)" in text and "MiB" not in text.split("flash")[-1].split("\n")[0]
    assert "| 50.0 MB |" in render("markdown", report)
    assert main(["profiles", "list"]) == 0
    phone = next(line for line in capsys.readouterr().out.splitlines() if "android" in line)
    assert "50.0 MB" in phone and "256.0 MiB" in phone


def test_sections_are_frozen():
    report = simulate(model_path("chain_int8"), "stm32l4r5-cortex-m4")
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.latency.estimated_device_ms = 0.0  # type: ignore[misc]
    assert isinstance(report, Report)


def test_simulate_prints_any_registered_text_view(capsys):
    from devicefit.sdk.cli import main

    path = str(model_path("chain_int8"))
    assert main(["simulate", path, "--profile", "esp32-s3", "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("op_index,op,macs,bytes_moved,live_bytes,")
    assert main(["simulate", path, "--profile", "esp32-s3", "--format", "junit"]) == 0
    assert '<testcase classname="devicefit.esp32-s3" name="budget.latency"' \
        in capsys.readouterr().out
    try:  # a binary view is written with --plot, never printed: a usage error
        code = main(["simulate", path, "--profile", "esp32-s3", "--format", "png"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2


def test_a_device_benchmark_is_judged_on_its_time_and_carries_its_ratio(tmp_path):
    """The phone's figures come from sdk's ``bench``; here a result as it would fill them
    (no phone in this test: tests/sdk/bench/test_bench.py drives the real command with a fake
    adb)."""
    from devicefit.simulator.report.benchmark import BenchmarkOutput, BenchResult, BenchSettings

    yaml = tmp_path / "phone.yaml"
    yaml.write_text("name: phone\nextends: android-arm64-cpu\nbudgets: {latency: 5ms}\n")
    result = BenchResult(
        model="m.tflite", profile="phone", serial="FAKE01", device_model="Pixel", abis=["arm64-v8a"],
        binary_arch="aarch64", settings=BenchSettings(4, "xnnpack", 2, 1, None, False),
        command="benchmark_model …", results=BenchmarkOutput(inference_avg_ms=12.5))
    report = simulate(model_path("chain_int8"), str(yaml), bench=result)
    [latency] = [b for b in report.budgets if b.name == BudgetName.LATENCY]
    assert latency.basis == Basis.MEASURED and latency.value == 12.5 and not report.ok
    vs = report.bench.vs_estimate
    assert vs.estimated_ms == report.latency.estimated_device_ms
    assert vs.ratio == pytest.approx(12.5 / vs.estimated_ms)
    back = read_report(json.loads(render("json", report)))
    assert back == report and back.bench.result.results.inference_avg_ms == 12.5
    assert f"{vs.ratio:.2f}x" in render("html", report)


def test_every_view_names_every_cause_of_a_fail(tmp_path):
    """An arena over its budget and a latency at risk: the verdict's line names both, the
    same in the text, Markdown and HTML views, never only the milder one."""
    model = str(model_path("mobilenet_v1_96_int8"))
    base = simulate(model, load_profile("esp32-s3"))
    est, (_, high) = base.latency.estimated_device_ms, base.latency.band_ms
    profile = tmp_path / "tight.yaml"
    profile.write_text(f"extends: esp32-s3\nbudgets: {{arena: 1KiB, "
                       f"latency: {(est + high) / 2:.3f}ms}}\n")
    report = simulate(model, load_profile(profile))
    assert report.verdict == Status.FAIL and report.at_risk == ["latency"]
    causes = "over: arena; at risk: latency"
    assert f"Verdict: FAIL ({causes})\n" in render("text", report)
    assert render("markdown", report).splitlines()[0].endswith(f": fail ({causes})")
    assert f'<span class="causes">{causes}</span>' in render("html", report)
    clean = simulate(model, load_profile("esp32-s3"))
    assert clean.ok and "Verdict: PASS\n" in render("text", clean)
    assert '<span class="causes">' not in render("html", clean)


def test_a_budget_written_in_mb_reads_in_mb_in_every_view():
    """android's flash budget is written 50MB: its limit is 50.0 MB in the text, Markdown
    and HTML views alike (the HTML said 47.7 MiB)."""
    report = simulate(model_path("chain_float32"), "android-arm64-cpu")
    flash = next(b for b in report.budgets if b.name == "flash")
    assert flash.limit == 50_000_000
    for view in ("text", "markdown", "html"):
        page = render(view, report)
        assert "50.0 MB" in page and "47.7 MiB" not in page, view


def test_conversion_settings_read_the_same_in_text_and_html():
    """The same words in both views (the terminal's one line keeps the top-level ones),
    nested settings by their dotted names, never a Python dict's repr."""
    report = simulate(model_path("residual_int8"), "stm32l4r5-cortex-m4")
    settings = {"scheme": "int8", "qat": {"epochs": 2, "lr": 0.001}, "layers": ["a", "b"],
                "odd": [{"x": 1}]}
    report = dataclasses.replace(report,
                                 model=dataclasses.replace(report.model, conversion=settings))
    assert "converted by devicefit: scheme=int8\n" in render("text", report)
    html = render("html", report)
    assert "scheme=int8, qat.epochs=2, qat.lr=0.001, layers=a/b" in html
    assert "{&#x27;" not in html and "{'" not in html


def test_stored_quality_figures_read_in_their_units():
    """convert's summary says "accuracy 97.50%"; the page's "converted with" row said the
    stored 0.975 (issue 46: one fact, two figures)."""
    report = simulate(model_path("residual_int8"), "stm32l4r5-cortex-m4")
    settings = {"scheme": "int8", "accuracy": {"accuracy": 0.975, "accuracy_drop_pp": 0.2778,
                                               "sqnr_db": 43.2023, "samples": 360}}
    report = dataclasses.replace(report,
                                 model=dataclasses.replace(report.model, conversion=settings))
    assert ("scheme=int8, accuracy.accuracy=97.50%, accuracy.accuracy_drop_pp=0.28 pp, "
            "accuracy.sqnr_db=43.2 dB, accuracy.samples=360") in render("html", report)
