"""``devicefit convert``: a trained model → ``.tflite`` for a profile, with what it cost."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.markup import escape

from devicefit.sdk.commands.optimize import add_patch_arguments, patch_options
from devicefit.sdk.console import make_console, table
from devicefit.sdk.convert.data import RANDOM
from devicefit.sdk.convert.sparsity import KINDS
from devicefit.sdk.convert.spec import (
    INT4_WEIGHTS,
    OPTIONS,
    QAT_MODES,
    WEIGHT_BITS,
    ConversionSpec,
)
from devicefit.sdk.options import (
    add_firmware_options,
    add_picture_options,
    data_inputs,
    firmware_output,
    picture_outputs,
    write_firmware,
    write_pictures,
)
from devicefit.simulator.errors import require_extra
from devicefit.simulator.infra import jsonout
from devicefit.simulator.infra.fileio import check_outputs, temporary_folder, write_atomic
from devicefit.simulator.infra.units import (
    format_estimate,
    format_percent,
    format_points,
    format_size,
    format_time_ms,
)
from devicefit.simulator.profiles import IO_TYPES, QUANT_SCHEMES
from devicefit.simulator.report.report import TargetSection
from devicefit.simulator.report.views.messages import budget_format, decimal_budget

if TYPE_CHECKING:
    from rich.console import Console

    from devicefit.sdk.convert.accuracy import AccuracyReport
    from devicefit.sdk.convert.lowbit import LowBitReport
    from devicefit.sdk.convert.report import ConversionReport

EXAMPLE = ("example: devicefit convert model.keras --profile stm32l4r5-cortex-m4 "
           "--calibration train.npz --eval test.npz -o model.tflite")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        description="Quantize (and optionally prune) a trained model as the profile's runtime "
                    "allows, write the .tflite, measure what it cost and simulate it.",
        epilog=EXAMPLE)
    p.add_argument("model", help=".keras, .h5 file or SavedModel folder")
    p.add_argument("--profile", required=True, help="device profile name or .yaml path")
    p.add_argument("-o", "--output", required=True, metavar="OUT.tflite", help="output file")
    p.add_argument("--spec", metavar="SPEC.yaml",
                   help="conversion settings from a YAML file (keys in README, 'Conversion "
                        "spec'); flags given as well override its keys")
    p.add_argument("--calibration", metavar="DATA",
                   help=".npy, .npz (x[, y]) or image folder; 'random' only to try things out")
    p.add_argument("--eval", dest="eval_data", metavar="DATA",
                   help="evaluation data (labels give accuracy; without: agreement and SQNR)")
    prune = p.add_mutually_exclusive_group()
    for kind in KINDS.values():
        prune.add_argument(kind.flag, dest=kind.option, type=kind.flag_type,
                           metavar=kind.metavar, help=kind.help)
    p.add_argument("--train", metavar="DATA", help="labelled data to fine-tune after pruning")
    p.add_argument("--epochs", type=int, help="fine-tuning epochs (with --train)")
    p.add_argument("--distill", action="store_true", default=None,
                   help="fine-tune with the original model as teacher (soft labels)")
    p.add_argument("--scheme", choices=QUANT_SCHEMES, help="quantization (profile default)")
    p.add_argument("--io-type", choices=IO_TYPES,
                   help="input/output tensor type (profile default)")
    p.add_argument("--weights", choices=WEIGHT_BITS, default=None,
                   help="int4: 4-bit weights (with int8 activations) on the conv and "
                        "fully-connected layers the profile's runtime runs that way, asked of "
                        "the runtime and its compiler, 8-bit on the others; written by AI Edge "
                        "Quantizer from the float model. auto: int4 only on the layers the "
                        "flash budget needs, those losing least accuracy on --eval data per "
                        "byte saved, each measured in LiteRT. lut4: int8 filters clustered to 16 "
                        "values per channel, stored as TFLM's look-up-table compression (TFLM "
                        "profiles with runtime.compression: true; accuracy measured in the TFLM "
                        "wheel) (default int8)"),
    p.add_argument("--qat", nargs="?", const="always", choices=QAT_MODES, default=None,
                   help="with --weights int4|auto, --train and --eval: train the layers put at "
                        "4 bits on the int4 grid (quantization-aware) for --epochs, quantize "
                        "again, and report PTQ int4 against QAT int4 accuracy. --qat auto: "
                        "train only when PTQ int4 loses more than 1 pp")
    p.add_argument("--optimize-memory", action="store_true", default=None,
                   help="tflm profiles: reorder operators and write an offline arena plan "
                        "(as 'devicefit optimize' does) so TFLM needs less RAM")
    add_patch_arguments(p, "with --optimize-memory: ")
    p.add_argument("--report", metavar="OUT.json", help="write the full report as JSON")
    add_picture_options(p)
    p.add_argument("--float-baseline", action="store_true", default=None,
                   help="also convert the float32 model to report the size against (a second "
                        "conversion; without it the size is compared with the float32 weights)")
    p.add_argument("--unsafe", action="store_true", default=None,
                   help="trust the model: allow Lambda layers (Python code in a .keras file) "
                        "and SavedModel ops that touch files, the network or Python")
    add_firmware_options(p)
    p.set_defaults(handler=_convert)


def spec_from_args(args: argparse.Namespace) -> ConversionSpec:
    """The conversion spec of ``--spec FILE`` (if given) with the flags given over it."""
    base = ConversionSpec.load(args.spec) if args.spec else ConversionSpec()
    flags = {name: getattr(args, name) for name in OPTIONS
             if name not in ("patches", "max_mac_overhead", "patch_objective")}
    flags.update(patch_options(args))  # given only with --patches (percent → fraction)
    return base.with_options(**flags)


def _convert(args: argparse.Namespace) -> int:
    # TensorFlow runs in a child process: without this it would fail there, later. A float
    # .tflite quantized with --weights int4|auto needs AI Edge Quantizer only.
    if Path(args.model).suffix.lower() != ".tflite" or args.weights not in INT4_WEIGHTS:
        require_extra("tensorflow", "devicefit convert")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
    from devicefit.sdk.convert import convert

    spec = spec_from_args(args)
    data = [(f"{what} data", value) for what, value in (
        ("calibration", spec.calibration), ("eval", spec.eval_data),
        ("train", spec.fine_tune.train if spec.fine_tune else None))
        if isinstance(value, (str, Path)) and value != RANDOM]
    check_outputs([("-o", args.output), ("--report", args.report), *picture_outputs(args)],
                  [*data_inputs(args, ()), *data, ("spec", args.spec)])
    firmware_output(args, [*data_inputs(args, ()), *data, ("-o", args.output)])
    console = make_console(args.no_color)
    with temporary_folder("devicefit-") as tmp, warnings_to(console), \
            _progress(args.no_color, args.quiet) as (progress, on_stage):
        baseline = Path(tmp) / "float32.tflite" if args.html or args.plot else None
        report = convert(args.model, args.profile, args.output, spec,
                         profiles_dirs=args.profiles_dir, progress=progress, on_stage=on_stage,
                         baseline_output=baseline)
        if baseline is not None:
            _before_after(args, report, baseline)
    if args.report:
        write_atomic(args.report, jsonout.dumps(report.to_dict(), indent=2) + "\n",
                     inputs=[args.model])
    _print_summary(console, report)
    code = 0 if report.verdict in (None, "pass") else 1
    if code == 0:
        code = write_firmware(args, args.output, args.profile, console.print)
    return code


def _size_line(report: ConversionReport) -> str:
    s = report.settings
    line = (f"[bold]{report.output}[/bold]: {s.scheme} ({s.io_type} I/O) for "
            f"{report.profile}, {format_size(report.output_bytes)}")
    if s.weights == "lut4":
        line = line.replace(" I/O)", " I/O, filters as 4-bit TFLM look-up tables)", 1)
    if report.float_tflite_bytes:
        line += (f" = {report.size_ratio:.2f}x the float32 .tflite "
                 f"({format_size(report.float_tflite_bytes)})")
    elif report.float_weight_bytes:
        line += (f" = {report.size_ratio:.2f}x its weights as float32 "
                 f"({format_size(report.float_weight_bytes)})")
    return line


def verdict_line(report: ConversionReport) -> tuple[str, str]:
    """The simulated figures and the verdict with its reasons: the target's compiler
    refusing the model, which budget failed by how much, which ops the runtime lacks (and
    their layers), which budgets went unchecked."""
    sim = report.simulation
    assert sim is not None  # called for a conversion that was simulated
    figures = [f"{b.name} {format_estimate(b.value, b.unit, b.band, decimal_budget(b))} of "
               f"{budget_format(b)(b.limit)}" for b in sim.budgets]
    at_risk = sim.at_risk
    figures += [f"{name} unchecked ({why})" for name, why in report.unchecked_budgets.items()]
    reasons = [sim.compile_refusal.line()] if sim.compile_refusal is not None else []
    reasons += [f"{b.name} over budget by {budget_format(b)(-b.margin)}"
                for b in sim.budgets if not b.ok]
    ops = sim.compatibility.unsupported_ops if sim.compatibility is not None else ()
    if ops:
        named = [o.op + (f" (layer {layer})" if (layer := report.layer_of(o.subgraph, o.op_index))
                         else "") for o in ops[:6]]
        reasons.append(f"{report.runtime} cannot run {', '.join(named)}"
                       + (f" and {len(ops) - 6} more" if len(ops) > 6 else "")
                       + (f": {ops[0].reason}" if ops[0].reason else ""))
    if report.verdict != "pass":
        word, colour = "FAIL: " + "; ".join(reasons or ["see the report"]), "red"
    elif report.unchecked_budgets:
        word, colour = (f"PASS for the checked budgets; {', '.join(report.unchecked_budgets)} "
                        "UNCHECKED"), "yellow"
    elif at_risk:
        word, colour = (f"PASS; {', '.join(at_risk)} AT RISK (its error band reaches past the "
                        "budget)"), "yellow"
    else:
        word, colour = "PASS", "green"
    return (f"simulated on {report.profile}: {', '.join(figures) or 'no budgets'} → ",
            f"[bold {colour}]{word}[/bold {colour}]")


def _before_after(args: argparse.Namespace, report: ConversionReport, baseline: Path
                  ) -> None:
    """``--html``/``--plot``: the float32 model and the converted one on the same profile,
    with the conversion's size ratio and accuracy; the float32 file is a temp file, so the
    pictures name it by what it is, not by its path."""
    import dataclasses

    from devicefit.sdk.options import conversion_summary_html
    from devicefit.simulator.simulate import simulate

    before = simulate(baseline, report.profile, profiles_dirs=args.profiles_dir)
    before = dataclasses.replace(before, model=dataclasses.replace(
        before.model, path=f"float32 .tflite of {args.model} (not kept)"))
    pairs = [(f"before: float32 .tflite of {args.model}", before),
             (f"after: {report.output} ({report.settings.scheme})",
              simulate(report.output, report.profile, profiles_dirs=args.profiles_dir))]
    write_pictures(args, pairs, inputs=[args.model], intro=conversion_summary_html(report),
                   title=f"convert {args.model} for {report.profile}: before / after")


def _print_summary(console: Console, report: ConversionReport) -> None:
    from devicefit.sdk.convert.finetune import training_summary

    s = report.settings
    console.print(_size_line(report))
    if report.scheme_reason:
        console.print(f"why: {escape(report.scheme_reason)}")
    if report.pruned_layers:
        console.print(table("Channels removed", ["layer", "op", "before", "after"],
                            [(p.name, p.op, p.before, p.after) for p in report.pruned_layers]))
    if trained := training_summary(report.fine_tune):
        console.print(trained)
    if s.sparsity:
        rows = [(w.tensor, w.op, "x".join(map(str, w.shape)), f"{format_percent(w.zero_fraction, 0)}",
                 "-" if w.nm_groups is None or w.nm_violations is None
                 else f"{w.nm_groups - w.nm_violations}/{w.nm_groups}")
                for w in report.weights]
        console.print(table(f"Weights read back from the file ({s.sparsity})",
                            ["tensor", "op", "shape", "zeros", "groups ok"], rows))
    acc = report.accuracy
    if acc is not None:
        parts = [f"{acc.samples} samples"]
        if acc.float_accuracy is not None and acc.accuracy_drop_pp is not None:
            parts.append(f"accuracy {format_percent(acc.float_accuracy)} float → {format_percent(acc.converted_accuracy)} "
                         f"converted ({format_points(-acc.accuracy_drop_pp)})")
        if acc.top1_agreement is not None:
            parts.append(f"top-1 agreement {format_percent(acc.top1_agreement)}")
        parts.append("SQNR " + ("identical" if acc.sqnr_db is None else f"{acc.sqnr_db:.1f} dB"))
        if not acc.runtime.startswith("litert"):  # LiteRT is the default, said in the docs
            parts.append(f"run in {acc.runtime}")
        console.print("evaluation: " + ", ".join(parts))
    console.print("stages: " + ", ".join(f"{k} {format_time_ms(v * 1000)}"
                                         for k, v in report.stages.items()))
    for line in _target_lines(report.target_extra):
        console.print(line)
    if report.low_bit is not None:
        _print_low_bit(console, report.low_bit, list(report.layers))
    if report.qat is not None:
        console.print(_qat_line(report))
    if report.memory_optimization is not None:
        o = report.memory_optimization
        console.print(f"memory optimization: {o.summary} (TFLM head "
                      f"{format_size(o.head_before_bytes)} → {format_size(o.head_after_bytes)}"
                      f", best-order bound {format_size(o.bound_best_order_bytes)})")
        for note in o.notes:
            if note.startswith("patches"):
                console.print(f"  {note}")
    if report.simulation is not None:
        figures, verdict = verdict_line(report)
        console.print(escape(figures) + verdict)
    for w in report.warnings:
        console.print(f"[bold yellow]warning:[/bold yellow] {w}")


def _qat_line(report: ConversionReport) -> str:
    """``--qat``: PTQ int4 against the written model, and why QAT ran or not."""
    q, written = report.qat, report.accuracy
    assert q is not None

    def score(acc: AccuracyReport | None) -> str:
        if acc is None:
            return "-"
        if acc.converted_accuracy is not None:
            return f"accuracy {format_percent(acc.converted_accuracy)}"
        if acc.top1_agreement is not None:
            return f"top-1 agreement {format_percent(acc.top1_agreement)}"
        return "SQNR " + ("identical" if acc.sqnr_db is None else f"{acc.sqnr_db:.1f} dB")

    if not q.trained:
        return f"QAT int4: not run, {escape(q.why)}; PTQ int4 {score(q.ptq_accuracy)} (measured)"
    return (f"QAT int4 ({q.epochs} epoch(s), {len(q.layers)} layer(s) on the int4 grid; "
            f"{escape(q.why)}): {score(written)}, PTQ int4 {score(q.ptq_accuracy)} "
            f"(both measured in LiteRT on {q.ptq_accuracy.samples} samples)")


def _print_low_bit(console: Console, low: LowBitReport, layers: list[str]) -> None:
    """``--weights int4``: each layer with weights, its bits, and why it is not int4 per
    channel, in short (``--report`` keeps the runtime's whole message)."""
    from devicefit.sdk.convert.diagnose import layer_of

    rows = [(str(w.op_index), w.op, layer_of(w.layer, layers) or w.layer.split(";")[0],
             f"int{w.bits} {w.granularity}", format_size(w.weight_bytes),
             w.why.split(": (")[0]) for w in low.layers]
    console.print(table(f"Weights: int4 on {low.int4_layers} of {len(low.layers)} layers "
                        f"({low.engine}; what the runtime refused, asked "
                        f"{low.rounds} time(s))",
                        ["op", "type", "layer", "weights", "bytes", "why not int4"], rows))
    if low.sensitivity:
        console.print(table(
            f"Each layer alone at int4 against all-int8 (flash {format_size(low.int8_flash_bytes or 0)}"
            f" all-int8, budget {format_size(low.flash_limit_bytes or 0)}; cheapest first)",
            ["op", "layer", "saves", "accuracy vs all-int8", "int4"],
            [(str(s.op_index), layer_of(s.layer, layers) or s.layer, format_size(s.saved_bytes),
              format_points(-s.drop_pp), "yes" if s.chosen else "no")
             for s in low.sensitivity]))


def _target_lines(extra: TargetSection | None) -> list[str]:
    """What the target's ``after_convert`` hook reported (a section), in a line or a few."""
    return [] if extra is None else extra.summary_lines()


class _ConsoleHandler(logging.Handler):
    def __init__(self, console: Console) -> None:
        super().__init__(logging.WARNING)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(f"[bold yellow]warning:[/bold yellow] {record.getMessage()}",
                           markup=True, highlight=False)


@contextmanager
def warnings_to(console: Console) -> Iterator[None]:
    """Show the library's logged warnings as they happen (e.g. random calibration)."""
    logger = logging.getLogger("devicefit.sdk")
    handler = _ConsoleHandler(make_console(console.no_color, stderr=True))
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@contextmanager
def _progress(no_color: bool, quiet: bool = False) -> Iterator:
    """(progress, on_stage) callbacks: rich bars on a TTY, plain lines otherwise (a CI log
    must show a long run is alive too); none with ``--quiet``."""
    if quiet:
        yield None, None
        return
    if not sys.stderr.isatty():
        with _PlainProgress(sys.stderr) as plain:
            yield plain.update, plain.stage
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TaskID,
        TextColumn,
    )

    tasks: dict[str, TaskID] = {}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), console=make_console(no_color, stderr=True),
                  transient=True) as bars:
        current: list[TaskID] = []

        def stage(name: str) -> None:
            if current:
                bars.remove_task(current.pop())
            current.append(bars.add_task(name, total=None))

        def update(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bars.add_task(name, total=total)
            bars.update(tasks[name], completed=done, total=total)
        yield update, stage


class _PlainProgress:
    """Plain progress lines: a stage still running after :attr:`DELAY` seconds is announced,
    and counts inside it are repeated at most every :attr:`EVERY` seconds."""

    DELAY = 2.0
    EVERY = 10.0

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.last_count = 0.0

    def __enter__(self) -> _PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cancel()

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _say(self, text: str) -> None:
        with self.lock:
            print(f"devicefit convert: {text}", file=self.stream, flush=True)

    def stage(self, name: str) -> None:
        self._cancel()
        started = time.monotonic()
        self.timer = threading.Timer(
            self.DELAY, lambda: self._say(f"{name} … ({time.monotonic() - started:.0f} s)"))
        self.timer.daemon = True
        self.timer.start()

    def update(self, name: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last_count >= self.EVERY or (done == total and self.last_count):
            self.last_count = now
            self._say(f"{name} {done}/{total}")
