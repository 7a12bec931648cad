"""``devicefit link-check FIRMWARE --export DIR``: did the firmware link what devicefit
verified (the model in flash and unchanged, the arena in RAM, aligned and large enough, the
profile's RAM reserve left)?"""

from __future__ import annotations

import argparse
from pathlib import Path

from devicefit.sdk.console import output_width, print_report
from devicefit.simulator.infra.units import SIZE_UNITS_HELP, parse_size
from devicefit.simulator.report.views.columns import text_width


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "link-check",
        description="Read the firmware the linker wrote (the map file of GNU ld's Map option, "
                    "a 32-bit ARM ELF, or both of one link; told apart by content) and check "
                    "it against what devicefit export verified: the model array's size, "
                    "place in flash and bytes (ELF), the arena array's place in RAM, "
                    "alignment and size, and the RAM the profile's firmware.reserve keeps "
                    "free (map). What the files cannot show is reported as not checked. "
                    "Exit 0 if no check fails, 1 if one does, 2 on bad input.",
        epilog="example: devicefit link-check build/firmware.elf build/firmware.map "
               "--export build/digits")
    p.add_argument("firmware", nargs="+", type=Path, metavar="FIRMWARE",
                   help="the linked ELF, its map file, or both")
    p.add_argument("--export", type=Path, metavar="DIR",
                   help="the folder devicefit export wrote (its manifest.json)")
    p.add_argument("--profile", metavar="NAME",
                   help="device profile whose firmware.reserve to check (default: the "
                        "export's)")
    p.add_argument("--model-symbol", metavar="NAME",
                   help="the model array's symbol (default: the export's)")
    p.add_argument("--arena-symbol", metavar="NAME",
                   help="the arena array's symbol (default: the export's)")
    p.add_argument("--arena-bytes", type=_size, metavar="N",
                   help="the least arena the firmware may link, e.g. the start arena "
                        "simulate printed (default: the export's start arena)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_link_check)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected {SIZE_UNITS_HELP}, got {text!r}") from exc


def _link_check(args: argparse.Namespace) -> int:
    from devicefit.simulator.firmware.check import expected_from, link_check
    from devicefit.simulator.firmware.manifest import read_manifest
    from devicefit.simulator.report.views.linkview import render_json, render_text

    manifest = read_manifest(args.export) if args.export is not None else None
    reserve, source = _reserve(args, manifest.profile if manifest else None)
    expected = expected_from(manifest, model_symbol=args.model_symbol,
                             arena_symbol=args.arena_symbol, arena_min_bytes=args.arena_bytes,
                             reserve_bytes=reserve, reserve_source=source)
    result = link_check(args.firmware, expected)
    if args.json:
        print(render_json(result), end="")
    else:
        with text_width(output_width()):
            print_report(render_text(result), args.no_color)
    return 0 if result.ok else 1


def _reserve(args: argparse.Namespace, exported_on: str | None) -> tuple[int | None, str]:
    """The profile's firmware.reserve and where it comes from (or why there is none)."""
    from devicefit.simulator.errors import ProfileError
    from devicefit.simulator.profiles import load_profile

    name = args.profile or exported_on
    if name is None:
        return None, ""
    try:
        profile = load_profile(name, args.profiles_dir)
    except ProfileError as exc:
        if args.profile:
            raise
        raise ProfileError(f"{exc} (the export names profile {name!r}; give --profile NAME "
                           "or a .yaml)") from exc
    note = "" if exported_on in (None, profile.name) else f", not the export's {exported_on}"
    if profile.firmware.reserve_bytes is None:
        return None, f"profile {profile.name} sets no firmware.reserve{note}"
    return profile.firmware.reserve_bytes, f"firmware.reserve of {profile.name}{note}"
