"""A phone's GPU run beside devicefit's prediction: the partition the delegate made (its log)
against the one predicted (the report's ``compatibility.gpu``), and the CPU run beside it
against the estimate of the CPU profile the GPU profile builds on.

The predicted partition is read by :func:`sdk.types.gpu_partition`, as ``check`` reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from devicefit.sdk.bench.runner import CPU_DELEGATE, REMOTE_BINARY, default_delegate
from devicefit.sdk.types import GpuPartitionSummary, gpu_partition
from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report.benchmark import (
    BenchComparison,
    BenchResult,
    DeviceRun,
    GpuDelegateLog,
    PartitionCheck,
)
from devicefit.simulator.report.report import Report
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import target_for

#: The rule under which a supported operator is left on the CPU (its partition is not among
#: the largest): not a refusal, so the delegate does not list it among the operations it
#: does not support. An fp16 weights' DEQUANTIZE left on the CPU is listed, with no reason
#: ("DEQUANTIZE: ", ``FP16GraphPartitionHelper::IsNodeSupported`` answers no for it).
NOT_REFUSED = "GetOpsToReplace: GetNodesOfFirstNLargestPartitions"
#: The rule of that DEQUANTIZE (:mod:`simulator.targets.gpu.partition`).
FP16_DEQUANTIZE = "FP16GraphPartitionHelper"


def _op_type(name: str) -> str:
    # The delegate names a custom op "CUSTOM name" (GetOpNameByRegistration); the reader
    # "CUSTOM:name".
    return name.replace(":", " ", 1) if name.startswith("CUSTOM:") else name


def partition_check(measured: GpuDelegateLog | None, predicted: GpuPartitionSummary,
                    whole_graph: bool | None = None) -> PartitionCheck:
    """The phone's partition (``measured`` None: its log said nothing of one) beside the
    predicted one. ``whole_graph``: benchmark_model said the graph runs "completely" on the
    GPU (an older build logs no count then: every operator is on the GPU)."""
    refused = [_op_type(f.op) for f in predicted.fallbacks if not f.rule.startswith(NOT_REFUSED)]
    on_gpu = measured.ops_on_gpu if measured else None
    if on_gpu is None and whole_graph:
        on_gpu = predicted.total_ops
    return PartitionCheck(
        measured_gpu_ops=on_gpu,
        predicted_gpu_ops=predicted.gpu_ops,
        measured_partitions=measured.kernels if measured else None,
        predicted_partitions=predicted.partitions,
        total_ops=predicted.total_ops,
        measured_refused=sorted(measured.refused_types) if measured else [],
        predicted_refused=sorted(set(refused)))


def cpu_profile(profile: Profile, profiles_dirs: Sequence[str | Path]) -> Profile | None:
    """The nearest profile ``profile`` extends that runs on the phone's CPU with XNNPACK (the
    GPU profile's fallback, and what its CPU run is estimated with); None if none does."""
    for name in profile.extends:
        parent = load_profile(name, list(profiles_dirs))
        if target_for(parent).bench_tool == REMOTE_BINARY and \
                default_delegate(parent) == CPU_DELEGATE:
            return parent
    return None


def compare(result: BenchResult, report: Report | None, profile: Profile,
            profiles_dirs: Sequence[str | Path] = ()) -> BenchResult:
    """``result`` with its GPU partition checked against ``report``'s (when the GPU run is
    the profile's own) and the run beside it compared with its own estimate."""
    partition = None
    predicted = gpu_partition(report)
    if predicted is not None and result.settings.delegate == "gpu":
        said = next((c.whole_graph for c in result.results.delegate_coverage
                     if c.delegate == "GPU"), None)
        partition = partition_check(result.results.gpu, predicted, said)
    beside = result.beside
    if beside is not None:
        beside = _compared(beside, result.model, profile, profiles_dirs)
    return dataclasses.replace(result, partition=partition, beside=beside)


def _compared(run: DeviceRun, model: str, profile: Profile,
              profiles_dirs: Sequence[str | Path]) -> DeviceRun:
    measured = run.results.inference_avg_ms
    if run.settings.delegate != CPU_DELEGATE:
        return dataclasses.replace(run, vs_estimate=BenchComparison.of(
            measured, None, f"{profile.name} is not a GPU profile: bench with a GPU profile "
                            "(android-gpu-adreno) to compare the GPU with its estimate"))
    cpu = cpu_profile(profile, profiles_dirs)
    if cpu is None:
        return dataclasses.replace(run, vs_estimate=BenchComparison.of(
            measured, None, f"{profile.name} extends no LiteRT CPU profile to estimate with"))
    try:
        latency = simulate(model, cpu, profiles_dirs=profiles_dirs).latency
    except DevicefitError as exc:
        return dataclasses.replace(run, vs_estimate=BenchComparison.of(
            measured, None, f"simulate on {cpu.name} failed: {exc}"), estimate_profile=cpu.name)
    estimate = latency.estimated_device_ms if latency is not None else None
    why = (latency.no_estimate if latency is not None else None) or "no latency estimate"
    band = latency.band_ms if latency is not None else None
    return dataclasses.replace(run, vs_estimate=BenchComparison.of(measured, estimate, why, band),
                               estimate_profile=cpu.name)
