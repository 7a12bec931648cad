"""``devicefit plan-batch``: the largest training batch that fits memory, plus accumulation."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from devicefit.sdk.console import make_console, print_json, step, table
from devicefit.sdk.train.estimate import PARAM_BYTES
from devicefit.simulator.errors import InputError, UsageError, require_extra
from devicefit.simulator.infra.units import SIZE_UNITS_HELP, format_size, parse_size

MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")


def register(sub: argparse._SubParsersAction) -> None:
    from devicefit.sdk.train.estimate import ACTIVATION_BYTES
    from devicefit.sdk.train.optimizers import OPTIMIZERS

    p = sub.add_parser(
        "plan-batch",
        description="Estimate training memory (parameters, gradients, optimizer state, "
                    "activations kept for the backward pass) and pick the largest micro-batch "
                    "that fits, with the gradient-accumulation steps that reach the target "
                    "effective batch. By default the plan is then calibrated on this machine: "
                    "short real training steps in child processes, on the backend training "
                    "will use (threads from TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS, "
                    "oneDNN from TF_ENABLE_ONEDNN_OPTS or the CPU, the GPU if one is "
                    "visible), and the chosen batch is verified with one real step.",
        epilog="example: devicefit plan-batch model.keras --memory 8GiB --target-batch 256")
    p.add_argument("model", help="Keras model file (.keras or .h5)")
    p.add_argument("--memory", default="auto", metavar="SIZE|auto",
                   help=f"memory to plan for: {SIZE_UNITS_HELP}; 'auto' (default) = what this "
                        "machine has free, with a safety margin")
    p.add_argument("--optimizer", default="adam", choices=sorted(OPTIMIZERS), metavar="NAME",
                   help=f"optimizer whose state to count (default adam; one of "
                        f"{', '.join(sorted(OPTIMIZERS))})")
    p.add_argument("--target-batch", type=int, default=32, metavar="N",
                   help="samples per optimizer update to reach (default 32)")
    p.add_argument("--dtype", default="float32", choices=sorted(ACTIVATION_BYTES),
                   help="training precision (default float32)")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="the static estimate only: instant, no training step run, the same on "
                        "every machine (tensor bytes, TensorFlow's runtime not included)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_handle)


def load_keras_model(path: str) -> Any:
    """Load a Keras model safely (no arbitrary code), or raise ``InputError``."""
    file = Path(path)
    if not file.is_file():
        raise InputError(f"model file not found: {path}")
    if file.suffix.lower() not in MODEL_SUFFIXES:
        raise InputError(f"{path} is not a Keras model file (expected "
                         f"{', '.join(MODEL_SUFFIXES)}); plan-batch needs the trainable model")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # no TF C++ start-up chatter
    step(f"loading {file.name} (TensorFlow starts)")
    import keras

    try:
        return keras.saving.load_model(file, safe_mode=True, compile=False)
    except Exception as exc:  # Keras raises many types for a bad file; all mean "not loadable"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load {path} as a Keras model: {detail}") from exc


def stored_parameter_bytes(path: str) -> int | None:
    """The bytes of the model's own variables as the file stores them (a ``.keras`` zip's
    ``model.weights.h5`` under ``layers/``, a legacy ``.h5``'s ``model_weights/``; the
    optimizer's state is not the model's), read with h5py without starting TensorFlow;
    None when the file does not read that way (Keras then says why)."""
    import io
    import zipfile

    try:
        import h5py
        import numpy as np

        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                source: Any = io.BytesIO(archive.read("model.weights.h5"))
            root = "layers"
        else:
            source, root = path, "model_weights"
        with h5py.File(source, "r") as weights:
            if root not in weights:
                return None
            sizes: list[int] = []
            weights[root].visititems(
                lambda _, item: sizes.append(item.size) if isinstance(item, h5py.Dataset)
                and np.issubdtype(item.dtype, np.floating) else None)
    except (ImportError, OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return sum(sizes) * PARAM_BYTES


def _memory(value: str) -> int | None:
    if value.strip().lower() == "auto":
        return None
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise UsageError(f"--memory: {exc}") from exc
    if size <= 0:
        raise UsageError("--memory must be more than 0 bytes")
    return size


def _handle(args: argparse.Namespace) -> int:
    from devicefit.sdk.train.plan import check_parameters, plan_batch

    require_extra("tensorflow", "devicefit plan-batch")  # Keras loads the model
    memory = _memory(args.memory)
    if args.target_batch < 1:
        raise UsageError(f"--target-batch must be at least 1, got {args.target_batch}")
    if memory is not None and Path(args.model).suffix.lower() in MODEL_SUFFIXES and \
            (stored := stored_parameter_bytes(args.model)) is not None:
        check_parameters(stored, memory)  # seconds before TensorFlow would have started
    model = load_keras_model(args.model)
    step("estimating training memory")
    plan = plan_batch(model, memory_bytes=memory,
                      optimizer=args.optimizer, target_batch=args.target_batch, dtype=args.dtype,
                      calibrate_with=args.model if args.calibrate else None)
    if args.json:
        print_json({"model": args.model} | plan.to_dict())
        return 0
    console = make_console(args.no_color)
    e = plan.estimate
    c = plan.calibration
    # Without calibration nothing counts TensorFlow's own memory (hundreds of MiB: the
    # calibrated fixed part), so the plan says so where it promises the batch.
    tensors_only = "" if c is not None else \
        " [bold]for the tensors alone[/bold]: TensorFlow's own memory not counted"
    console.print(
        f"{args.model}: batch [bold]{plan.batch_size}[/bold] x {plan.accumulation_steps} "
        f"accumulation step(s) = effective batch {plan.effective_batch} "
        f"({plan.optimizer}, {plan.dtype}){tensors_only}")
    if c is None:
        console.print(f"memory limit {format_size(plan.memory_limit_bytes)} "
                      f"({plan.memory_source}); static estimate {format_size(e.peak_bytes)} at "
                      f"{e.peak_at} (tensors only, not measured on this machine: without "
                      "--no-calibrate, real steps measure what TensorFlow adds)")
    else:
        v = c.verified
        measured = ", ".join(f"{p.batch_size}" + (f"x{p.accumulation_steps}"
                                                  if p.accumulation_steps > 1 else "")
                             + f": {format_size(p.peak_bytes)}" for p in c.points)
        console.print(f"backend: {c.backend.describe()}")
        console.print(f"memory limit {format_size(plan.memory_limit_bytes)} "
                      f"({plan.memory_source}); planned peak "
                      f"[bold]{format_size(plan.planned_peak_bytes)}[/bold] = verified step "
                      f"at batch {v.batch_size} {format_size(v.peak_bytes)} + margin "
                      "(the training process's private memory, TensorFlow's runtime "
                      "included)")
        console.print(f"calibrated: {format_size(c.fixed_bytes)} + "
                      f"{format_size(c.per_sample_bytes)} per sample (measured peaks by "
                      f"batch: {measured}); static estimate {format_size(e.peak_bytes)} "
                      f"at {e.peak_at}")
    console.print(
        f"  at the static peak ({e.peak_at}): parameters {format_size(e.parameter_bytes)}, "
        f"optimizer state "
        f"{format_size(e.optimizer_slot_bytes)}, accumulators {format_size(e.accumulator_bytes)}"
        f", gradients {format_size(e.gradient_bytes)}, activations kept "
        f"{format_size(e.activation_bytes)}, workspace {format_size(e.workspace_bytes)}, "
        f"batch data {format_size(e.input_bytes)}")
    rows = [(t.batch_size, format_size(t.kept_activation_bytes), format_size(t.peak_bytes))
            + (() if c is None else (format_size(plan.table_peak(t)),))
            + ("yes" if plan.table_peak(t) <= plan.memory_limit_bytes else "no",)
            for t in plan.table]
    # Activations at their most (as the backward starts), not at the peak: a small batch
    # peaks in the optimizer update, after every activation is freed.
    heads = ["batch", "activations kept", "static peak"] + \
        ([] if c is None else ["calibrated peak"]) + ["fits" if c else "tensors fit"]
    console.print(table("Batch size vs training memory", heads, rows))
    return 0
