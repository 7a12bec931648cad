"""A device benchmark's figures (TFLite's ``benchmark_model`` on a phone), for the ``bench``
section of the report (:class:`simulator.report.report.BenchSection`).

The types live here, beside the report, so that the simulator's views can show them; the
SDK's ``devicefit bench`` fills them (it runs the tool over adb and parses its output). The
ratio of the measurement to the estimate is computed once, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunStats:
    """One ``count=...`` line; times in milliseconds (the tool prints microseconds)."""

    count: int
    first_ms: float | None = None
    curr_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    avg_ms: float | None = None
    std_ms: float | None = None
    p5_ms: float | None = None
    median_ms: float | None = None
    p95_ms: float | None = None


@dataclass(frozen=True)
class OpProfileRow:
    """One node of the ``Run Order`` table (times in ms as the tool prints them)."""

    node_type: str
    name: str
    first_ms: float | None
    avg_ms: float | None
    percent: float | None
    cdf_percent: float | None
    mem_kb: float | None
    times_called: int | None


@dataclass(frozen=True)
class OpTypeSummary:
    """One row of ``Summary by node type``."""

    node_type: str
    count: int | None
    avg_ms: float | None
    percent: float | None
    cdf_percent: float | None
    mem_kb: float | None
    times_called: int | None


@dataclass(frozen=True)
class DelegateCoverage:
    """How much of the graph a delegate took, as far as the log says."""

    delegate: str
    nodes_delegated: int | None = None
    nodes_total: int | None = None
    partitions: int | None = None
    #: True/False when the tool stated the whole graph does (not) run on the delegate.
    whole_graph: bool | None = None


#: What benchmark_model's "MB" is, in bytes: its model size is the file's bytes / 1e6, its
#: memory figures kB of /proc (KiB) / 1024, a mebibyte (``benchmark_model.cc``,
#: ``memory_info.cc``).
MODEL_MB, MEMORY_MB = 1e6, 1024.0 ** 2


def _bytes(mb: float | None, size: float) -> float | None:
    return None if mb is None else mb * size


@dataclass(frozen=True)
class GpuDelegateLog:
    """What LiteRT's GPU delegate said in benchmark_model's output: its own log lines
    (``tflite/delegates/gpu/delegate.cc``, ``common/model_builder.cc``) and TFLite's
    (``tflite/core/subgraph.cc``)."""

    #: "Created N GPU delegate kernels.": one kernel per partition the GPU runs.
    kernels: int | None = None
    #: Operators on the GPU and in the graph: "N operations will run on the GPU, and the
    #: remaining M ..." or "Replacing N out of T node(s) with delegate (TfLiteGpuDelegateV2)".
    ops_on_gpu: int | None = None
    ops_total: int | None = None
    #: The "OP: reason" lines under "Following operations are not supported by GPU delegate:".
    refused: list[str] = field(default_factory=list)
    #: "OpenCL" or "OpenGL": the API it initialised ("Initialized OpenCL-based API.").
    backend: str | None = None

    @property
    def refused_types(self) -> list[str]:
        """The operator types it refused, each once, in its (sorted) order (a bounded list
        ends in "… N more lines", no type)."""
        return list(dict.fromkeys(line.split(":", 1)[0].strip() for line in self.refused
                                  if ":" in line))


@dataclass(frozen=True)
class BenchmarkOutput:
    """The tool's figures in its own units (ms, its "MB"); the ``*_bytes`` properties give
    the sizes in bytes, for the views to print like every other size."""

    model_size_mb: float | None = None
    init_ms: float | None = None
    first_inference_ms: float | None = None
    warmup_avg_ms: float | None = None
    inference_avg_ms: float | None = None
    warmup: RunStats | None = None
    inference: RunStats | None = None
    memory_init_mb: float | None = None
    memory_overall_mb: float | None = None
    memory_peak_mb: float | None = None
    delegates_created: list[str] = field(default_factory=list)
    delegate_coverage: list[DelegateCoverage] = field(default_factory=list)
    op_profile: list[OpProfileRow] = field(default_factory=list)
    op_summary: list[OpTypeSummary] = field(default_factory=list)
    #: None when the GPU delegate logged nothing (it was not asked for).
    gpu: GpuDelegateLog | None = None

    @property
    def model_size_bytes(self) -> float | None:
        return _bytes(self.model_size_mb, MODEL_MB)

    @property
    def memory_init_bytes(self) -> float | None:
        return _bytes(self.memory_init_mb, MEMORY_MB)

    @property
    def memory_overall_bytes(self) -> float | None:
        return _bytes(self.memory_overall_mb, MEMORY_MB)

    @property
    def memory_peak_bytes(self) -> float | None:
        return _bytes(self.memory_peak_mb, MEMORY_MB)


@dataclass(frozen=True)
class BenchSettings:
    """What was asked of benchmark_model (after profile defaults were applied)."""

    threads: int
    delegate: str | None
    runs: int
    warmup_runs: int
    cpu_mask: str | None
    op_profiling: bool


@dataclass(frozen=True)
class BenchResult:
    model: str
    profile: str
    serial: str
    device_model: str
    abis: list[str]
    binary_arch: str
    settings: BenchSettings
    #: The shell command run on the device.
    command: str
    results: BenchmarkOutput
    #: Remote files pushed by this run, and those already on the device with the same bytes.
    pushed: list[str] = field(default_factory=list)
    already_on_device: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    output_tail: list[str] = field(default_factory=list)
    #: The run beside this one on the same phone (``bench --gpu``: the CPU with XNNPACK).
    beside: DeviceRun | None = None
    #: The phone's GPU partition beside devicefit's prediction (a GPU run of a GPU profile).
    partition: PartitionCheck | None = None

    @property
    def gpu_log(self) -> GpuDelegateLog | None:
        """The GPU delegate's log of the run on the GPU: the profile's own, or the one beside
        it (``bench --gpu`` on a CPU profile); None when no run logged one."""
        if self.settings.delegate == "gpu":
            return self.results.gpu
        return self.beside.results.gpu if self.beside is not None else None


@dataclass(frozen=True)
class BenchComparison:
    """The phone's average inference beside the simulator's estimate of it."""

    measured_ms: float | None
    estimated_ms: float | None
    #: measured / estimated; None when either is missing.
    ratio: float | None
    #: Why there is no estimate to compare with.
    estimate_unavailable: str | None = None
    #: The estimate's error band (ms, low, high); None without one.
    band_ms: tuple[float, float] | None = None

    @classmethod
    def of(cls, measured_ms: float | None, estimated_ms: float | None,
           why: str | None = None,
           band_ms: tuple[float, float] | None = None) -> BenchComparison:
        ratio = measured_ms / estimated_ms if measured_ms and estimated_ms else None
        return cls(measured_ms, estimated_ms, ratio, why or None,
                   band_ms if estimated_ms is not None else None)

    @property
    def in_band(self) -> bool | None:
        """Whether the measured time is inside the estimate's band; None: nothing to say."""
        if self.measured_ms is None or self.band_ms is None:
            return None
        return self.band_ms[0] <= self.measured_ms <= self.band_ms[1]


@dataclass(frozen=True)
class DeviceRun:
    """A second benchmark_model run on the phone (``bench --gpu``: the CPU beside the GPU)
    and its comparison with the estimate of ``estimate_profile``, the profile whose runtime
    that run is (None before ``devicefit bench`` compares it)."""

    settings: BenchSettings
    command: str
    results: BenchmarkOutput
    vs_estimate: BenchComparison | None = None
    estimate_profile: str | None = None


@dataclass(frozen=True)
class PartitionCheck:
    """How the phone's GPU delegate cut the model (measured: its log) beside the partition
    devicefit predicted for it (``compatibility.gpu``), both in operators of the main graph."""

    measured_gpu_ops: int | None
    predicted_gpu_ops: int
    measured_partitions: int | None
    predicted_partitions: int
    total_ops: int
    #: Operator types the delegate refused, as the phone said and as predicted.
    measured_refused: list[str] = field(default_factory=list)
    predicted_refused: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool | None:
        """Whether the phone cut the model as predicted; None when its log did not say."""
        if self.measured_gpu_ops is None or self.measured_partitions is None:
            return None
        return (self.measured_gpu_ops == self.predicted_gpu_ops
                and self.measured_partitions == self.predicted_partitions
                and sorted(self.measured_refused) == sorted(self.predicted_refused))
