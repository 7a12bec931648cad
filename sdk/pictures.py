"""``--html`` and ``--plot`` for every command whose result is one or more simulate reports."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicefit.simulator.fileio import write_atomic
from devicefit.simulator.report import Report


def add_picture_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--html", metavar="FILE.html",
                        help="write a self-contained HTML report: memory timeline, arena "
                             "layout, per-op cost, budgets")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="write the memory timeline as a PNG (matplotlib)")


def write_pictures(args: argparse.Namespace, reports: Sequence[tuple[str, Report]], *,
                   inputs: Sequence[str | Path] = (), title: str | None = None,
                   intro: str = "") -> None:
    """Write the views the user asked for; ``reports`` are (heading, report) pairs.

    Several reports (convert's before/after) are drawn on one y scale, in the page and in
    the PNG, so their heights compare.
    """
    if getattr(args, "html", None):
        from devicefit.simulator.views.html import Section, render_html

        page = render_html(title or reports[0][0], [Section(h, r) for h, r in reports], intro,
                           shared_scale=len(reports) > 1)
        write_atomic(args.html, page, inputs=inputs)
    if getattr(args, "plot", None) and reports:
        from devicefit.simulator.views.png import render_reports

        write_atomic(args.plot, render_reports(reports), inputs=inputs)


def conversion_summary_html(report: Any) -> str:
    """The figures of a conversion (a :class:`sdk.convert.ConversionReport`) a before/after
    page leads with: sizes and their ratio, accuracy before and after, SQNR."""
    from devicefit.simulator.units import format_percent, format_size
    from devicefit.simulator.views.html import html_table

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
