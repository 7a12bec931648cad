"""argparse types shared by several commands."""

from __future__ import annotations

import argparse
import math


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
    """``--input-shape [NAME:]DIMS`` (:func:`simulator.shapes.parse_input_shape`)."""
    from devicefit.simulator.errors import UsageError
    from devicefit.simulator.shapes import parse_input_shape

    try:
        return parse_input_shape(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
