"""The one reader of a report's predicted GPU partition (``sdk.types.gpu_partition``) that
``check``'s lines and ``bench``'s comparison share, on real simulations of zoo models."""

from __future__ import annotations

import dataclasses

from devicefit.sdk.bench.compare import NOT_REFUSED
from devicefit.sdk.types import GpuAsked, GpuFallback, gpu_partition
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report.report import Report
from devicefit.simulator.simulate import simulate
from devicefit.simulator.targets.gpu.live import LiveDelegate
from tests.zoo import model_path

GPU = "android-gpu-adreno"


def _with_live(report: Report, live: LiveDelegate) -> Report:
    compat = report.compatibility
    assert compat is not None and compat.section is not None
    section = dataclasses.replace(compat.section, live=live)  # type: ignore[type-var]
    return dataclasses.replace(report, compatibility=dataclasses.replace(compat,
                                                                         section=section))


def test_no_report_and_a_report_without_a_gpu_section_predict_no_partition() -> None:
    assert gpu_partition(None) is None
    cpu = simulate(model_path("if_float32"), load_profile("android-arm64-cpu"))
    assert cpu.compatibility is not None and gpu_partition(cpu) is None
    tpu = simulate(model_path("chain_int8"), load_profile("coral-edgetpu"))
    assert tpu.compatibility is not None and tpu.compatibility.section is not None
    assert gpu_partition(tpu) is None  # a target section, not the GPU's


def test_a_refused_op_is_a_fallback_and_the_delegate_was_not_asked() -> None:
    """if_float32: its IF is refused, the 3 other operators run on the GPU in one
    partition; a static simulation did not ask the delegate."""
    report = simulate(model_path("if_float32"), load_profile(GPU))
    gpu = gpu_partition(report)
    assert gpu is not None
    assert (gpu.gpu_ops, gpu.total_ops, gpu.partitions, gpu.asked) == (3, 4, 1, None)
    assert [f.op for f in gpu.fallbacks] == ["IF"]
    assert gpu.fallbacks[0].rule != NOT_REFUSED


def test_supported_ops_beyond_the_delegates_partition_limit_are_fallbacks_too() -> None:
    """unet_int8's upsampling cuts it into several candidate partitions; with one kept, the
    supported operators of the others fall back under the delegate's partition rule, in the
    model's order, beside the ones it refuses."""
    report = simulate(model_path("unet_int8"), load_profile(GPU))
    section = report.compatibility.section.to_dict()  # type: ignore[union-attr]
    gpu = gpu_partition(report)
    assert gpu is not None and gpu.partitions == 1 < section["candidate_partitions"]
    on_cpu = [o for o in section["ops"] if o["device"] == "cpu"]
    assert gpu.fallbacks == tuple(GpuFallback(o["op"], o["rule"]) for o in on_cpu)
    assert gpu.gpu_ops + len(gpu.fallbacks) == gpu.total_ops
    beyond = [f for f in gpu.fallbacks if f.rule == NOT_REFUSED]
    assert {f.op for f in beyond} == {"CONV_2D", "CONCATENATION"}
    assert {f.op for f in gpu.fallbacks if f not in beyond} == {"RESHAPE", "TILE"}


def test_what_the_delegate_answered_is_read_with_the_partition() -> None:
    report = simulate(model_path("if_float32"), load_profile(GPU))
    asked = _with_live(report, LiveDelegate(not_asked="", disagreements=("IF: a", "b")))
    assert gpu_partition(asked).asked == GpuAsked("", ("IF: a", "b"))  # type: ignore[union-attr]
    absent = _with_live(report, LiveDelegate(not_asked="no GPU adapter"))
    assert gpu_partition(absent).asked == GpuAsked("no GPU adapter", ())  # type: ignore[union-attr]
