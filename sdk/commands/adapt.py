"""``devicefit adapt``: a trainable ``.tflite`` for a phone, adapted in LiteRT on the user's
data, with the accuracy before/after, the train signature's memory and its time per step."""

from __future__ import annotations

import argparse
import os

from devicefit.sdk.console import make_console, print_json
from devicefit.sdk.devtrain.spec import UPDATE_HELP, Update
from devicefit.simulator.errors import UsageError, require_extra
from devicefit.simulator.infra.fileio import check_outputs
from devicefit.simulator.infra.units import format_size

EXAMPLE = ("example: devicefit adapt base.keras --profile android-arm64-cpu --update biases "
           "--batch 8 --data user.npz --eval user_test.npz -o trainable.tflite")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "adapt",
        description="Write a .tflite with train/infer/save/restore signatures (builtin "
                    "operators only: no Flex delegate) that trains the chosen part of a Keras "
                    "model with SGD on the device, the frozen rest stored as int8; run its "
                    "train signature in LiteRT on the adaptation data and report held-out "
                    "accuracy before and after, the memory LiteRT took to run it (measured) "
                    "and the time per step on this host.",
        epilog=EXAMPLE)
    p.add_argument("model", help="Keras model (.keras) to adapt")
    p.add_argument("--profile", required=True, help="device profile name or .yaml path")
    p.add_argument("--update", required=True, type=_update, metavar="WHAT", help=UPDATE_HELP)
    p.add_argument("--batch", required=True, type=int, metavar="B",
                   help="samples per training step: a fixed dimension of the train signature")
    p.add_argument("--data", required=True, metavar="DATA.npz",
                   help="the user's adaptation data (x, y)")
    p.add_argument("--eval", dest="eval_data", required=True, metavar="DATA.npz",
                   help="the same user's held-out data (x, y) for the accuracy")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, default=1,
                        help="passes over the adaptation data (default 1)")
    length.add_argument("--steps", type=int, help="training steps (instead of epochs)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    p.add_argument("--float-frozen", action="store_true",
                   help="store the frozen weights as float32 (default int8)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.tflite", help="output file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_handle)


def _update(text: str) -> Update:
    try:
        return Update.parse(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--update {text!r}: ")) from exc


def _handle(args: argparse.Namespace) -> int:
    from devicefit.sdk.devtrain.adapt import AdaptSettings, adapt, refuse_untrainable
    from devicefit.simulator.profiles import load_profile

    profile = load_profile(args.profile, args.profiles_dir)
    refuse_untrainable(profile)  # before TensorFlow is asked for
    require_extra("tensorflow", "devicefit adapt")
    require_extra("ai_edge_litert", "devicefit adapt")
    for flag, value in (("--batch", args.batch), ("--epochs", args.epochs),
                        ("--steps", args.steps)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if not args.lr > 0 or args.lr == float("inf"):
        raise UsageError(f"--lr must be a positive number, got {args.lr}")
    check_outputs([("-o", args.output)], [("model", args.model), ("adaptation data", args.data),
                                          ("evaluation data", args.eval_data)])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    settings = AdaptSettings(update=args.update, batch=args.batch, steps=args.steps,
                             epochs=args.epochs, learning_rate=args.lr,
                             int8_frozen=not args.float_frozen)
    result = adapt(args.model, profile, args.data, args.eval_data, args.output, settings)
    if args.json:
        print_json({"model": args.model, "profile": profile.name, "output": args.output}
                   | result.to_dict())
        return 0
    console = make_console(args.no_color)
    frozen = "float32" if args.float_frozen else "int8 where dynamic-range quantization takes them"
    console.print(f"{args.output}: train/infer/save/restore, builtin ops only; trains "
                  f"{len(result.trained)} tensors ({result.trained_parameters:,} parameters, "
                  f"float32, SGD), {result.frozen_parameters:,} frozen ({frozen}); "
                  f"{format_size(result.model_bytes)}")
    if result.scores:
        ranked = ", ".join(f"{path} {score:.3g}" for path, score in result.scores[:5])
        console.print(f"sparse update ranked by |gradient| x |weight| on the first batches: "
                      f"{ranked}{', ...' if len(result.scores) > 5 else ''}")
    console.print(f"held-out accuracy (LiteRT infer): {result.accuracy_before:.1%} before, "
                  f"[bold]{result.accuracy_after:.1%}[/bold] after {result.steps} steps of "
                  f"batch {result.batch} (loss {result.first_loss:.3f} -> "
                  f"{result.last_loss:.3f})")
    kernels = "XNNPACK" if result.xnnpack else "builtin kernels"
    console.print(f"train signature memory, measured in LiteRT (this host's wheel): heap "
                  f"[bold]{format_size(result.train_heap_bytes)}[/bold], of which tensors "
                  f"{format_size(result.train_tensor_bytes)} (builtin kernels); process peak "
                  f"rise {format_size(result.train_peak_rise_bytes)} ({kernels})")
    console.print(f"time per step, measured on this host ({result.threads} thread, median): "
                  f"{result.step_seconds_median * 1e3:.2f} ms")
    return 0
