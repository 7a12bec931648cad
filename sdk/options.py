"""What several commands share on their command line: argument types, the ``--layers``/
``--csv`` and ``--html``/``--plot`` options and the writing of their files, the study's
flags of ``fit`` and ``search`` and their reports and exit codes, and the inputs and outputs
each command hands to :func:`simulator.infra.fileio.check_outputs`.

Every command calls ``check_outputs`` once, before its work starts, with everything it reads
and everything it will write, so a typo such as ``--html model.tflite`` or ``--html X --plot
X`` costs one line and exit 2, not the input or an hour of conversion.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit.simulator.infra.fileio import Named, write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.report.report import Report

if TYPE_CHECKING:
    from devicefit.sdk.study import SearchSettings

TIME_UNITS = {"s": 1, "m": 60, "h": 3600}

# --------------------------------------------------------------------------- argument types
def positive_seconds(text: str) -> float:
    """A timeout: a finite number of seconds > 0 (``nan`` would disable the timeout)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def input_shape(text: str) -> tuple[str | None, tuple[int, ...]]:
    """``--input-shape [NAME:]DIMS`` (:func:`simulator.plan.shapes.parse_input_shape`)."""
    from devicefit.simulator.errors import UsageError
    from devicefit.simulator.plan.shapes import parse_input_shape

    try:
        return parse_input_shape(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_duration(text: str | None) -> float | None:
    """'30m' → 1800.0 seconds; a bare number is seconds."""
    from devicefit.simulator.errors import UsageError

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


# --------------------------------------------------------------------------- inputs
def data_inputs(args: argparse.Namespace, data_options: tuple[str, ...]) -> list[Named]:
    """The model, the profile's files and the data options of a converting command;
    ``random`` (generated calibration data) is no file."""
    from devicefit.simulator.profiles import load_profile

    data = [(f"{name.replace('_data', '')} data", getattr(args, name, None))
            for name in data_options]
    profile = [] if args.profile is None else profile_inputs(  # fit --export may omit it
        load_profile(args.profile, args.profiles_dir))
    return [("model", args.model), *profile, *((what, p) for what, p in data if p != "random")]


def profile_inputs(profile: Profile) -> list[Named]:
    """A profile's file and the files it extends."""
    return [("profile", Path(f)) for f in profile.files]


# --------------------------------------------------------------------------- --layers, --csv
def add_layer_options(parser: argparse.ArgumentParser) -> None:
    """``--layers`` and ``--csv`` for every command that prints a simulate report: the
    per-layer table (:mod:`simulator.report.layers`) on the terminal and in a CSV file."""
    parser.add_argument("--layers", action="store_true",
                        help="list every operator: shapes, dtype, MACs, parameters, live "
                             "bytes, estimated (and measured) time")
    parser.add_argument("--csv", metavar="FILE.csv",
                        help="write the per-layer table as CSV (one row per operator)")


def layer_outputs(args: argparse.Namespace) -> list[Named]:
    """The ``--csv`` output of :func:`add_layer_options`."""
    return [("--csv", getattr(args, "csv", None))]


def write_layers(args: argparse.Namespace, report: Report, *,
                 inputs: Sequence[str | Path] = ()) -> None:
    """Write ``--csv`` (atomically, never over an input)."""
    if getattr(args, "csv", None):
        from devicefit.simulator.report.views import render

        write_atomic(args.csv, render("csv", report), inputs=inputs)
        say_written(args.csv)


def say_written(path: str | Path) -> None:
    """One line on stderr for a file a view wrote (``--html``, ``--plot``, ``--csv``): the
    report goes to stdout, and may be JSON a pipe reads."""
    print(f"wrote {path}", file=sys.stderr)


# --------------------------------------------------------------------------- --html, --plot
def add_picture_options(parser: argparse.ArgumentParser) -> None:
    """``--html`` and ``--plot`` for every command whose result is one or more simulate
    reports."""
    parser.add_argument("--html", metavar="FILE.html",
                        help="write a self-contained HTML report: memory timeline, arena "
                             "layout, per-op cost, budgets")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="write the memory timeline as a PNG (matplotlib)")


def picture_outputs(args: argparse.Namespace) -> list[Named]:
    """The ``--html``/``--plot`` outputs of :func:`add_picture_options`."""
    return [("--html", getattr(args, "html", None)), ("--plot", getattr(args, "plot", None))]


def write_pictures(args: argparse.Namespace, reports: Sequence[tuple[str, Report]], *,
                   inputs: Sequence[str | Path] = (), title: str | None = None,
                   intro: str = "") -> None:
    """Write the views the user asked for; ``reports`` are (heading, report) pairs.

    Several reports (convert's before/after) are drawn on one y scale, in the page and in
    the PNG, so their heights compare.
    """
    if getattr(args, "html", None):
        from devicefit.simulator.report.views.html import Section, render_html

        page = render_html(title or reports[0][0], [Section(h, r) for h, r in reports], intro,
                           shared_scale=len(reports) > 1)
        write_atomic(args.html, page, inputs=inputs)
        say_written(args.html)
    if getattr(args, "plot", None) and reports:
        from devicefit.simulator.report.views.png import render_reports

        write_atomic(args.plot, render_reports(reports), inputs=inputs)
        say_written(args.plot)


def conversion_summary_html(report: Any) -> str:
    """The figures of a conversion (a :class:`sdk.convert.ConversionReport`) a before/after
    page leads with: sizes and their ratio, accuracy before and after, SQNR."""
    from devicefit.simulator.infra.units import format_percent, format_size
    from devicefit.simulator.report.views.html import html_table

    pct = format_percent

    rows = [("converted size", format_size(report.output_bytes))]
    if report.float_tflite_bytes:
        rows.append(("float32 .tflite size", format_size(report.float_tflite_bytes)))
    if report.size_ratio is not None:
        rows.append(("size ratio (after / before)", f"{report.size_ratio:.2f}x"))
    acc = report.accuracy
    if acc is None:
        rows.append(("accuracy", "not measured (give --eval DATA)"))
    else:
        drop = acc.accuracy_drop_pp
        rows += [("accuracy before (float32)", pct(acc.float_accuracy)),
                 ("accuracy after", pct(acc.converted_accuracy)),
                 ("accuracy drop", "-" if drop is None else f"{drop:.2f} pp"),
                 ("top-1 agreement", pct(acc.top1_agreement)),
                 ("SQNR", "-" if acc.sqnr_db is None else f"{acc.sqnr_db:.1f} dB"),
                 ("evaluated on", f"{acc.samples} samples, {acc.runtime}")]
    return '<h2>Conversion</h2><div id="conversion">' + html_table((), rows) + "</div>"


# --------------------------------------------------------------------------- --firmware
def add_firmware_options(parser: argparse.ArgumentParser) -> None:
    """``--firmware DIR`` (and ``--tflm``) for every command that writes a model: the
    written model's firmware component too, as ``devicefit export`` writes it."""
    group = parser.add_argument_group("the firmware component (as devicefit export)")
    group.add_argument("--firmware", default=None, metavar="DIR",
                       help="also write the output model as a TFLM firmware component to DIR "
                            "(the model array, its op resolver, the judged arena, a header, an "
                            "example, build files: see devicefit export)")
    group.add_argument("--tflm", default=None, metavar="TFLM_DIR",
                       help="with --firmware: your TFLM checkout's op resolver method names")


def firmware_output(args: argparse.Namespace, inputs: Sequence[Named]) -> None:
    """Refuse a bad ``--firmware`` folder before any work (one line, exit 2)."""
    from devicefit.simulator.errors import UsageError
    from devicefit.simulator.infra.fileio import check_output_folder

    if args.tflm and not args.firmware:
        raise UsageError("--tflm names the op resolver's methods of --firmware: add --firmware")
    if args.firmware:
        check_output_folder("--firmware", Path(args.firmware),
                            [*inputs, ("TFLM checkout", args.tflm)])


def write_firmware(args: argparse.Namespace, model: str | Path, profile: str | Profile,
                   say: Any = print) -> int:
    """The ``--firmware`` folder of the written ``model``: 0 written, 1 its verdict fails
    (said in one line; the command's own outputs stand)."""
    from devicefit.sdk.export import ExportRefused, export_model
    from devicefit.simulator.profiles import load_profile

    if not args.firmware:
        return 0
    loaded = profile if isinstance(profile, Profile) else load_profile(profile,
                                                                       args.profiles_dir)
    try:
        done = export_model(model, loaded, args.firmware, tflm=args.tflm)
    except ExportRefused as exc:
        say(f"firmware: {exc}")
        return 1
    arena = done.manifest["arena"]
    say(f"firmware: wrote {args.firmware}/ ({arena['symbol']} {arena['bytes']:,} B, "
        f"{len(done.manifest['ops'])} ops; next: devicefit link-check FIRMWARE.map --export "
        f"{args.firmware})")
    return 0


# --------------------------------------------------------------------------- the study
def add_study_options(parser: argparse.ArgumentParser, *, storage: str, study: str,
                      artifacts: str) -> None:
    """How ``fit`` and ``search`` run their study (:class:`sdk.study.SearchSettings`); the
    help of the flags whose meaning differs between them is theirs."""
    parser.add_argument("--storage", metavar="URL", help=storage)
    parser.add_argument("--study", "--study-name", dest="study_name", metavar="NAME", help=study)
    parser.add_argument("--artifacts", type=Path, metavar="DIR", help=artifacts)
    parser.add_argument("--heartbeat", type=int, default=30, metavar="SECONDS",
                        help="on a database server: a worker silent for 3 heartbeats is taken "
                             "for dead and its trial is retried by another (30)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel trial processes (1)")
    parser.add_argument("--seed", type=int, default=0, help="sampler seed (0)")


def study_settings(args: argparse.Namespace) -> SearchSettings:
    """The study's flags as one value (``--max-trials`` and ``--time-budget`` too)."""
    from devicefit.sdk.study import SearchSettings
    from devicefit.simulator.errors import UsageError

    if args.heartbeat < 1:
        raise UsageError(f"--heartbeat {args.heartbeat}: give at least 1 second")
    return SearchSettings(max_trials=args.max_trials,
                          time_budget_s=parse_duration(args.time_budget), storage=args.storage,
                          study_name=args.study_name, jobs=args.jobs, seed=args.seed,
                          heartbeat_s=args.heartbeat, artifacts=args.artifacts)


def write_reports(args: argparse.Namespace, data: dict[str, Any], html: Callable[[], str],
                  summary: Callable[[], None], inputs: Sequence[str | Path]) -> None:
    """``--report`` (the JSON ``data``), ``--html``, and on stdout ``--json`` or the summary."""
    from devicefit.sdk.console import print_json
    from devicefit.simulator.infra import jsonout

    if args.report:
        write_atomic(args.report, jsonout.dumps(data, indent=2) + "\n", inputs=inputs)
    if args.html:
        write_atomic(args.html, html(), inputs=inputs)
    if args.json:
        print_json(data)
    else:
        summary()


def study_exit(args: argparse.Namespace, *, writer: bool, found: bool,
               profile: str | Profile, say: Callable[[str], object]) -> int:
    """0 when another worker of the study writes the winner or it was written (with its
    ``--firmware``: :func:`write_firmware`), 1 when nothing fits."""
    if not writer:
        return 0
    if not found:
        return 1
    return write_firmware(args, args.output, profile, say)
