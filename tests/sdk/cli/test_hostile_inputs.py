"""Hostile and broken inputs (issue 24): every defect found by the fuzz campaign, one input
of its kind each. The CLI runs in-process (``main(argv) -> int``) except where signals are
sent: those run ``python -m sdk.cli`` as a subprocess.

Bad input must give exit 2 and one clear line on stderr, never a traceback, never a changed
input, never a half-written output.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks.procs import runtime_workers, zygotes
from devicefit.sdk.cli import main
from devicefit.simulator.infra.escape import clean, markdown
from tests import hostile
from tests.paths import ROOT
from tests.tflite_builder import custom_model, fb

ESC = "\x1b[2J\x1b]0;owned\x07"


def _one_line_error(capsys, *fragments: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert "\x1b" not in err
    return lines[0]


def _digest(*paths: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A valid one-op float model (x[1, 8] → RELU), built without TensorFlow."""
    p = tmp_path / "tiny.tflite"
    p.write_bytes(hostile.relu_chain(1))
    return p


# --------------------------------------------------------------------------- YAML
BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9 if p else ['x'] * 9)}]\n"
               for p, c in zip(["", *"abcdefgh"], "abcdefghi"))

BAD_PROFILES = [
    # (id, profile text, fragments of the one-line error)
    ("alias-bomb", BOMB, ["alias bomb"]),
    ("duplicate-key", "extends: esp32-s3\nbudgets:\n  arena: 1KiB\n  arena: 2KiB\n",
     [":4:", "duplicate key 'budgets.arena'", "line 3"]),
    ("deep-nesting", "a: " + "[" * 3000 + "]" * 3000 + "\n", ["nested deeper than"]),
    ("huge-integer", "extends: esp32-s3\nbudgets:\n  arena: " + "9" * 5000 + "\n",
     [":3:", "integer of 5,000 characters"]),
    ("nan-budget", "extends: esp32-s3\nbudgets:\n  latency: .nan\n", [":3:", "not finite"]),
    ("inf-cost", "extends: esp32-s3\ncost_model:\n  cycles_per_byte: 1e999\n", ["finite"]),
    ("nan-text-latency", "extends: esp32-s3\nbudgets:\n  latency: nan ms\n",
     ["budgets.latency"]),
    ("zero-clock", "extends: esp32-s3\ndevice:\n  clock: 0MHz\n", ["device.clock", "0MHz"]),
    ("pointer-size-6", "extends: esp32-s3\nruntime:\n  pointer_size: 6\n",
     ["runtime.pointer_size", "one of 4, 8"]),
    ("empty-schemes", "extends: esp32-s3\nquantization:\n  schemes: []\n",
     ["quantization.schemes", "non-empty"]),
    ("negative-time", "extends: esp32-s3\ncost_model:\n  op_overhead: -1ms\n",
     ["cost_model.op_overhead"]),
    ("extends-dev-zero", "extends: /dev/zero\n", ["/dev/zero", "not a regular file"]),
    ("extends-proc", "extends: /proc/self/status\n", ["not a regular file"]),
    ("extends-folder", "extends: ./sub/\n", ["a folder"]),
]


@pytest.mark.parametrize("text,fragments", [c[1:] for c in BAD_PROFILES],
                         ids=[c[0] for c in BAD_PROFILES])
def test_hostile_profiles_exit_2_with_one_line(tmp_path, capsys, text, fragments):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["profiles", "validate", str(path)]) == 2
    _one_line_error(capsys, *fragments)


def test_profile_extends_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "bad.yaml").write_text("extends: ./pipe.yaml\n")
    assert main(["profiles", "validate", str(tmp_path / "bad.yaml")]) == 2
    _one_line_error(capsys, "pipe.yaml", "not a regular file")


def test_oversized_profile_is_refused_before_parsing(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text("extends: esp32-s3\n" + "# padding\n" * 200_000)
    assert main(["profiles", "validate", str(path)]) == 2
    _one_line_error(capsys, "the limit is 1,048,576")


PROJECTS = [
    ("alias-bomb", BOMB, ["alias bomb"]),
    ("duplicate-model-key", "models:\n  - path: m.tflite\n    path: n.tflite\n",
     ["duplicate key 'models.0.path'"]),
    ("nan-percent-rule", "models:\n  - path: m.tflite\n    profiles: [esp32-s3]\n"
     "    regression: {arena: nan%}\n", ["regression.arena", "'nan%'"]),
    ("inf-percent-rule", "models:\n  - path: m.tflite\n    profiles: [esp32-s3]\n"
     "    regression: {arena: inf%}\n", ["'inf%'"]),
    ("nan-budget", "models:\n  - path: m.tflite\n    profiles: [esp32-s3]\n"
     "    budgets: {latency: .nan}\n", ["not finite"]),
    ("profile-dev-zero", "models:\n  - path: m.tflite\n    profiles: [/dev/zero.yaml]\n",
     ["not found"]),
    ("profile-fifo", "models:\n  - path: m.tflite\n    profiles: [pipe.yaml]\n",
     ["not a regular file"]),
    ("deep-nesting", "models: " + "[" * 2000 + "]" * 2000 + "\n", ["nested deeper than"]),
]


@pytest.mark.parametrize("text,fragments", [c[1:] for c in PROJECTS],
                         ids=[c[0] for c in PROJECTS])
def test_hostile_project_files_exit_2(tmp_path, capsys, tiny, text, fragments):
    shutil.copy(tiny, tmp_path / "m.tflite")
    os.mkfifo(tmp_path / "pipe.yaml")
    f = tmp_path / "devicefit.yaml"
    f.write_text(text)
    assert main(["check", str(f)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "\x1b" not in err
    for fragment in fragments:
        assert fragment in err


def test_project_file_that_is_a_device_is_refused(capsys):
    assert main(["check", "/dev/zero"]) == 2
    _one_line_error(capsys, "/dev/zero", "not a regular file")


# --------------------------------------------------------------------------- escaping
def test_clean_makes_every_unsafe_character_visible():
    text = "a\x1b[2Jb\x07c\x9bd\u202ee\rf\x00\ud800\ufffe"
    out = clean(text)
    assert out == "a\\x1b[2Jb\\x07c\\x9bd\\u202ee\\rf\\x00\\ud800\\ufffe"
    assert clean("tab\tnew\nline") == "tab\tnew\nline"
    assert clean("tab\tnew\nline", one_line=True) == "tab\\tnew\\nline"
    assert markdown("a|b *c* <d> `e` mlp_int8 _x_") == \
        "a\\|b \\*c\\* \\<d\\> \\`e\\` mlp_int8 \\_x\\_"


def test_custom_op_name_with_escape_sequences_never_reaches_the_terminal(tmp_path, capsys):
    model = tmp_path / "esc.tflite"
    model.write_bytes(custom_model(ESC + "Evil"))
    page = tmp_path / "r.html"
    main(["simulate", str(model), "--profile", "esp32-s3", "--html", str(page)])
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b[2J" in out  # shown, visibly
    html = page.read_text()
    assert "\x1b" not in html and "\\x1b[2J" in html


def test_junit_stays_valid_xml_whatever_the_names(tmp_path, capsys, tiny):
    """Model names from the project and op names from the model end up in XML attributes
    and text: control characters are invalid XML 1.0 and must be escaped."""
    shutil.copy(tiny, tmp_path / "m.tflite")
    (tmp_path / "esc.tflite").write_bytes(custom_model("\x01\x1b[31m<&>\"'"))
    f = tmp_path / "devicefit.yaml"
    f.write_text('models:\n'
                 '  - {path: m.tflite, name: "bad\\x1b[2J\\x00name\\ud800", '
                 'profiles: [esp32-s3]}\n'
                 '  - {path: esc.tflite, name: "pipe|*star*", profiles: [esp32-s3]}\n')
    junit, md = tmp_path / "j.xml", tmp_path / "s.md"
    code = main(["check", str(f), "--junit", str(junit), "--markdown", str(md)])
    assert code in (0, 1)
    out = capsys.readouterr().out
    assert "\x1b" not in out
    root = ET.parse(junit).getroot()  # raises on invalid XML
    names = {s.get("name") for s in root.iter("testsuite")}
    assert any("\\x1b[2J\\x00name" in n for n in names)
    text = md.read_text()
    assert "\x1b" not in text and "pipe\\|\\*star\\*" in text


# --------------------------------------------------------------------------- outputs
def _outputs_case(tmp_path: Path, tiny: Path, case: str) -> tuple[list[str], list[Path], str]:
    """argv (after 'devicefit'), the files that must not change, and the message fragment."""
    profile = tmp_path / "p.yaml"
    profile.write_text("extends: esp32-s3\n")
    data = tmp_path / "cal.npy"
    data.write_bytes(b"\x93NUMPY data stand-in")
    sm = tmp_path / "sm"
    sm.mkdir(exist_ok=True)
    (sm / "saved_model.pb").write_bytes(b"graph stand-in")
    m, prof = str(tiny), str(profile)
    cases = {
        "html-over-model": (["simulate", m, "--profile", "esp32-s3", "--html", m],
                            [tiny], "would replace an input, the model"),
        "html-and-plot-same": (["simulate", m, "--profile", "esp32-s3", "--html",
                                str(tmp_path / "x"), "--plot", str(tmp_path / "x")],
                               [tiny], "are the same file"),
        "plot-over-profile": (["simulate", m, "--profile", prof, "--plot", prof],
                              [profile], "would replace an input, the profile"),
        "html-over-input-data": (["simulate", m, "--profile", "esp32-s3", "--run", "--input",
                                  str(data), "--html", str(data)], [data],
                                 "would replace an input, the --input data"),
        "html-is-a-folder": (["simulate", m, "--profile", "esp32-s3", "--html", str(sm)],
                             [tiny], "is a folder"),
        "html-unwritable": (["simulate", m, "--profile", "esp32-s3", "--html",
                             "/proc/devicefit.html"], [tiny], "cannot write to the folder"),
        # A missing folder is made, under the nearest one that exists: that must be writable.
        "html-missing-folder": (["simulate", m, "--profile", "esp32-s3", "--html",
                                 "/proc/devicefit-no/r.html"], [tiny],
                                "cannot write to the folder /proc"),
        "optimize-over-profile": (["optimize", m, "--profile", prof, "-o", prof],
                                  [profile], "would replace an input, the profile"),
        "convert-into-savedmodel": (["convert", str(sm), "--profile", "esp32-s3", "-o",
                                     str(sm / "saved_model.pb")], [sm / "saved_model.pb"],
                                    "inside an input, the model folder"),
        "convert-report-over-calibration": (["convert", str(sm), "--profile", "esp32-s3",
                                             "-o", str(tmp_path / "o.tflite"), "--calibration",
                                             str(data), "--report", str(data)], [data],
                                            "would replace an input, the calibration data"),
        "convert-output-is-folder": (["convert", str(sm), "--profile", "esp32-s3", "-o",
                                      str(tmp_path)], [sm / "saved_model.pb"], "is a folder"),
        "convert-html-equals-output": (["convert", str(sm), "--profile", "esp32-s3", "-o",
                                        str(tmp_path / "o.tflite"), "--html",
                                        str(tmp_path / "o.tflite")], [],
                                       "are the same file"),
        "bench-plot-over-model": (["bench", m, "--profile", "android-arm64-cpu", "--plot", m],
                                  [tiny], "would replace an input, the model"),
    }
    return cases[case]


OUTPUT_CASES = ["html-over-model", "html-and-plot-same", "plot-over-profile",
                "html-over-input-data", "html-is-a-folder", "html-unwritable",
                "html-missing-folder", "optimize-over-profile", "convert-into-savedmodel",
                "convert-report-over-calibration", "convert-output-is-folder",
                "convert-html-equals-output", "bench-plot-over-model"]


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_no_output_replaces_an_input_or_another_output(tmp_path, capsys, tiny, case):
    """Refused before any work (convert would load TensorFlow, bench call adb: neither
    exists for these inputs, so reaching the work would give a different error)."""
    argv, kept, fragment = _outputs_case(tmp_path, tiny, case)
    before = _digest(*kept)
    assert main(argv) == 2
    _one_line_error(capsys, fragment)
    assert _digest(*kept) == before


def test_check_outputs_never_replace_profiles_or_each_other(tmp_path, capsys, tiny):
    shutil.copy(tiny, tmp_path / "m.tflite")
    (tmp_path / "mine.yaml").write_text("extends: esp32-s3\n")
    f = tmp_path / "devicefit.yaml"
    f.write_text("models: [{path: m.tflite, profiles: [mine.yaml]}]\n")
    before = _digest(tmp_path / "mine.yaml", f)
    assert main(["check", str(f), "--junit", str(tmp_path / "mine.yaml")]) == 2
    _one_line_error(capsys, "would replace an input, the profile")
    assert main(["check", str(f), "--junit", str(tmp_path / "r"), "--html",
                 str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "same file")
    assert _digest(tmp_path / "mine.yaml", f) == before


# --------------------------------------------------------------------------- limits
def test_nested_control_flow_is_analysed_once_per_subgraph(tmp_path, capsys):
    """IF subgraphs calling the next one from both branches, 40 deep: 2**40 executed
    operators. Refused by the bound in milliseconds instead of walked for ever."""
    model = tmp_path / "if40.tflite"
    model.write_bytes(hostile.nested_if(40))
    assert main(["simulate", str(model), "--profile", "esp32-s3"]) == 2
    _one_line_error(capsys, "4,398,046,511,101 operators executed", "--max-ops")


@pytest.mark.parametrize("profile", ["android-arm64-cpu", "coral-edgetpu"])
def test_nested_control_flow_macs_count_each_subgraph_once(tmp_path, capsys, monkeypatch,
                                                           profile):
    """The same IF chain 63 deep on runtimes without TFLM's executed-operator bound: the
    MAC count visits each subgraph once (it walked 2**63 paths and never returned; found by
    bench_fuzz). A walk past a few hundred visits fails here instead of hanging."""
    from devicefit.simulator.estimate import compute

    visits = 0
    counted = compute._macs

    def bounded(*args):
        nonlocal visits
        visits += 1
        assert visits < 1000, "the IF chain is being walked path by path"
        return counted(*args)

    monkeypatch.setattr(compute, "_macs", bounded)
    model = tmp_path / "if63.tflite"
    model.write_bytes(hostile.nested_if(63))
    assert main(["simulate", str(model), "--profile", profile]) in (0, 1)
    assert visits <= 64 * 2 * 3  # each subgraph's operators, a few passes at most


def test_max_ops_bounds_operators_in_the_file(tmp_path, capsys):
    model = tmp_path / "chain.tflite"
    model.write_bytes(hostile.relu_chain(300))
    assert main(["--max-ops", "100", "simulate", str(model), "--profile", "esp32-s3"]) == 2
    _one_line_error(capsys, "300 operators", "(100)")
    assert main(["--max-ops", "1000", "simulate", str(model), "--profile", "esp32-s3"]) == 0
    for bad in ("0", "nan"):
        with pytest.raises(SystemExit) as exc:
            main(["--max-ops", bad, "simulate", str(model), "--profile", "esp32-s3"])
        assert exc.value.code == 2


def test_memoised_lifetimes_equal_the_literal_walk():
    """The once-per-subgraph analysis against TFLM's walk, re-marking at every call."""
    from devicefit.simulator.read.reader import parse_model
    from devicefit.simulator.targets.tflm.scratch import tflm_buffers

    for depth in (1, 2, 5):
        model = parse_model(hostile.nested_if(depth), f"if{depth}")
        got = {(b.subgraph, b.tensor): (b.first, b.last) for b in tflm_buffers(model)}
        literal = _literal_lifetimes(model)
        assert len(got) == 3 * (depth + 1)  # cond, x, y of every subgraph
        assert got == {key: literal[key] for key in got}


def _literal_lifetimes(model) -> dict[tuple[int, int], tuple[int, int]]:
    """``MarkAllocationLifetimes`` as TFLM runs it: a subgraph re-marked at every call."""
    first = {(k, t): -1 for k, sg in enumerate(model.subgraphs) for t in range(len(sg.tensors))}
    last = dict(first)
    scope = 0

    def mark(k: int) -> None:
        nonlocal scope
        sg = model.subgraphs[k]
        for t in sg.inputs:
            first[k, t] = scope if first[k, t] == -1 else first[k, t]
            last[k, t] = scope
        for op in sg.operators:
            scope += 1
            for t in op.outputs:
                first[k, t] = scope if first[k, t] == -1 else first[k, t]
            if op.op_name == "IF":
                for child in (op.options["then_subgraph_index"],
                              op.options["else_subgraph_index"]):
                    scope += 1
                    mark(child)
            for t in (*op.inputs, *op.outputs):
                last[k, t] = scope
        for t in sg.outputs:
            first[k, t] = scope if first[k, t] == -1 else first[k, t]
            last[k, t] = scope

    mark(0)
    return {key: (first[key], last[key]) for key in first}


def test_many_unused_tensors_and_long_chains_are_planned(tmp_path):
    """100k tensors no operator touches (TFLM stacks them in the head) and 5,000 operators:
    quadratic before. No time limit here (benchmarks/bench_fuzz.py measures); the figures
    must be TFLM's."""
    from devicefit.simulator.simulate import simulate

    unused = tmp_path / "unused.tflite"
    unused.write_bytes(hostile.unused_tensors(100_000))
    report = simulate(unused, "esp32-s3")
    # Stacked one on another at step -1; x and y (steps 0-1) reuse the bottom.
    assert report.memory.arena_head_bytes == 100_000 * 64
    chain = tmp_path / "chain.tflite"
    chain.write_bytes(hostile.relu_chain(5_000))
    assert simulate(chain, "esp32-s3").memory.arena_head_bytes == 64


# --------------------------------------------------------------------------- --run
def test_run_refuses_a_tiny_model_with_a_huge_input_before_allocating(tmp_path, capsys):
    model = tmp_path / "huge.tflite"
    model.write_bytes(hostile.huge_input(2**29))
    assert model.stat().st_size < 400
    assert main(["simulate", str(model), "--profile", "android-arm64-cpu", "--run"]) == 2
    _one_line_error(capsys, "4,294,967,296 bytes", "--run handles up to")


def test_run_with_an_int4_input_is_one_line(tmp_path, capsys):
    model = tmp_path / "int4.tflite"
    model.write_bytes(hostile.huge_input(8, fb.TensorType.INT4))
    assert main(["simulate", str(model), "--profile", "android-arm64-cpu", "--run"]) == 2
    _one_line_error(capsys, "dtype int4")


@pytest.mark.parametrize("data", ["devnull", "header-bomb", "scalar", "truncated"])
def test_run_input_data_is_read_in_the_child(tmp_path, capsys, tiny, data):
    import numpy as np

    if data == "devnull":
        path = Path("/dev/null")
    else:
        path = tmp_path / "x.npy"
        if data == "header-bomb":  # claims 4 TiB of float32
            header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1099511627776), }"
            header += b" " * (118 - len(header)) + b"\n"
            path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
        elif data == "scalar":
            np.save(path, np.float32(1.0))
        else:
            np.save(path, np.zeros((1, 8), np.float32))
            path.write_bytes(path.read_bytes()[:-7])
    assert main(["simulate", str(tiny), "--profile", "android-arm64-cpu", "--run",
                 "--input", str(path)]) == 2
    _one_line_error(capsys)


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_timeout_must_be_finite_and_positive(tiny, capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(tiny), "--profile", "esp32-s3", "--run", "--timeout", value])
    assert exc.value.code == 2
    assert "seconds > 0" in capsys.readouterr().err


# --------------------------------------------------------------------------- signals
def _worker_pids(marker: str) -> list[int]:
    return runtime_workers(marker) + zygotes(marker)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_terminate_and_hangup_clean_up_like_ctrl_c(tmp_path, tiny, sig):
    """A CI runner cancelling a job: the --run worker dies with us, its temp folder goes,
    and no output is written (the HTML would come after the run)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    page = tmp_path / "r.html"
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "devicefit.sdk.cli", "simulate", str(tiny), "--profile", "esp32-s3",
         "--run", "--runs", "100000000", "--html", str(page)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        for _ in range(600):  # the worker has started invoking
            stages = list(tmp.glob("devicefit-run-*/stage"))
            if stages and stages[0].read_text() == "invoke":
                break
            time.sleep(0.1)
        assert _worker_pids(str(tmp)), "the worker never started"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig
    assert f"stopped by {signal.Signals(sig).name}" in err.decode()
    assert "Traceback" not in err.decode()
    deadline = time.monotonic() + 10
    while _worker_pids(str(tmp)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _worker_pids(str(tmp)) == []
    assert list(tmp.iterdir()) == []
    assert not page.exists()


# --------------------------------------------------------------------------- bench
CAPTURE = ROOT / "tests" / "fixtures" / "benchmark_model" / "tf42507_android_cpu_tf23.txt"


@pytest.mark.parametrize("old,new", [
    ("Inference (avg): 33209.4", "Inference (avg): nan"),
    ("avg=33209.4 std=450", "avg=-33209.4 std=450"),
    ("Inference (avg): 33209.4", "Inference (avg): inf"),
    ("overall=12.8672", "overall=nan"),
    ("Inference (avg): 33209.4", "Inference (avg): 1e300"),
    ("count=50 first=32891", "count=0 first=32891"),
], ids=["nan-average", "negative-stat", "inf-average", "nan-memory", "absurd-average",
        "no-runs"])
def test_bench_refuses_impossible_figures_from_the_device(old, new):
    from devicefit.sdk.bench.benchmark_output import BenchmarkOutputError, parse_benchmark_output

    text = CAPTURE.read_text()
    assert old in text
    parse_benchmark_output(text)  # the real capture is fine
    with pytest.raises(BenchmarkOutputError, match="which no run can measure"):
        parse_benchmark_output(text.replace(old, new))


def test_bench_never_echoes_raw_device_bytes(tmp_path, monkeypatch, capsys, tiny):
    """A FAKE phone (tests/fakes: there is no Android device here) whose model name and
    ABI list carry escape sequences and rich markup."""
    from tests.sdk.bench.test_bench import ARM64, FakePhones, elf

    phones = FakePhones(tmp_path, monkeypatch)
    props = {**ARM64, "ro.product.model": ESC + "[/][bold]Pixel"}
    phones.add("FAKE01", props=props)
    binary = elf(tmp_path / "benchmark_model", 183)
    code = main(["bench", str(tiny), "--profile", "android-arm64-cpu", "--benchmark-binary",
                 str(binary), "--adb", str(phones.adb), "--runs", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "[/][bold]Pixel" in out  # shown literally, not read as markup


# --------------------------------------------------------------------------- fuzz finds
@pytest.mark.parametrize("baseline", ["/dev/zero", "nan.json", "deep.json", "fifo.json"])
def test_check_baseline_is_a_bounded_regular_json_file(tmp_path, capsys, tiny, baseline):
    """Found by bench_fuzz: 'baseline: /dev/zero' read until the OOM killer came."""
    shutil.copy(tiny, tmp_path / "m.tflite")
    (tmp_path / "nan.json").write_text(
        '{"version": 1, "models": {"m": {"esp32-s3": {"arena_bytes": NaN}}}}')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    os.mkfifo(tmp_path / "fifo.json")
    f = tmp_path / "devicefit.yaml"
    f.write_text(f"baseline: {baseline}\n"
                 "models: [{path: m.tflite, profiles: [esp32-s3], regression: {arena: 5%}}]\n")
    assert main(["check", str(f)]) == 2
    _one_line_error(capsys, "baseline")


@pytest.mark.parametrize("op", ["SOFTMAX", "MEAN", "SUM", "SPLIT", "CONV_2D", "PRELU"])
@pytest.mark.parametrize("profile", ["coral-edgetpu", "esp32-s3", "android-arm64-cpu"])
def test_operator_without_its_inputs_is_reported_not_a_traceback(tmp_path, capsys, op,
                                                                 profile):
    """Found by bench_fuzz: a SOFTMAX with no input tensor crashed the Edge TPU rules."""
    from tests.tflite_builder import F32, _model, _opcode, _operator, _tensor

    code = getattr(fb.BuiltinOperator, op)
    model = tmp_path / "m.tflite"
    model.write_bytes(_model([_opcode(code)], [_tensor("y", (1, 8), F32, 0)], [],
                             [_operator(0, [], [0])], [], [0]))
    assert main(["simulate", str(model), "--profile", profile]) in (0, 1, 2)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("model", ["/dev/zero", "fifo", "/proc/self/status"])
def test_model_path_must_be_a_regular_file(tmp_path, capsys, model):
    """Found by bench_fuzz's neighbours: /dev/zero was read until MemoryError, a FIFO
    blocked for ever."""
    if model == "fifo":
        model = str(tmp_path / "m.tflite")
        os.mkfifo(model)
    assert main(["simulate", model, "--profile", "esp32-s3"]) == 2
    _one_line_error(capsys, "not a regular file")


def test_a_signal_outside_the_work_exits_with_its_status_not_by_it():
    """Found by bench_fuzz: SIGTERM arriving while the interpreter shut down after a
    finished `check --jobs 2` killed the process (status -15: a crash to CI)."""
    code = ("import os, signal, time; "
            "from devicefit.simulator.infra.signals import exit_outside_work; "
            "exit_outside_work(); os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 128 + signal.SIGTERM


# --------------------------------------------------------------------------- strict JSON
def _strict(text: str):
    """Parse as a strict JSON parser would (jq, JSON.parse): no NaN/Infinity."""
    import json

    def refuse(constant: str):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def test_an_overflowing_cost_model_gives_no_estimate_and_strict_json(tmp_path, capsys, tiny):
    """Found by the fault campaign: each figure of the profile is finite, their sum over
    the operators is not; --json printed a bare Infinity and the text 'inf s'."""
    profile = tmp_path / "huge.yaml"
    profile.write_text("extends: esp32-s3\ncost_model:\n  op_overhead: 1e308ms\n")
    model = tmp_path / "chain.tflite"
    model.write_bytes(hostile.relu_chain(4))
    main(["simulate", str(model), "--profile", str(profile), "--json"])
    doc = _strict(capsys.readouterr().out)
    assert doc["latency"]["estimated_device_ms"] is None
    assert "overflows" in doc["latency"]["no_estimate"]
    main(["simulate", str(model), "--profile", str(profile)])
    assert "inf" not in capsys.readouterr().out.replace("info", "")


def test_check_results_are_strict_json_whatever_the_regression_rule(tmp_path, capsys, tiny):
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"baseline: base.json\ndefaults:\n  regression: {{flash: 1e308%}}\n"
                       f"models:\n  - path: {tiny}\n    profiles: [esp32-s3]\n")
    assert main(["check", str(project)]) == 0  # the first run writes the baseline
    capsys.readouterr()
    results = tmp_path / "results.json"
    assert main(["check", str(project), "--results", str(results), "--json"]) == 0
    _strict(results.read_text())
    _strict(capsys.readouterr().out)


def test_strict_json_writes_null_for_every_non_finite_figure():
    from devicefit.simulator.infra import jsonout

    doc = {"a": float("inf"), "b": [1.5, float("nan"), {"c": -float("inf")}], "d": (2,)}
    assert _strict(jsonout.dumps(doc)) == {"a": None, "b": [1.5, None, {"c": None}], "d": [2]}
