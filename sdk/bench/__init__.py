"""Benchmark a model on a real Android phone with TFLite's ``benchmark_model`` over adb.

``bench(model, profile, benchmark_binary=...)`` returns a :class:`BenchResult`;
``dataclasses.asdict`` of it is the ``bench`` section of the simulate report.
"""

from sdk.bench.adb import AdbError, DeviceGone
from sdk.bench.benchmark_output import (
    BenchmarkOutput,
    BenchmarkOutputError,
    parse_benchmark_output,
)
from sdk.bench.runner import BenchResult, BenchSettings, bench

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
