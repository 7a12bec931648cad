"""``devicefit fit``: search the compression space a profile allows for the most accurate
candidate that passes every budget, verify it in the runtime and write it."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit.sdk.commands.optimize import add_patch_arguments, patch_options
from devicefit.sdk.console import make_console, print_json, print_stderr, table
from devicefit.sdk.options import add_firmware_options
from devicefit.simulator import jsonout
from devicefit.simulator.errors import UsageError, require_extra
from devicefit.simulator.fileio import write_atomic
from devicefit.simulator.units import (
    decimal_prefixes,
    format_estimate,
    format_figure,
    format_percent,
    format_points,
    format_size,
)

if TYPE_CHECKING:
    from rich.console import Console

    from devicefit.sdk.fit.report import FitReport
    from devicefit.sdk.fit.search import SearchSettings
    from devicefit.sdk.fit.trial import TrialRecord
    from devicefit.simulator.report import BudgetCheck

EXAMPLE = ("example: devicefit fit model.keras --profile stm32l4r5-cortex-m4 --train train.npz "
           "--eval test.npz -o model.tflite --max-trials 20 --time-budget 30m\n"
           "on N machines, each runs the same search in one shared study:\n"
           "  devicefit fit model.keras --profile stm32l4r5-cortex-m4 --train train.npz "
           "--eval test.npz -o model.tflite --storage postgresql://user@db/fit --study kws-l4 "
           "--artifacts /shared/fit\n"
           "and any time after, anywhere, the best candidate so far is written by:\n"
           "  devicefit fit --storage postgresql://user@db/fit --study kws-l4 "
           "--artifacts /shared/fit --export -o model.tflite")
TIME_UNITS = {"s": 1, "m": 60, "h": 3600}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit", help="find the most accurate compressed model that fits a device profile",
        description="Search quantization scheme, channel pruning, N:M sparsity (where the "
                    "runtime uses it) and PTQ vs quantization-aware training for the most "
                    "accurate candidate that passes every budget; verify it in the target's "
                    "runtime. Exit 0: found and written; 1: nothing fits (the closest miss is "
                    "shown); 2: bad input. Ctrl-C keeps the best fitting candidate so far.",
        epilog=EXAMPLE)
    p.add_argument("model", nargs="?", help=".keras or .h5 file (not with --export)")
    p.add_argument("--profile", help="device profile name or .yaml path (with --export: "
                                     "default the study's)")
    p.add_argument("--train", metavar="DATA",
                   help="labelled training data (.npz with x, y) for fine-tuning")
    p.add_argument("--eval", dest="eval_data", metavar="DATA",
                   help="labelled evaluation data (.npz with x, y) to rank candidates")
    p.add_argument("--calibration", metavar="DATA",
                   help="calibration data (default: the first 300 training samples)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.tflite", help="output file")
    p.add_argument("--max-trials", type=int, default=20, help="distinct candidates (20)")
    p.add_argument("--time-budget", metavar="DURATION",
                   help="stop starting new trials after this long, e.g. 30m, 90s, 2h")
    p.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs per candidate (3)")
    p.add_argument("--storage", metavar="URL",
                   help="optuna storage: sqlite:///fit.db (resume on this machine) or "
                        "postgresql://user@host/db (workers on several machines join one study; "
                        "needs devicefit[distributed])")
    p.add_argument("--study", "--study-name", dest="study_name", metavar="NAME",
                   help="study name in --storage (default: from model, profile and space)")
    p.add_argument("--artifacts", type=Path, metavar="DIR",
                   help="keep every candidate model and its record in DIR/STUDY (a folder all "
                        "workers share) so the winner can be exported anywhere")
    p.add_argument("--export", action="store_true",
                   help="write the best candidate of --study so far to -o and stop (no model, "
                        "data or TensorFlow needed)")
    p.add_argument("--heartbeat", type=int, default=30, metavar="SECONDS",
                   help="on a database server: a worker silent for 3 heartbeats is taken for "
                        "dead and its trial is retried by another (30)")
    p.add_argument("--jobs", type=int, default=1, help="parallel trial processes (1)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (0)")
    p.add_argument("--distill", action="store_true",
                   help="fine-tune with the original model as teacher (soft labels)")
    p.add_argument("--cluster", type=int, metavar="K",
                   help="cluster each layer's weights to K values (smaller gzip download only)")
    add_patch_arguments(p, "tflm profiles, to make a model fit: ")
    p.add_argument("--html", metavar="REPORT.html", help="write the report as HTML")
    p.add_argument("--report", metavar="REPORT.json", help="write the report as JSON")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--unsafe", action="store_true",
                   help="allow Lambda layers (runs Python code from the model file)")
    add_firmware_options(p)
    p.set_defaults(handler=_fit)


def parse_duration(text: str | None) -> float | None:
    """'30m' → 1800.0 seconds; a bare number is seconds."""
    if text is None:
        return None
    value, unit = text.strip().lower(), "s"
    if value and value[-1] in TIME_UNITS:
        value, unit = value[:-1], value[-1]
    try:
        seconds = float(value) * TIME_UNITS[unit]
    except ValueError:
        raise UsageError(f"--time-budget {text!r}: give a duration such as 90s, 30m or 2h") \
            from None
    if seconds <= 0:
        raise UsageError(f"--time-budget {text!r}: must be positive")
    return seconds


def _fit(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
    # The converter warns once per full-integer conversion; fit converts dozens of times.
    warnings.filterwarnings("ignore", message="Statistics for quantized inputs")
    from devicefit.sdk.commands.convert import warnings_to
    from devicefit.sdk.convert.spec import FineTuning, MemoryOptimization
    from devicefit.sdk.fit import FitSpec, SearchSettings, fit

    if args.heartbeat < 1:
        raise UsageError(f"--heartbeat {args.heartbeat}: give at least 1 second")
    # Before any data is read: --export needs only the study (optuna), a search TensorFlow.
    for module in ("optuna",) if args.export else ("tensorflow", "optuna"):
        require_extra(module, "devicefit fit --export" if args.export else "devicefit fit")
    from devicefit.sdk.options import data_inputs, firmware_output
    from devicefit.simulator.fileio import check_outputs

    check_outputs([("-o", args.output), ("--report", args.report), ("--html", args.html)],
                  data_inputs(args, ("train", "eval_data", "calibration")))
    firmware_output(args, [*data_inputs(args, ("train", "eval_data", "calibration")),
                           ("-o", args.output)])
    settings = SearchSettings(max_trials=args.max_trials,
                              time_budget_s=parse_duration(args.time_budget),
                              storage=args.storage, study_name=args.study_name, jobs=args.jobs,
                              seed=args.seed, heartbeat_s=args.heartbeat,
                              artifacts=args.artifacts)
    console = make_console(args.no_color)
    if args.export:
        return _export(args, settings, console)
    missing = [flag for flag, value in (("MODEL", args.model), ("--profile", args.profile),
                                        ("--train", args.train), ("--eval", args.eval_data))
               if value is None]
    if missing:
        raise UsageError(f"fit needs {', '.join(missing)} (or --export with --storage and "
                         "--study to write the best candidate of a search)")
    patches = patch_options(args)
    spec = FitSpec(FineTuning(args.train, args.epochs, args.distill), args.eval_data,
                   calibration=args.calibration, search=settings, cluster=args.cluster,
                   optimize_memory=MemoryOptimization(**patches) if patches else None,
                   unsafe=args.unsafe)
    with warnings_to(console), trial_progress(args.no_color, args.json or args.quiet,
                                               args.max_trials) as (progress, on_trial):
        report = fit(args.model, args.profile, args.output, spec,
                     profiles_dirs=args.profiles_dir, progress=progress, on_trial=on_trial)
    return _outputs(args, console, report,
                    [p for p in (args.model, args.train, args.eval_data, args.calibration) if p])


def _export(args: argparse.Namespace, settings: SearchSettings, console: Console) -> int:
    from devicefit.sdk.fit import export

    given = [flag for flag, value in (("MODEL", args.model), ("--train", args.train),
                                      ("--eval", args.eval_data)) if value is not None]
    if given:
        raise UsageError(f"--export writes what the study found; {', '.join(given)} not used")
    report = export(settings, args.output, profile=args.profile,
                    profiles_dirs=args.profiles_dir)
    return _outputs(args, console, report, [])


def _outputs(args: argparse.Namespace, console: Console, report: FitReport,
             inputs: list[str]) -> int:
    from devicefit.sdk.fit.report import render_fit_html

    if args.report:
        write_atomic(args.report, jsonout.dumps(report.to_dict(), indent=2) + "\n", inputs=inputs)
    if args.html:
        write_atomic(args.html, render_fit_html(report), inputs=inputs)
    if args.json:
        print_json(report.to_dict())
    else:
        _print_summary(console, report)
    if report.another_worker_writes:
        return 0
    if not report.found:
        return 1
    from devicefit.sdk.options import write_firmware

    return write_firmware(args, args.output, report.profile,
                          print_stderr if args.json else console.print)



def _print_summary(console: Console, report: FitReport) -> None:
    from devicefit.sdk.fit.report import TRIAL_COLUMNS, format_value, trial_rows

    console.print(table(f"Trials on {report.profile} ({report.search_seconds:.0f} s"
                        + (", interrupted" if report.interrupted else "") + ")",
                        TRIAL_COLUMNS, trial_rows(report)))
    chosen = report.trial(report.chosen)
    if chosen is not None:
        v = report.verification
        runtime = v.measured.runtime if v is not None and v.measured else report.runtime
        loss = report.accuracy_loss_pp
        console.print(f"[bold green]fits:[/bold green] trial {chosen.number}, "
                      f"{chosen.candidate.label()}: accuracy {format_percent(chosen.accuracy)}"
                      + ("" if loss is None else f" ({format_points(-loss)} vs float "
                         f"{format_percent(report.float_accuracy)})")
                      + f", flash {format_size(chosen.flash_bytes)}, arena "
                      f"{format_size(chosen.arena_bytes)}")
        console.print(f"why: {report.reason}")
        for run in chosen.fine_tune:
            console.print(f"fine-tuned {run.epochs} epoch(s): batch {run.batch_size} x "
                          f"{run.accumulation_steps} accumulation (sdk.train plan for "
                          f"{format_size(run.memory_limit_bytes)}), loss "
                          + " → ".join(f"{loss:.3f}" for loss in run.loss))
        budgets = ", ".join(budget_text(b) for b in (v.budgets if v is not None else []))
        console.print(f"verified in {runtime}: {budgets}")
        if report.clustering:
            c = report.clustering
            console.print(f"clustered to {c.clusters} values per layer: gzip download "
                          f"{format_size(c.gzip_before)} → {format_size(c.gzip_after)}, "
                          f"accuracy {format_percent(c.accuracy_after)}; {c.note}")
        console.print(f"wrote {report.output}")
        return
    if report.another_worker_writes:
        study = f"study {report.study.name}" if report.study is not None else "the study"
        console.print(f"this worker's share of {study} is done; the "
                      "worker that completes the study writes the winner (or run "
                      "'devicefit fit --storage URL --study NAME --export -o OUT')")
        return
    closest = report.trial(report.closest)
    console.print("[bold red]nothing fits[/bold red] "
                  f"({len(report.trials)} candidates tried)")
    if closest is not None:
        misses = "; ".join(f"{m.budget} {format_value(m.value, m.unit)} > "
                           f"{format_value(m.limit, m.unit)} by {format_value(m.over, m.unit)} "
                           f"({format_percent(m.over_fraction, 1, signed=True)})" for m in report.closest_misses)
        console.print(f"closest: trial {closest.number}, {closest.candidate.label()}: "
                      f"{misses or closest.note}")


def _trial_line(record: TrialRecord) -> str:
    return (f"trial {record.number}: {record.candidate.label()}: "
            f"{'PASS' if record.fits else 'fail'}"
            + ("" if record.accuracy is None else f", accuracy {format_percent(record.accuracy)}")
            + (f" ({record.note})" if record.note else ""))


@contextmanager
def trial_progress(no_color: bool, quiet: bool, max_trials: int,
                   line: Callable[[Any], str] | None = None) -> Iterator[tuple]:
    """(progress, on_trial): rich bars on a TTY; one plain line per trial off a TTY.
    ``line`` says a finished trial in one line (default: fit's trials; the architecture
    search passes its own)."""
    line = line or _trial_line
    err = make_console(no_color, stderr=True)
    if quiet or not sys.stderr.isatty():
        yield None, (None if quiet else lambda record: err.print(line(record)))
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

    tasks: dict[str, TaskID] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=err, transient=True) as bars:
        search = bars.add_task("search", total=max_trials)

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(f"  {stage}", total=total)
            bars.update(tasks[stage], completed=done, total=total)

        def on_trial(record: Any) -> None:
            bars.advance(search)
            bars.console.print(line(record))
        yield update, on_trial


def budget_text(budget: BudgetCheck) -> str:
    """One verified budget; an estimate shows with its error band and says when it is at risk."""
    from devicefit.simulator.types import Status, Unit

    unit = budget.unit
    risk = ", at risk" if budget.status == Status.AT_RISK else ""
    decimal = unit == Unit.BYTES and decimal_prefixes(budget.limit)
    return (f"{budget.name} {format_estimate(budget.value, unit, budget.band, decimal)} ≤ "
            f"{format_figure(budget.limit, unit, decimal)} ({budget.basis}{risk})")
