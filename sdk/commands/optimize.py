"""``devicefit optimize MODEL.tflite --profile NAME -o OUT.tflite``: a smaller TFLM arena."""

from __future__ import annotations

import argparse

from sdk.console import make_console, print_json, table
from sdk.outputs import check_outputs, profile_inputs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize", help="rewrite a .tflite so TFLite-Micro needs a smaller tensor arena",
        description="Reorder operators (the valid order with the lowest peak of live bytes) and "
                    "write an offline arena plan (TFLM's OfflineMemoryAllocation metadata) so "
                    "the stock TFLM interpreter needs a smaller arena head. The rewritten model "
                    "is run in TFLM and LiteRT against the original (bit-identical outputs "
                    "required) before it is written. A model that is already optimal is copied "
                    "unchanged. Exit 0 on success, 2 on bad input.",
        epilog="example: devicefit optimize model.tflite --profile stm32l4r5-cortex-m4 "
               "-o model_opt.tflite")
    p.add_argument("model", help="the .tflite model file")
    p.add_argument("--profile", required=True, metavar="NAME",
                   help="a TFLM device profile name or .yaml path (see 'devicefit profiles list')")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="where to write the optimized .tflite (never the input file)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_optimize)


def _optimize(args: argparse.Namespace) -> int:
    from simulator.fileio import write_atomic
    from simulator.optimize import optimize_model_bytes
    from simulator.profiles import load_profile
    from simulator.reader import read_model

    profile = load_profile(args.profile, args.profiles_dir)
    check_outputs([("-o", args.output)], [("model", args.model), *profile_inputs(profile)])
    read_model(args.model)  # one clear error for a missing or broken file
    with open(args.model, "rb") as f:
        data = f.read()
    out, report = optimize_model_bytes(data, profile, name=args.model)
    write_atomic(args.output, out, inputs=[args.model])
    if args.json:
        print_json({**report.to_dict(), "output": args.output})
        return 0
    console = make_console(args.no_color)
    console.print(f"{args.model}: {report.summary}")
    console.print(table(None, ["", "before", "after"], _rows(report)))
    for note in report.notes:
        console.print(f"note: {note}")
    console.print(f"wrote {args.output}" + ("" if report.changed else " (an identical copy)"))
    return 0


def _rows(r) -> list[tuple[str, str, str]]:
    def size(n: int | None) -> str:
        return "-" if n is None else f"{n:,} B"

    best = "exact" if r.bound_exact else "per-operator floor"
    return [
        ("arena head, predicted", size(r.head_before_bytes), size(r.head_after_bytes)),
        ("arena head, measured (TFLM)", size(r.measured_head_before_bytes),
         size(r.measured_head_after_bytes)),
        ("lower bound, file order", size(r.bound_file_order_bytes), ""),
        (f"lower bound, best order ({best})", "", size(r.bound_best_order_bytes)),
        ("gap to best-order bound", "", f"{r.gap_bytes:,} B ({r.gap_pct:.1f} %)"),
        ("reduction", "", f"{r.reduction_bytes:,} B ({r.reduction_pct:.1f} %)"),
        ("operator order", "file", "reordered" if r.order_changed else "file"),
        ("offline plan", "", r.plan_method if r.offline_plan else "none"),
        ("time to optimize", "", f"{r.seconds * 1000:.0f} ms"),
    ]
