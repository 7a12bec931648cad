"""The ``devicefit`` command: parse arguments, call the library, map errors to exit codes.

Each subcommand lives in ``sdk/commands/<name>.py`` and exposes ``register(subparsers)``;
they are discovered here, so adding a command is one new module. Command modules import
heavy libraries (TensorFlow, runtimes) inside their handlers, never at module level, so
``devicefit --help`` and ``check`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from sdk import commands
from simulator.errors import DevicefitError
from simulator.escape import clean
from simulator.limits import DEFAULT_MAX_OPS, ENV_MAX_OPS, TENSORS_PER_OP
from simulator.signals import (
    Terminated,
    exit_outside_work,
    ignore_during_shutdown,
    terminate_as_interrupt,
)

#: argparse's own exit code for usage errors, kept for the missing-command case too.
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on usage errors already; keep the message to one line + hint."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"devicefit: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="devicefit",
        description="Know before flashing: will this model fit the device (flash, RAM, latency)?",
        epilog="example: devicefit simulate model.tflite --profile stm32l4r5-cortex-m4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--profiles-dir", action="append", default=[], metavar="DIR",
                        help="extra folder of device profiles (repeatable; also $DEVICEFIT_PROFILES)")
    parser.add_argument("--no-color", action="store_true", help="plain output, no colours")
    parser.add_argument("--max-ops", type=_positive_int, default=None, metavar="N",
                        help="refuse models with more operators than N, in the file or as "
                             f"executed through control flow (default {DEFAULT_MAX_OPS:,}; "
                             f"also ${ENV_MAX_OPS}); tensors: {TENSORS_PER_OP} per operator")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").register(sub)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Through the environment so that worker processes (check --jobs) obey it too.
    saved = os.environ.get(ENV_MAX_OPS)
    if args.max_ops is not None:
        os.environ[ENV_MAX_OPS] = str(args.max_ops)
    try:
        return _run(args)
    finally:
        if saved is None:
            os.environ.pop(ENV_MAX_OPS, None)
        else:
            os.environ[ENV_MAX_OPS] = saved


def _run(args: argparse.Namespace) -> int:
    with terminate_as_interrupt():
        try:
            return int(args.handler(args))
        except DevicefitError as exc:
            # Messages quote file contents (names, YAML values): never raw control characters.
            print(f"devicefit: error: {clean(exc)}", file=sys.stderr)
            return exc.exit_code
        except Terminated as exc:
            # Outputs are written whole or not at all (write_atomic): none is half there.
            print(f"devicefit: stopped by {exc.name}", file=sys.stderr)
            return 128 + exc.signum
        except KeyboardInterrupt:
            print("devicefit: interrupted", file=sys.stderr)
            return 130


def run() -> None:
    """Console-script entry point."""
    exit_outside_work()
    code = main()
    ignore_during_shutdown()
    sys.exit(code)


if __name__ == "__main__":
    run()
