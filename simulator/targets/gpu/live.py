"""LiteRT's GPU delegate asked where it runs here: its partition and its outputs.

One child process (:mod:`._live_worker`, with a timeout) compiles the model for GPU|CPU
in LiteRT's CompiledModel — the WebGPU accelerator (ML Drift on Dawn) on the machine's
Vulkan adapter: a real GPU, or Chromium's SwiftShader, a software one
(:mod:`.delegate`) — and runs the same inputs three ways: on the CPU in fp32 (XNNPACK,
the reference), on the CPU with XNNPACK's ``FORCE_FP16`` (fp16 tensors), and through the
GPU path. The delegate's log gives its partition (:func:`.delegate.read_answer`); the
outputs give what each way does to them against the fp32 reference.

Why two fp16 answers: a phone's GPU delegate computes in fp16 unless told not to
(``GpuOptions.enforce_f32`` False by default), but ML Drift computes in fp16 only on an
adapter with WebGPU's ``shader-f16``; on SwiftShader its outputs match the CPU's fp32 ones
to fp32 rounding (measured: ``benchmarks/bench_gpu_live.py``), so the GPU path here checks
the partition and the kernels, and XNNPACK's fp16 mode checks fp16 tensors.

Why a fourth way on some models (:func:`ways_for`): LiteRT's XNNPACK, which runs the ops
the GPU leaves on the CPU, skips a DENSIFY of constant sparse weights it means to unpack
itself, but leaves the DEQUANTIZE after it (fp16 weights) to LiteRT's builtin kernel when
a GPU op reads its output: that DEQUANTIZE then reads a tensor never written, and the GPU
op computes with garbage weights (``tflite/delegates/xnnpack/xnnpack_delegate.cc``,
``PrepareOpsToDelegate``: a producer is un-skipped only for the direct inputs of an op it
does not take). MediaPipe's sparse models are made so. On such a model the GPU path runs a
second time with the CPU's ops on LiteRT's builtin kernels, and the report says which of
the two the difference comes from (measured: ``benchmarks/repro_xnnpack_densify.py``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.simulator.infra.fileio import temporary_folder
from devicefit.simulator.read.model import Model, Tensor
from devicefit.simulator.run.runtimes import WORKER_MEMORY_BYTES
from devicefit.simulator.targets.gpu.delegate import ICDS, DelegateAnswer, read_answer, vulkan_env

#: The ways the child computes (:mod:`._live_worker`), with what each is, for the report.
WAYS = {"fp32": "CPU fp32 (XNNPACK)",
        "fp16": "CPU fp16 tensors (XNNPACK FORCE_FP16)",
        "gpu": "GPU path",
        "gpu_builtin": "Same GPU path, the ops left on the CPU on LiteRT's builtin kernels"}
#: The ways every model is computed; :func:`ways_for` adds ``gpu_builtin`` where needed.
BASE_WAYS = ("fp32", "fp16", "gpu")
#: How much closer (in dB of SQNR) the GPU path must come with the builtin CPU kernels for
#: its difference to be put down to XNNPACK: on the models measured the gap is over 100 dB
#: (garbage weights), and a GPU kernel's own rounding moves both ways alike.
CPU_KERNELS_GAP_DB = 20.0
#: Seconds the child is given per sample, beside the caller's timeout for compiling.
SECONDS_PER_SAMPLE = 2.0


@dataclass(frozen=True)
class OutputAgreement:
    """One way's outputs against the CPU's fp32 ones on the same inputs (measured)."""

    way: str
    #: Why this way gave no outputs ("" when it did); the figures are then None.
    error: str = ""
    #: Largest |difference| over the elements finite in both.
    max_abs_diff: float | None = None
    #: Signal-to-noise ratio of the outputs against the reference, in dB; None: identical.
    sqnr_db: float | None = None
    #: Samples whose first output picks the reference's class (a classifier's: None else).
    top1_agreement: float | None = None
    #: Top-1 accuracy against the labels, when given.
    accuracy: float | None = None
    #: Output elements finite in the reference and not here (fp16 overflows to inf).
    nonfinite: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        if self.error:
            return f"{self.way}: no outputs: {self.error}"
        # Garbage can be nan everywhere: no finite difference is not agreement then.
        same = "identical" if not self.nonfinite else "equal where finite"
        figures = [f"max |diff| {_g(self.max_abs_diff)}",
                   same if self.sqnr_db is None else f"SQNR {self.sqnr_db:.1f} dB"]
        if self.top1_agreement is not None:
            figures.append(f"top-1 agreement {self.top1_agreement:.1%}")
        if self.accuracy is not None:
            figures.append(f"accuracy {self.accuracy:.1%}")
        if self.nonfinite:
            figures.append(f"{self.nonfinite:,} output values overflow (inf/nan)")
        return f"{self.way}: " + ", ".join(figures)


@dataclass(frozen=True)
class PrecisionCheck:
    """The model's outputs computed as the GPU computes them, against the CPU's fp32."""

    inputs: str
    samples: int
    #: Top-1 accuracy of the fp32 reference against the labels, when given.
    reference_accuracy: float | None
    ways: tuple[OutputAgreement, ...]
    #: Where the GPU path's difference comes from, when the ways measured show it ("").
    cause: str = ""


@dataclass(frozen=True)
class LiveDelegate:
    """What ``--run`` asked LiteRT's GPU delegate, and what it answered (measured)."""

    #: Why it was not asked or did not compile the model; "" when it answered.
    not_asked: str
    adapter: str = ""
    #: Wall time of the child: compiling three ways and running every sample.
    seconds: float = 0.0
    gpu_ops: int | None = None
    total_ops: int = 0
    #: The delegate's own "OP: reason" lines for what it leaves on the CPU.
    refused: tuple[str, ...] = ()
    #: Where its partition differs from the predicted one, each named.
    disagreements: tuple[str, ...] = ()
    precision: PrecisionCheck | None = None
    #: Why there is no fp16 check ("" when there is one).
    not_checked: str = ""
    #: Read from the cache of an earlier ask (``seconds`` is that ask's).
    cached: bool = False


def short(adapter: str) -> str:
    """The adapter's name without Dawn's details ("SwiftShader Device (Subzero)")."""
    return adapter.split(",")[0] or "the adapter"


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def default_icd() -> str | None:
    """The Vulkan driver to ask on: the user's (``VK_ICD_FILENAMES``/``VK_DRIVER_FILES``
    set: theirs, None here), else Chromium's SwiftShader where installed, else the
    loader's own choice (None)."""
    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        return None
    swiftshader = ICDS["swiftshader"]
    return swiftshader if swiftshader and Path(swiftshader).is_file() else None


@dataclass(frozen=True)
class LiveRun:
    """What one child gave: the delegate's answer and each way's outputs by name."""

    answer: DelegateAnswer
    seconds: float
    outputs: dict[str, dict[str, np.ndarray]]
    errors: dict[str, str]
    way_seconds: dict[str, float]
    #: The ways the child was asked to compute, in its order.
    ways: tuple[str, ...] = BASE_WAYS


def densified_fp16_weights(model: Model) -> tuple[int, ...]:
    """The DEQUANTIZE ops that read a DENSIFY of constant sparse weights: the chain LiteRT's
    XNNPACK leaves half-run when a GPU op reads the result (the module's docstring)."""
    sg = model.main
    producers = {t: op for op in sg.operators for t in op.outputs}
    found = []
    for op in sg.operators:
        source = producers.get(op.inputs[0]) if op.op_name == "DEQUANTIZE" and op.inputs \
            else None
        if source is not None and source.op_name == "DENSIFY" and source.inputs \
                and sg.tensors[source.inputs[0]].has_data:
            found.append(op.index)
    return tuple(found)


def ways_for(model: Model) -> tuple[str, ...]:
    """The ways the child computes for ``model``: the GPU path a second time, the CPU's
    ops on LiteRT's builtin kernels, where its weights are made by DENSIFY → DEQUANTIZE."""
    return (*BASE_WAYS, "gpu_builtin") if densified_fp16_weights(model) else BASE_WAYS


def run_live(model: Model, inputs: Callable[[Path], dict[str, Any]], precision: str,
             timeout_s: float,
             samples: int = 1, work_files: dict[str, np.ndarray] | None = None) -> LiveRun:
    """Compile and run ``model`` the three ways in a child. ``inputs``: one sample's source
    for the child's folder (``RunSetup.input_request``); ``work_files``: arrays written into the child's folder,
    ``"samples"`` (the first input's samples, in its dtype) in place of ``inputs``."""
    ways = ways_for(model)
    # The caller's timeout is for three ways; a fourth compiles and runs once more.
    timeout = (timeout_s + SECONDS_PER_SAMPLE * samples) * len(ways) / 3
    with temporary_folder("devicefit-gpu-") as tmp:
        work = Path(tmp)
        files = {}
        for name, array in (work_files or {}).items():
            np.save(work / f"{name}.npy", array)
            files[name] = str(work / f"{name}.npy")
        names = [model.main.tensors[i].name for i in model.main.inputs]
        request = {**files, "inputs": inputs(work), "dir": str(work), "model": str(
            Path(model.path).resolve()), "precision": precision, "names": names,
            "ways": list(ways), "memory_bytes": WORKER_MEMORY_BYTES}
        (work / "request.json").write_text(json.dumps(request))
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "devicefit.simulator.targets.gpu._live_worker",
                 str(work / "request.json")], env=vulkan_env(default_icd()),
                capture_output=True, text=True, timeout=timeout, start_new_session=True)
            stdout, stderr, code = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            stdout, stderr = _text(exc.stdout), _text(exc.stderr) + (
                f"\nFailed to initialize: no answer within {timeout:.0f} s")
            code = -9
        seconds = time.perf_counter() - start
        outputs, errors, way_seconds = {}, {}, {}
        for way in ways:
            try:
                result = json.loads((work / f"{way}.json").read_text())
            except (OSError, ValueError):
                errors[way] = "the child ended before this way finished"
                continue
            way_seconds[way] = float(result["seconds"])
            if not result["ok"]:
                errors[way] = str(result["error"])
                continue
            with np.load(work / f"{way}.npz", allow_pickle=False) as z:
                outputs[way] = {name: z[f"arr_{k}"] for k, name in enumerate(result["names"])}
    return LiveRun(read_answer(stdout, stderr, code), seconds, outputs, errors, way_seconds,
                   ways)


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _as_float(values: np.ndarray, tensor: Tensor | None) -> np.ndarray:
    """An output as real numbers: an integer output dequantized with its tensor's scale."""
    q = tensor.quantization if tensor is not None else None
    if values.dtype.kind in "iu" and q is not None and q.scale:
        return (values.astype(np.float64) - q.zero_point[0]) * q.scale[0]
    return values.astype(np.float64)


def agreement(way: str, reference: dict[str, np.ndarray], got: dict[str, np.ndarray],
              model: Model, labels: np.ndarray | None) -> OutputAgreement:
    """``got`` against ``reference`` (both keyed ``"<sample>:<output name>"``)."""
    by_name = {t.name: t for t in model.main.tensors}
    ref = {k: _as_float(v, by_name.get(k.split(":", 1)[1])) for k, v in reference.items()}
    out = {k: _as_float(got[k], by_name.get(k.split(":", 1)[1])) for k in ref if k in got}
    if len(out) != len(ref) or any(out[k].shape != ref[k].shape for k in ref):
        return OutputAgreement(way, error="its outputs do not match the reference's in name "
                                          "or shape")
    r = np.concatenate([v.ravel() for v in ref.values()]) if ref else np.zeros(0)
    o = np.concatenate([out[k].ravel() for k in ref]) if ref else np.zeros(0)
    both = np.isfinite(r) & np.isfinite(o)
    noise = float(np.sum((r[both] - o[both]) ** 2))
    signal = float(np.sum(r[both] ** 2))
    first = model.main.tensors[model.main.outputs[0]].name if model.main.outputs else ""
    heads = sorted((int(k.split(":", 1)[0]), k) for k in ref if k.split(":", 1)[1] == first)
    top1 = accuracy = None
    if heads and ref[heads[0][1]].size > 1:
        picked = np.array([[ref[k].argmax(), out[k].argmax()] for _, k in heads])
        top1 = float(np.mean(picked[:, 0] == picked[:, 1]))
        if labels is not None and len(labels) == len(heads):
            accuracy = float(np.mean(picked[:, 1] == labels))
    return OutputAgreement(
        way, max_abs_diff=float(np.max(np.abs(r[both] - o[both]), initial=0.0)),
        sqnr_db=None if noise == 0 else float(10 * np.log10(max(signal, 1e-30) / noise)),
        top1_agreement=top1, accuracy=accuracy,
        nonfinite=int(np.sum(np.isfinite(r) & ~np.isfinite(o))))


def precision_check(run: LiveRun, model: Model, inputs: str, samples: int,
                    labels: np.ndarray | None = None) -> PrecisionCheck | str:
    """The fp16 way and the GPU path against the fp32 reference; a string: why not."""
    reference = run.outputs.get("fp32")
    if reference is None:
        return f"the CPU's fp32 reference did not run: {run.errors.get('fp32', '')}"
    ways = []
    for way in run.ways[1:]:
        name = (f"{WAYS[way]} (LiteRT's GPU accelerator on {short(run.answer.adapter)})"
                if way == "gpu" else WAYS[way])
        found = run.outputs.get(way)
        # Without an adapter the GPU way's own error is LiteRT's generic one: say why.
        error = (run.answer.error if way.startswith("gpu") and not run.answer.ok
                 and run.answer.error else run.errors.get(way, "no outputs"))
        ways.append(dataclasses.replace(
            OutputAgreement(name, error=error)
            if found is None else agreement(name, reference, found, model, labels),
            seconds=run.way_seconds.get(way, 0.0)))
    ref_accuracy = agreement(WAYS["fp32"], reference, reference, model, labels).accuracy
    return PrecisionCheck(inputs, samples, ref_accuracy, tuple(ways),
                          cpu_kernels_cause(run, model, ways))


def _noise_db(way: OutputAgreement) -> float:
    """SQNR as a number to compare: identical is best, outputs lost to inf/nan worst."""
    if way.error or way.nonfinite:
        return -math.inf
    return math.inf if way.sqnr_db is None else way.sqnr_db


def cpu_kernels_cause(run: LiveRun, model: Model, ways: list[OutputAgreement]) -> str:
    """Where the GPU path's difference comes from, when the builtin-kernel way ran."""
    by_way = dict(zip(run.ways[1:], ways, strict=True))
    default, builtin = by_way.get("gpu"), by_way.get("gpu_builtin")
    if default is None or builtin is None or builtin.error:
        return ""
    chains = len(densified_fp16_weights(model))
    better, worse = _noise_db(builtin), _noise_db(default)
    # Both lost to inf/nan (or both identical): the CPU's kernels are not the difference.
    if better == -math.inf or not (worse == -math.inf or better - worse >= CPU_KERNELS_GAP_DB):
        return (f"not the CPU's kernels: with LiteRT's builtin kernels for the ops left on "
                f"the CPU the GPU path comes no nearer the CPU's outputs (by "
                f"{CPU_KERNELS_GAP_DB:.0f} dB or more) than with XNNPACK; the model has "
                f"{chains} DENSIFY → DEQUANTIZE weight chain(s)")
    return (f"not the model, not the GPU: the GPU path matches the CPU once the ops left on "
            f"the CPU run on LiteRT's builtin kernels; with XNNPACK, LiteRT's default, its "
            f"{chains} DENSIFY → DEQUANTIZE weight chain(s) feed the GPU weights never "
            f"written (XNNPACK skips the DENSIFY, the DEQUANTIZE runs without it; LiteRT's "
            f"bug, expected wherever its CPU side is XNNPACK; a model with dense weights, or "
            f"CpuOptions(kernel_mode=CpuKernelMode.BUILTIN), avoids it)")


def live_lines(live: LiveDelegate | None) -> list[str]:
    """The GPU section's lines for what the delegate itself answered (or why not)."""
    if live is None:
        return ["  delegate     not asked (predicted only): a --run that completes asks "
                "LiteRT's GPU delegate where a GPU adapter is present",
                "  fp16         fp16 accuracy not checked: a --run that completes checks it"]
    if live.not_asked:
        lines = [f"  delegate     not asked: {live.not_asked}"]
    else:
        on = live.total_ops if live.gpu_ops is None else live.gpu_ops
        when = "cached answer of a run that took" if live.cached else "measured,"
        lines = [f"  delegate     asked ({when} {live.seconds:.1f} s on {short(live.adapter)}): "
                 f"{on} of {live.total_ops} ops on the GPU; "
                 + ("agrees with the prediction" if not live.disagreements
                    else f"{len(live.disagreements)} disagreement(s) with the prediction")]
        lines += [f"  disagrees    {d}" for d in live.disagreements]
    check = live.precision
    if check is None:
        return [*lines, f"  fp16         fp16 accuracy not checked: {live.not_checked}"]
    ref = ("" if check.reference_accuracy is None
           else f"; reference accuracy {check.reference_accuracy:.1%}")
    lines.append(f"  fp16         outputs against the CPU's fp32 (XNNPACK) on {check.samples} "
                 f"sample(s) of {check.inputs} (measured{ref}):")
    lines += [f"                 {w.line()}" for w in check.ways]
    return [*lines, f"  cause        {check.cause}"] if check.cause else lines


def live_summary(live: LiveDelegate | None) -> list[str]:
    """One line for ``check`` and ``convert``: the delegate asked or not, the fp16 check."""
    if live is None:
        return []
    if live.not_asked:
        head = f"GPU delegate not asked: {live.not_asked}"
    else:
        head = ("GPU delegate asked: agrees with the prediction" if not live.disagreements
                else f"GPU delegate asked: {'; '.join(live.disagreements)}")
    check = live.precision
    fp16 = next((w for w in check.ways if w.way.startswith(WAYS["fp16"])), None) if check \
        else None
    return [head, f"fp16 (measured): {fp16.line()}" if fp16 is not None
            else "fp16 accuracy not checked",
            *([f"GPU path's difference (measured): {check.cause}"] if check and check.cause
              else [])]
