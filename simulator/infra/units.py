"""Parsing of sizes (``256KiB``, ``1.5 MB``, ``2MiB``), times (``12ms``, ``500us``) and clocks
(``120MHz``).

Decimal prefixes (kB, MB, GB, any case) are powers of 1000 and binary ones (KiB, MiB, GiB)
powers of 1024, as SI and IEC 80000-13 say; a bare ``K``/``M``/``G`` is read as binary, the
way MCU datasheets use it. A time or a clock needs its unit (``clock: 120`` read as 120 Hz
made every estimate a million times too slow); a size without one is bytes, and
:func:`size_warning` says so, as it does when a decimal unit sizes a memory, whose sizes
are powers of two.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

_SIZE_FACTORS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "k": 1024, "m": 1024**2, "g": 1024**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3,
}
_TIME_FACTORS_MS = {"ms": 1.0, "us": 1e-3, "µs": 1e-3, "s": 1000.0, "ns": 1e-6}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ]*)\s*$")

SIZE_UNITS_HELP = "an integer byte count or a number with B, kB, MB, GB, KiB, MiB, GiB"
TIME_UNITS_HELP = "a number with its unit: ms, us or s (e.g. 30ms)"
FREQUENCY_HELP = "a frequency with its unit: Hz, kHz, MHz or GHz (e.g. 120MHz)"
_DECIMAL_SIZE_UNITS = ("kb", "mb", "gb")


def parse_size(value: object) -> int:
    """Return a size in bytes, or raise ``ValueError`` naming what is allowed."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size ({SIZE_UNITS_HELP}), got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative, got {value}")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        if match and match.group(2).lower() in _SIZE_FACTORS:
            number = float(match.group(1)) * _SIZE_FACTORS[match.group(2).lower()]
            if not math.isfinite(number):
                raise ValueError(f"{value!r} is not a finite size")
            if number.is_integer():
                return int(number)
            raise ValueError(f"{value!r} is not a whole number of bytes")
    raise ValueError(f"expected a size ({SIZE_UNITS_HELP}), got {value!r}")


def parse_time_ms(value: object) -> float:
    """Return a duration in milliseconds, or raise ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a time ({TIME_UNITS_HELP}), got {value!r}")
    if value in (0, "0"):
        return 0.0  # nothing to misread
    if isinstance(value, (int, float)) or (isinstance(value, str) and _unit(value) == ""):
        raise ValueError(f"a time needs its unit, such as {_number_text(value)}ms")
    if isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        unit = match.group(2).lower() if match else None
        if match and unit in _TIME_FACTORS_MS:
            return _finite(float(match.group(1)) * _TIME_FACTORS_MS[unit], "a time")
    raise ValueError(f"expected a time ({TIME_UNITS_HELP}), got {value!r}")


def parse_frequency_hz(value: object) -> float:
    """Return a clock frequency in Hz from ``120MHz`` or ``1.5 GHz``; the unit is required."""
    factors = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
    hz = None
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
            isinstance(value, str) and _unit(value) == ""):
        raise ValueError(f"a clock needs its unit, such as {_number_text(value)}MHz")
    if isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        if match and match.group(2).lower() in factors:
            hz = float(match.group(1)) * factors[match.group(2).lower()]
    # 0 Hz would make every latency infinite (the budget was silently skipped).
    if hz is not None and math.isfinite(hz) and hz > 0:
        return hz
    raise ValueError(f"expected a frequency such as 120MHz or 1.5GHz, got {value!r}")


def size_warning(value: object, memory: bool) -> str | None:
    """Why a valid size may not say what its writer meant, or None: a bare number (bytes),
    or, for a ``memory`` (RAM, whose sizes are powers of two), a decimal unit (``512KB`` is
    512,000 B, not 512 KiB)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        unit = ""
    elif isinstance(value, str) and (written := _unit(value)) is not None:
        unit = written.lower()
    else:
        return None
    size = parse_size(value)
    if unit == "":
        binary = f" or {size // 1024}KiB" if size and size % 1024 == 0 else ""
        return f"{value!r} has no unit, so it is {size:,} B; write {size}B{binary} to say so"
    if not memory or unit not in _DECIMAL_SIZE_UNITS:
        return None
    number = _NUMBER_UNIT.match(str(value)).group(1)  # type: ignore[union-attr]
    binary = f"{number}{unit[0].upper()}iB"
    si = "kB" if unit == "kb" else unit.upper()
    text = f"{value!r} is {size:,} B (1 {si} = {_SIZE_FACTORS[unit]:,} B)"
    try:
        return (f"{text}; memory comes in powers of two: if you mean {binary} "
                f"({parse_size(binary):,} B), write {binary}")
    except ValueError:  # 1.3 MiB is no whole number of bytes: no suggestion to make
        return f"{text}; memory comes in powers of two: did you mean MiB/KiB?"


def _unit(text: str) -> str | None:
    """The unit of ``"120 MHz"`` (``"MHz"``), ``""`` for a bare number, None if not a number."""
    match = _NUMBER_UNIT.match(text)
    return match.group(2) if match else None


def _number_text(value: object) -> str:
    return str(value).strip()


def _finite(number: float, what: str) -> float:
    """Refuse NaN, infinities and negatives: each would void the comparison it feeds."""
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {number!r}")
    return number


# --------------------------------------------------------------------------- formatting
# One style for every view: counts and bytes with thousands separators, a size in its
# budget's prefix family (binary KiB unless the profile wrote the budget in kB/MB), a time in
# the unit that fits it (us, ms, s) with its sign, a share as a percentage, a difference of
# shares in percentage points; nothing prints as "-0".

#: Prefixes of a readable size: binary (KiB = 1024 B) or decimal (kB = 1000 B).
_PREFIXES = {False: (1024, ("KiB", "MiB", "GiB")), True: (1000, ("kB", "MB", "GB"))}


def decimal_prefixes(limit_bytes: float) -> bool:
    """Whether a size budget was written with decimal prefixes, so its figures print in
    kB/MB: a whole number of kilobytes that is no whole number of KiB (``50MB`` is
    50,000,000 B; shown as 47.7 MiB it read as a different budget)."""
    return limit_bytes >= 1000 and limit_bytes % 1000 == 0 and limit_bytes % 1024 != 0


def format_count(n: int | float) -> str:
    """A whole number with thousands separators: ``672,778``."""
    return _unsigned_zero(f"{n:,.0f}")


def format_size(num_bytes: int | float | None, decimal: bool = False) -> str:
    """A compact size: exact bytes below 10 KiB (``6,912 B``), else one readable figure
    (``122.4 KiB``; ``50.0 MB`` with ``decimal``), signed. A figure that would need four
    digits before the point moves up a prefix, with two decimals while it rounds below one
    of it: 1,045,000 B is ``1.0 MiB`` (not ``1020.5 KiB``), 1,024,000 B ``0.98 MiB``."""
    if num_bytes is None:
        return "-"
    value = float(num_bytes)
    base, units = _PREFIXES[decimal]
    if abs(value) < 10 * 1024:
        return f"{format_count(value)} B"
    for unit in units:
        value /= base
        if abs(value) < 999.95 or unit == units[-1]:
            return _unsigned_zero(f"{value:.{2 if abs(value) < 0.995 else 1}f} {unit}")
    raise AssertionError("unreachable")


def format_bytes(num_bytes: int | float, decimal: bool = False) -> str:
    """Exact bytes, and the readable size beside them from 10 KiB on:
    ``125,304 B (122.4 KiB)``."""
    exact = f"{format_count(num_bytes)} B"
    return exact if abs(num_bytes) < 10 * 1024 else f"{exact} ({format_size(num_bytes, decimal)})"


def format_time_ms(ms: float | None) -> str:
    """A time in the unit that fits it, signed: ``182 us``, ``18.27 ms``, ``-273.55 ms``,
    ``18,269.29 s``; under 10 us two significant digits (``5.8 us``, ``0.61 us``, up to three
    decimals), so an Edge TPU op's share of a microsecond never reads "0 us"."""
    if ms is None:
        return "-"
    if abs(ms) >= 0.9995:  # (the bounds are where the smaller unit would round to 1000)
        return _unsigned_zero(f"{ms:.2f} ms" if abs(ms) < 999.995 else f"{ms / 1000:,.2f} s")
    us = ms * 1000
    if us == 0 or abs(us) >= 9.95:
        return _unsigned_zero(f"{us:.0f} us")
    if abs(us) < 0.0005:
        return "< 0.001 us"
    digits = min(3, 1 - math.floor(math.log10(abs(us))))
    return f"{us:.{digits}f} us"


def format_percent(fraction: float | None, digits: int = 2, signed: bool = False) -> str:
    """A share as a percentage: ``0.9778`` → ``97.78%``; ``signed``: a change, ``+3.2%``."""
    if fraction is None:
        return "-"
    text = f"{fraction:{'+' if signed else ''}.{digits}%}"
    return text.lstrip("+-") if float(text[:-1]) == 0 else text


def format_points(pp: float | None, digits: int = 2) -> str:
    """A difference of two percentages, signed: ``+0.12 pp``, ``-1.50 pp``, ``0.00 pp``."""
    if pp is None:
        return "-"
    text = f"{pp:+.{digits}f}"
    return f"{text.lstrip('+-') if float(text) == 0 else text} pp"


def format_figure(value: float, unit: str, decimal: bool = False) -> str:
    """A figure in its unit: "bytes" (:func:`format_size`), "ms" (:func:`format_time_ms`),
    "fraction" (a percentage), "pp" (percentage points), "dB"; a count without one."""
    if unit == "bytes":
        return format_size(value, decimal)
    if unit == "ms":
        return format_time_ms(value)
    if unit == "fraction":
        return format_percent(value)
    if unit == "pp":
        return format_points(value).lstrip("+")
    if unit == "dB":
        return _unsigned_zero(f"{value:.1f} dB")
    return format_count(value) if float(value).is_integer() else _unsigned_zero(f"{value:.4g}")


def format_estimate(value: float, unit: str,
                    band: tuple[float, float] | list[float] | None, decimal: bool = False) -> str:
    """A figure in its unit with its error band, ``18.27 ms (likely 11.69 ms–21.74 ms)``; the
    figure alone without a band (a prediction or a measurement)."""
    text = format_figure(value, unit, decimal)
    if not band:
        return text
    return f"{text} (likely {format_band(band, lambda v: format_figure(v, unit, decimal))})"


def format_band(band: tuple[float, float] | list[float],
                fmt: Callable[[float], str] | None = None) -> str:
    """An error band as ``low–high`` in ``fmt`` (times by default); one figure when both ends
    print the same (an estimate with nothing uncertain left in it, e.g. all on an NPU)."""
    fmt = fmt or format_time_ms
    low, high = fmt(band[0]), fmt(band[1])
    return low if low == high else f"{low}–{high}"


def _unsigned_zero(text: str) -> str:
    """``-0.00 ms`` → ``0.00 ms``: a value that rounds to zero has no sign to show."""
    if text.startswith("-") and not any(c in "123456789" for c in text):
        return text[1:]
    return text
