"""``devicefit convert``: a trained model → ``.tflite`` for a profile, with what it cost."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sdk.console import make_console, table
from sdk.outputs import check_outputs, data_inputs, picture_outputs
from sdk.pictures import add_picture_options, write_pictures
from simulator.fileio import write_atomic
from simulator.profiles import QUANT_SCHEMES
from simulator.units import format_size

EXAMPLE = ("example: devicefit convert model.keras --profile stm32l4r5-cortex-m4 "
           "--calibration train.npz --eval test.npz -o model.tflite")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert", help="convert a Keras/SavedModel model to .tflite for a device profile",
        description="Quantize (and optionally prune) a trained model as the profile's runtime "
                    "allows, write the .tflite, measure what it cost and simulate it.",
        epilog=EXAMPLE)
    p.add_argument("model", help=".keras, .h5 file or SavedModel folder")
    p.add_argument("--profile", required=True, help="device profile name or .yaml path")
    p.add_argument("-o", "--output", required=True, metavar="OUT.tflite", help="output file")
    p.add_argument("--calibration", metavar="DATA",
                   help=".npy, .npz (x[, y]) or image folder; 'random' only to try things out")
    p.add_argument("--eval", dest="eval_data", metavar="DATA",
                   help="evaluation data (labels give accuracy; without: agreement and SQNR)")
    prune = p.add_mutually_exclusive_group()
    prune.add_argument("--sparsity", metavar="N:M", help="N:M weight sparsity, e.g. 2:4")
    prune.add_argument("--prune-channels", type=float, metavar="FRACTION",
                       help="remove this fraction of filters/units, e.g. 0.5")
    p.add_argument("--train", metavar="DATA", help="labelled data to fine-tune after pruning")
    p.add_argument("--epochs", type=int, default=0, help="fine-tuning epochs (with --train)")
    p.add_argument("--distill", action="store_true",
                   help="fine-tune with the original model as teacher (soft labels)")
    p.add_argument("--scheme", choices=QUANT_SCHEMES, help="quantization (profile default)")
    p.add_argument("--io-type", choices=("int8", "uint8", "int16", "float32"),
                   help="input/output tensor type (profile default)")
    p.add_argument("--optimize-memory", action="store_true",
                   help="tflm profiles: reorder operators and write an offline arena plan "
                        "(as 'devicefit optimize' does) so TFLM needs less RAM")
    p.add_argument("--report", metavar="OUT.json", help="write the full report as JSON")
    add_picture_options(p)
    p.add_argument("--unsafe", action="store_true",
                   help="allow Lambda layers (runs Python code from the model file)")
    p.set_defaults(handler=_convert)


def _convert(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
    from sdk.convert import convert

    check_outputs([("-o", args.output), ("--report", args.report), *picture_outputs(args)],
                  data_inputs(args, ("calibration", "eval_data", "train")))
    console = make_console(args.no_color)
    with tempfile.TemporaryDirectory() as tmp, _warnings_to(console), \
            _progress(args.no_color) as progress:
        baseline = Path(tmp) / "float32.tflite" if args.html else None
        report = convert(
            args.model, args.profile, args.output, calibration=args.calibration,
            eval_data=args.eval_data, sparsity_pattern=args.sparsity,
            prune_channels=args.prune_channels, train=args.train, epochs=args.epochs,
            distill=args.distill, optimize_memory=args.optimize_memory,
            scheme=args.scheme, io_type=args.io_type, unsafe=args.unsafe,
            profiles_dirs=args.profiles_dir, progress=progress, baseline_output=baseline)
        if baseline is not None:
            _before_after(args, report, baseline)
    if args.report:
        write_atomic(args.report, json.dumps(report.to_dict(), indent=2) + "\n",
                     inputs=[args.model])
    _print_summary(console, report)
    return 0 if report.verdict in (None, "pass") else 1


def _before_after(args: argparse.Namespace, report, baseline: Path) -> None:
    """``--html``/``--plot``: the float32 model and the converted one on the same profile."""
    from simulator.simulate import simulate

    pairs = [(f"before: float32 .tflite of {args.model}", simulate(baseline, report.profile,
                                                                    profiles_dirs=args.profiles_dir)),
             (f"after: {report.output} ({report.settings['scheme']})",
              simulate(report.output, report.profile, profiles_dirs=args.profiles_dir))]
    write_pictures(args, pairs, inputs=[args.model],
                   title=f"convert {args.model} for {report.profile}: before / after")


def _print_summary(console, report) -> None:
    s = report.settings
    console.print(f"[bold]{report.output}[/bold]: {s['scheme']} ({s['io_type']} I/O) for "
                  f"{report.profile}, {format_size(report.output_bytes)}"
                  + (f" = {report.size_ratio:.2f}x the float .tflite "
                     f"({format_size(report.float_tflite_bytes)})" if report.size_ratio else ""))
    if report.pruned_layers:
        console.print(table("Channels removed", ["layer", "op", "before", "after"],
                            [(p.name, p.op, p.before, p.after) for p in report.pruned_layers]))
    for ft in report.fine_tune:
        console.print(f"fine-tuned {ft.epochs} epoch(s): batch {ft.batch_size} x "
                      f"{ft.accumulation_steps} accumulation, loss "
                      + " → ".join(f"{v:.3f}" for v in ft.loss))
    if s.get("sparsity"):
        rows = [(w.tensor, w.op, "x".join(map(str, w.shape)), f"{w.zero_fraction:.0%}",
                 "-" if w.nm_groups is None else f"{w.nm_groups - w.nm_violations}/{w.nm_groups}")
                for w in report.weights]
        console.print(table(f"Weights read back from the file ({s['sparsity']})",
                            ["tensor", "op", "shape", "zeros", "groups ok"], rows))
    acc = report.accuracy
    if acc is not None:
        parts = [f"{acc.samples} samples"]
        if acc.float_accuracy is not None:
            parts.append(f"accuracy {acc.float_accuracy:.2%} float → {acc.converted_accuracy:.2%} "
                         f"converted ({-acc.accuracy_drop_pp:+.2f} pp)")
        if acc.top1_agreement is not None:
            parts.append(f"top-1 agreement {acc.top1_agreement:.2%}")
        parts.append("SQNR " + ("identical" if acc.sqnr_db is None else f"{acc.sqnr_db:.1f} dB"))
        console.print("evaluation: " + ", ".join(parts))
    console.print("stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in report.stages.items()))
    if report.edgetpu is not None:
        e = report.edgetpu
        first = e.get("first_unmapped")
        console.print(f"Edge TPU: {e['mapped_ops']}/{e['total_ops']} ops mapped"
                      + (f"; first on CPU: op {first['index']} {first['op']}: {first['reason']}"
                         if first else "")
                      + (f"; {e['compile_error']}" if e.get("compile_error") else ""))
    if report.memory_optimization is not None:
        o = report.memory_optimization
        console.print(f"memory optimization: {o['summary']} (TFLM head "
                      f"{format_size(o['head_before_bytes'])} → {format_size(o['head_after_bytes'])}"
                      f", best-order bound {format_size(o['bound_best_order_bytes'])})")
    if report.simulation is not None:
        budgets = ", ".join(
            f"{b['name']} {'ok' if b['ok'] else 'OVER'}" for b in report.simulation["budgets"])
        mem = report.simulation["memory"]
        colour = "green" if report.verdict == "pass" else "red"
        console.print(f"simulated on {report.profile}: flash {format_size(mem['flash_bytes'])}, "
                      f"arena {format_size(mem['arena_bytes'])}; {budgets} → "
                      f"[bold {colour}]{report.verdict.upper()}[/bold {colour}]")
    for w in report.warnings:
        console.print(f"[bold yellow]warning:[/bold yellow] {w}")


class _ConsoleHandler(logging.Handler):
    def __init__(self, console) -> None:
        super().__init__(logging.WARNING)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(f"[bold yellow]warning:[/bold yellow] {record.getMessage()}",
                           markup=True, highlight=False)


@contextmanager
def _warnings_to(console) -> Iterator[None]:
    """Show the library's logged warnings as they happen (e.g. random calibration)."""
    logger = logging.getLogger("sdk")
    handler = _ConsoleHandler(make_console(console.no_color, stderr=True))
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@contextmanager
def _progress(no_color: bool) -> Iterator:
    """A progress callback drawing rich bars on a TTY; None (no output) otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    tasks: dict[str, int] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=make_console(no_color, stderr=True), transient=True) as bars:
        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            bars.update(tasks[stage], completed=done, total=total)
        yield update
