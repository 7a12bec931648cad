"""CLI conventions shared by every command: exit codes, one-line errors, light start-up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devicefit.sdk.cli import build_parser, main


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
    """`devicefit --help` must stay fast: importing every command module imports no TF."""
    code = "import sys; from devicefit.sdk.cli import build_parser; build_parser(); " \
           "bad = [m for m in ('tensorflow', 'keras') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_resolves_lazily_without_tensorflow():
    code = ("import sys, sdk; [getattr(sdk, n) for n in sdk.__all__]; "
            "import devicefit.sdk.convert, sdk.check, sdk.bench, sdk.fit; "
            "print([m for m in ('tensorflow', 'keras') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from devicefit import sdk
    from devicefit.sdk.convert import convert

    assert callable(convert) and callable(sdk.simulate) and callable(sdk.plan_batch)
