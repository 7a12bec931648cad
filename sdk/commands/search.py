"""``devicefit search --family NAME --profile P --screen``: the static screen of an
architecture family's grid (issue 34's first part; training the survivors is not built yet)."""

from __future__ import annotations

import argparse
import itertools
import re
from typing import Any

from devicefit.sdk.console import make_console, print_json, table
from devicefit.simulator.errors import UsageError, require_extra
from devicefit.simulator.units import format_bytes, format_time_ms

_NUMBERS = re.compile(r"\d+([x-]\d+)+")
#: Parameters that are lists of sizes.
_SIZES = ("input_shape", "depth")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search", help="screen an architecture family's candidates against a profile",
        description="Build every candidate of an architecture family's grid with random "
                    "weights, convert each to int8 (calibrated on random samples of the input "
                    "shape: sizes, arena and latency do not depend on the data) in one "
                    "TensorFlow process, and judge it statically for the profile: flash, the "
                    "arena (with TFLM's offline plan where it is smaller) and the latency "
                    "estimate with its band. Families: mbv2 (images), dscnn (audio "
                    "features), cnn1d and mlp (sensor windows), or a Python function "
                    "module:function taking the parameters and returning a Keras model. "
                    "Exit 0 when a candidate fits, 1 when none does, 2 on bad input.",
        epilog="example: devicefit search --family mbv2 --profile stm32l4r5-cortex-m4 "
               "--screen --param input_shape=64x64x3,96x96x3 --param width=0.35,0.5")
    p.add_argument("--family", required=True, metavar="NAME",
                   help="mbv2, dscnn, cnn1d, mlp or module:function")
    p.add_argument("--profile", required=True, metavar="NAME",
                   help="device profile name or .yaml path (see 'devicefit profiles list')")
    p.add_argument("--screen", action="store_true",
                   help="judge the candidates statically (the only mode built so far)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=V[,V...]",
                   help="a parameter's values (the grid is every combination): input_shape "
                        "(32x32x1), classes, width, depth (blocks per stage: 1-2-2), kernel, "
                        "expansion; others keep the family's defaults")
    p.add_argument("--json", action="store_true", help="print the screened candidates as JSON")
    p.set_defaults(handler=_search)


def value(text: str) -> Any:
    """``32x32x1`` / ``1-2-2`` → a tuple of ints; else an int, or a float."""
    if _NUMBERS.fullmatch(text):
        return tuple(int(n) for n in re.split("[x-]", text))
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise UsageError(f"--param value '{text}': give a number, or sizes like 32x32x1 or 1-2-2")


def axes(params: list[str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for item in params:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise UsageError(f"--param {item}: give NAME=VALUE[,VALUE...]")
        if name in out:
            raise UsageError(f"--param {name} given twice: list its values once, comma-separated")
        parsed = [value(v) for v in values.split(",")]
        if name in _SIZES:  # one stage / one dimension: a size of one
            parsed = [(v,) if isinstance(v, int) else v for v in parsed]
        out[name] = parsed
    return out


def _search(args: argparse.Namespace) -> int:
    require_extra("tensorflow", "devicefit search")  # the screen converts every candidate
    from devicefit.sdk.search import candidate, screen
    from devicefit.simulator.profiles import load_profile

    if not args.screen:
        raise UsageError("devicefit search: only the static screen is built so far "
                         "(training the candidates that fit is not); add --screen")
    grid = axes(args.param)
    names = list(grid)
    candidates = [candidate(args.family, **dict(zip(names, combo, strict=True)))
                  for combo in itertools.product(*grid.values())]
    profile = load_profile(args.profile, args.profiles_dir)
    run = screen(candidates, profile)
    if args.json:
        print_json([{"label": r.candidate.label(), "key": r.candidate.key,
                     **r.candidate.to_dict(), "verdict": r.verdict,
                     "status": r.status,
                     "rejected_by": list(r.rejected_by), "flash_bytes": r.flash_bytes,
                     "arena_bytes": r.arena_bytes,
                     "offline_plan_saved_bytes": r.offline_plan_saved_bytes,
                     "latency_ms": r.latency_ms, "latency_band_ms": r.latency_band_ms,
                     "parameters": r.parameters, "note": r.note} for r in run.results])
    else:
        rows = [(r.candidate.label(), r.status, _size(r.flash_bytes), _size(r.arena_bytes),
                 _latency(r.latency_ms, r.latency_band_ms),
                 ", ".join(r.rejected_by) + (f" ({r.note})" if r.note else ""))
                for r in run.results]
        console = make_console(args.no_color)
        console.print(table(f"Screened for {profile.name}: {len(run.fitting)} of "
                            f"{len(rows)} fit", ["candidate", "verdict", "flash", "arena",
                                                 "latency (band)", "rejected by"], rows))
    return 0 if run.fitting else 1


def _size(n: int | None) -> str:
    return "" if n is None else format_bytes(n)


def _latency(ms: float | None, band: tuple[float, float] | None) -> str:
    if ms is None:
        return ""
    shown = format_time_ms(ms)
    return f"{shown} ({format_time_ms(band[0])}-{format_time_ms(band[1])})" if band else shown
