"""``devicefit search --family NAME --profile P``: the static screen of an architecture
family's grid (``--screen``), and with ``--train/--eval/-o`` the training of the candidates
that fit, the choice and the verified, written winner (:mod:`sdk.search.architectures`)."""

from __future__ import annotations

import argparse
import itertools
import re
from typing import TYPE_CHECKING, Any

from devicefit.sdk.commands.optimize import add_patch_arguments, patch_options
from devicefit.sdk.console import (
    make_console,
    print_json,
    print_stderr,
    quiet_conversions,
    table,
)
from devicefit.sdk.options import (
    add_firmware_options,
    add_study_options,
    study_exit,
    study_settings,
    write_reports,
)
from devicefit.sdk.search.objective import Objective
from devicefit.simulator.errors import UsageError, require_extra
from devicefit.simulator.infra.units import format_percent

if TYPE_CHECKING:
    from rich.console import Console

    from devicefit.sdk.convert.spec import MemoryOptimization
    from devicefit.sdk.search.architectures import Searched

_NUMBERS = re.compile(r"\d+([x-]\d+)+")
#: Parameters that are lists of sizes.
_SIZES = ("input_shape", "depth")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        description="Build every candidate of an architecture family's grid with random "
                    "weights, convert each to int8 (calibrated on random samples of the input "
                    "shape: sizes, arena and latency do not depend on the data) in one "
                    "TensorFlow process, and judge it statically for the profile: flash, the "
                    "arena (with TFLM's offline plan where it is smaller) and the latency "
                    "estimate with its band. Families: mbv2 (images), dscnn (audio "
                    "features), cnn1d and mlp (sensor windows), or a Python function "
                    "module:function taking the parameters and returning a Keras model. "
                    "With --screen that is all; with --train, --eval and -o only the "
                    "candidates that fit are trained (an optuna study: one objective or a "
                    "Pareto front), ranked by the accuracy of their int8 file, and the best "
                    "is verified in the target's runtime and written. Exit 0 when a "
                    "candidate fits (and was written), 1 when none does, 2 on bad input. "
                    "Ctrl-C (or SIGTERM, SIGHUP) keeps the best fitting candidate trained so "
                    "far and exits 128 + the signal.",
        epilog="example: devicefit search --family mbv2 --profile stm32l4r5-cortex-m4 "
               "--screen --param input_shape=64x64x3,96x96x3 --param width=0.35,0.5\n"
               "train the candidates that fit, write the best (a Pareto front vs latency):\n"
               "  devicefit search --family mbv2 --profile nrf52840-cortex-m4 --train "
               "train.npz --eval test.npz -o best.tflite --param width=0.25,0.5,1 --param "
               "depth=1-1,1-2 --epochs 5 --objective accuracy,latency --html search.html")
    p.add_argument("--family", required=True, metavar="NAME",
                   help="mbv2, dscnn, cnn1d, mlp or module:function")
    p.add_argument("--profile", required=True, metavar="NAME",
                   help="device profile name or .yaml path (see 'devicefit profiles list')")
    p.add_argument("--screen", action="store_true",
                   help="only judge the candidates statically (no data, nothing trained)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=V[,V...]",
                   help="a parameter's values (the grid is every combination): input_shape "
                        "(32x32x1), classes, width, depth (blocks per stage: 1-2-2), kernel, "
                        "expansion; others keep the family's defaults (when training, "
                        "input_shape and classes are the data's)")
    p.add_argument("--train", metavar="DATA", help="labelled training data (.npz with x, y)")
    p.add_argument("--eval", dest="eval_data", metavar="DATA",
                   help="labelled evaluation data (.npz with x, y) to rank the candidates")
    p.add_argument("--calibration", metavar="DATA",
                   help="int8 calibration data (default: the first 300 training samples)")
    p.add_argument("-o", "--output", metavar="OUT.tflite", help="where the best is written")
    p.add_argument("--max-trials", type=int, default=20,
                   help="candidates trained at most (20)")
    p.add_argument("--time-budget", metavar="DURATION",
                   help="stop starting new trials after this long, e.g. 30m, 90s, 2h")
    p.add_argument("--epochs", type=int, default=3, help="training epochs per candidate (3)")
    p.add_argument("--objective", default="accuracy", choices=[o.value for o in Objective],
                   help="accuracy (one objective), or accuracy against latency or arena (a "
                        "Pareto front; NSGA-II)")
    add_study_options(
        p, storage="optuna storage: sqlite:///search.db (a rerun resumes) or "
                   "postgresql://user@host/db (several machines join one study)",
        study="study name in --storage (default: from profile, survivors and data)",
        artifacts="keep every trained candidate in DIR/STUDY (a folder workers share)")
    add_patch_arguments(p, "tflm profiles, screened and trained alike, so a candidate can fit "
                           "by it: ")
    p.add_argument("--report", metavar="REPORT.json", help="write the report as JSON")
    p.add_argument("--html", metavar="REPORT.html", help="write the report as HTML")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_firmware_options(p)
    p.set_defaults(handler=_search)


def value(text: str) -> Any:
    """``32x32x1`` / ``1-2-2`` → a tuple of ints; else an int, or a float."""
    if _NUMBERS.fullmatch(text):
        return tuple(int(n) for n in re.split("[x-]", text))
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise UsageError(f"--param value '{text}': give a number, or sizes like 32x32x1 or 1-2-2")


def axes(params: list[str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for item in params:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise UsageError(f"--param {item}: give NAME=VALUE[,VALUE...]")
        if name in out:
            raise UsageError(f"--param {name} given twice: list its values once, comma-separated")
        parsed = [value(v) for v in values.split(",")]
        if name in _SIZES:  # one stage / one dimension: a size of one
            parsed = [(v,) if isinstance(v, int) else v for v in parsed]
        out[name] = parsed
    return out


def _search(args: argparse.Namespace) -> int:
    if args.screen:
        return _screen(args)
    quiet_conversions()  # the search converts many times
    missing = [flag for flag, given in (("--train", args.train), ("--eval", args.eval_data),
                                        ("-o", args.output)) if given is None]
    if missing:
        raise UsageError(f"devicefit search needs {', '.join(missing)} to train the candidates "
                         "that fit (or --screen to only judge them)")
    from devicefit.sdk.commands.fit import stopped_line, trial_progress

    settings = study_settings(args)
    for module in ("tensorflow", "optuna"):
        require_extra(module, "devicefit search")
    from devicefit.sdk.commands.convert import warnings_to
    from devicefit.sdk.options import data_inputs, firmware_output
    from devicefit.sdk.search.architectures import SearchSpec, search_architectures
    from devicefit.sdk.search.report import render_search_html, to_dict
    from devicefit.simulator.infra.fileio import check_outputs

    inputs_named = data_inputs(argparse.Namespace(**vars(args), model=None),  # no model file
                               ("train", "eval_data", "calibration"))
    check_outputs([("-o", args.output), ("--report", args.report), ("--html", args.html)],
                  inputs_named)
    firmware_output(args, [*inputs_named, ("-o", args.output)])
    spec = SearchSpec(args.train, args.eval_data, args.calibration, args.epochs,
                      Objective(args.objective), settings, _memory(args))
    console = make_console(args.no_color)
    with warnings_to(console), trial_progress(args.no_color, args.json or args.quiet,
                                               args.max_trials) as (progress, on_trial):
        found = search_architectures(args.family, axes(args.param), args.profile, args.output,
                                     spec, profiles_dirs=args.profiles_dir, progress=progress,
                                     on_trial=on_trial)
    write_reports(args, to_dict(found), lambda: render_search_html(found),
                  lambda: _print_summary(console, found),
                  [p for p in (args.train, args.eval_data, args.calibration) if p])
    if found.stopped is not None:
        chosen = next((t for t in found.trials if t.number == found.chosen), None)
        print_stderr(stopped_line(found.stopped, chosen, found.output, writer=found.writer,
                                  resumable=args.storage is not None))
        return found.stopped.exit_code
    return study_exit(args, writer=found.writer, found=found.found, profile=found.profile,
                      say=print_stderr if args.json else console.print)


def _memory(args: argparse.Namespace) -> MemoryOptimization | None:
    from devicefit.sdk.convert.spec import MemoryOptimization

    patches = patch_options(args)
    return MemoryOptimization(**patches) if patches else None


def _screen(args: argparse.Namespace) -> int:
    require_extra("tensorflow", "devicefit search")  # the screen converts every candidate
    from devicefit.sdk.search import candidate, screen
    from devicefit.sdk.search.report import SCREEN_COLUMNS, screen_rows, screened_dict
    from devicefit.simulator.profiles import load_profile

    grid = axes(args.param)
    names = list(grid)
    candidates = [candidate(args.family, **dict(zip(names, combo, strict=True)))
                  for combo in itertools.product(*grid.values())]
    profile = load_profile(args.profile, args.profiles_dir)
    run = screen(candidates, profile, memory=_memory(args))
    if args.json:
        print_json([screened_dict(r) for r in run.results])
    else:
        console = make_console(args.no_color)
        console.print(table(f"Screened for {profile.name}: {len(run.fitting)} of "
                            f"{len(run.results)} fit", list(SCREEN_COLUMNS),
                            screen_rows(run.results)))
    return 0 if run.fitting else 1


def _print_summary(console: Console, found: Searched) -> None:
    from devicefit.sdk.commands.fit import verified_line
    from devicefit.sdk.fit.report import low_bit_lines, miss_text, trials_note
    from devicefit.sdk.search.report import (
        SCREEN_COLUMNS,
        TRIAL_COLUMNS,
        closest_miss,
        front_rows,
        reason,
        rejected_by,
        screen_rows,
        trial_rows,
    )

    run = found.screen
    console.print(table(f"Screened for {found.profile.name}: {len(run.fitting)} of "
                        f"{len(run.results)} fit", list(SCREEN_COLUMNS),
                        screen_rows(run.results)))
    if not run.fitting:
        closest, misses = closest_miss(found)
        console.print("[bold red]nothing fits[/bold red] (rejected: " + ", ".join(
            f"{n} by {r}" for r, n in rejected_by(found).items()) + ")")
        if closest is not None:
            console.print(f"closest: {closest.candidate.label()}: "
                          + "; ".join(miss_text(m) for m in misses))
        return
    console.print(table(f"Trained on {found.profile.name} ({found.search_seconds:.0f} s"
                        + (", interrupted" if found.interrupted else "") + ")",
                        list(TRIAL_COLUMNS), trial_rows(found)))
    if note := trials_note(found.trials, found.unshown, found.settings.max_trials):
        console.print(note)
    if found.objective.cost is not None:
        console.print(table(f"Pareto front: accuracy vs {found.objective.cost}",
                            ["#", "candidate", "accuracy", found.objective.cost],
                            front_rows(found)))
    chosen = next((t for t in found.trials if t.number == found.chosen), None)
    if chosen is None:
        if not found.writer:
            console.print("this worker's share of the study is done; the worker that "
                          "completes it writes the winner")
        else:
            console.print("[bold red]nothing fits[/bold red]: no trained candidate passed "
                          "every budget in the runtime")
        return
    # int8 is the scheme (int8 activations) also with int4 weights, as in fit's labels.
    console.print(f"[bold green]fits:[/bold green] trial {chosen.number}, "
                  f"{chosen.candidate.label()}: int8 accuracy {format_percent(chosen.accuracy)}")
    console.print(f"why: {reason(found)}")
    for line in low_bit_lines(chosen.payload.low_bit) if chosen.payload.low_bit else []:
        console.print(line)
    console.print(verified_line(found.verification, found.profile.runtime.name, chosen))
    console.print(f"wrote {found.output}")
