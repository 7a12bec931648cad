"""``devicefit adapt``: a trainable ``.tflite`` for a phone, adapted in LiteRT on the user's
data, with the accuracy before/after, the train signature's memory and its time per step."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from devicefit.sdk.console import make_console, print_json
from devicefit.sdk.devtrain.spec import UPDATE_HELP, Update
from devicefit.simulator.errors import UsageError, require_extra
from devicefit.simulator.infra.fileio import check_outputs
from devicefit.simulator.infra.units import SIZE_UNITS_HELP, format_size, parse_size

if TYPE_CHECKING:
    from rich.console import Console

    from devicefit.sdk.devtrain.adapt import Adaptation, AutoChoice, AutoResult

EXAMPLE = ("example: devicefit adapt base.keras --profile android-arm64-cpu --update biases "
           "--batch 8 --data user.npz --eval user_test.npz -o trainable.tflite\n"
           "example: devicefit adapt base.keras --profile android-arm64-cpu --update auto "
           "--train-memory 1MiB --batch 8 --data user.npz --eval user_test.npz "
           "-o trainable.tflite")


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
    p.add_argument("--train-memory", type=_size, metavar="SIZE",
                   help="the training-memory budget --update auto chooses under, instead of "
                        f"the profile's budgets.train_memory ({SIZE_UNITS_HELP})")
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


def _size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0 bytes")
    return value


def _handle(args: argparse.Namespace) -> int:
    from devicefit.sdk.devtrain.adapt import (
        AdaptSettings,
        adapt,
        adapt_auto,
        refuse_untrainable,
        train_budget,
    )
    from devicefit.simulator.profiles import load_profile

    profile = load_profile(args.profile, args.profiles_dir)
    refuse_untrainable(profile)  # before TensorFlow is asked for
    auto = args.update == Update("auto")
    if args.train_memory is not None and not auto:
        raise UsageError("--train-memory is the budget --update auto chooses under; "
                         f"--update {args.update} trains what it names")
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
                             int8_frozen=not args.float_frozen,
                             train_memory_bytes=args.train_memory)
    head = {"model": args.model, "profile": profile.name, "output": args.output}
    if auto:
        train_budget(profile, settings)  # a missing budget is refused before TensorFlow
        chosen = adapt_auto(args.model, profile, args.data, args.eval_data, args.output,
                            settings)
        code = 0 if chosen.measured_fits else 1
        if args.json:
            print_json(head | {"status": "pass" if code == 0 else "fail"} | chosen.to_dict())
            return code
        console = make_console(args.no_color)
        _print_choice(console, chosen.choice)
        if chosen.adaptation is not None:
            _print_adaptation(console, chosen.adaptation, args, chosen.adaptation.update)
        _print_verdict(console, chosen, args.output)
        return code
    result = adapt(args.model, profile, args.data, args.eval_data, args.output, settings)
    if args.json:
        print_json(head | result.to_dict())
        return 0
    _print_adaptation(make_console(args.no_color), result, args, args.output)
    return 0


def _print_choice(console: Console, choice: AutoChoice) -> None:
    console.print(f"training-memory budget {format_size(choice.budget_bytes)} "
                  f"({choice.budget_from}); every choice planned by the simulator "
                  f"(estimated), those that fit adapted in LiteRT on {choice.fit_samples} "
                  f"samples of --data and validated on the {choice.validation_samples} "
                  "held out:")
    console.print(f"  {'update':<10} {'planned':>10}  fits  validation accuracy")
    for c in choice.candidates:
        if c.refused is not None:
            console.print(f"  {c.update:<10} {'-':>10}  -     refused: {c.refused}")
            continue
        accuracy = "-" if c.validation_accuracy is None else f"{c.validation_accuracy:.1%}"
        mark = " <- chosen" if c.update == choice.chosen else ""
        console.print(f"  {c.update:<10} {format_size(c.planned_bytes):>10}  "
                      f"{'yes' if c.fits else 'no ':<4}  {accuracy}{mark}")


def _print_verdict(console: Console, chosen: AutoResult, output: str) -> None:
    choice, adaptation = chosen.choice, chosen.adaptation
    budget = format_size(choice.budget_bytes)
    if adaptation is None:
        miss = choice.closest_miss()
        closest = "" if miss is None else \
            (f"; closest miss: {miss.update}, planned {format_size(miss.planned_bytes)} "
             f"(estimated) against {budget}")
        console.print(f"[bold red]FAIL[/bold red]: no choice of what to train fits the "
                      f"training-memory budget {budget}{closest}; nothing written")
        return
    heap = format_size(adaptation.train_heap_bytes)
    if chosen.measured_fits:
        console.print(f"chose {choice.chosen}: measured heap {heap} within the budget {budget} "
                      f"(planned {format_size(adaptation.planned_bytes)}); wrote {output}")
        return
    console.print(f"[bold red]FAIL[/bold red]: {choice.chosen} was planned at "
                  f"{format_size(adaptation.planned_bytes)}, but LiteRT measured a heap of "
                  f"{heap}, over the budget {budget}; nothing written")


def _print_adaptation(console: Console, result: Adaptation, args: argparse.Namespace,
                      label: str) -> None:
    """The trained model's figures, headed by ``label``: the file written, or with ``auto``
    (which writes it only once verified) the chosen update."""
    frozen = "float32" if args.float_frozen else "int8 where dynamic-range quantization takes them"
    console.print(f"{label}: train/infer/save/restore, builtin ops only; trains "
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
    console.print(f"train signature memory, planned by the simulator (estimated): "
                  f"{format_size(result.planned_bytes)}")
    console.print(f"time per step, measured on this host ({result.threads} thread, median): "
                  f"{result.step_seconds_median * 1e3:.2f} ms")
