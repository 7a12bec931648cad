"""``--layers`` and ``--csv`` for every command that prints a simulate report: the per-layer
table (:mod:`simulator.layers`) on the terminal and in a CSV file."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from devicefit.simulator.fileio import Named, write_atomic
from devicefit.simulator.report import Report


def add_layer_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", action="store_true",
                        help="list every operator: shapes, dtype, MACs, parameters, live "
                             "bytes, estimated (and measured) time")
    parser.add_argument("--csv", metavar="FILE.csv",
                        help="write the per-layer table as CSV (one row per operator)")


def layer_outputs(args: argparse.Namespace) -> list[Named]:
    """The ``--csv`` output, for :func:`sdk.outputs.check_outputs`."""
    return [("--csv", getattr(args, "csv", None))]


def write_layers(args: argparse.Namespace, report: Report, *,
                 inputs: Sequence[str | Path] = ()) -> None:
    """Write ``--csv`` (atomically, never over an input)."""
    if getattr(args, "csv", None):
        from devicefit.simulator.views import render

        write_atomic(args.csv, render("csv", report), inputs=inputs)
