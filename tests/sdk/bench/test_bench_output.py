"""The benchmark_model output parser against real captured outputs (tests/fixtures/benchmark_model,
sources in its README) and against lines in the formats of the tool's source."""

from __future__ import annotations

import pytest

from devicefit.sdk.bench.benchmark_output import (
    BenchmarkOutputError,
    DelegateCoverage,
    RunStats,
    gpu_failure,
    parse_benchmark_output,
    parse_gpu_log,
    parse_stat_line,
)
from devicefit.simulator.report.benchmark import GpuDelegateLog
from tests.paths import TESTS

FIXTURES = TESTS / "fixtures" / "benchmark_model"

# file → figures stated in it (ms, MB); None = the capture does not print it.
REAL = {
    "tf42507_android_cpu_tf23.txt": dict(
        model_size_mb=0.004448, init_ms=0.855, first_inference_ms=49.06, warmup_avg_ms=34.8251,
        inference_avg_ms=33.2094, memory_init_mb=0.0, memory_overall_mb=12.8672,
        memory_peak_mb=None,
        warmup=RunStats(15, 49.06, 33.682, 32.825, 49.06, 34.8251, 3.93),
        inference=RunStats(50, 32.891, 33.978, 32.641, 34.005, 33.2094, 0.45)),
    "tf43541_android_gpu.txt": dict(
        model_size_mb=7.07479, init_ms=870.557, first_inference_ms=130.565,
        warmup_avg_ms=122.373, inference_avg_ms=119.375, delegates_created=["GPU"],
        delegate_coverage=[DelegateCoverage("GPU", whole_graph=True)],
        gpu=GpuDelegateLog(kernels=1, backend="OpenCL"),
        inference=RunStats(50, 119.212, 118.055, 113.737, 124.776, 119.375, 1.948)),
    "xnnpack999_rpi_int8.txt": dict(
        model_size_mb=3.67827, init_ms=18.777, first_inference_ms=64.791,
        warmup_avg_ms=57.7582, inference_avg_ms=55.0432, memory_init_mb=8.97656,
        memory_overall_mb=18.7227, delegates_created=["XNNPACK"], gpu=None),
    "tf26736_android_cpu_2019.txt": dict(
        model_size_mb=None, init_ms=17.527, first_inference_ms=1058.871, warmup_avg_ms=None,
        inference_avg_ms=880.688,
        warmup=RunStats(1, 1058.871, 1058.871, 1058.871, 1058.871, 1058.871, 0.0),
        inference=RunStats(50, 885.931, 881.142, 851.668, 903.937, 880.688, 12.426)),
    "yuenshome77_android_arm64_2018.txt": dict(
        init_ms=9.933, first_inference_ms=127.425, warmup_avg_ms=76.6059,
        inference_avg_ms=66.7676),
    "tf_readme_op_profiling.txt": dict(
        init_ms=38.467, warmup_avg_ms=83.235, inference_avg_ms=79.7609, inference=None),
    "chromeos_tast_cpu_peak_memory.txt": dict(
        init_ms=3.337, first_inference_ms=81.913, warmup_avg_ms=58.9847,
        inference_avg_ms=56.2658, memory_peak_mb=93.2383, delegates_created=["XNNPACK"],
        delegate_coverage=[DelegateCoverage("TfLiteXNNPackDelegate", 58, 58, 1)],
        inference=RunStats(1061, 56.576, 56.299, 54.669, 60.236, 56.2658, 0.982)),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_outputs(name: str) -> None:
    out = parse_benchmark_output((FIXTURES / name).read_text())
    for attr, expected in REAL[name].items():
        got = getattr(out, attr)
        if isinstance(expected, float):
            assert got == pytest.approx(expected, rel=1e-9), attr
        else:
            assert got == expected, attr


def test_readme_op_profile_tables() -> None:
    out = parse_benchmark_output((FIXTURES / "tf_readme_op_profiling.txt").read_text())
    assert len(out.op_profile) == 31  # "Number of nodes executed: 31"
    first, last = out.op_profile[0], out.op_profile[-1]
    assert (first.node_type, first.first_ms, first.avg_ms, first.percent) == (
        "CONV_2D", 4.269, 4.269, 0.107)
    assert first.name == "MobilenetV1/MobilenetV1/Conv2d_0/Relu6"
    assert (last.node_type, last.avg_ms, last.cdf_percent) == ("SOFTMAX", 0.029, 1.993)
    # "Top by Computation Time" repeats nodes: it must not be appended to the run order.
    assert [o.node_type for o in out.op_profile].count("CONV_2D") == 15
    assert [(s.node_type, s.count, s.avg_ms, s.percent) for s in out.op_summary[:2]] == [
        ("CONV_2D", 15, 1.406, 89.27), ("DEPTHWISE_CONV_2D", 13, 0.169, 10.73)]
    assert sum(s.count for s in out.op_summary) == 31


def test_profile_of_initialization_is_not_taken_for_inference() -> None:
    init_table = ("Profiling Info for Benchmark Initialization:\n"
                  "============================== Run Order ==============================\n"
                  "\t[node type]\t[first]\t[avg ms]\t[%]\t[cdf%]\t[mem KB]\t[times called]\t[Name]\n"
                  "\tModifyGraphWithDelegate\t5.1\t5.1\t90%\t90%\t0\t1\tModifyGraphWithDelegate\n"
                  "\n")
    # Since TF 2.3 the initialization profile comes first, then this heading.
    text = (init_table + "Operator-wise Profiling Info for Regular Benchmark Runs:\n"
            + (FIXTURES / "tf_readme_op_profiling.txt").read_text())
    out = parse_benchmark_output(text)
    assert out.op_profile[0].node_type == "CONV_2D"
    assert len(out.op_profile) == 31


def test_percentiles_and_all_same_forms() -> None:
    # StatWithPercentiles::OutputToStream (xla/tsl/util/stats_calculator.h) appends
    # " p5=.. median=.. p95=.." to Stat's "count=.. first=.. ..." or "count=N curr=X(all same)".
    s = parse_stat_line("INFO: count=20 first=410 curr=398 min=390 max=455 avg=401.5 std=12 "
                        "p5=391 median=399 p95=440")
    assert s == RunStats(20, 0.41, 0.398, 0.39, 0.455, 0.4015, 0.012, 0.391, 0.399, 0.44)
    same = parse_stat_line("count=10 curr=30(all same) p5=30 median=30 p95=30")
    assert (same.count, same.min_ms, same.avg_ms, same.std_ms, same.median_ms) == (
        10, 0.03, 0.03, 0.0, 0.03)
    assert parse_stat_line("Timings (microseconds): count=50 first=1 curr=1") is None


def test_logcat_prefixes_and_delegate_lines() -> None:
    # Prefixes as in the benchmark APK's logcat (tensorflow#56301), the NNAPI refusal line
    # from the same capture, and the "N nodes delegated out of M" form of SimpleDelegate.
    text = "\n".join([
        "05-31 10:31:13.037 21767 21767 I tflite  : Loaded model /data/local/tmp/model.tflite",
        "05-31 10:31:13.041 21767 21767 I tflite  : Created TensorFlow Lite delegate for NNAPI.",
        "05-31 10:31:13.157 21767 21767 I tflite  : Though NNAPI delegate is explicitly applied,"
        " the model graph will not be executed by the delegate.",
        "INFO: [simple_delegate.cc:104] XNNPACK delegate: 12 nodes delegated out of 14 nodes"
        " with 2 partitions.",
        "INFO: Replacing 269 node(s) with delegate (TfLiteXNNPackDelegate) node, yielding 13"
        " partitions.",
        "05-31 10:31:14.000 21767 21767 I tflite  : count=3 first=9000 curr=8000 min=8000"
        " max=9000 avg=8333.33 std=471",
        "05-31 10:31:15.000 21767 21767 I tflite  : Inference timings in us: Init: 120000, "
        "First inference: 9000, Warmup (avg): 8333.33, Inference (avg): 8100.5",
    ])
    out = parse_benchmark_output(text)
    assert out.delegates_created == ["NNAPI"]
    assert out.delegate_coverage == [
        DelegateCoverage("NNAPI", whole_graph=False),
        DelegateCoverage("XNNPACK", 12, 14, 2),
        DelegateCoverage("TfLiteXNNPackDelegate", 269, None, 13)]
    assert (out.init_ms, out.inference_avg_ms) == (120.0, 8.1005)
    assert out.inference.count == 3 and out.warmup is None


def test_unparseable_output_shows_its_tail() -> None:
    text = "STARTING!\n" + "\n".join(f"line {i}" for i in range(20)) + "\nAborted\n"
    with pytest.raises(BenchmarkOutputError) as err:
        parse_benchmark_output(text)
    msg = str(err.value)
    assert "no inference timings" in msg and "line 19 | Aborted" in msg
    assert "line 5" not in msg and "\n" not in msg


def test_the_gpu_delegates_partition_message_from_a_real_device() -> None:
    """TF 2.6 on a Mali G31 (issue 57907): its refusals, a blank line, then the count."""
    lines = (FIXTURES / "tf57907_gpu_partition_mali_g31.txt").read_text().splitlines()
    log = parse_gpu_log(lines, {})
    assert (log.ops_on_gpu, log.ops_total, log.kernels) == (97, 297, None)
    assert len(log.refused) == 11 and log.refused[3] == "DEQUANTIZE:"
    assert log.refused_types == ["ARG_MAX", "CAST", "CONCATENATION", "DEQUANTIZE", "FLOOR_DIV",
                                 "GATHER_ND", "MUL", "PACK", "RESHAPE", "SUB", "UNPACK"]


LOGCAT = "06-18 10:11:07.713  4320  4320 E tflite  : "


@pytest.mark.parametrize("prefix", ["", LOGCAT], ids=["stderr", "logcat"])
def test_gpu_lines_in_the_wording_of_litert_sources(prefix: str) -> None:
    """A partial delegation as LiteRT's sources word it (model_builder.cc, delegate.cc,
    subgraph.cc, benchmark_tflite_model.cc), on stderr or in logcat, where every line of
    the multi-line message carries its own header; TFLite's "Replacing" line counts every
    subset of the cut (3 here), the kernels the GPU's partitions (1)."""
    text = "\n".join(prefix + line for line in [
        "INFO: Created TensorFlow Lite delegate for GPU.",
        "ERROR: Following operations are not supported by GPU delegate:",
        "CUSTOM TFLite_Detection_PostProcess: Operation is not supported.",
        "IF: Operation is not supported.",
        "41 operations will run on the GPU, and the remaining 2 operations will run on the CPU.",
        "VERBOSE: Replacing 41 out of 43 node(s) with delegate (TfLiteGpuDelegateV2) node, "
        "yielding 3 partitions for subgraph 0 (main).",
        "INFO: Initialized OpenGL-based API.",
        "INFO: Created 1 GPU delegate kernels.",
        "INFO: Explicitly applied GPU delegate, and the model graph will be partially executed "
        "by the delegate w/ 1 delegate kernels.",
        "Inference timings in us: Init: 5, First inference: 7, Warmup (avg): 7, "
        "Inference (avg): 6"])
    out = parse_benchmark_output(text)
    assert out.gpu == GpuDelegateLog(kernels=1, ops_on_gpu=41, ops_total=43, backend="OpenGL",
                                     refused=["CUSTOM TFLite_Detection_PostProcess: Operation "
                                              "is not supported.",
                                              "IF: Operation is not supported."])
    assert out.gpu.refused_types == ["CUSTOM TFLite_Detection_PostProcess", "IF"]
    assert DelegateCoverage("TfLiteGpuDelegateV2", 41, 43, 3) in out.delegate_coverage
    assert DelegateCoverage("GPU", whole_graph=False) in out.delegate_coverage


def test_a_whole_graph_on_the_gpu_is_counted_from_tflites_line() -> None:
    """The delegate lists nothing when it takes every operator: TFLite's line counts them."""
    out = parse_benchmark_output(
        "VERBOSE: Replacing 16 out of 16 node(s) with delegate (TfLiteGpuDelegateV2) node, "
        "yielding 1 partitions for subgraph 0 (main).\nINFO: Created 1 GPU delegate kernels.\n"
        "Inference timings in us: Init: 5, First inference: 7, Warmup (avg): 7, "
        "Inference (avg): 6\n")
    assert (out.gpu.ops_on_gpu, out.gpu.ops_total, out.gpu.kernels) == (16, 16, 1)


def test_no_operation_on_the_gpu() -> None:
    log = parse_gpu_log(["ERROR: Following operations are not supported by GPU delegate:",
                         "SVDF: Operation is not supported.",
                         "No operations will run on the GPU, and all 5 operations will run on "
                         "the CPU.", "INFO: Created 0 GPU delegate kernels."], {})
    assert (log.ops_on_gpu, log.ops_total, log.kernels) == (0, 5, 0)


def test_the_delegates_failure_in_its_own_words() -> None:
    """A phone with neither OpenCL nor OpenGL ES 3.1: the causes, not the consequences
    ("delegate is not initialized", "failed to prepare")."""
    text = "\n".join([
        "INFO: Created TensorFlow Lite delegate for GPU.",
        'ERROR: Can not open OpenCL library on this device - dlopen failed: library '
        '"libOpenCL.so" not found',
        "ERROR: Falling back to OpenGL",
        "ERROR: TfLiteGpuDelegate Init: OpenGL ES 3.1 or above is required to use OpenGL "
        "inference.",
        "INFO: Created 0 GPU delegate kernels.",
        "ERROR: TfLiteGpuDelegate Prepare: delegate is not initialized",
        "ERROR: Node number 3 (TfLiteGpuDelegateV2) failed to prepare.",
        "ERROR: Restored original execution plan after delegate application failure.",
        "ERROR: Failed to apply GPU delegate.", "ERROR: Benchmarking failed."])
    assert gpu_failure(text) == (
        'Can not open OpenCL library on this device - dlopen failed: library "libOpenCL.so" '
        "not found; OpenGL ES 3.1 or above is required to use OpenGL inference. "
        "(benchmark_model: Failed to apply GPU delegate.)")
    assert gpu_failure(text.replace("Failed to apply GPU delegate.", "")) is None


def test_a_device_listing_refusals_without_end_is_bounded() -> None:
    lines = ["ERROR: Following operations are not supported by GPU delegate:",
             *(f"OP_{i}: {'x' * 5000}" for i in range(20_000))]
    log = parse_gpu_log(lines, {})
    assert len(log.refused) == 501 and log.refused[-1] == "… 19,500 more lines"
    assert max(len(line) for line in log.refused) < 300
