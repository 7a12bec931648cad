"""The ``devicefit`` command: parse arguments, call the library, map errors to exit codes.

Each subcommand lives in ``sdk/commands/<name>.py`` and exposes ``register(subparsers)``;
``sdk/commands``' table names them with their line in ``--help``. A command's module is
imported only when that command runs (or its help is asked for), and imports heavy
libraries (TensorFlow, runtimes) inside its handler: ``devicefit --help`` and a mistyped
command import none of them, ``simulate`` only its own.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit import __version__
from devicefit.sdk import commands
from devicefit.sdk.commands import COMMANDS
from devicefit.simulator.errors import (
    DevicefitError,
    InputError,
    UsageError,
    did_you_mean,
    missing_extra,
    require_extra,
)
from devicefit.simulator.infra.escape import clean
from devicefit.simulator.infra.limits import DEFAULT_MAX_OPS, ENV_MAX_OPS, TENSORS_PER_OP
from devicefit.simulator.infra.signals import (
    Terminated,
    exception_for,
    exit_outside_work,
    ignore_during_shutdown,
    stopped_message,
    taken,
    terminate_as_interrupt,
)

if TYPE_CHECKING:
    from devicefit.sdk.console import NativeLog

#: argparse's own exit code for usage errors, kept for the missing-command case too.
EXIT_USAGE = 2


class HelpFormatter(argparse.HelpFormatter):
    """argparse's layout at the terminal's width (``COLUMNS``), readable at 80 columns.

    argparse's own wrapping breaks at hyphens, so ``--benchmark-binary`` and
    ``android-arm64-cpu`` were split across lines; here a line breaks only between words, a
    flag stays with its value (``--profile esp32-s3``), descriptions keep their paragraphs
    and a wrapped example continues indented under its start.
    """

    def _metavar_formatter(self, action: argparse.Action, default_metavar: str
                           ) -> Callable[[int], tuple[str, ...]]:
        # ``{reference,cmsis-nn,...}`` is one unbreakable word: name it, list it in the help.
        if not _long_choices(action):
            return super()._metavar_formatter(action, default_metavar)
        return lambda size: (default_metavar,) * size if isinstance(size, int) else \
            (default_metavar,)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text and _long_choices(action):
            assert action.choices is not None  # _long_choices checked it
            text += f" (one of: {', '.join(map(str, action.choices))})"
        return text

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(" ".join(text.split()), width, "", "")

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for paragraph in text.splitlines():
            lead = indent + paragraph[:len(paragraph) - len(paragraph.lstrip())]
            if COMMAND_LINE.match(paragraph.strip()):
                # A command line wraps with ' \' so that it can be pasted into a shell.
                wrapped = _wrap(paragraph.strip(), width - 2, lead, lead + "    ")
                lines += [line + " \\" for line in wrapped[:-1]] + wrapped[-1:]
            else:
                lines += _wrap(paragraph.strip(), width, lead, lead) or [""]
        return "\n".join(lines)


#: A paragraph of a description or epilog that is a command line (one example per line).
COMMAND_LINE = re.compile(r"(example: )?devicefit ")


#: Choices longer than this (joined) show as a name in usage lines, listed in the help.
LONG_CHOICES = 30


def _long_choices(action: argparse.Action) -> bool:
    return (action.metavar is None and action.choices is not None and bool(action.option_strings)
            and len(",".join(map(str, action.choices))) > LONG_CHOICES)


#: A flag followed by its value, joined so that a line never breaks between them.
_FLAG_VALUE = re.compile(r"(?<!\S)(-{1,2}[A-Za-z][\w-]*) (?=[^\s-])")
_KEEP = "\x00"


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    joined = _FLAG_VALUE.sub(lambda m: m.group(1) + _KEEP, text).replace(
        "devicefit ", "devicefit" + _KEEP)
    return [line.replace(_KEEP, " ") for line in textwrap.wrap(
        joined, max(width, 20), initial_indent=first, subsequent_indent=rest,
        break_on_hyphens=False, break_long_words=False)]


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on usage errors already; keep the message to one line + hint,
    and name what was meant: a misspelt command or choice, an unknown flag (rather than the
    required one it was meant to be). Every command's help uses :class:`HelpFormatter`.

    The suggestions are devicefit's own (difflib), not argparse's (3.14+), so that every
    supported Python says the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["formatter_class"] = HelpFormatter
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None
                         ) -> tuple[Any, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if unknown := self._unknown_flags(extras):
            self.error(self._unknown_message(unknown))
        return namespace, extras

    def _check_value(self, action: argparse.Action, value: object) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        hint = did_you_mean(value, [str(c) for c in choices]) if isinstance(value, str) else ""
        if isinstance(action, argparse._SubParsersAction):
            raise argparse.ArgumentError(None, f"unknown command {value!r}{hint}")
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from "
                                             f"{', '.join(map(repr, choices))})")

    def _unknown_flags(self, tokens: Sequence[str]) -> list[str]:
        """The tokens that look like flags of this parser but are none (nor an abbreviation
        argparse would take)."""
        known = self._option_string_actions
        unknown = []
        for token in tokens:
            if token == "--":
                break
            if not token.startswith("-") or token == "-" or \
                    self._negative_number_matcher.match(token):
                continue
            flag = token.partition("=")[0] if token.startswith("--") else token
            if flag in known or (token.startswith("--") and self.allow_abbrev and any(
                    option.startswith(flag) for option in known)) or \
                    (not token.startswith("--") and token[:2] in known):  # -j4, -qj
                continue
            unknown.append(flag)
        return unknown

    def _unknown_message(self, unknown: list[str]) -> str:
        options = sorted(o for o in self._option_string_actions if o.startswith("--"))
        return "; ".join(f"unknown flag {flag}{did_you_mean(flag, options)}" for flag in unknown)

    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse checks required flags before it reports unknown ones: '--profle x' would
        # read "required: --profile", hiding the typo that is the cause.
        if message.startswith("the following arguments are required") and \
                (unknown := self._unknown_flags(self._given)):
            message = self._unknown_message(unknown)
        self.exit(EXIT_USAGE, f"devicefit: error: {message} (see '{self.prog} --help')\n")


class _Commands(argparse._SubParsersAction):
    """The commands: a stand-in parser for each (its name and line in ``--help``), replaced by
    the command's own, from its module, when argparse reaches its name on the command line
    (or by :meth:`load`): a run imports the module of its command alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting: set[str] = set()  # the commands whose parser is a stand-in

    def stand_in(self, name: str) -> None:
        super().add_parser(name, help=COMMANDS[name])
        self._waiting.add(name)

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        # From the module's register(): its parser takes the place of the stand-in, whose
        # line in --help stays.
        if name in self._waiting:
            self._waiting.remove(name)
            del self._name_parser_map[name]
        return super().add_parser(name, **kwargs)

    def load(self, name: str) -> None:
        if name not in self._waiting:
            return
        module = importlib.import_module(f"{commands.__name__}.{name.replace('-', '_')}")
        module.register(self)
        command = self._name_parser_map[name]
        for each in [command, *_commands(command)]:
            _add_global_options(each, late=True)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        self.load(values[0])  # argparse has checked that it names a command
        super().__call__(parser, namespace, values, option_string)


def build_parser(lazy: bool = False) -> argparse.ArgumentParser:
    """The ``devicefit`` parser. ``lazy``: each command's parser is built when the command
    line names it (what :func:`main` needs); otherwise every one is built now, to be walked
    (:func:`_commands`)."""
    parser = _Parser(
        prog="devicefit",
        description="Know before flashing: will this model fit the device (flash, RAM, latency)? "
                    "--profiles-dir, --no-color, -q, --log and --max-ops may also follow "
                    "the command (devicefit check -q).",
        epilog="example: devicefit simulate model.tflite --profile stm32l4r5-cortex-m4",
    )
    parser.add_argument("--version", action="version", version=f"devicefit {__version__}")
    _add_global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                action=_Commands)
    assert isinstance(sub, _Commands)
    for name in COMMANDS:
        sub.stand_in(name)
    if not lazy:
        for name in COMMANDS:
            sub.load(name)
    return parser


#: Where a global option given after the command is kept until :func:`_merge_late`.
_LATE = "late_"


def _add_global_options(parser: argparse.ArgumentParser, late: bool = False) -> None:
    """The options of ``devicefit`` itself. ``late``: the hidden copy each command takes, so
    that ``devicefit check -q`` works as ``devicefit -q check`` does (argparse would call the
    flag unrecognized after the command)."""

    def add(*flags: str, dest: str, help: str, **kwargs: Any) -> None:
        if late:
            kwargs.update(default=argparse.SUPPRESS)
        parser.add_argument(*flags, dest=_LATE + dest if late else dest,
                            help=argparse.SUPPRESS if late else help, **kwargs)

    add("--profiles-dir", dest="profiles_dir", action="append", default=[], metavar="DIR",
        help="extra folder of device profiles (repeatable; also $DEVICEFIT_PROFILES)")
    add("--no-color", dest="no_color", action="store_true",
        help="plain output, no colours or bold (also $NO_COLOR)")
    add("-q", "--quiet", dest="quiet", action="store_true",
        help="no progress display (it is drawn on stderr only when that is a terminal)")
    add("--log", dest="log", metavar="FILE",
        help="append what TensorFlow and other native libraries print to FILE (default: a "
             "temporary file, shown and kept only when the command fails)")
    add("--max-ops", dest="max_ops", type=_positive_int, default=None, metavar="N",
        help="refuse models with more operators than N, in the file or as executed through "
             f"control flow (default {DEFAULT_MAX_OPS:,}; also ${ENV_MAX_OPS}); tensors: "
             f"{TENSORS_PER_OP} per operator")


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser, nested ones too (``profiles list``)."""
    found: dict[int, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                found.setdefault(id(command), command)
                for inner in _commands(command):
                    found.setdefault(id(inner), inner)
    return list(found.values())


def _merge_late(args: argparse.Namespace) -> None:
    """Global options given after the command join those given before it: folders add up,
    a value given later wins."""
    for name, value in list(vars(args).items()):
        if name.startswith(_LATE):
            dest = name[len(_LATE):]
            early = getattr(args, dest)
            setattr(args, dest, early + value if isinstance(early, list) else value)
            delattr(args, name)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(lazy=True)
    args = parser.parse_args(argv)
    _merge_late(args)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if problem := _profiles_dir_problem(args.profiles_dir):
        print(f"devicefit: error: {clean(problem)}", file=sys.stderr)
        return EXIT_USAGE
    if args.log is not None and (problem := _log_problem(Path(args.log))):
        print(f"devicefit: error: --log {clean(args.log)}: {problem}", file=sys.stderr)
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
    from devicefit.sdk.console import native_log, progress
    from devicefit.simulator.infra.fileio import all_or_nothing

    with terminate_as_interrupt(), native_log(args.log) as log:
        try:
            try:
                if getattr(args, "plot", None):
                    require_extra("matplotlib", "--plot", "or use --html")
                with progress(quiet=args.quiet, no_color=args.no_color), all_or_nothing():
                    return int(args.handler(args))
            except Exception:
                if (signum := taken()) is None:
                    raise
                # Raised in place of the signal's own exception, which native code lost
                # (signals.taken): the signal ends the command, not this error.
                raise exception_for(signum) from None
        except DevicefitError as exc:
            # Messages quote file contents (names, YAML values): never raw control characters.
            print(f"devicefit: error: {clean(exc)}", file=sys.stderr)
            if not isinstance(exc, (UsageError, InputError)):  # native code may be the cause
                _show_log(log)
            return exc.exit_code
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP as Terminated
            # Outputs are written whole or not at all (write_atomic): none is half there.
            signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
            print(stopped_message(signum), file=sys.stderr)
            return 128 + signum
        except ImportError as exc:
            # An optional dependency imported where the command needed it: name its extra.
            missing = missing_extra(exc, f"devicefit {args.command}")
            if missing is None:
                _show_log(log)
                raise
            print(f"devicefit: error: {missing}", file=sys.stderr)
            return missing.exit_code
        except Exception:
            _show_log(log)  # then Python's traceback: a bug in devicefit
            raise


def _show_log(log: NativeLog) -> None:
    """The last lines native code printed in this process (and the processes that share its
    stderr), and where the whole log is kept. A child's own log (the converter's) is named
    in its error message instead."""
    tail = log.tail()
    log.keep = bool(tail)
    if tail:
        print(f"devicefit: last lines of {log.path}:", file=sys.stderr)
        for line in tail:
            print(f"  {line}", file=sys.stderr)


#: An existing file --log may append to; anything else could be an input (never written).
LOG_SUFFIXES = (".log", ".txt")


def _log_problem(path: Path) -> str | None:
    if path.exists() and (not path.is_file() or path.suffix.lower() not in LOG_SUFFIXES):
        return (f"exists and is not a {'/'.join(LOG_SUFFIXES)} file; refusing to append to "
                "it (it may be an input)")
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        return f"cannot write it ({exc.strerror})"
    return None


def _profiles_dir_problem(given: list[str]) -> str | None:
    """A profile folder that is not there: a typo would otherwise just find no profiles."""
    from devicefit.simulator.profiles import ENV_PROFILES

    env = [d for d in os.environ.get(ENV_PROFILES, "").split(os.pathsep) if d]
    for where, folder in [*(("--profiles-dir", d) for d in given),
                          *((f"${ENV_PROFILES}", d) for d in env)]:
        if not Path(folder).is_dir():
            return (f"{where} {folder}: "
                    + ("not a folder" if Path(folder).exists() else "no such folder"))
    return None


def run() -> None:
    """Console-script entry point (through :mod:`devicefit.__main__`, which guards the
    imports before this module's)."""
    exit_outside_work()
    code = main()
    ignore_during_shutdown()
    sys.exit(code)


if __name__ == "__main__":
    run()
