"""``bench()``: run TFLite's benchmark_model on an Android device and return the figures.

Steps: pick the device, check the binary's architecture against the device ABIs, push the
binary and the model (skipped when the device already holds the same bytes), run with the
profile's threads/delegate unless overridden, parse the output, remove what was pushed.

On the phone's GPU (``gpu=True``, or a profile whose first delegate is the GPU's) it runs
twice: ``--use_gpu=true`` with the profile's delegate options (its ``gpu:`` keys as
benchmark_model's flags), and the CPU beside it (XNNPACK), so the GPU's time is seen against
the CPU's on the same phone. The profile's own run is the result; the other is ``beside``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shlex
import signal
from collections.abc import Sequence
from pathlib import Path

from devicefit.sdk.bench.adb import AdbClient, AdbError, DeviceGone, check_binary_arch, find_adb
from devicefit.sdk.bench.benchmark_output import gpu_failure, parse_benchmark_output, tail
from devicefit.sdk.console import step
from devicefit.simulator.errors import InputError, RuntimeFailure, UsageError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report.benchmark import (
    BenchmarkOutput,
    BenchResult,
    BenchSettings,
    DeviceRun,
)
from devicefit.simulator.target import TARGETS, target_for

log = logging.getLogger(__name__)

REMOTE_DIR = "/data/local/tmp/devicefit"
REMOTE_BINARY = "benchmark_model"
DELEGATES = ("xnnpack", "gpu", "nnapi")
#: benchmark_model flag per delegate choice.
_DELEGATE_FLAGS = {"xnnpack": "--use_xnnpack=true", "gpu": "--use_gpu=true",
                   "nnapi": "--use_nnapi=true", None: "--use_xnnpack=false"}
_CPU_MASK = re.compile(r"^(0x)?[0-9a-fA-F]+$")
DEFAULT_RUN_TIMEOUT_S = 600.0
#: The CPU run beside a GPU run.
CPU_DELEGATE = "xnnpack"


class GpuUnavailable(RuntimeFailure):
    """The phone's GPU delegate could not run the model (no OpenCL and no OpenGL ES 3.1, or
    it failed on the model): the model does not run on that GPU, a finding (exit 1, as
    every :class:`RuntimeFailure`)."""


def default_delegate(profile: Profile) -> str | None:
    """The first delegate of the profile's runtime that benchmark_model can apply."""
    return next((d for d in profile.runtime.delegates if d in DELEGATES), None)


def _settings(profile: Profile, threads: int | None, delegate: str | None, runs: int,
              warmup: int, cpu_mask: str | None, op_profiling: bool) -> BenchSettings:
    if target_for(profile).bench_tool != REMOTE_BINARY:
        takers = " or ".join(t.name for t in TARGETS.values() if t.bench_tool == REMOTE_BINARY)
        raise UsageError(f"profile {profile.name} targets {profile.runtime.name}; bench runs "
                         f"LiteRT on Android phones: use a {takers} profile such as "
                         "android-arm64-cpu")
    if delegate is not None and delegate not in DELEGATES:
        raise UsageError(f"unknown delegate '{delegate}': choose one of {', '.join(DELEGATES)}")
    if cpu_mask is not None and not _CPU_MASK.match(cpu_mask):
        raise UsageError(f"--cpu-mask {cpu_mask!r} is not a hex CPU mask such as f0")
    for name, value, low in (("--runs", runs, 1), ("--warmup", warmup, 0),
                             ("--threads", threads, 1)):
        if value is not None and value < low:
            raise UsageError(f"{name} must be >= {low}, got {value}")
    return BenchSettings(threads=threads or profile.runtime.threads,
                         delegate=delegate or default_delegate(profile), runs=runs,
                         warmup_runs=warmup, cpu_mask=cpu_mask, op_profiling=op_profiling)


def gpu_flags(profile: Profile) -> list[str]:
    """benchmark_model's GPU delegate options as the profile's ``gpu:`` keys set them
    (``tflite/tools/delegates/gpu_delegate_provider.cc``, ``default_execution_provider.cc``);
    a key the profile leaves out keeps the tool's default, which is the delegate's (1
    partition, precision loss allowed), as devicefit's prediction assumes too."""
    keys = profile.resolved.get("gpu") or {}
    flags = []
    if "max_partitions" in keys:
        flags.append(f"--max_delegated_partitions={int(keys['max_partitions'])}")
    if "precision" in keys:
        flags.append("--gpu_precision_loss_allowed="
                     + ("true" if keys["precision"] == "fp16" else "false"))
    return flags


def _command(s: BenchSettings, remote_binary: str, remote_model: str,
             delegate_flags: Sequence[str] = ()) -> str:
    args = [remote_binary, f"--graph={remote_model}", f"--num_threads={s.threads}",
            f"--warmup_runs={s.warmup_runs}", f"--num_runs={s.runs}",
            _DELEGATE_FLAGS[s.delegate], *delegate_flags, "--report_peak_memory_footprint=true"]
    if s.op_profiling:
        args.append("--enable_op_profiling=true")
    if s.cpu_mask:
        args = ["taskset", s.cpu_mask, *args]
    return " ".join(shlex.quote(a) for a in args)


def _remote_name(model: Path) -> str:
    # The device shell is plain sh: keep the name to characters that need no quoting there.
    return re.sub(r"[^A-Za-z0-9._-]", "_", model.name)


def _failure(returncode: int, output: str) -> RuntimeFailure:
    """The error for a benchmark_model run that exited non-zero on a device still online:
    exit 1 (the model failed on the phone) unless adb or the binary, not the model, failed."""
    last = tail(output)
    if returncode == 255:
        # adb's own failure code (and no signal's: shells report a signal as 128 + n < 255).
        return AdbError(f"adb failed while benchmark_model ran (exit 255: adb's own "
                        f"error, or benchmark_model exited 255); its last lines: {last}")
    if returncode > 128:
        try:
            name = signal.Signals(returncode - 128).name
        except ValueError:
            name = f"signal {returncode - 128}"
        return RuntimeFailure(f"benchmark_model crashed on the device ({name}); its last "
                              f"lines: {last}")
    if returncode == 126:
        return AdbError(f"the device cannot execute benchmark_model (exit 126): {last}")
    if returncode == 127:
        return AdbError(f"the device shell could not start benchmark_model (exit 127; a "
                        f"missing file or library): {last}")
    return RuntimeFailure(f"benchmark_model failed (exit {returncode}); its last lines: {last}")


def bench(model: str | Path, profile: Profile | str, *, benchmark_binary: str | Path | None,
          serial: str | None = None, adb: str | None = None, runs: int = 50, warmup: int = 1,
          threads: int | None = None, delegate: str | None = None, cpu_mask: str | None = None,
          op_profiling: bool = False, keep: bool = False, gpu: bool = False,
          timeout_s: float = DEFAULT_RUN_TIMEOUT_S,
          profiles_dirs: Sequence[str | Path] = ()) -> BenchResult:
    """Benchmark ``model`` on an Android device over adb; see the module docstring.

    ``profile`` is a :class:`Profile`, or a profile name or ``.yaml`` path looked up in
    ``profiles_dirs`` and the built-in profiles, as everywhere in the API. ``gpu``: run
    on the GPU and on the CPU beside it (a GPU profile does without asking, unless
    ``delegate`` names one).
    """
    if not isinstance(profile, Profile):
        profile = load_profile(profile, list(profiles_dirs))
    model = Path(model)
    if not model.is_file():
        raise InputError(f"model file not found: {model}")
    if benchmark_binary is None:
        raise UsageError("bench needs --benchmark-binary PATH: TFLite's prebuilt "
                         "android_aarch64_benchmark_model (tensorflow.org/lite/performance/"
                         "measurement), which devicefit cannot download for you")
    binary = Path(benchmark_binary)
    if not binary.is_file():
        raise InputError(f"benchmark binary not found: {binary}")
    if gpu and delegate is not None:
        raise UsageError(f"--gpu runs the model on the GPU and on the CPU beside it: leave out "
                         f"--delegate {delegate}")
    settings = _settings(profile, threads, delegate, runs, warmup, cpu_mask, op_profiling)
    # Both runs when asked, or when the profile's own is the GPU's: its time means little
    # without the CPU's beside it (a partial GPU partition can be slower than the CPU).
    pair = gpu or (delegate is None and settings.delegate == "gpu")
    if pair:
        primary = "gpu" if settings.delegate == "gpu" else CPU_DELEGATE
        settings = dataclasses.replace(settings, delegate=primary)
        other = dataclasses.replace(settings,
                                    delegate=CPU_DELEGATE if primary == "gpu" else "gpu")

    client = AdbClient(find_adb(adb))
    entry = client.select(serial)
    abis = client.abis()
    arch = check_binary_arch(binary, abis)
    device_model = client.getprop("ro.product.model")

    remote_binary = f"{REMOTE_DIR}/{REMOTE_BINARY}"
    remote_model = f"{REMOTE_DIR}/{_remote_name(model)}"
    flags = gpu_flags(profile)

    def command_of(s: BenchSettings) -> str:
        return _command(s, remote_binary, remote_model, flags if s.delegate == "gpu" else ())

    command = command_of(settings)
    beside: DeviceRun | None = None
    pushed: list[str] = []
    already: list[str] = []
    removed: list[str] = []
    try:
        step(f"copying the model and benchmark_model to {entry.serial}")
        client.mkdir(REMOTE_DIR)
        for local, remote in ((binary, remote_binary), (model, remote_model)):
            if client.same_file(local, remote):
                already.append(remote)
            else:
                client.push(local, remote)
                pushed.append(remote)
        client.chmod_executable(remote_binary)
        where = device_model or entry.serial
        results, output = _run(client, command, settings, where, timeout_s)
        if pair:
            other_command = command_of(other)
            other_results, _ = _run(client, other_command, other, where, timeout_s)
            beside = DeviceRun(other, other_command, other_results)
    finally:
        if not keep:
            removed = _cleanup(client, pushed)
    return BenchResult(model=str(model), profile=profile.name, serial=entry.serial,
                       device_model=device_model, abis=abis, binary_arch=arch,
                       settings=settings, command=command, results=results, pushed=pushed,
                       already_on_device=already, removed=removed,
                       output_tail=[ln for ln in output.splitlines() if ln.strip()][-40:],
                       beside=beside)


def _run(client: AdbClient, command: str, settings: BenchSettings, where: str,
         timeout_s: float) -> tuple[BenchmarkOutput, str]:
    """One benchmark_model run on the device: its figures and its whole output."""
    on = "the GPU" if settings.delegate == "gpu" else "the CPU"
    log.info("running on %s: %s", client.serial, command)
    step(f"running benchmark_model on {where} ({on})")
    run = client.shell(command, timeout=timeout_s, what="benchmark_model")
    output = run.stdout + ("\n" + run.stderr if run.stderr.strip() else "")
    if run.returncode != 0:
        if not client.is_online():
            raise DeviceGone(f"device {client.serial} disconnected while benchmark_model "
                             f"ran; its last lines: {tail(output)}; reconnect it and run "
                             "again")
        if settings.delegate == "gpu" and (why := gpu_failure(output)) is not None:
            raise GpuUnavailable(f"the model does not run on the GPU of {where}: {why}")
        raise _failure(run.returncode, output)
    return parse_benchmark_output(output), output


def _cleanup(client: AdbClient, pushed: list[str]) -> list[str]:
    """Remove the files this run pushed; the ones removed."""
    # Files that were already there are the user's (an earlier --keep run): leave them.
    try:
        client.remove(pushed)
    except (AdbError, DeviceGone) as exc:
        log.warning("could not remove %s from the device: %s", ", ".join(pushed), exc)
        return []
    return list(pushed)
