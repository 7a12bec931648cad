"""``devicefit diff``: what changed between two models on one profile, or one model on two
profiles (size, flash, arena, latency, accuracy, op counts, layers)."""

from __future__ import annotations

import argparse

from devicefit.sdk.console import output_width, print_report
from devicefit.simulator.errors import UsageError
from devicefit.simulator.report.views.columns import text_width


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        description="Simulate both sides and show what changed: model size, flash, arena, "
                    "estimated latency with its error band, accuracy where the models' "
                    "conversion metadata records it, op counts and per-layer changes. "
                    "Exit 0 (a diff is not a gate), 2 on bad input.",
        epilog="example: devicefit diff before.tflite after.tflite "
               "--profile stm32l4r5-cortex-m4\n"
               "example: devicefit diff model.tflite --profile stm32l4r5-cortex-m4 "
               "--profile nrf52840-cortex-m4")
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="two .tflite files (A then B), or one with two --profile")
    p.add_argument("--profile", action="append", required=True, metavar="NAME",
                   help="device profile name or .yaml; give it twice to compare one model "
                        "on two profiles")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--html", metavar="FILE.html", help="write the comparison as an HTML page")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="changed layers listed in the text (default 20; 0: all)")
    p.set_defaults(handler=_diff)


def _diff(args: argparse.Namespace) -> int:
    from devicefit.sdk.options import profile_inputs, say_written
    from devicefit.simulator.infra.fileio import check_outputs, write_atomic
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.report.diff import Side, diff_reports
    from devicefit.simulator.report.views.diffview import render_html, render_json, render_text
    from devicefit.simulator.simulate import simulate

    models, names = args.models, args.profile
    if len(models) == 2 and len(names) == 1:
        kind, pairs = "models", [(models[0], names[0]), (models[1], names[0])]
    elif len(models) == 1 and len(names) == 2:
        kind, pairs = "profiles", [(models[0], names[0]), (models[0], names[1])]
    else:
        raise UsageError(f"diff compares two models on one profile or one model on two "
                         f"profiles, got {len(models)} model(s) and {len(names)} --profile")
    profiles = {name: load_profile(name, args.profiles_dir) for name in dict.fromkeys(names)}
    check_outputs([("--html", args.html)],
                  [*(("model", m) for m in models),
                   *(i for p in profiles.values() for i in profile_inputs(p))])
    sides = [Side(model if kind == "models" else profiles[name].name,
                  simulate(model, profiles[name])) for model, name in pairs]
    diff = diff_reports(sides[0], sides[1], kind)
    if args.html:
        write_atomic(args.html, render_html(diff), inputs=models)
        say_written(args.html)
    if args.json:
        print(render_json(diff), end="")
        return 0
    with text_width(output_width()):
        print_report(render_text(diff, max(args.top, 0)), args.no_color)
    return 0
