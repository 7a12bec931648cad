"""The console: help and tables readable at 80 columns, no padding when piped, NO_COLOR
without any escape sequence, native and third-party log lines kept out of the terminal
(in a log shown on failure), --plot without matplotlib, the API taking profile names."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

import devicefit.sdk.commands.profiles as profiles_command
from devicefit.sdk.cli import build_parser, main
from devicefit.sdk.console import native_log
from devicefit.simulator.errors import InputError, RuntimeFailure, install_command
from devicefit.simulator.profiles import ProfileStore
from tests.paths import ROOT, TESTS
from tests.terminal import in_a_terminal, on_a_pty, screen
from tests.zoo import model_path

#: Lines that TensorFlow, absl and the MLIR quantizer print (issue #20).
THIRD_PARTY = re.compile(r"absl|oneDNN|cudart|cuda drivers|fully_quantize|inference_type|"
                         r"^[IWEF]\d{4} |WARNING:tensorflow|UserWarning")
DESCRIPTION = "Mid-range Android phone, arm64 big cores 2.4 GHz, LiteRT + XNNPACK, 4 threads"


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(argv prefix, parser) of the top level and every (sub)command."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*prefix, name))


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for _, p in _commands(parser) for a in p._actions for s in a.option_strings}


def test_help_of_every_command_fits_80_columns_without_breaking_a_flag(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    known = _flags(parser)
    commands = list(_commands(parser))
    assert len(commands) >= 10  # the top level, 8 commands, profiles' subcommands
    for argv, _ in commands:
        with pytest.raises(SystemExit) as done:
            main([*argv, "--help"])
        assert done.value.code == 0
        text = capsys.readouterr().out
        assert "example: devicefit" in text, argv
        for line in text.splitlines():
            assert len(line) <= 80, (argv, line)
            assert not re.search(r"\w-$", line), (argv, line)  # a word broken at a hyphen
        # Every flag shown is whole: argparse's own wrapping cut "--benchmark-binary" into
        # "--benchmark-" and "binary".
        shown = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", text))
        assert shown <= known | {"-o", "-j"}, (argv, shown - known)


def test_help_keeps_a_flag_with_its_value(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    example = text[text.index("example:"):]
    assert "--benchmark-binary ./android_aarch64_benchmark_model" in example
    assert "--profile android-arm64-cpu" in example


def test_tables_at_80_columns_keep_names_whole(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["profiles", "list"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines())
    words = set(out.split())
    for name in ProfileStore().names():
        assert name in words, name  # not folded into "android-ar" + "m64-cpu"


@pytest.mark.parametrize("argv", [
    ["simulate", "{a}", "--profile", "esp32-s3"],
    ["simulate", "{a}", "--profile", "esp32-s3", "--layers"],
    ["diff", "{a}", "{b}", "--profile", "stm32l4r5-cortex-m4"],
], ids=["simulate", "simulate-layers", "diff"])
def test_reports_at_80_columns_fold_at_spaces(monkeypatch, capsys, tmp_path, argv):
    a, b = model_path("chain_int8"), model_path("residual_int8")
    # A probe cache of its own: in the shared one, another worker's probes could land
    # between the two runs and change the "N cached, M probed now" figures.
    monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path / "cache"))
    # Relative names: the reports echo the paths given, and the checkout's own path (any
    # length on a CI machine) must not decide whether a line can fold to 80 columns.
    monkeypatch.chdir(a.parent)
    argv = [x.format(a=a.name, b=b.name) for x in argv]
    monkeypatch.delenv("COLUMNS", raising=False)
    main(argv)
    whole = capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "80")
    main(argv)
    folded = capsys.readouterr().out
    assert max(map(len, whole.splitlines())) > 80  # piped: nothing folded
    assert all(len(line) <= 80 for line in folded.splitlines())
    # the same words: folding a line and narrowing a table's columns (whose cells then take
    # two lines, aligned) only move words between lines (tests/sdk/cli/test_terminal_layout.py
    # checks that no number is parted from its unit)
    assert sorted(folded.split()) == sorted(whole.split())


def test_a_word_wider_than_the_terminal_stays_whole(monkeypatch):
    """A path longer than the terminal is not cut (users copy it); the rest still folds."""
    from devicefit.sdk.console import fold

    monkeypatch.setenv("COLUMNS", "40")
    path = "/very/long/checkout/" + "x" * 40 + "/model.tflite"
    folded = fold(f"  model {path} on stm32l4r5-cortex-m4 with a budget")
    assert path in folded.splitlines()[1].split()
    assert all(len(line) <= 40 for line in folded.splitlines() if path not in line)


def test_piped_output_is_neither_padded_nor_folded(capsys):
    assert main(["profiles", "list"]) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line != line.rstrip()]
    assert DESCRIPTION in out  # one line: a log or grep sees it whole


def test_no_color_means_no_escape_sequence_at_all():
    # On a terminal the table's header is bold: rich's own NO_COLOR handling kept that.
    assert "\x1b[" in in_a_terminal(["profiles", "list"])
    assert "\x1b[" not in in_a_terminal(["profiles", "list"], NO_COLOR="1")
    assert "\x1b[" not in in_a_terminal(["--no-color", "profiles", "list"])


def _noisy(log_line: bytes, error: Exception | None):
    """A command handler that writes to fd 2 like native code and warns like Keras."""
    def handler(args) -> int:
        os.write(2, log_line)
        warnings.warn("a third-party UserWarning", UserWarning, stacklevel=1)
        if error is not None:
            raise error
        return 0
    return handler


def test_native_lines_and_warnings_stay_out_of_a_successful_command(monkeypatch, capfd,
                                                                     tmp_path):
    monkeypatch.setattr(profiles_command, "_list", _noisy(b"I0000 00:00 port.cc] oneDNN\n",
                                                          None))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["profiles", "list"]) == 0
    err = capfd.readouterr().err
    assert not THIRD_PARTY.search(err), err
    assert not list(tmp_path.glob("devicefit-*.log"))  # nothing kept after a success


def test_a_failure_shows_the_end_of_the_native_log_and_keeps_it(monkeypatch, capfd, tmp_path):
    monkeypatch.setattr(profiles_command, "_list", _noisy(
        b"F0000 check failed: the native reason\n", RuntimeFailure("it went wrong")))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["profiles", "list"]) == 1  # the model failed in the runtime
    err = capfd.readouterr().err
    assert "devicefit: error: it went wrong" in err
    assert "F0000 check failed: the native reason" in err
    (kept,) = tmp_path.glob("devicefit-*.log")
    assert str(kept) in err and "the native reason" in kept.read_text()


def test_bad_input_is_one_line_without_the_native_log(monkeypatch, capfd, tmp_path):
    """A missing file after TensorFlow started: its start-up lines are not the cause."""
    monkeypatch.setattr(profiles_command, "_list", _noisy(
        b"I0000 oneDNN custom operations are on\n", InputError("data.npz: not found")))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["profiles", "list"]) == 2
    assert capfd.readouterr().err == "devicefit: error: data.npz: not found\n"
    assert not list(tmp_path.glob("devicefit-*.log"))


def test_log_option_keeps_the_native_lines(monkeypatch, capfd, tmp_path):
    monkeypatch.setattr(profiles_command, "_list", _noisy(b"absl says hello\n", None))
    log = tmp_path / "native.log"
    assert main(["--log", str(log), "profiles", "list"]) == 0
    assert "absl says hello" not in capfd.readouterr().err
    text = log.read_text()
    assert "absl says hello" in text and "a third-party UserWarning" in text


def test_native_log_leaves_a_replaced_stderr_alone(capsys):
    """Under pytest's capsys sys.stderr is not fd 2: only the descriptor moves."""
    before = sys.stderr
    with native_log() as log:
        print("mine", file=sys.stderr)
        assert sys.stderr is before
    assert "mine" in capsys.readouterr().err and not log.path.exists()


# --------------------------------------------------------------------------- matplotlib
def _without_matplotlib(code: str) -> subprocess.CompletedProcess:
    prelude = "import sys\nsys.modules['matplotlib'] = None  # importing it now fails\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_plot_without_matplotlib_is_one_clear_message(tmp_path, model_zoo, monkeypatch,
                                                      capsys):
    # In this process: the import fails as in a light install (a None entry in sys.modules
    # makes every import of the package raise ImportError, whatever was imported before).
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["simulate", str(model_zoo("chain_int8")), "--profile", "esp32-s3", "--plot",
                 str(tmp_path / "m.png")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines() == [
        "devicefit: error: --plot needs matplotlib, which the light install leaves out: "
        f"{install_command('plot')} (or use --html)"]
    assert not (tmp_path / "m.png").exists()


def test_the_light_install_needs_no_matplotlib(tmp_path, model_zoo):
    """simulate, check and the HTML report work with matplotlib unimportable."""
    model = model_zoo("chain_int8")
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"version: 1\nmodels:\n  - name: chain\n    path: {model}\n"
                       "    profiles: [esp32-s3]\n")
    done = _without_matplotlib(
        "from devicefit.sdk.cli import main\n"
        f"assert main(['simulate', {str(model)!r}, '--profile', 'esp32-s3', "
        f"'--html', {str(tmp_path / 'r.html')!r}]) == 0\n"
        f"assert main(['check', {str(project)!r}]) == 0\n"
        "assert 'matplotlib' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.html").stat().st_size > 0


def test_with_matplotlib_plot_writes_a_png(tmp_path, model_zoo):
    out = tmp_path / "m.png"
    assert main(["simulate", str(model_zoo("chain_int8")), "--profile", "esp32-s3",
                 "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- API
def test_every_api_entry_point_takes_a_profile_name(model_zoo):
    from devicefit.sdk import optimize_model_bytes, simulate
    from devicefit.sdk.bench import bench
    from devicefit.simulator.errors import UsageError

    model = model_zoo("chain_int8")
    assert simulate(model, "stm32l4r5-cortex-m4").profile.name == "stm32l4r5-cortex-m4"
    _, report = optimize_model_bytes(model.read_bytes(), "stm32l4r5-cortex-m4", verify=False)
    assert report.head_after_bytes > 0
    # bench resolves the name before it needs a phone: the next problem is the binary.
    with pytest.raises(UsageError, match="--benchmark-binary"):
        bench(model, "android-arm64-cpu", benchmark_binary=None)


# --------------------------------------------------------------------------- real TensorFlow
@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict[str, Path]:
    from examples.digits import cached_cnn, load_digits

    paths = load_digits().save_npz(tmp_path_factory.mktemp("digits"))
    return {"model": cached_cnn(TESTS / "artifacts" / "convert"), **paths}


def _cli(*argv: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: its own process, stderr a pipe."""
    return subprocess.run([sys.executable, "-m", "devicefit.sdk.cli", *argv], capture_output=True,
                          text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_convert_and_fit_print_no_third_party_line(digits, tmp_path):
    # Off a terminal convert names a stage still running after 2 s (the README tour's
    # recorded run shows those lines, tests/docs_models.py); --quiet silences that. The
    # native log goes to a file either way, so one quiet run holds both claims.
    convert = _cli("--quiet", "convert", str(digits["model"]), "--profile",
                   "stm32l4r5-cortex-m4", "--calibration", str(digits["train"]), "-o",
                   str(tmp_path / "c.tflite"))
    assert convert.returncode == 0, convert.stderr
    assert "devicefit convert:" not in convert.stderr, convert.stderr
    fit = _cli("fit", str(digits["model"]), "--profile", "stm32l4r5-cortex-m4", "--train",
               str(digits["train"]), "--eval", str(digits["test"]), "--max-trials", "1",
               "--epochs", "1", "-o", str(tmp_path / "f.tflite"))
    assert fit.returncode in (0, 1), fit.stderr
    for done in (convert, fit):
        lines = (done.stdout + done.stderr).splitlines()
        assert not [ln for ln in lines if THIRD_PARTY.search(ln)], done.stderr


# --------------------------------------------------------------------------- progress, JUnit
def test_quiet_means_no_progress_callbacks():
    from devicefit.sdk.commands.convert import _progress

    with _progress(no_color=True, quiet=True) as callbacks:
        assert callbacks == (None, None)
    with _progress(no_color=True) as (update, stage):  # off a terminal: plain lines
        assert callable(update) and callable(stage)


def test_progress_draws_on_a_terminal_only():
    import io

    from rich.console import Console

    from devicefit.sdk.console import Steps, count, progress, step

    screen = io.StringIO()
    steps = Steps(Console(file=screen, force_terminal=True, width=80))
    steps.step("loading the model")
    steps.count("measuring", 1, 4)
    steps.close()
    assert "loading the model" in screen.getvalue() and "1/4" in screen.getvalue()
    # Off a terminal (pytest captures stderr) and outside a command: nothing, no error.
    with progress() as quiet:
        step("a step")
        count("a count", 1, 2)
        assert quiet.console is None
    step("outside any command")


#: What ``make demo`` does with its consoles: results on stdout while the progress line
#: of its steps is drawn on stderr; ``done()`` (argv[1] "done") ends the steps first.
_DEMO_LIKE = """
import sys
from devicefit.sdk.console import count, done, make_console, progress, step, table
with progress():
    console = make_console()
    console.print("[bold]1. Train[/bold] a model")
    step("training")
    console.print("   trained: 1,234 parameters")
    for i in range(3):
        count("converting", i, 3)
    if sys.argv[1] == "done":
        done()
    console.print(table("Verdicts", ["profile", "verdict"], [["a", "PASS"]]))
    print("a plain print")
    console.print("finished")
"""
_DEMO_SCREEN = ["1. Train a model", "   trained: 1,234 parameters", "Verdicts",
                "profile ┃ verdict", "━━━━━━━━╇━━━━━━━━", "a       │ PASS", "a plain print",
                "finished"]


@pytest.mark.parametrize("ending", ["done", "open"])
def test_results_printed_under_a_progress_line_end_up_whole_and_alone(tmp_path, ending):
    """A stdout console printed over stderr's progress line (``…0:00:38   build/…``) and the
    line's last state (a stuck ``6/7``) stayed above the table (issue 46)."""
    script = tmp_path / "demo_like.py"
    script.write_text(_DEMO_LIKE)
    shown = on_a_pty([sys.executable, str(script), ending], columns=80)
    assert "training" in shown and "2/3" in shown  # the line was drawn...
    assert [line for line in screen(shown) if line] == _DEMO_SCREEN  # ...and is gone


def test_a_redirected_stdout_keeps_what_is_printed_under_a_progress_line(tmp_path):
    """rich moved print() above the line on stderr's terminal: out of the file."""
    script = tmp_path / "demo_like.py"
    script.write_text(_DEMO_LIKE)
    with open(tmp_path / "out.txt", "wb") as out:
        shown = on_a_pty([sys.executable, str(script), "open"], columns=80, stdout=out)
    assert "converting" in shown and "a plain print" not in shown
    kept = (tmp_path / "out.txt").read_text().splitlines()
    assert [line.rstrip() for line in kept] == [line.rstrip() for line in _DEMO_SCREEN]


def test_junit_testsuites_say_when_and_where(tmp_path, model_zoo):
    import socket
    import xml.etree.ElementTree as ET
    from datetime import datetime, timezone

    from devicefit.sdk.check.junit_meta import testsuite_attributes

    now = datetime(2026, 11, 30, 12, 0, 10, tzinfo=timezone.utc)
    assert testsuite_attributes(10.0, now) == {"timestamp": "2026-11-30T12:00:00",
                                               "hostname": socket.gethostname()}
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"version: 1\nmodels:\n  - name: chain\n    path: "
                       f"{model_zoo('chain_int8')}\n    profiles: [esp32-s3, android-arm64-cpu]\n")
    assert main(["check", str(project), "--junit", str(tmp_path / "j.xml")]) == 0
    suites = ET.parse(tmp_path / "j.xml").getroot().findall("testsuite")
    assert len(suites) == 2
    for suite in suites:
        assert datetime.fromisoformat(suite.get("timestamp")) <= datetime.now(timezone.utc) \
            .replace(tzinfo=None)
        assert suite.get("hostname") == socket.gethostname()


def test_log_option_never_appends_to_an_input(tmp_path, model_zoo, capsys):
    model = tmp_path / "m.tflite"
    model.write_bytes(model_zoo("chain_int8").read_bytes())
    before = model.read_bytes()
    assert main(["--log", str(model), "profiles", "list"]) == 2
    assert "refusing to append" in capsys.readouterr().err
    assert model.read_bytes() == before
    assert main(["--log", str(tmp_path / "no" / "such" / "dir.log"), "profiles", "list"]) == 2
    assert "cannot write it" in capsys.readouterr().err


def test_a_closed_stderr_is_no_crash(tmp_path):
    done = subprocess.run([sys.executable, "-m", "devicefit.sdk.cli", "profiles", "list"],
                          stderr=subprocess.DEVNULL, capture_output=False, stdout=subprocess.PIPE,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
                          preexec_fn=lambda: os.close(2))
    assert done.returncode == 0 and b"stm32l4r5-cortex-m4" in done.stdout


def test_log_tail_leaves_out_python_stacks(tmp_path):
    from devicefit.sdk.console import log_tail

    log = tmp_path / "converter.log"
    log.write_text("I0000 port.cc:153] oneDNN custom operations are on\n"
                   "Traceback (most recent call last):\n"
                   '  File "tfwork.py", line 3, in run\n'
                   "    convert()\n"
                   "ValueError: bad\n"
                   "error: 'tf.ResizeBicubic' op is neither a custom op nor a flex op\n"
                   "Fatal Python error: Segmentation fault\n\n"
                   "Current thread 0x00007f (most recent call first):\n"
                   '  File "keras.py", line 9 in call\n')
    assert log_tail(log) == ["I0000 port.cc:153] oneDNN custom operations are on",
                             "error: 'tf.ResizeBicubic' op is neither a custom op nor a flex op"]


def test_a_report_to_a_pipe_is_what_rich_prints_there(capsys, monkeypatch):
    """print_report off a terminal writes without rich (a static simulate's start-up): the
    same characters rich's console writes to a file (tabs expanded, no trailing padding)."""
    import io

    from rich.text import Text

    from devicefit.sdk.console import print_report
    from devicefit.sdk.terminal import SafeConsole

    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(variable, raising=False)
    for text in ("Model\tm.tflite  \n  arena  1,024 B  \n\nVerdict: PASS\n", "x\t\ty", "  \n"):
        print_report(text)
        written = io.StringIO()
        SafeConsole(file=written, highlight=False, width=1000, folds=False).print(
            Text(text), end="", soft_wrap=True)
        assert capsys.readouterr().out == written.getvalue()


def test_a_written_view_is_said_on_stderr_and_the_json_stays_whole(tmp_path, capsys):
    """``--html``/``--csv`` used to write silently (only check said "wrote"); the line goes
    to stderr, so a report on stdout (here JSON) stays what a pipe reads."""
    import json

    from devicefit.sdk.cli import main
    from tests.zoo import model_path

    page, rows = tmp_path / "r.html", tmp_path / "r.csv"
    assert main(["simulate", str(model_path("residual_int8")), "--profile",
                 "stm32l4r5-cortex-m4", "--json", "--html", str(page), "--csv", str(rows)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] == "pass"
    assert err.splitlines() == [f"wrote {page}", f"wrote {rows}"]
    assert page.stat().st_size > 0 and rows.stat().st_size > 0
