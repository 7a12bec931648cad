"""``devicefit simulate MODEL.tflite --profile NAME``: will it fit, before flashing."""

from __future__ import annotations

import argparse
import contextlib

from devicefit.sdk.console import fold, make_console, output_width, print_report
from devicefit.sdk.options import (
    add_layer_options,
    add_picture_options,
    input_shape,
    layer_outputs,
    picture_outputs,
    positive_seconds,
    profile_inputs,
    write_layers,
    write_pictures,
)
from devicefit.simulator.errors import UsageError
from devicefit.simulator.infra.fileio import check_outputs
from devicefit.simulator.profiles import KERNELS
from devicefit.simulator.report.views import TEXT_FORMATS
from devicefit.simulator.report.views.base import heading
from devicefit.simulator.report.views.columns import text_width
from devicefit.simulator.types import BuildRequest, MeasureOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        description="Read a .tflite model and predict, without running it, the flash and the "
                    "tensor arena it needs on a device profile; judge the profile's budgets. "
                    "Op support on TFLM and LiteRT profiles is also asked of the runtime, one "
                    "operator at a time (cached; --no-probe: the tables alone). "
                    "Exit 0 if every budget passes, 1 if one fails, 2 on bad input.",
        epilog="example: devicefit simulate model.tflite --profile stm32l4r5-cortex-m4")
    p.add_argument("model", help="the .tflite model file")
    p.add_argument("--profile", required=True, metavar="NAME",
                   help="device profile name or path to a profile .yaml "
                        "(see 'devicefit profiles list')")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--format", choices=TEXT_FORMATS, default=None, metavar="NAME",
                   help="print the report in this format: " + ", ".join(TEXT_FORMATS)
                        + " (default text; --json is --format json)")
    add_picture_options(p)
    p.add_argument("--top", type=int, default=8, metavar="N",
                   help="operators listed in the memory timeline (default 8)")
    add_layer_options(p)
    p.add_argument("--kernels", choices=KERNELS, default=None,
                   help="override the profile's kernel flavour (e.g. 'reference' to compare "
                        "with the tflite-micro pip wheel)")
    p.add_argument("--input-shape", action="append", default=[], type=input_shape,
                   metavar="[NAME:]DIMS",
                   help="resolve dynamic dimensions (-1) from this input shape, e.g. 1x1280 or "
                        "NAME:1,1280; once per input (default: the shapes stored in the file)")
    p.add_argument("--pointer-size", type=int, choices=(4, 8), default=None,
                   help="override the target's pointer width in bytes (8: 64-bit host)")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="answer op support from devicefit's tables only; by default each "
                        "operator signature not seen before is also run alone in the TFLM or "
                        "LiteRT wheel (a child process, cached in ~/.cache/devicefit/op-probe)")
    run = p.add_argument_group("running the model (--run)")
    run.add_argument("--run", action="store_true",
                     help="also run the model in the profile's real runtime (TFLM, LiteRT) in a "
                          "child process: measured arena, host latency, TFLM/LiteRT cross-check")
    run.add_argument("--runs", type=int, default=10, metavar="N",
                     help="timed invokes after one warm-up (default 10)")
    run.add_argument("--input", default=None, metavar="FILE",
                     help="input data (.npy for one input, .npz by input name); default: random "
                          "data within each input's range, fixed seed")
    run.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="S",
                     help="seconds before a hanging runtime is killed (default 60)")
    run.add_argument("--target-build", default=None, metavar="TFLM_DIR",
                     help="also build TFLite-Micro from this checkout (its third-party trees "
                          "downloaded) for the profile's core and kernel library with the Arm "
                          "GNU toolchain, run the model in it under qemu-arm and measure the "
                          "device's arena; builds are cached in ~/.cache/devicefit/tflm-builds "
                          "($DEVICEFIT_CACHE), the first takes several minutes")
    p.set_defaults(handler=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    from devicefit.simulator.profiles import load_profile, with_runtime
    from devicefit.simulator.report.views import render
    from devicefit.simulator.simulate import simulate

    profile = with_runtime(load_profile(args.profile, args.profiles_dir),
                           kernels=args.kernels, pointer_bytes=args.pointer_size)
    if args.input and not args.run:
        raise UsageError("--input gives data to run the model with: add --run")
    if args.target_build and not args.run:
        raise UsageError("--target-build runs the model on a TFLM build: add --run")
    build = BuildRequest(args.target_build) if args.target_build else None
    if build is not None:
        from devicefit.simulator.run.measure import device_build

        # Before the host run: a missing checkout or toolchain is one line, at once.
        device_build(build, profile)
    check_outputs([*picture_outputs(args), *layer_outputs(args)], [("model", args.model), ("--input data", args.input),
                                          *profile_inputs(profile)])
    run = (MeasureOptions(runs=args.runs, input_path=args.input, timeout_s=args.timeout,
                          target_build=build) if args.run else None)
    # The runs happen in child processes: on a terminal, show that something is going on
    # (a static run makes no console: rich is not imported).
    err = make_console(args.no_color, stderr=True) if run is not None else None
    running = (err.status(f"running {args.runs} timed invokes in {profile.runtime.name} "
                          "(child process)…") if err is not None and err.is_terminal
               else contextlib.nullcontext())
    with running:
        report = simulate(args.model, profile, run=run, input_shapes=args.input_shape,
                          probe=args.probe)
    write_pictures(args, [(heading(report), report)], inputs=[args.model])
    write_layers(args, report, inputs=[args.model])
    view = "json" if args.json else args.format or "text"
    options = {"top": max(args.top, 0), "layers": args.layers} if view == "text" else {}
    with text_width(output_width()):
        text = render(view, report, **options)
    assert isinstance(text, str)  # --format offers only the views that are not binary
    if view == "text":
        print_report(text, args.no_color)
    else:
        print(text if view == "json" else fold(text), end="")
    return report.exit_code
