"""``devicefit optimize MODEL.tflite --profile NAME -o OUT.tflite``: a smaller TFLM arena."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from devicefit.sdk.console import make_console, print_json, print_stderr, table
from devicefit.sdk.options import (
    add_firmware_options,
    firmware_output,
    positive_seconds,
    profile_inputs,
    write_firmware,
)
from devicefit.simulator.infra.fileio import check_outputs
from devicefit.simulator.infra.units import format_bytes, format_percent, format_time_ms
from devicefit.simulator.optimize.patches import OBJECTIVES

if TYPE_CHECKING:
    from rich.console import Console

    from devicefit.simulator.optimize.driver import OptimizeReport
    from devicefit.simulator.optimize.patches import PatchReport


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize",
        description="Reorder operators (the valid order with the lowest peak of live bytes) and "
                    "write an offline arena plan (TFLM's OfflineMemoryAllocation metadata) so "
                    "the stock TFLM interpreter needs a smaller arena head. The rewritten model "
                    "is run in TFLM and LiteRT against the original (bit-identical outputs "
                    "required) before it is written. A model that is already optimal is copied "
                    "unchanged. With --patches the first stage of a conv model also runs patch "
                    "by patch (MCUNetV2-style, stock SLICE/PAD/CONCATENATION ops), which goes "
                    "below the whole-tensor bound for some extra MACs. Exit 0 on success, 2 on "
                    "bad input.",
        epilog="example: devicefit optimize model.tflite --profile stm32l4r5-cortex-m4 "
               "-o model_opt.tflite\n"
               "example: devicefit optimize model.tflite --profile stm32l4r5-cortex-m4 "
               "--patches auto --max-mac-overhead 20 -o model_patched.tflite")
    p.add_argument("model", help="the .tflite model file")
    p.add_argument("--profile", required=True, metavar="NAME",
                   help="a TFLM device profile name or .yaml path (see 'devicefit profiles list')")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="where to write the optimized .tflite (never the input file)")
    add_patch_arguments(p)
    p.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="S",
                   help="seconds each verification run (the original and the rewritten model "
                        "in TFLM and LiteRT) may take before it is killed and nothing is "
                        "written (default 60; TFLM's own allocation of a graph of many "
                        "thousands of operators can take minutes)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_firmware_options(p)
    p.set_defaults(handler=_optimize)


def add_patch_arguments(p: argparse.ArgumentParser, when: str = "") -> None:
    """``--patches`` and ``--max-mac-overhead`` (also offered by convert and fit)."""
    p.add_argument("--patches", metavar="auto|RxC",
                   help=f"{when}run the first stage (int8 convs) patch by patch on a grid: 'auto' "
                        "searches grid and split point for the smallest head, 'RxC' fixes "
                        "the grid (e.g. 3x3); refused with the reason where not exact")
    p.add_argument("--max-mac-overhead", type=float, default=20.0, metavar="PCT",
                   help="with --patches: the most extra multiply-accumulates the halo "
                        "recomputation may cost, in %% of the model's (20)")
    p.add_argument("--patch-objective", choices=OBJECTIVES, default="arena",
                   help="with --patches: minimise the arena TFLM needs to start, head + tail "
                        "(default: each cloned operator adds OpData to the tail; patches are "
                        "only kept when it is smaller than without them) or the head alone "
                        "(for a head in memory of its own: the whole arena may grow)")


def patch_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``optimize_model_bytes`` for the parsed patch flags."""
    from devicefit.simulator.errors import UsageError
    from devicefit.simulator.optimize.patches import parse_grid

    if args.patches is None:
        return {}
    parse_grid(args.patches)  # a usage error before any work
    if not 0 <= args.max_mac_overhead < 10_000:
        raise UsageError(f"--max-mac-overhead {args.max_mac_overhead:g}: give a percentage "
                         ">= 0")
    return {"patches": args.patches, "max_mac_overhead": args.max_mac_overhead / 100,
            "patch_objective": args.patch_objective}


def _optimize(args: argparse.Namespace) -> int:
    from devicefit.simulator.infra.fileio import write_atomic
    from devicefit.simulator.optimize import optimize_model_bytes
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model

    options = patch_options(args)
    profile = load_profile(args.profile, args.profiles_dir)
    check_outputs([("-o", args.output)], [("model", args.model), *profile_inputs(profile)])
    firmware_output(args, [("model", args.model), *profile_inputs(profile),
                           ("-o", args.output)])
    read_model(args.model)  # one clear error for a missing or broken file
    with open(args.model, "rb") as f:
        data = f.read()
    out, report = optimize_model_bytes(data, profile, name=args.model, timeout_s=args.timeout,
                                       **options)
    write_atomic(args.output, out, inputs=[args.model])
    if args.json:
        print_json({**report.to_dict(), "output": args.output})
        return write_firmware(args, args.output, profile, print_stderr)
    console = make_console(args.no_color)
    console.print(f"{args.model}: {report.summary}")
    console.print(table(None, ["", "before", "after"], _rows(report)))
    if report.patches is not None:
        _print_patches(console, report.patches)
    for note in report.notes:
        console.print(f"note: {note}")
    console.print(f"wrote {args.output}" + ("" if report.changed else " (an identical copy)"))
    return write_firmware(args, args.output, profile, console.print)



#: Head vs overhead pairs printed (all are in --json).
PAIRS_SHOWN = 8


def _size(n: int | None) -> str:
    return "-" if n is None else format_bytes(n)


def _times(r: OptimizeReport) -> list[tuple[str, str, str]]:
    """The search's time, and the runtimes' apart: on a large graph TFLM's own allocation
    takes longer than the whole search."""
    verified = [("time to verify (TFLM, LiteRT)", "", format_time_ms(r.verify_seconds * 1000))]
    return [("time to optimize", "", format_time_ms(r.seconds * 1000)),
            *(verified if r.verify_seconds else [])]


def _rows(r: OptimizeReport) -> list[tuple[str, str, str]]:
    best = "exact" if r.bound_exact else "per-operator floor"
    if r.patches is not None and r.patches.grid:
        return [
            ("arena head, predicted", _size(r.head_before_bytes), _size(r.head_after_bytes)),
            ("arena head, measured (TFLM)", _size(r.measured_head_before_bytes),
             _size(r.measured_head_after_bytes)),
            ("lower bound, whole tensors (best order)", _size(r.patches.bound_whole_tensor_bytes),
             ""),
            ("lower bound, patched graph (" + ("best order" if r.bound_exact else
                                               "written order") + ")", "",
             _size(r.bound_best_order_bytes)),
            ("reduction", "", f"{format_bytes(r.reduction_bytes)}, {format_percent(r.reduction_pct / 100, 1)}"),
            ("operators", str(r.patches.operators_before), str(r.patches.operators_after)),
            ("offline plan", "", r.plan_method if r.offline_plan else "none"),
            *_times(r),
        ]
    return [
        ("arena head, predicted", _size(r.head_before_bytes), _size(r.head_after_bytes)),
        ("arena head, measured (TFLM)", _size(r.measured_head_before_bytes),
         _size(r.measured_head_after_bytes)),
        ("lower bound, file order", _size(r.bound_file_order_bytes), ""),
        (f"lower bound, best order ({best})", "", _size(r.bound_best_order_bytes)),
        ("gap to best-order bound", "", f"{format_bytes(r.gap_bytes)}, {format_percent(r.gap_pct / 100, 1)}"),
        ("reduction", "", f"{format_bytes(r.reduction_bytes)}, {format_percent(r.reduction_pct / 100, 1)}"),
        ("operator order", "file", "reordered" if r.order_changed else "file"),
        ("offline plan", "", r.plan_method if r.offline_plan else "none"),
        *_times(r),
    ]


def _arena_table(p: PatchReport) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """Head, tail and whole arena of the plain offline plan and of the best patched graph,
    predicted for the profile's build and, once verified, measured in TFLM."""
    rows, builds = [], []
    for plain, patched in ((p.plain_arena, p.patched_arena),
                           (p.plain_measured, p.patched_measured)):
        if plain is None and patched is None:
            continue
        shown = plain or patched
        assert shown is not None  # both None is skipped above
        kind, build = shown.build.split(", ", 1)
        builds.append(f"{kind}: {build}")
        fields = [("head", "head_bytes"), ("tail", "tail_bytes"),
                  ("whole arena (head + tail)", "whole_bytes")]
        if kind == "predicted":  # measured, the whole arena is what TFLM used
            fields.append(("arena to start", "start_bytes"))
        rows += [(f"{label}, {kind}", _size(getattr(plain, attr, None)),
                  _size(getattr(patched, attr, None))) for label, attr in fields]
    return (f"arena ({'; '.join(builds)})",
            ["", "plain offline plan", "best patched (" + ("kept" if p.grid else "not used") + ")"],
            rows)


def _print_patches(console: Console, p: PatchReport) -> None:
    """The chosen patch plan and the head vs MAC-overhead pairs it was chosen from."""
    if p.grid:
        ms = ("" if p.estimated_ms_before is None or p.estimated_ms_after is None else
              f", estimated latency {format_time_ms(p.estimated_ms_before)} → "
              f"{format_time_ms(p.estimated_ms_after)}")
        overhead = format_percent(p.mac_overhead_pct / 100, 1, signed=True)
        console.print(f"patches: {p.grid} grid over the first {p.split} operators, "
                      f"{p.operators_before} → {p.operators_after} operators, MACs "
                      f"{p.macs_before:,} → {p.macs_after:,} ({overhead}){ms}; "
                      f"file {p.model_bytes_before:,} → {p.model_bytes_after:,} B")
    if p.plain_arena is not None and p.patched_arena is not None:
        console.print(table(*_arena_table(p)))
    by_head = p.objective == "head"
    built = sorted((c for c in p.candidates if c.bound_bytes is not None),
                   key=lambda c: (c.bound_bytes if by_head else c.arena_bytes,
                                  c.mac_overhead_pct))
    if built:
        rows = [(f"{c.split}", c.grid, _size(c.bound_bytes), _size(c.arena_bytes),
                 format_percent(c.mac_overhead_pct / 100, 1, signed=True),
                 "chosen" if (c.split, c.grid) == (p.split, p.grid) else "")
                for c in built[:PAIRS_SHOWN]]
        more = len(p.candidates) - len(rows)
        title = (f"patch candidates within +{p.max_mac_overhead_pct:g}% MACs, best "
                 f"{p.objective} first ({more} more in --json)")
        console.print(table(title, ["stage ops", "grid", "head bound", "arena", "MACs", ""],
                            rows))
