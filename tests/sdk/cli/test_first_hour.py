"""What a newcomer gets wrong in the first hour gets an answer: a misspelt command, flag,
choice or profile is named with what was meant, the trained model passed where a .tflite
belongs says to convert it, global flags work after the command, a missing profile folder
is an error, ``--version`` answers, help examples paste at 80 columns, and the demo's hint
runs as printed. All in-process except the runs of a printed command."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from devicefit import __version__
from devicefit.sdk.cli import COMMAND_LINE, _commands, build_parser, main
from devicefit.simulator.errors import MissingExtra, did_you_mean, install_command, missing_extra
from tests.paths import ROOT
from tests.tflite_builder import conv_time_model


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "conv.tflite"
    path.write_bytes(conv_time_model())
    return path


def _usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.strip()


def test_a_misspelt_command_is_named(capsys):
    assert _usage_error(["simualte"], capsys) == (
        "devicefit: error: unknown command 'simualte'; did you mean 'simulate'? "
        "(see 'devicefit --help')")
    assert "did you mean 'list'?" in _usage_error(["profiles", "lst"], capsys)


def test_a_misspelt_flag_is_named(model, capsys):
    assert _usage_error(["simulate", str(model), "--profile", "esp32-s3", "--jsn"], capsys) == (
        "devicefit: error: unknown flag --jsn; did you mean '--json'? "
        "(see 'devicefit simulate --help')")
    assert "unknown flag --jsn; did you mean '--json'?" in _usage_error(
        ["profiles", "list", "--jsn"], capsys)


def test_a_misspelt_required_flag_is_the_typo_not_a_missing_flag(model, capsys):
    """argparse alone said 'the following arguments are required: --profile'."""
    err = _usage_error(["simulate", str(model), "--profle", "esp32-s3"], capsys)
    assert "unknown flag --profle; did you mean '--profile'?" in err and "required" not in err


def test_a_misspelt_choice_is_named(model, capsys):
    err = _usage_error(["simulate", str(model), "--profile", "esp32-s3", "--kernels", "cmsis"],
                       capsys)
    assert "invalid choice: 'cmsis'; did you mean 'cmsis-nn'?" in err


def test_part_of_a_profile_name_lists_the_profiles_it_names(model, capsys):
    assert main(["simulate", str(model), "--profile", "coral"]) == 2
    assert "unknown profile 'coral'; did you mean 'coral-edgetpu'?" in capsys.readouterr().err
    assert main(["simulate", str(model), "--profile", "ethos-u55"]) == 2
    assert "did you mean one of 'ethos-u55-128', 'ethos-u55-256'?" in capsys.readouterr().err


def test_did_you_mean_prefers_names_containing_the_word():
    names = ["coral-edgetpu", "esp32-s3", "stm32h743-cortex-m7", "stm32l4r5-cortex-m4"]
    assert did_you_mean("stm32", names) == \
        "; did you mean one of 'stm32h743-cortex-m7', 'stm32l4r5-cortex-m4'?"
    assert did_you_mean("esp32s3", names) == "; did you mean 'esp32-s3'?"
    assert did_you_mean("zz", names) == ""


def _profile(folder: Path, name: str) -> Path:
    folder.mkdir()
    (folder / f"{name}.yaml").write_text(f"name: {name}\nextends: esp32-s3\n")
    return folder


def test_global_flags_work_after_the_command(tmp_path, model, capsys):
    first, second = _profile(tmp_path / "a", "board-a"), _profile(tmp_path / "b", "board-b")
    assert main(["--profiles-dir", str(first), "profiles", "list", "--json", "-q",
                 "--no-color", "--profiles-dir", str(second)]) == 0
    names = {p["name"] for p in json.loads(capsys.readouterr().out)}
    assert {"board-a", "board-b", "esp32-s3"} <= names  # folders before and after add up
    assert main(["simulate", str(model), "--profile", "board-b", "--no-probe", "--no-color",
                 "--profiles-dir", str(second)]) == 0
    assert "\x1b[" not in capsys.readouterr().out


def test_a_missing_profiles_folder_is_an_error(tmp_path, monkeypatch, capsys):
    assert main(["--profiles-dir", str(tmp_path / "nope"), "profiles", "list"]) == 2
    assert capsys.readouterr().err == \
        f"devicefit: error: --profiles-dir {tmp_path / 'nope'}: no such folder\n"
    (tmp_path / "file.yaml").write_text("")
    assert main(["profiles", "list", "--profiles-dir", str(tmp_path / "file.yaml")]) == 2
    assert "file.yaml: not a folder" in capsys.readouterr().err
    monkeypatch.setenv("DEVICEFIT_PROFILES", str(tmp_path / "gone"))
    assert main(["profiles", "list"]) == 2
    assert f"$DEVICEFIT_PROFILES {tmp_path / 'gone'}: no such folder" in capsys.readouterr().err


def _keras_file(path: Path) -> Path:
    """A Keras 3 archive's layout (Keras itself would start TensorFlow to write one; the
    reader looks only at the name and the first bytes)."""
    with zipfile.ZipFile(path, "w") as z:
        for name in ("metadata.json", "config.json", "model.weights.h5"):
            z.writestr(name, "{}")
    return path


def _saved_model(folder: Path) -> Path:
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01\x12\x00")
    return folder


@pytest.mark.parametrize(("make", "says"), [
    (lambda d: _keras_file(d / "kws.keras"),
     "kws.keras: a Keras model (.keras), not a .tflite: convert it first: devicefit convert "
     "{path} --profile NAME -o kws.tflite"),
    (lambda d: (d / "kws.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64)) and d / "kws.h5",
     "kws.h5: a Keras model in HDF5 (.h5), not a .tflite: convert it first: devicefit convert "
     "{path} --profile NAME -o kws.tflite"),
    (lambda d: _saved_model(d / "kws_saved"),
     "kws_saved: a TensorFlow SavedModel folder, not a .tflite: convert it first: devicefit "
     "convert {path} --profile NAME -o kws_saved.tflite"),
    (lambda d: _saved_model(d / "sm") / "saved_model.pb",
     "saved_model.pb: the graph of a TensorFlow SavedModel, not a .tflite: convert its "
     "folder first: devicefit convert {parent} --profile NAME -o sm.tflite"),
    (lambda d: (d / "kws.onnx").write_bytes(b"\x08\x07\x12\x07pytorch") and d / "kws.onnx",
     "kws.onnx: an ONNX model, not a .tflite; devicefit convert reads a SavedModel folder, "
     ".keras or .h5: turn it into a SavedModel (for example with onnx2tf), then: devicefit "
     "convert FOLDER --profile NAME -o model.tflite"),
    (lambda d: (d / "frozen.pb").write_bytes(b"\n\x0c\n\x01x\x12\x07") and d / "frozen.pb",
     "frozen.pb: a TensorFlow graph (.pb), not a .tflite; devicefit convert reads a "
     "SavedModel folder, .keras or .h5: save it as a SavedModel, then: devicefit convert "
     "FOLDER --profile NAME -o model.tflite"),
], ids=["keras", "h5", "savedmodel", "saved_model.pb", "onnx", "graphdef"])
def test_a_model_that_is_not_a_tflite_says_what_it_is(tmp_path, capsys, make, says):
    path = make(tmp_path)
    assert main(["simulate", str(path), "--profile", "esp32-s3"]) == 2
    expected = says.format(path=shlex.quote(str(path)), parent=path.parent)
    assert capsys.readouterr().err.strip().endswith(expected)


def test_check_names_a_keras_file_in_the_project(tmp_path, capsys):
    _keras_file(tmp_path / "kws.keras")
    (tmp_path / "devicefit.yaml").write_text("models: [{path: kws.keras, profiles: [esp32-s3]}]\n")
    assert main(["check", str(tmp_path / "devicefit.yaml")]) == 2
    assert "a Keras model (.keras), not a .tflite: convert it first: devicefit convert" in \
        capsys.readouterr().err


def test_an_import_of_an_optional_module_names_its_extra():
    """What the CLI and the converter's child map a failed import to; a module of devicefit
    itself or a base dependency is a bug and stays one (tests/sdk/cli/test_light_install.py
    runs the commands where the extras really are missing)."""
    found = missing_extra(ModuleNotFoundError("No module named 'keras'", name="keras"),
                          "devicefit fit")
    assert isinstance(found, MissingExtra) and str(found) == (
        "devicefit fit needs TensorFlow, which the light install leaves out: "
        + install_command("convert"))
    assert missing_extra(ModuleNotFoundError(name="ethosu.vela"), "x").extra == "ethos-u"
    for name in ("numpy", "devicefit.sdk.nothing", None):
        assert missing_extra(ModuleNotFoundError(name=name), "x") is None
    assert missing_extra(ValueError("keras"), "x") is None


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert (exc.value.code, capsys.readouterr().out) == (0, f"devicefit {__version__}\n")


def _examples(text: str) -> list[str]:
    return [COMMAND_LINE.sub("devicefit ", line.strip(), count=1)
            for line in text.splitlines() if COMMAND_LINE.match(line.strip())]


def test_the_install_hint_names_where_devicefit_came_from(monkeypatch):
    """devicefit is on no package index: the hint names the folder, wheel or URL pip
    installed it from (tests/sdk/cli/test_light_install.py: a wheel), or, never installed,
    this checkout (no distribution metadata: a plain clone on PYTHONPATH)."""
    def not_installed(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    assert install_command("study") == f"pip install '{ROOT}[study]'"


def test_help_examples_paste_at_80_columns(monkeypatch):
    """Every command's --help at 80 columns: no line is wider, and each example wraps with
    ' \\' so that the lines joined are the whole command, which parses."""
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    for command in [parser, *_commands(parser)]:
        rendered = command.format_help()
        wide = [line for line in rendered.splitlines() if len(line) > 80]
        assert not wide, f"{command.prog} --help: {wide}"
        formatter = command._get_formatter()  # the epilog as --help lays it out
        formatter.add_text(command.epilog)
        epilog = formatter.format_help()
        assert epilog.strip() in rendered
        pasted = [" ".join(line.split()) for line in epilog.replace(" \\\n", " ").splitlines()]
        assert _examples("\n".join(pasted)) == _examples(command.epilog), \
            f"{command.prog} --help cuts an example:\n{epilog}"
        for example in _examples(command.epilog):
            try:
                build_parser().parse_args(shlex.split(example)[1:])
            except SystemExit:
                pytest.fail(f"{command.prog} --help: the example does not parse: {example}")


def test_help_examples_are_one_per_line():
    """A command in the middle of prose cannot be pasted; each example is its own line."""
    parser = build_parser()
    for command in [parser, *_commands(parser)]:
        for line in command.epilog.splitlines():
            assert "devicefit " not in line or COMMAND_LINE.match(line.strip()), \
                f"{command.prog}: {line}"


def test_the_demo_hint_runs_as_printed(monkeypatch):
    """make demo runs in .venv without activating it: its hint names a devicefit this shell
    runs (here: not on PATH), and a bare 'devicefit' only where PATH has that one."""
    from examples.demo import devicefit_command

    bin_dir = str(Path(sys.executable).parent)
    bare = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if d != bin_dir)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + bare)
    assert devicefit_command() == "devicefit"
    monkeypatch.setenv("PATH", bare)
    command = devicefit_command()
    assert command != "devicefit"
    done = subprocess.run([*shlex.split(command), "--version"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.startswith("devicefit "), done.stderr


def test_a_postgres_study_without_its_driver_names_the_extra(tmp_path, monkeypatch, capsys):
    """The dev install has psycopg2; here importing it fails as where the 'distributed'
    extra is not installed (None in sys.modules stops the import)."""
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    assert main(["fit", "--storage", "postgresql://fit@localhost/fit", "--study", "s",
                 "--export", "-o", str(tmp_path / "out.tflite")]) == 2
    assert capsys.readouterr().err == (
        "devicefit: error: --storage postgresql://fit@localhost/fit needs psycopg2, which the "
        f"light install leaves out: {install_command('distributed')}\n")


def test_a_bare_postgresql_url_uses_the_driver_of_the_extra(tmp_path, capsys):
    """SQLAlchemy 2.1 reads postgresql:// as psycopg 3; the 'distributed' extra installs
    psycopg2. With it, the URL of the help reaches the server (none listens on port 1)."""
    assert main(["fit", "--storage", "postgresql://fit@127.0.0.1:1/fit", "--study", "s",
                 "--export", "-o", str(tmp_path / "out.tflite")]) == 2
    err = capsys.readouterr().err
    assert "cannot open the study" in err and "Connection refused" in err, err
    assert "No module named" not in err and len(err.splitlines()) == 1


def test_the_converter_process_names_the_extra_it_lacks(tmp_path, monkeypatch, capsys):
    """Where the parent finds TensorFlow but the converter's child cannot import it (a
    broken install): the child's ImportError comes back as the same one line, not as an
    'internal error'. A sitecustomize on the child's PYTHONPATH hides tensorflow there."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['tensorflow'] = None\n")
    monkeypatch.setenv("PYTHONPATH", str(hide))
    model = _keras_file(tmp_path / "kws.keras")
    assert main(["convert", str(model), "--profile", "esp32-s3", "--calibration", "random",
                 "-o", str(tmp_path / "kws.tflite")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "devicefit: error: the converter needs TensorFlow, which the light install leaves "
        f"out: {install_command('convert')}")


def test_the_demo_table_prints_sizes_in_their_budgets_units():
    """The demo's own table follows the views' number style: a 50MB flash budget in MB, a
    256 KiB arena in KiB (not 47.7 MiB and 0.2 MiB)."""
    from devicefit.simulator.report.report import BudgetCheck
    from devicefit.simulator.types import BudgetName, Unit
    from examples.demo import _size_of

    def budget(limit: int) -> BudgetCheck:
        return BudgetCheck(BudgetName.FLASH, limit, 0, True, Unit.BYTES)

    assert _size_of(31_250_000, budget(50_000_000)) == "31.2 MB / 50.0 MB"
    assert _size_of(100_000, budget(256 * 1024)) == "97.7 KiB / 256.0 KiB"
