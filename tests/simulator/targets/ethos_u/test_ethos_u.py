"""The Ethos-U target with the real Vela compiler (ethos-u-vela 5.2.0) in the loop.

Every test runs Vela for real (a child process, about a second per small model); the
models are the zoo's (built with the real TF converter). Public models: tests/public_models/
test_corpus_ethos_u.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.errors import install_command
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import target_for
from devicefit.simulator.targets.ethos_u.analysis import config_for, record_path
from devicefit.simulator.targets.ethos_u.vela import run_vela
from tests.paths import ROOT
from tests.vela_anchor import HIGH_END_PROFILE, vela_cli, vela_cli_for

VELA_INI = "Arm/vela.ini"  # shipped inside ethos-u-vela: Vela's own reference configs



VELA_INI = "Arm/vela.ini"  # shipped inside ethos-u-vela: Vela's own reference configs
def simulate_json(capsys, model: Path, profile: str, *more: str) -> tuple[int, dict]:
    code = main(["simulate", str(model), "--profile", profile, "--json", *more])
    return code, json.loads(capsys.readouterr().out)


def test_generated_ini_gives_what_vela_gives_with_its_own_config(tmp_path, model_zoo):
    """A profile section equal to Vela's reference config compiles to the same bytes and
    the same figures as Vela's own CLI with that config."""
    model = model_zoo("mobilenet_v2_96_int8")
    profile = tmp_path / "high_end.yaml"
    profile.write_text(HIGH_END_PROFILE)
    ours = run_vela(model.read_bytes(), config_for(load_profile(profile)))
    theirs = vela_cli(model, tmp_path / "vela", "--accelerator-config", "ethos-u55-128",
                      "--config", VELA_INI, "--system-config", "Ethos_U55_High_End_Embedded",
                      "--memory-mode", "Shared_Sram")
    for key in ("cycles_total", "cycles_npu", "sram_memory_used", "off_chip_flash_memory_used",
                "total_npu_encoded_weights", "inference_time"):
        assert ours.summary[key] == theirs.summary[key], key
    assert ours.compiled == theirs.compiled.read_bytes()


def test_int8_model_simulates_as_vela_compiles_it(tmp_path, capsys, model_zoo):
    src = model_zoo("mobilenet_v2_96_int8")
    code, report = simulate_json(capsys, src, "ethos-u55-128")
    assert code == 0 and report["verdict"] == "pass"
    s = report["compatibility"]["ethos-u"]
    source_ops = sum(len(sg.operators) for sg in read_model(src).subgraphs)
    assert s["basis"] == "vela" and s["vela_version"] == "5.2.0"
    assert (s["npu_ops"], s["cpu_ops"]) == (source_ops, 0)
    assert report["model"]["op_types"] == {"CUSTOM:ethos-u": 1}
    # Shared_Sram: Vela's SRAM figure is the NPU scratch tensor of the compiled file, which
    # the TFLM arena holds (plus the Cortex-M side's tail).
    f = s["figures"]
    assert f["sram_used_bytes"] == s["scratch_bytes"] > 0
    assert report["memory"]["arena_bytes"] >= f["sram_used_bytes"]
    profile = load_profile("ethos-u55-128")
    assert report["memory"]["flash_bytes"] == s["compiled_bytes"] + profile.runtime.code_bytes
    assert f["core_clock_hz"] == profile.target_settings["npu_clock"] == 160e6
    assert s["latency"]["npu_ms"] == pytest.approx(f["total_cycles"] / 160e6 * 1e3)
    assert s["latency"]["npu_ms"] == pytest.approx(f["inference_time_s"] * 1e3, rel=1e-5)
    assert report["latency"]["estimated_device_ms"] == pytest.approx(s["latency"]["total_ms"])
    assert sum(r["cycles"] for r in s["per_layer"]) > 0
    assert {b["name"] for b in report["budgets"]} == {"flash", "arena", "latency"}


def test_op_the_npu_cannot_take_runs_on_the_cortex_m_with_velas_reason(capsys, model_zoo):
    """The zoo's edgetpu_limits_int8 ends in a MEAN over 6 channels: Vela keeps it on the
    CPU ("Unsupported depth-reduction"); TFLM runs it, so the verdict stays a pass."""
    code, report = simulate_json(capsys, model_zoo("edgetpu_limits_int8"), "ethos-u55-128")
    s = report["compatibility"]["ethos-u"]
    cpu = [p for p in s["partition"] if p["unit"] == "cpu"]
    assert [p["op"] for p in cpu] == ["MEAN"]
    assert "Unsupported depth-reduction" in cpu[0]["reason"]
    assert s["ethos_u_ops"] == 2  # the NPU part is split around the CPU op
    assert code == 0 and report["compatibility"]["supported"]
    assert s["latency"]["cpu_ms"] > 0 and s["latency"]["npu_ms"] > 0


def test_float_model_is_refused_for_the_npu(capsys, model_zoo):
    code, report = simulate_json(capsys, model_zoo("chain_float32"), "ethos-u55-256")
    assert code == 1 and report["verdict"] == "fail"
    s = report["compatibility"]["ethos-u"]
    assert s["npu_ops"] == 0 and s["ethos_u_ops"] == 0
    reasons = [u["reason"] for u in report["compatibility"]["unsupported_ops"]]
    assert reasons and all("runs int8/int16 only" in r for r in reasons)
    assert any("unsupported DataType Float32" in r for r in reasons)  # Vela's own words
    assert "devicefit convert --profile ethos-u55-256" in reasons[0]


def test_convert_hook_writes_the_vela_file_and_its_record(tmp_path, capsys, caplog, model_zoo):
    src = tmp_path / "out.tflite"
    shutil.copy(model_zoo("edgetpu_limits_int8"), src)
    before = src.read_bytes()
    profile = load_profile("ethos-u55-128")
    section = target_for(profile).after_convert(src, profile)
    vela_file = tmp_path / "out_vela.tflite"
    assert src.read_bytes() == before and vela_file.is_file()
    assert record_path(vela_file).is_file()
    assert read_model(vela_file).op_types["CUSTOM:ethos-u"] == 2
    # Simulating the compiled file later reports Vela's figures from the record.
    code, report = simulate_json(capsys, vela_file, "ethos-u55-128")
    s = report["compatibility"]["ethos-u"]
    assert code == 0 and s["basis"] == "vela record"
    assert s["figures"]["total_cycles"] == section.figures.total_cycles
    assert [p["op"] for p in s["partition"] if p["unit"] == "cpu"] == ["MEAN"]
    assert report["latency"]["estimated_device_ms"] == pytest.approx(section.latency_ms)
    # The record keeps what names the user's layers: each operator's output tensor and what
    # Vela made of it, each of Vela's rows tied to its operator.
    assert [(p["name"], tuple(p["vela_ops"]), p["cycles"], p["ethos_u_op"], p["fused_into"])
            for p in s["partition"]] == [(p.name, p.vela_ops, p.cycles, p.ethos_u_op,
                                          p.fused_into) for p in section.partition]
    assert [r["op_index"] for r in s["per_layer"]] == [r.op_index for r in section.per_layer]
    assert all(p["name"] for p in s["partition"])
    # A record of an older devicefit (format 1: no operator database) is not read.
    record = json.loads(record_path(vela_file).read_text())
    old = tmp_path / "old_vela.tflite"
    shutil.copy(vela_file, old)
    record_path(old).write_text(json.dumps({**record, "format": "devicefit.vela/1"}))
    code, report = simulate_json(capsys, old, "ethos-u55-128")
    assert report["compatibility"]["ethos-u"]["basis"] == "compiled file"
    assert any("older devicefit's format: convert the model again" in r.getMessage()
               for r in caplog.records)
    # Vela's command stream is for one NPU configuration: on another it is a finding.
    code, report = simulate_json(capsys, vela_file, "ethos-u55-256")
    assert code == 1
    reasons = [u["reason"] for u in report["compatibility"]["unsupported_ops"]]
    assert len(reasons) == 2 and all("compiled by Vela for ethos-u55-128, but this "
                                     "profile's NPU is ethos-u55-256" in r for r in reasons)
    # A record that does not belong to the file is ignored: the figures are not claimed.
    vela_file.write_bytes(vela_file.read_bytes() + b"\0" * 16)
    code, report = simulate_json(capsys, vela_file, "ethos-u55-128")
    s = report["compatibility"]["ethos-u"]
    assert s["basis"] == "compiled file" and s["figures"] is None
    assert report["latency"]["estimated_device_ms"] is None


def test_vela_compiled_file_is_a_finding_on_other_targets(tmp_path, capsys, model_zoo):
    src = tmp_path / "m.tflite"
    shutil.copy(model_zoo("chain_int8"), src)
    target_for(load_profile("ethos-u55-128")).after_convert(src, load_profile("ethos-u55-128"))
    code, report = simulate_json(capsys, tmp_path / "m_vela.tflite", "stm32h743-cortex-m7")
    assert code == 1
    assert any("compiled for the Arm Ethos-U NPU" in u["reason"]
               for u in report["compatibility"]["unsupported_ops"])


def test_check_gates_an_ethos_u_model(tmp_path, capsys, model_zoo):
    shutil.copy(model_zoo("mobilenet_v1_96_int8"), tmp_path / "m.tflite")
    project = tmp_path / "devicefit.yaml"
    project.write_text("models:\n  - path: m.tflite\n    profiles: [ethos-u55-128]\n")
    assert main(["check", str(project)]) == 0
    project.write_text("models:\n  - path: m.tflite\n    profiles:\n"
                       "      - {name: ethos-u55-128, budgets: {latency: 10us}}\n")
    assert main(["check", str(project)]) == 1
    assert "latency" in capsys.readouterr().out


@pytest.mark.parametrize("profile", ["ethos-u55-256", "ethos-u65-256", "ethos-u85-256"])
def test_every_ethos_u_profile_compiles(profile, model_zoo):
    s = simulate(model_zoo("residual_int8"), profile).to_dict()["compatibility"]["ethos-u"]
    p = load_profile(profile)
    assert s["figures"]["accelerator"].lower().replace("_", "-") == \
        p.target_settings["accelerator"]
    assert s["cpu_ops"] == 0 and s["latency"]["total_ms"] > 0
    if profile == "ethos-u65-256":  # Dedicated_Sram: the arena is in DRAM, the cache in SRAM
        assert s["figures"]["dram_used_bytes"] > 0


def test_profile_errors_name_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: ethos-u55-128\nethos_u:\n  accelerator: ethos-u99\n")
    assert main(["profiles", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "ethos_u.accelerator" in err and "ethos-u55-128" in err
    bad.write_text("extends: ethos-u55-128\nethos_u:\n  memories: {sram: {burst: 3}}\n")
    assert main(["profiles", "validate", str(bad)]) == 2
    assert "unknown memories.sram key 'burst'" in capsys.readouterr().err
    # A list where a name is expected (a fuzzer's mutant raised TypeError: unhashable).
    bad.write_text("extends: ethos-u55-128\nethos_u:\n  arena_area: []\n")
    assert main(["profiles", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "ethos_u.arena_area" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_user_vela_ini_and_vela_failures_are_clean_errors(tmp_path, capsys, model_zoo):
    ini = tmp_path / "mine.ini"
    [package] = importlib.util.find_spec("ethosu").submodule_search_locations
    ini.write_text(Path(package, "config_files", VELA_INI).read_text())
    user = tmp_path / "user.yaml"
    user.write_text("extends: ethos-u55-128\nethos_u:\n  config_file: mine.ini\n"
                    "  system_config: Ethos_U55_Deep_Embedded\n")
    code, report = simulate_json(capsys, model_zoo("mlp_int8"), str(user))
    assert code == 0
    assert report["compatibility"]["ethos-u"]["figures"]["core_clock_hz"] == 200e6
    # A section the .ini lacks: Vela fails on its configuration; one line, exit 2.
    user.write_text("extends: ethos-u55-128\nethos_u:\n  config_file: mine.ini\n"
                    "  system_config: No_Such_Section\n")
    assert main(["simulate", str(model_zoo("mlp_int8")), "--profile", str(user)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("devicefit: error: Vela 5.2.0 failed (exit 1)") and \
        "Traceback" not in err
    user.write_text("extends: ethos-u55-128\nethos_u:\n  timeout: 1ms\n")
    assert main(["simulate", str(model_zoo("mlp_int8")), "--profile", str(user)]) == 2
    assert "did not finish within 0.001 s" in capsys.readouterr().err


def test_without_vela_installed_one_line_says_how_to_get_it(tmp_path, model_zoo):
    """A real environment without Vela: the CLI in a child Python whose imports of
    ``ethosu`` fail, as they do where the extra is not installed."""
    hide = ("import sys, importlib.abc\n"
            "class NoVela(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'ethosu':\n"
            "            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, NoVela())\n"
            "from devicefit.sdk.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", hide, "simulate", str(model_zoo("mlp_int8")),
                           "--profile", "ethos-u55-128"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert install_command("ethos-u") in done.stderr and "Traceback" not in done.stderr


def test_one_process_two_configs_keep_their_own_figures(tmp_path, model_zoo):
    """Two profiles can compile a model to the same bytes with other cycles (other memory
    timings): each simulation reports its own configuration's Vela figures."""
    model = model_zoo("mlp_int8")
    high_end = tmp_path / "high_end.yaml"
    high_end.write_text(HIGH_END_PROFILE)
    first = simulate(model, "ethos-u55-128").to_dict()["compatibility"]["ethos-u"]["figures"]
    second = simulate(model, high_end).to_dict()["compatibility"]["ethos-u"]["figures"]
    theirs = vela_cli_for(model, high_end, tmp_path).summary
    assert (first["system_config"], second["system_config"]) == \
        ("Ethos_U55_128_160MHz", "Ethos_U55_High_End_Embedded")
    assert second["total_cycles"] == int(theirs["cycles_total"]) != first["total_cycles"]


def first_outputs(model: Path) -> dict[tuple[int, int], tuple[str, str]]:
    """(subgraph, op index) → (op type, its first output tensor's name), read from the file."""
    return {(sg.index, op.index): (op.op_name, next((sg.tensors[t].name for t in op.outputs
                                                     if t >= 0), ""))
            for sg in read_model(model).subgraphs for op in sg.operators}


def layer_bars(html: str) -> list[tuple[str, str]]:
    """The Ethos-U per-operator chart's bars as the page draws them: (label, hover text)."""
    svg = re.search(r'<svg [^>]*class="ethos-u-layers".*?</svg>', html, re.S)
    assert svg is not None
    return [(unescape(label), unescape(title)) for label, title in re.findall(
        r'<rect class="op" data-op="([^"]*)"[^>]*><title>(.*?)</title></rect>', svg.group(0),
        re.S)]


def test_text_and_html_name_the_users_layers(tmp_path, capsys, model_zoo):
    """A Keras-built model (the zoo's edgetpu_limits_int8: conv, slice, softmax, a MEAN Vela
    leaves to the CPU, flatten, dense): every bar and every partition row names an operator
    of the user's file by its index and output tensor, and says what Vela made of it, from
    Vela's operator database: the conv as Vela's Conv2D + Relu in the first ethos-u op, the
    softmax as Vela's many operations, the MEAN on the CPU between the two ethos-u ops, the
    reshape compiled away."""
    model = model_zoo("edgetpu_limits_int8")
    ops = first_outputs(model)
    page = tmp_path / "r.html"
    assert main(["simulate", str(model), "--profile", "ethos-u55-128", "--html", str(page)]) == 0
    text = capsys.readouterr().out
    assert "Ethos-U NPU (Vela 5.2.0 run by devicefit)" in text
    assert f"CPU op 3 MEAN '{ops[(0, 3)][1]}': Unsupported depth-reduction" in text
    assert "every operator can run (5 on the NPU, 1 on the Cortex-M)" in text
    s = simulate(model, "ethos-u55-128").compatibility.section
    assert [(p.op, p.name) for p in s.partition] == [ops[k] for k in sorted(ops)]
    # Every one of Vela's operators is tied to one of the file's, and the cycles add up.
    assert all(r.op_index is not None for r in s.per_layer)
    assert sum(p.cycles or 0 for p in s.partition) == sum(r.cycles for r in s.per_layer) > 0
    compiled = [op.index for op in read_model(compiled_by_vela(tmp_path, model)).main.operators
                if op.op_name == "CUSTOM:ethos-u"]
    did = {p.op_index: p.what_vela_did() for p in s.partition}
    assert compiled == [0, 2]
    assert did[0] == "ethos-u op 0: Vela's Conv2D + Relu"
    assert did[2].startswith("ethos-u op 0: Vela's ") and "operations (MaxPool" in did[2]
    assert did[3] == ("run on the CPU (TFLM, op 1 of the compiled file): Unsupported "
                      "depth-reduction.  IFM: 1, 4, 8, 6")
    assert did[4] == "compiled away by Vela (no NPU command of its own)"
    assert did[5] == "ethos-u op 2: Vela's FullyConnected"
    html = page.read_text()
    bars = layer_bars(html)
    assert [label for label, _ in bars] == [str(i) for i in range(6)]
    for (label, title), p in zip(bars, s.partition, strict=True):
        assert title.startswith(f"op {label} {p.op} '{p.name}'\n{did[p.op_index]}")
    mean = ops[(0, 3)][1]
    assert re.search(rf"<td>3</td><td>MEAN</td><td>CPU</td><td>run on the CPU [^<]*</td>"
                     rf'<td class="num">-</td><td class="num">[^<]+</td><td>{re.escape(mean)}'
                     rf"</td>", html)
    assert html.count("<td>NPU</td>") == 5


def compiled_by_vela(tmp_path: Path, model: Path) -> Path:
    """The compiled file Vela's own CLI makes of ``model`` with the profile's .ini."""
    return vela_cli_for(model, "ethos-u55-128", tmp_path).compiled


def test_an_activation_vela_fuses_says_into_which_operator(model_zoo):
    """The zoo's leaky_mid_int8 (Keras: conv, LeakyReLU, conv ...): Vela runs the
    LEAKY_RELU inside the first conv's NPU command; its row says so, by the conv's index."""
    model = model_zoo("leaky_mid_int8")
    s = simulate(model, "ethos-u55-128").compatibility.section
    leaky = [p for p in s.partition if p.op == "LEAKY_RELU"]
    assert len(leaky) == 1 and leaky[0].fused_into == leaky[0].op_index - 1
    assert s.partition[leaky[0].op_index - 1].op == "CONV_2D"
    assert leaky[0].what_vela_did() == (f"fused into op {leaky[0].fused_into}'s NPU command "
                                        f"(ethos-u op 0)")


@pytest.mark.slow
def test_convert_for_an_ethos_u_profile_writes_the_vela_file(tmp_path, capsys):
    """``devicefit convert`` (real TF converter, scikit-learn's digits as calibration data)
    then Vela: the int8 file, ``out_vela.tflite`` beside it, and its record; simulating the
    Vela file reports Vela's figures from that record."""
    from examples.digits import cached_cnn, load_digits
    from tests.paths import TESTS

    data = load_digits().save_npz(tmp_path)
    out, rep = tmp_path / "out.tflite", tmp_path / "r.json"
    code = main(["convert", str(cached_cnn(TESTS / "artifacts" / "convert")), "--profile",
                 "ethos-u55-128", "--calibration", str(data["train"]), "-o", str(out),
                 "--report", str(rep)])
    text = capsys.readouterr().out
    assert code == 0 and "Ethos-U NPU (Vela 5.2.0 run by devicefit)" in text
    vela_file = tmp_path / "out_vela.tflite"
    assert out.is_file() and vela_file.is_file() and record_path(vela_file).is_file()
    extra = json.loads(rep.read_text())["ethos-u"]
    assert extra["npu_ops"] > 0 and extra["figures"]["total_cycles"] > 0
    code, report = simulate_json(capsys, vela_file, "ethos-u55-128")
    s = report["compatibility"]["ethos-u"]
    assert code == 0 and s["basis"] == "vela record"
    assert s["figures"]["total_cycles"] == extra["figures"]["total_cycles"]
