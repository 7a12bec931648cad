"""``--html`` and ``--plot`` for every command whose result is one or more simulate reports."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from simulator.fileio import write_atomic
from simulator.report import Report


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

    The PNG shows the last report's timeline (a plot is for one model on one device: the
    result, e.g. the converted model after its float baseline).
    """
    if getattr(args, "html", None):
        from simulator.views.html import Section, render_html

        page = render_html(title or reports[0][0], [Section(h, r) for h, r in reports], intro)
        write_atomic(args.html, page, inputs=inputs)
    if getattr(args, "plot", None) and reports:
        from simulator.views import render

        write_atomic(args.plot, render("png", reports[-1][1]), inputs=inputs)
