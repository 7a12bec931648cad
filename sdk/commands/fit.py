"""``devicefit fit``: search the compression space a profile allows for the most accurate
candidate that passes every budget, verify it in the runtime and write it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from devicefit.sdk.commands.optimize import add_patch_arguments, patch_options
from devicefit.sdk.console import make_console, print_stderr, quiet_conversions, table
from devicefit.sdk.options import (
    add_firmware_options,
    add_study_options,
    study_exit,
    study_settings,
    write_reports,
)
from devicefit.simulator.errors import UsageError, require_extra
from devicefit.simulator.infra.units import (
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
    from devicefit.sdk.study import SearchSettings, Stopped, TrialRecord
    from devicefit.simulator.report.report import BudgetCheck, Report

EXAMPLE = ("example: devicefit fit model.keras --profile stm32l4r5-cortex-m4 --train train.npz "
           "--eval test.npz -o model.tflite --max-trials 20 --time-budget 30m\n"
           "on N machines, each runs the same search in one shared study:\n"
           "  devicefit fit model.keras --profile stm32l4r5-cortex-m4 --train train.npz "
           "--eval test.npz -o model.tflite --storage postgresql://user@db/fit --study kws-l4 "
           "--artifacts /shared/fit\n"
           "and any time after, anywhere, the best candidate so far is written by:\n"
           "  devicefit fit --storage postgresql://user@db/fit --study kws-l4 "
           "--artifacts /shared/fit --export -o model.tflite")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit",
        description="Search quantization scheme, channel pruning, N:M sparsity (where the "
                    "runtime uses it) and PTQ vs quantization-aware training for the most "
                    "accurate candidate that passes every budget; verify it in the target's "
                    "runtime. Exit 0: found and written; 1: nothing fits (the closest miss is "
                    "shown); 2: bad input. Ctrl-C (or SIGTERM, SIGHUP) keeps the best fitting "
                    "candidate so far and exits 128 + the signal.",
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
    p.add_argument("--epochs", type=int, default=3,
                   help="fine-tuning epochs per training stage (3): a pruned candidate trains "
                        "them while pruned, and a QAT candidate (and its PTQ twin) as many "
                        "again for int8")
    add_study_options(
        p, storage="optuna storage: sqlite:///fit.db (resume on this machine) or "
                   "postgresql://user@host/db (workers on several machines join one study; "
                   "needs devicefit[distributed])",
        study="study name in --storage (default: from model, profile and space)",
        artifacts="keep every candidate model and its record in DIR/STUDY (a folder all "
                  "workers share) so the winner can be exported anywhere")
    p.add_argument("--export", action="store_true",
                   help="write the best candidate of --study so far to -o and stop (no model, "
                        "data or TensorFlow needed)")
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


def _fit(args: argparse.Namespace) -> int:
    quiet_conversions()  # fit converts dozens of times
    from devicefit.sdk.commands.convert import warnings_to
    from devicefit.sdk.convert.spec import FineTuning, MemoryOptimization
    from devicefit.sdk.fit import FitSpec, fit

    settings = study_settings(args)
    # Before any data is read: --export needs only the study (optuna), a search TensorFlow.
    for module in ("optuna",) if args.export else ("tensorflow", "optuna"):
        require_extra(module, "devicefit fit --export" if args.export else "devicefit fit")
    from devicefit.sdk.options import data_inputs, firmware_output
    from devicefit.simulator.infra.fileio import check_outputs

    check_outputs([("-o", args.output), ("--report", args.report), ("--html", args.html)],
                  data_inputs(args, ("train", "eval_data", "calibration")))
    firmware_output(args, [*data_inputs(args, ("train", "eval_data", "calibration")),
                           ("-o", args.output)])
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

    write_reports(args, report.to_dict(), lambda: render_fit_html(report),
                  lambda: _print_summary(console, report), inputs)
    if report.stopped is not None:
        print_stderr(stopped_line(report.stopped, report.trial(report.chosen), report.output,
                                  writer=not report.another_worker_writes,
                                  resumable=args.storage is not None))
        return report.stopped.exit_code
    return study_exit(args, writer=not report.another_worker_writes, found=report.found,
                      profile=report.profile, say=print_stderr if args.json else console.print)


def _print_summary(console: Console, report: FitReport) -> None:
    from devicefit.sdk.convert.finetune import training_summary
    from devicefit.sdk.fit.report import (
        TRIAL_COLUMNS,
        miss_text,
        trial_rows,
        trials_note,
        weights_lines,
    )

    console.print(table(f"Trials on {report.profile} ({report.search_seconds:.0f} s"
                        + (", interrupted" if report.interrupted else "") + ")",
                        TRIAL_COLUMNS, trial_rows(report)))
    if note := trials_note(report.trials, report.unshown, report.settings.max_trials):
        console.print(note)
    chosen = report.trial(report.chosen)
    if chosen is not None:
        loss = report.accuracy_loss_pp
        console.print(f"[bold green]fits:[/bold green] trial {chosen.number}, "
                      f"{chosen.candidate.label()}: accuracy {format_percent(chosen.accuracy)}"
                      + ("" if loss is None else f" ({format_points(-loss)} vs float "
                         f"{format_percent(report.float_accuracy)})"))
        console.print(f"why: {report.reason}")
        for line in weights_lines(report):
            console.print(line, markup=False)
        if trained := training_summary(chosen.payload.fine_tune):
            console.print(trained)
        console.print(verified_line(report.verification, report.runtime, chosen))
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
        misses = "; ".join(miss_text(m) for m in report.closest_misses)
        console.print(f"closest: trial {closest.number}, {closest.candidate.label()}: "
                      f"{misses or closest.note}")
    for line in weights_lines(report):
        console.print(line, markup=False)


def trial_line(record: TrialRecord[Any, Any]) -> str:
    """A finished trial of fit or search in one line (the progress off a terminal)."""
    return (f"trial {record.number}: {record.candidate.label()}: "
            f"{'PASS' if record.fits else 'fail'}"
            + ("" if record.accuracy is None else f", accuracy {format_percent(record.accuracy)}")
            + (f" ({record.note})" if record.note else ""))


def stopped_line(stopped: Stopped, kept: TrialRecord[Any, Any] | None, output: str | None,
                 *, writer: bool, resumable: bool) -> str:
    """The one line fit and search end with when a signal stopped the study: which trials
    it cut short (none when it came between trials), which candidate was kept, and, for a
    study in ``--storage``, that the same command resumes it."""
    import signal

    from devicefit.simulator.infra.signals import stopped_message

    cut = ", ".join(f"trial {t.number}" + (f" ({t.candidate})" if t.candidate else "")
                    for t in stopped.trials)
    where = f" during {cut}" if cut else " between trials"
    if kept is not None:
        what = (f"kept the best fitting candidate so far, trial {kept.number} "
                f"({kept.candidate.label()}"
                + ("" if kept.accuracy is None else f", accuracy {format_percent(kept.accuracy)}")
                + f"), in {output}")
    elif not writer:
        what = "the trials judged so far are kept in the study ('--export' writes the best)"
    else:
        what = "no candidate judged so far fits: nothing written"
    again = "; the same command resumes the study" if resumable else ""
    return f"{stopped_message(signal.Signals[stopped.by])}{where}; {what}{again}"


@contextmanager
def trial_progress(no_color: bool, quiet: bool, max_trials: int) -> Iterator[tuple]:
    """(progress, on_trial): rich bars on a TTY; one plain line per trial off a TTY
    (:func:`trial_line`, for fit's trials and search's alike)."""
    err = make_console(no_color, stderr=True)
    if quiet or not sys.stderr.isatty():
        yield None, (None if quiet else lambda record: err.print(trial_line(record)))
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
            bars.console.print(trial_line(record))
        yield update, on_trial


def verified_line(verification: Report | None, runtime: str,
                  judged: TrialRecord[Any, Any] | None = None) -> str:
    """What the run in the target's runtime (named by the run, else ``runtime``) showed, of
    the file as written, named against the ``judged`` trial
    (:func:`sdk.fit.report.written_as`)."""
    from devicefit.sdk.fit.report import written_as

    if verification is not None and verification.measured:
        runtime = verification.measured.runtime
    budgets = verification.budgets if verification is not None else []
    written = written_as(verification, judged)
    written = f", the file as written: {written}" if written else ""
    return f"verified in {runtime}{written}: {', '.join(budget_text(b) for b in budgets)}"


def budget_text(budget: BudgetCheck) -> str:
    """One verified budget; an estimate shows with its error band and says when it is at risk."""
    from devicefit.simulator.types import Status, Unit

    unit = budget.unit
    risk = ", at risk" if budget.status == Status.AT_RISK else ""
    decimal = unit == Unit.BYTES and decimal_prefixes(budget.limit)
    return (f"{budget.name} {format_estimate(budget.value, unit, budget.band, decimal)} ≤ "
            f"{format_figure(budget.limit, unit, decimal)} ({budget.basis}{risk})")
