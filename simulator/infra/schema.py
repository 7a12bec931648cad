"""Checkers for the values of YAML files (profiles, targets' own keys): one :class:`Leaf`
per key, which parses a value or raises :class:`ValueError`, and says what it allows.

Profiles (:mod:`simulator.profiles`) build their schema from these; a target
(:mod:`simulator.targets`) declares its own profile keys with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devicefit.simulator.infra.units import (
    SIZE_UNITS_HELP,
    TIME_UNITS_HELP,
    parse_size,
    parse_time_ms,
    size_warning,
)

Checker = Callable[[Any], Any]


@dataclass(frozen=True)
class Leaf:
    check: Checker
    allowed: str
    #: Why a value that passed ``check`` may not mean what its writer meant (a warning the
    #: profile validator reports with file, key and line), or None.
    lint: Callable[[Any], str | None] | None = None


def string() -> Leaf:
    def check(v: Any) -> str:
        if not isinstance(v, str) or not v.strip():
            raise ValueError("expected a non-empty string")
        return v
    return Leaf(check, "a string")


def boolean() -> Leaf:
    def check(v: Any) -> bool:
        if not isinstance(v, bool):
            raise ValueError("expected true or false")
        return v
    return Leaf(check, "true or false")


def integer(lo: int, hi: int | None = None) -> Leaf:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
            raise ValueError("out of range or not an integer")
        return v
    return Leaf(check, f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else ""))


def finite_number(v: Any) -> float:
    """``v`` as a finite float; NaN would pass every comparison below and void a budget."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError("not a finite number")
    return float(v)


def number(lo: float = 0.0) -> Leaf:
    def check(v: Any) -> float:
        if finite_number(v) < lo:
            raise ValueError("not a number in range")
        return float(v)
    return Leaf(check, f"a finite number >= {lo:g}")


def fraction() -> Leaf:
    def check(v: Any) -> float:
        if not 0 < finite_number(v) <= 1:
            raise ValueError("not a fraction in range")
        return float(v)
    return Leaf(check, "a number > 0 and <= 1")


def share() -> Leaf:
    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise ValueError("not a share in range")
        return float(v)
    return Leaf(check, "a number >= 0 and <= 1 (0.1 = 10 %)")


def one_of(*choices: str) -> Leaf:
    def check(v: Any) -> str:
        if v not in choices:
            raise ValueError("not one of the allowed values")
        return v
    return Leaf(check, "one of " + ", ".join(choices))


def list_of(item: Leaf, non_empty: bool = False) -> Leaf:
    def check(v: Any) -> tuple:
        if not isinstance(v, list) or (non_empty and not v):
            raise ValueError("expected a non-empty list" if non_empty else "expected a list")
        return tuple(item.check(x) for x in v)
    return Leaf(check, f"a {'non-empty ' if non_empty else ''}list, each {item.allowed}")


def one_of_ints(*choices: int) -> Leaf:
    def check(v: Any) -> int:
        if isinstance(v, bool) or v not in choices:
            raise ValueError("not one of the allowed values")
        return int(v)
    return Leaf(check, "one of " + ", ".join(map(str, choices)))


def mapping_of(value: Leaf) -> Leaf:
    def check(v: Any) -> dict:
        if not isinstance(v, dict):
            raise ValueError("expected a mapping")
        return {str(k): value.check(x) for k, x in v.items()}
    return Leaf(check, f"a mapping of names to {value.allowed}")


def leaf(parse: Callable[[Any], Any], allowed: str) -> Leaf:
    return Leaf(parse, allowed)


def _bandwidth(v: Any) -> float:
    """``"320MB/s"`` or a bytes-per-second number."""
    if isinstance(v, str) and v.strip().endswith("/s"):
        return float(parse_size(v.strip()[:-2]))
    return float(parse_size(v))


#: A size of storage (flash, code): decimal units are as good as binary ones there.
SIZE = Leaf(parse_size, SIZE_UNITS_HELP, lambda v: size_warning(v, memory=False))
#: A size of RAM (SRAM, PSRAM, an arena): a decimal unit is probably a misreading.
MEMORY = Leaf(parse_size, SIZE_UNITS_HELP, lambda v: size_warning(v, memory=True))
TIME = leaf(parse_time_ms, TIME_UNITS_HELP)
BANDWIDTH = leaf(_bandwidth, "a rate such as 320MB/s")
