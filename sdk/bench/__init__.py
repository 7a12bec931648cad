"""Benchmark a model on a real Android phone with TFLite's ``benchmark_model`` over adb.

``bench(model, profile, benchmark_binary=...)`` returns a :class:`BenchResult` (its type
lives in :mod:`simulator.report.benchmark`, beside the report whose ``bench`` section it fills).
"""

from devicefit.sdk.bench.adb import AdbError, DeviceGone
from devicefit.sdk.bench.benchmark_output import BenchmarkOutputError, parse_benchmark_output
from devicefit.sdk.bench.runner import bench
from devicefit.simulator.report.benchmark import BenchmarkOutput, BenchResult, BenchSettings

__all__ = [
    "AdbError",
    "BenchResult",
    "BenchSettings",
    "BenchmarkOutput",
    "BenchmarkOutputError",
    "DeviceGone",
    "bench",
    "parse_benchmark_output",
]
