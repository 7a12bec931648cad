"""``devicefit bench`` end to end against a FAKE phone: there is no Android device here.

``tests/fakes/fake_adb.py`` stands in for adb and one or more phones (a temp folder is each
phone's storage); its ``benchmark_model`` is ``tests/fakes/fake_benchmark_model.py``, which
runs the pushed model in the real LiteRT runtime on this machine and prints the measured
timings in benchmark_model's output format. So the timings below are real LiteRT timings
of this host, not of a phone; what is tested is the adb conversation (device choice, state
checks, ABI check, skip-if-same push, run, cleanup), the flags sent, the parsing and every
error path. The parser is also tested on real phone captures in test_bench_output.py.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from devicefit.sdk.bench import bench
from devicefit.sdk.cli import main
from devicefit.simulator.profiles import load_profile
from tests.paths import TESTS
from tests.zoo import model_path

FAKES = TESTS / "fakes"
README_PROFILE = TESTS / "fixtures" / "benchmark_model" / "tf_readme_op_profiling.txt"
ARM64 = {"ro.product.cpu.abi": "arm64-v8a", "ro.product.cpu.abilist": "arm64-v8a,armeabi-v7a",
         "ro.product.model": "Fake Pixel"}


def elf(path: Path, machine: int) -> Path:
    """A 64-byte ELF header of a PIE executable for ``machine`` (all the ABI check reads)."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    header[16:18] = (3).to_bytes(2, "little")  # ET_DYN
    header[18:20] = machine.to_bytes(2, "little")
    path.write_bytes(bytes(header))
    return path


class FakePhones:
    """Writes the fake adb's config and an ``adb`` wrapper that runs it with this Python."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = tmp_path
        self.config_path = tmp_path / "fake_adb.json"
        self.log = tmp_path / "adb_calls.jsonl"
        self.adb = tmp_path / "bin" / "adb"
        self.adb.parent.mkdir()
        self.adb.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                            f"{shlex.quote(str(FAKES / 'fake_adb.py'))} \"$@\"\n")
        self.adb.chmod(0o755)
        self.devices: list[dict] = []
        monkeypatch.setenv("FAKE_ADB_CONFIG", str(self.config_path))
        self.write()

    def add(self, serial: str, state: str = "device", props: dict | None = None,
            tools: list[str] | None = None, **benchmark: object) -> Path:
        storage = self.root / "devices" / serial
        storage.mkdir(parents=True)
        self.devices.append({"serial": serial, "state": state, "storage": str(storage),
                             "props": ARM64 if props is None else props,
                             "tools": ["sha256sum", "md5sum", "stat"] if tools is None else tools,
                             "benchmark": benchmark})
        self.write()
        return storage

    def write(self) -> None:
        self.config_path.write_text(json.dumps(
            {"python": sys.executable, "log": str(self.log), "devices": self.devices}))

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def phones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePhones:
    return FakePhones(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def model() -> Path:
    return model_path("chain_int8")


@pytest.fixture
def arm64_binary(tmp_path: Path) -> Path:
    return elf(tmp_path / "android_aarch64_benchmark_model", 183)


@pytest.fixture
def profile():
    return load_profile("android-arm64-cpu", [])


def device_files(storage: Path) -> list[str]:
    return sorted(str(p.relative_to(storage)) for p in storage.rglob("*") if p.is_file())


def test_bench_runs_litert_on_the_fake_phone(phones, model, arm64_binary, profile) -> None:
    storage = phones.add("FAKE01")
    result = bench(model, profile, benchmark_binary=arm64_binary, adb=str(phones.adb),
                   runs=7, warmup=2)
    r = result.results
    assert (result.serial, result.device_model, result.abis) == (
        "FAKE01", "Fake Pixel", ["arm64-v8a", "armeabi-v7a"])
    assert result.binary_arch == "AArch64"
    # Profile defaults: 4 threads, XNNPACK.
    assert (result.settings.threads, result.settings.delegate) == (4, "xnnpack")
    assert "--num_threads=4" in result.command and "--use_xnnpack=true" in result.command
    assert r.inference.count == 7 and r.warmup.count == 2
    assert 0 < r.inference.min_ms <= r.inference.avg_ms <= r.inference.max_ms
    assert r.inference.p5_ms <= r.inference.median_ms <= r.inference.p95_ms
    assert r.inference_avg_ms == pytest.approx(r.inference.avg_ms, rel=1e-5)
    assert r.first_inference_ms == r.warmup.first_ms
    assert r.model_size_mb == pytest.approx(model.stat().st_size / 1e6, rel=1e-5)
    assert r.memory_overall_mb is not None and r.memory_peak_mb > 0
    assert "XNNPACK" in r.delegates_created  # LiteRT's own log line
    remote = ["/data/local/tmp/devicefit/benchmark_model",
              "/data/local/tmp/devicefit/chain_int8.tflite"]
    assert result.pushed == remote and result.removed == remote
    assert device_files(storage) == []  # cleaned up


def test_keep_then_same_files_are_not_pushed_again(phones, model, arm64_binary, profile) -> None:
    storage = phones.add("FAKE01")
    first = bench(model, profile, benchmark_binary=arm64_binary, adb=str(phones.adb), runs=2,
                  keep=True)
    assert len(first.pushed) == 2 and first.removed == []
    assert device_files(storage) == ["data/local/tmp/devicefit/benchmark_model",
                                     "data/local/tmp/devicefit/chain_int8.tflite"]
    n_calls = len(phones.calls())
    second = bench(model, profile, benchmark_binary=arm64_binary, adb=str(phones.adb), runs=2)
    assert second.pushed == [] and len(second.already_on_device) == 2
    assert not any(c[2:3] == ["push"] for c in phones.calls()[n_calls:])
    # Files that were there before the run are left alone.
    assert len(device_files(storage)) == 2
    # A changed binary of the same size is pushed again (sha256 differs).
    arm64_binary.write_bytes(arm64_binary.read_bytes()[:-1] + b"\x01")
    third = bench(model, profile, benchmark_binary=arm64_binary, adb=str(phones.adb), runs=2)
    assert third.pushed == ["/data/local/tmp/devicefit/benchmark_model"]


@pytest.mark.parametrize("tools, skipped", [(["md5sum", "stat"], 2), ([], 0)],
                         ids=["md5sum-fallback", "no-tools-always-push"])
def test_push_check_without_sha256sum(phones, model, arm64_binary, profile, tools,
                                      skipped) -> None:
    phones.add("FAKE01", tools=tools)
    bench(model, profile, benchmark_binary=arm64_binary, adb=str(phones.adb), runs=1, keep=True)
    again = bench(model, profile, benchmark_binary=arm64_binary, adb=str(phones.adb), runs=1)
    assert len(again.already_on_device) == skipped


def test_cli_options_reach_benchmark_model_and_json_joins_report(
        phones, model, arm64_binary, capsys) -> None:
    phones.add("FAKE01", op_profile_file=str(README_PROFILE))
    phones.add("FAKE02")
    code = main(["bench", str(model), "--profile", "android-arm64-cpu", "--serial", "FAKE01",
                 "--benchmark-binary", str(arm64_binary), "--adb", str(phones.adb),
                 "--runs", "3", "--warmup", "1", "--threads", "2", "--delegate", "nnapi",
                 "--cpu-mask", "f0", "--op-profiling", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(out)
    b = report["bench"]
    assert b["command"].startswith("taskset f0 /data/local/tmp/devicefit/benchmark_model ")
    for flag in ("--num_threads=2", "--use_nnapi=true", "--num_runs=3", "--warmup_runs=1",
                 "--enable_op_profiling=true"):
        assert flag in b["command"].split()
    assert b["serial"] == "FAKE01" and b["results"]["inference"]["count"] == 3
    assert len(b["results"]["op_profile"]) == 31
    vs = b["vs_estimate"]
    assert vs["measured_ms"] == b["results"]["inference_avg_ms"] > 0
    assert vs["estimated_ms"] == report["latency"]["estimated_device_ms"] > 0
    assert vs["ratio"] == pytest.approx(vs["measured_ms"] / vs["estimated_ms"])
    assert vs["estimate_unavailable"] is None
    # The rest of the simulate report is there too (same JSON shape as `simulate --json`).
    assert report["profile"]["name"] == "android-arm64-cpu" and report["memory"]["arena_bytes"]


def test_cli_text_output(phones, model, arm64_binary, capsys) -> None:
    phones.add("FAKE01")
    code = main(["bench", str(model), "--profile", "android-arm64-cpu", "--benchmark-binary",
                 str(arm64_binary), "--adb", str(phones.adb), "--runs", "3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "inference avg" in out and "p5 / median / p95" in out
    assert "FAKE01" in out
    assert re.search(r"measured [\d.]+ [mu]s vs simulator estimate [\d.]+ [mu]s \(likely "
                     r"[\d.]+ [mu]s–[\d.]+ [mu]s: measured (inside|outside)\): ratio [\d.]+x", out)


def test_cli_html_shows_the_measurement_beside_the_estimate(phones, model, arm64_binary,
                                                            tmp_path) -> None:
    phones.add("FAKE01")
    page = tmp_path / "bench.html"
    code = main(["bench", str(model), "--profile", "android-arm64-cpu", "--benchmark-binary",
                 str(arm64_binary), "--adb", str(phones.adb), "--runs", "3", "--html", str(page)])
    assert code == 0
    html = page.read_text()
    assert "Measured on the device (benchmark_model)" in html and "FAKE01" in html
    assert re.search(r"measured / estimated</td><td[^>]*>[\d.]+x", html)


def test_sizes_print_as_every_other_size_in_the_terminal_and_the_page(
        phones, model, arm64_binary, tmp_path, capsys) -> None:
    """benchmark_model's "MB" (a mebibyte for memory, 10^6 B for the file) is shown as the
    other views show sizes: ``44.8 MiB``, not ``44.63 MB``; the same text in the terminal
    and on the page, and the file in the flash budget's prefixes (50MB: kB), as its line
    in the budgets (issue 46: "0.07 MB")."""
    phones.add("FAKE01")
    page = tmp_path / "bench.html"
    code = main(["bench", str(model), "--profile", "android-arm64-cpu", "--benchmark-binary",
                 str(arm64_binary), "--adb", str(phones.adb), "--runs", "3", "--html", str(page)])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = dict(re.findall(r"^(model size|memory peak|memory delta init / overall)\s*│ (.+?)\s*$",
                           out, re.M))
    peak = rows["memory peak"]
    assert re.fullmatch(r"[\d.,]+ (KiB|MiB|GiB)|[\d,]+ B", peak), peak
    # The page keeps a figure whole on one line (span.fig); the text is the terminal's.
    assert re.search(rf'memory peak</td><td[^>]*>(<span class="fig">)?{re.escape(peak)}'
                     r'(</span>)?</td>', page.read_text())
    assert all(re.fullmatch(r"-?[\d.,]+ (KiB|MiB|GiB|B)", part)
               for part in rows["memory delta init / overall"].split(" / "))
    flash = re.search(r"ok   flash (\S+ \S+) within", out)
    assert flash and rows["model size"] == flash[1] and flash[1].endswith(" kB")


@pytest.mark.parametrize("mb, text", [(0.0703125, "72.0 KiB"), (44.63, "44.6 MiB"),
                                      (0.005, "5,243 B"), (None, "-")])
def test_the_tools_memory_megabytes_are_mebibytes(mb, text) -> None:
    from devicefit.simulator.infra.units import format_size
    from devicefit.simulator.report.benchmark import BenchmarkOutput

    assert format_size(BenchmarkOutput(memory_peak_mb=mb).memory_peak_bytes) == text
    assert BenchmarkOutput(model_size_mb=0.022912).model_size_bytes == pytest.approx(22_912)


def _run_cli(model: Path, binary: Path, adb: str, *extra: str) -> list[str]:
    return ["bench", str(model), "--profile", "android-arm64-cpu", "--benchmark-binary",
            str(binary), "--adb", adb, "--runs", "2", *extra]


@pytest.mark.parametrize("devices, extra, message", [
    ([], [], "no Android device found"),
    ([("A1", "unauthorized")], [], "device A1 is unauthorized: unlock the phone"),
    ([("A1", "offline")], [], "device A1 is offline"),
    ([("A1", "device"), ("B2", "device")], [], "2 devices are connected (A1 (device), "
                                               "B2 (device)): choose one with --serial"),
    ([("A1", "device")], ["--serial", "Z9"], "device Z9 is not connected"),
], ids=["no-device", "unauthorized", "offline", "several-devices", "unknown-serial"])
def test_device_errors(phones, model, arm64_binary, capsys, devices, extra, message) -> None:
    for serial, state in devices:
        phones.add(serial, state=state)
    assert main(_run_cli(model, arm64_binary, str(phones.adb), *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("behaviour, code, message", [
    # The model crashed the runtime on the phone: a verdict on the model, as a failed budget.
    ({"crash": True}, 1, "benchmark_model crashed on the device (SIGSEGV)"),
    # The phone, the binary or its output failed: nothing was learnt about the model.
    ({"vanish": True}, 2, "device FAKE01 disconnected while benchmark_model ran"),
    ({"garbage": True}, 2, "benchmark_model printed no inference timings; its last lines: "),
    ({"noexec": True}, 2, "the device cannot execute benchmark_model (exit 126): /system/bin/sh: "
                          "/data/local/tmp/devicefit/benchmark_model: can't execute: Permission"),
], ids=["crash", "device-gone-mid-run", "unparseable", "not-executable"])
def test_run_failures_are_one_line_and_clean_up(phones, model, arm64_binary, capsys,
                                                behaviour, code, message) -> None:
    storage = phones.add("FAKE01", **behaviour)
    assert main(_run_cli(model, arm64_binary, str(phones.adb))) == code
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    if not behaviour.get("noexec"):
        assert "last lines: " in err and "INFO: " in err  # the tail of the output is shown
    if not behaviour.get("vanish"):
        assert device_files(storage) == []


def test_device_unplugged_before_the_run(phones, model, arm64_binary, capsys) -> None:
    phones.add("FAKE01", unplug_at_push=True)
    assert main(_run_cli(model, arm64_binary, str(phones.adb))) == 2
    err = capsys.readouterr().err
    assert ("device FAKE01 is no longer available during adb push android_aarch64_benchmark_model"
            " (adb: error: failed to get feature set: device 'FAKE01' not found); reconnect it"
            ) in err


def test_a_hanging_run_times_out(phones, model, arm64_binary, capsys) -> None:
    storage = phones.add("FAKE01", hang=30)
    assert main(_run_cli(model, arm64_binary, str(phones.adb), "--timeout", "2")) == 2
    err = capsys.readouterr().err
    assert "benchmark_model timed out after 2 s (it may still be running on the device)" in err
    assert device_files(storage) == []


def test_binary_errors(phones, model, tmp_path, capsys) -> None:
    phones.add("FAKE01")
    adb = str(phones.adb)
    cases = [
        (_run_cli(model, tmp_path / "missing", adb), "benchmark binary not found"),
        (_run_cli(model, tmp_path / "x", adb)[:4] + ["--adb", adb], "needs --benchmark-binary"),
    ]
    script = tmp_path / "benchmark_model.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    cases.append((_run_cli(model, script, adb), "is not an ELF executable"))
    x86 = elf(tmp_path / "linux_x86-64_benchmark_model", 62)
    cases.append((_run_cli(model, x86, adb), "built for x86-64 but the device runs arm64-v8a"))
    cases.append((_run_cli(model, x86, str(tmp_path / "no-adb")), "is not an executable file"))
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    # The wrong-architecture binary was refused before anything was pushed.
    assert not any("push" in c for c in phones.calls())


def test_a_32bit_binary_runs_on_an_arm64_device_that_lists_armeabi(phones, model, tmp_path,
                                                                   profile) -> None:
    phones.add("FAKE01", props={"ro.product.cpu.abi": "armeabi-v7a",
                                "ro.product.cpu.abilist": "armeabi-v7a,armeabi"})
    arm32 = elf(tmp_path / "android_arm_benchmark_model", 40)
    result = bench(model, profile, benchmark_binary=arm32, adb=str(phones.adb), runs=1)
    assert result.binary_arch == "ARM (32-bit)" and result.results.inference.count == 1


def test_non_litert_profile_is_refused(phones, model, arm64_binary, capsys) -> None:
    phones.add("FAKE01")
    argv = _run_cli(model, arm64_binary, str(phones.adb))
    argv[3] = "stm32l4r5-cortex-m4"
    assert main(argv) == 2
    assert "targets tflm; bench runs LiteRT on Android phones" in capsys.readouterr().err
    assert phones.calls() == []  # refused before talking to adb


def test_latency_budget_is_judged_on_the_measured_time(phones, model, arm64_binary, tmp_path,
                                                       capsys) -> None:
    """The estimate for chain_int8 on the phone is far below 5 ms, but this fake phone is
    slow: every inference takes 10 ms more than LiteRT on this host (``slow_ms``), so the
    measurement exceeds the 5 ms budget on any machine. The verdict follows the phone."""
    phones.add("FAKE01", slow_ms=10)
    strict = tmp_path / "strict-phone.yaml"
    strict.write_text("name: strict-phone\nextends: android-arm64-cpu\nbudgets:\n  latency: 5ms\n")
    from devicefit.simulator.simulate import simulate

    estimate = simulate(model, load_profile(strict)).latency.estimated_device_ms
    assert estimate < 5
    args = ["bench", str(model), "--profile", str(strict), "--benchmark-binary",
            str(arm64_binary), "--adb", str(phones.adb), "--runs", "2"]
    code = main([*args, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["verdict"] == "fail"
    [latency] = [b for b in report["budgets"] if b["name"] == "latency"]
    assert latency["basis"] == "measured" and latency["value"] >= 10 and not latency["ok"]
    assert report["bench"]["vs_estimate"]["measured_ms"] == latency["value"]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 1
    assert "Verdict: FAIL" in out and re.search(r"OVER latency [\d.]+ ms exceeds its 5", out)


def test_op_profiling_times_reach_the_layer_table_csv_and_html(phones, model, arm64_binary,
                                                               tmp_path, capsys) -> None:
    """benchmark_model's per-operator table (a capture written for this model: the fake phone
    prints it as benchmark_model does) lands in the layer rows, ``--layers``, ``--csv`` and
    the HTML table instead of being dropped."""
    from devicefit.simulator.read.reader import read_model

    sg = read_model(model).main
    lines = ["", "=" * 30 + " Run Order " + "=" * 30,
             "\t[node type]\t[start]\t[first]\t[avg ms]\t[%]\t[cdf%]\t[mem KB]\t"
             "[times called]\t[Name]"]
    for op in sg.operators:
        ms = 0.5 + op.index
        lines.append(f"\t{op.op_name}\t0.000\t{ms:.3f}\t{ms:.3f}\t1.000%\t1.000%\t0.000\t1\t"
                     f"[{sg.tensors[op.outputs[0]].name}]:{op.index}")
    capture = tmp_path / "profile.txt"
    capture.write_text("\n".join(lines) + "\n\n")
    phones.add("FAKE01", op_profile_file=str(capture))
    out_csv, page = tmp_path / "layers.csv", tmp_path / "bench.html"
    code = main(["bench", str(model), "--profile", "android-arm64-cpu", "--benchmark-binary",
                 str(arm64_binary), "--adb", str(phones.adb), "--runs", "2", "--op-profiling",
                 "--layers", "--csv", str(out_csv), "--html", str(page)])
    out = capsys.readouterr().out
    assert code == 0, out
    last = sg.operators[-1]
    assert (f"slowest on the device (measured): op {last.index} {last.op_name} "
            f"({0.5 + last.index:.2f} ms)") in out
    import csv

    rows = list(csv.DictReader(out_csv.open()))
    assert [float(r["device_ms"]) for r in rows] == [0.5 + op.index for op in sg.operators]
    assert 'data-col="device_ms"' in page.read_text()


# --------------------------------------------------------------------------- hostile phones
def _fake_adb_processes(config: Path) -> list[int]:
    """The fake adb processes still running with ``config`` (their environment names it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if proc.name.isdigit() and f"FAKE_ADB_CONFIG={config}\0".encode() in environ:
            found.append(int(proc.name))
    return found


def test_a_device_printing_without_end_stops_at_the_timeout(phones, model, arm64_binary,
                                                            capsys) -> None:
    """A FAKE phone (no Android device here) that prints forever: adb's output used to be
    kept whole until memory ran out; now the deadline holds and adb is killed."""
    phones.add("FAKE01", flood=-1)
    assert main(_run_cli(model, arm64_binary, str(phones.adb), "--timeout", "2")) == 2
    err = capsys.readouterr().err
    assert "benchmark_model timed out after 2 s" in err
    assert len(err) < 2000
    assert _fake_adb_processes(phones.config_path) == []


def test_a_device_printing_a_flood_keeps_its_results(phones, model, arm64_binary,
                                                    capsys) -> None:
    """24 MB (more than adb.OUTPUT_LIMIT) of noise on one line before benchmark_model's real output (a FAKE phone): the
    last part of what it prints is kept, so the results still parse."""
    phones.add("FAKE01", flood=24 << 20)
    assert main(_run_cli(model, arm64_binary, str(phones.adb))) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ms" in out and len(out) < 20_000


def test_a_device_error_is_quoted_briefly(phones, model, arm64_binary, capsys) -> None:
    """20 MB on one stderr line and a failure (a FAKE phone): one short line quotes it."""
    phones.add("FAKE01", flood=20 << 20, flood_stderr=True, flood_exit=1)
    assert main(_run_cli(model, arm64_binary, str(phones.adb))) == 1  # the model failed there
    err = capsys.readouterr().err
    assert "benchmark_model failed (exit 1)" in err
    assert "more)" in err and len(err) < 2000


def test_run_bounded_keeps_the_head_and_the_tail() -> None:
    from devicefit.sdk.bench.adb import run_bounded

    done = run_bounded(["sh", "-c", "echo first; head -c 5000000 /dev/zero | tr '\\0' x; "
                        "echo; echo last"], timeout=60, limit=1 << 20)
    assert done.returncode == 0
    assert done.stdout.startswith("first\n") and done.stdout.rstrip().endswith("last")
    assert "bytes left out" in done.stdout and len(done.stdout) < (1 << 20) + 100


def test_adb_exit_255_is_adbs_failure_not_a_signal() -> None:
    from devicefit.sdk.bench.runner import _failure

    message = str(_failure(255, "error: closed"))
    assert "adb failed" in message and "signal" not in message
