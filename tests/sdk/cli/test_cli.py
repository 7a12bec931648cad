"""CLI conventions shared by every command: exit codes, one-line errors, light start-up."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

from devicefit.sdk import commands
from devicefit.sdk.cli import build_parser, main
from devicefit.sdk.commands import COMMANDS
from devicefit.simulator.report.views import FORMATS
from tests.tflite_builder import dense_chain_model


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: devicefit" in capsys.readouterr().err


def test_unknown_command_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_every_command_has_help_with_an_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices, "no subcommands registered"
    for name, command in sub.choices.items():
        assert "example:" in (command.epilog or ""), f"'devicefit {name} --help' lacks an example"


def test_console_script_starts_without_tensorflow():
    """Importing every command module (build_parser() builds them all) imports no TF."""
    code = "import sys; from devicefit.sdk.cli import build_parser; build_parser(); " \
           "bad = [m for m in ('tensorflow', 'keras') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


#: Runs the console script's entry point on argv (JSON) and writes the modules it imported,
#: whatever way it ends, to the file named last.
_IMPORTS = """
import json, sys
argv, out = json.loads(sys.argv[1]), sys.argv[2]
sys.argv = ["devicefit", *argv]
try:
    from devicefit.__main__ import run
    run()
except SystemExit:
    pass
finally:
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
"""

#: Libraries a cheap command line promises not to import (what made the start-up ~0.6 s).
HEAVY = ("numpy", "rich", "yaml", "optuna", "tensorflow", "keras", "matplotlib",
         "importlib.metadata", "ai_edge_litert")


def _imported(argv: list[str], tmp_path) -> set[str]:
    out = tmp_path / "modules.json"
    subprocess.run([sys.executable, "-c", _IMPORTS, json.dumps(argv), str(out)],
                   capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path)
    return set(json.loads(out.read_text()))


def test_version_imports_nothing_but_its_entry_point(tmp_path):
    """A bare --version is answered before the parser: not even argparse is imported."""
    modules = _imported(["--version"], tmp_path)
    assert {m for m in modules if m.startswith("devicefit")} == {
        "devicefit", "devicefit.__main__", "devicefit.sdk", "devicefit.sdk.entry"}
    assert "argparse" not in modules and "typing" not in modules


@pytest.mark.parametrize("argv", [["--help"], ["simulat"], [], ["-q", "--version"]])
def test_help_and_a_mistyped_command_import_no_command(argv, tmp_path):
    modules = _imported(argv, tmp_path)
    assert "devicefit.sdk.cli" in modules  # the parser answered
    assert not [m for m in modules if m.startswith("devicefit.sdk.commands.")]
    assert not [m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY]


def test_a_static_simulate_imports_its_own_command_and_view_alone(tmp_path):
    """simulate's text report to a pipe: no other command, no other view, no rich."""
    model = tmp_path / "m.tflite"
    model.write_bytes(dense_chain_model(layers=2))
    modules = _imported(["simulate", str(model), "--profile", "stm32l4r5-cortex-m4",
                         "--no-probe"], tmp_path)
    assert [m for m in modules if m.startswith("devicefit.sdk.commands.")] == \
        ["devicefit.sdk.commands.simulate"]
    views = {m.rpartition(".")[2] for m in modules
             if m.startswith("devicefit.simulator.report.views.")}
    assert "text" in views and not views & (set(FORMATS) - {"text"})
    assert not [m for m in modules if m.split(".")[0] in ("rich", "optuna", "tensorflow",
                                                          "matplotlib")]


def test_the_command_table_names_every_command_module():
    """sdk/commands' table (what --help lists without importing them) and its modules
    agree: a new module needs its line, or it would never be reached."""
    modules = {info.name for info in pkgutil.iter_modules(commands.__path__)}
    assert modules == {name.replace("-", "_") for name in COMMANDS}
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)
    assert [a.help for a in sub._choices_actions] == list(COMMANDS.values())


def test_public_api_resolves_lazily_without_tensorflow():
    code = ("import sys, sdk; [getattr(sdk, n) for n in sdk.__all__]; "
            "import devicefit.sdk.convert, sdk.check, sdk.bench, sdk.fit; "
            "print([m for m in ('tensorflow', 'keras') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from devicefit import sdk
    from devicefit.sdk.convert import convert

    assert callable(convert) and callable(sdk.simulate) and callable(sdk.plan_batch)
