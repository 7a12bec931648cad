"""The phone GPU's latency: a cost model of the delegate's partition, fitted to published
figures.

Per inference, with the partition :mod:`.partition` predicts::

    ms = Σ GPU ops (op_dispatch + MACs / macs_per_second + bytes / memory_bandwidth)
         + Σ partitions (2 × sync + boundary bytes / transfer_bandwidth)
         + the CPU ops on XNNPACK (:func:`simulator.estimate.latency.estimate_latency`)

A GPU op's bytes are what it reads and writes in the GPU's precision (activations and
weights: fp16 halves them). A phone's CPU and GPU share its DRAM, so a boundary costs a copy
through it (the delegate converts each crossing tensor to and from its own layout) and a
fixed synchronisation each way (the CPU hands over, then waits for the GPU's result).
A bandwidth a profile leaves unset is no term (the fit found no weight for it).
The constants are a profile's ``gpu`` keys, fitted per phone class to the published times
of ``published.yaml`` (``benchmarks/bench_gpu_latency.py``); its ``cost_model.error_band``
is that fit's leave-one-figure-out spread. A profile without them gets no estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from devicefit.simulator.infra.safeyaml import load_own_data
from devicefit.simulator.report.report import OpLatencyRow
from devicefit.simulator.targets.gpu.settings import PRECISION_BYTES, GpuCost

if TYPE_CHECKING:
    from devicefit.simulator.profile_types import Profile
    from devicefit.simulator.read.model import Model

PUBLISHED = Path(__file__).with_name("published.yaml")


@dataclass(frozen=True)
class Phone:
    """One phone's published GPU-delegate times (``published.yaml``)."""

    phone: str
    gpu: str
    #: The phones fitted together to one set of constants.
    gpu_class: str
    #: "Android 10", "iOS", …: the profiles target Android phones only.
    os: str
    backend: str
    #: Model key → published ms per inference.
    ms: Mapping[str, float]
    #: Model key → the table (or thread) its figure comes from.
    sources: Mapping[str, str]
    #: The built-in profile of its class, if one is fitted to it.
    profile: str | None = None
    #: ``speed: own``: left out of its class's fit (another harness, or a slower GPU of the
    #: class); predicted with the class's constants times a speed factor of its own.
    own_speed: bool = False


def load_published(path: Path = PUBLISHED) -> list[Phone]:
    data = load_own_data(path)
    phones = []
    for p in data["phones"]:
        if p.get("speed", "own") != "own":
            raise ValueError(f"{path}: {p['phone']}: speed must be 'own' or absent, "
                             f"not {p['speed']!r}")
        phones.append(Phone(p["phone"], p["gpu"], p["class"], p["os"], p["backend"],
                            {m: float(f["ms"]) for m, f in p["figures"].items()},
                            {m: " ".join(f["source"].split()) for m, f in p["figures"].items()},
                            p.get("profile"), p.get("speed") == "own"))
    return phones


class PlacedOp(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def device(self) -> str: ...


class Partitioned(Protocol):
    """What the estimate reads of a partition (:class:`.partition.GpuReport`, which imports
    this module: named by what it offers, so the two do not import each other)."""

    @property
    def precision(self) -> str: ...
    @property
    def ops(self) -> Sequence[PlacedOp]: ...
    @property
    def partitions(self) -> Sequence[object]: ...
    @property
    def boundary_bytes(self) -> int: ...


@dataclass(frozen=True)
class GpuOpWork:
    op_index: int
    op: str
    dtype: str
    macs: int
    #: What it reads and writes in the GPU's precision.
    gpu_bytes: int


@dataclass(frozen=True)
class GpuFeatures:
    """What the estimate is linear in, for one model's partition."""

    gpu_ops: int
    gpu_macs: int
    gpu_bytes: int
    #: Partitions × 2: a hand-over to the GPU and a wait for its result each.
    crossings: int
    boundary_bytes: int
    #: The CPU ops' XNNPACK estimate (0 with none); None: XNNPACK's tables cover one not.
    cpu_ms: float | None
    per_op: tuple[GpuOpWork, ...] = ()
    cpu_rows: tuple[OpLatencyRow, ...] = ()


def gpu_features(model: Model, report: Partitioned, profile: Profile) -> GpuFeatures:
    """The partition's figures the cost model needs, and the CPU ops' own estimate."""
    from devicefit.simulator.estimate.compute import op_work
    from devicefit.simulator.estimate.latency import estimate_latency
    from devicefit.simulator.report.report import OpCompute

    sg = model.main
    element = PRECISION_BYTES[report.precision]
    on_gpu = {o.index for o in report.ops if o.device == "gpu"}
    work = op_work(model)
    per_op = []
    for w in work:
        if w.op_index in on_gpu:
            op = sg.operators[w.op_index]
            touched = {t for t in (*op.inputs, *op.outputs) if t >= 0}
            per_op.append(GpuOpWork(w.op_index, w.op, w.dtype, w.macs, sum(
                sg.tensors[t].num_elements for t in touched) * element))
    cpu_work = [OpCompute(w.op_index, w.op, w.macs, w.bytes_moved)
                for w in work if w.op_index not in on_gpu]
    cpu_ms: float | None = 0.0
    cpu_rows: tuple[OpLatencyRow, ...] = ()
    if cpu_work:
        cpu = estimate_latency(model, cpu_work, profile)
        cpu_ms = cpu.total_ms
        cpu_rows = tuple(OpLatencyRow(o.op_index, o.op, o.dtype, o.macs, o.bytes_moved, o.ms,
                                      "cpu") for o in cpu.per_op)
    return GpuFeatures(len(per_op), sum(o.macs for o in per_op),
                       sum(o.gpu_bytes for o in per_op), 2 * len(report.partitions),
                       report.boundary_bytes, cpu_ms, tuple(per_op), cpu_rows)


def _ms(amount: float, per_second: float | None) -> float:
    return 0.0 if per_second is None else 1e3 * amount / per_second


def op_ms(op: GpuOpWork, cost: GpuCost) -> float:
    """One GPU op's time: its dispatch, its MACs and its memory traffic."""
    return (cost.op_ms + _ms(op.macs, cost.macs_per_second)
            + _ms(op.gpu_bytes, cost.memory_bytes_per_second))


def transfer_ms(f: GpuFeatures, cost: GpuCost) -> float:
    """The boundaries' time: a sync per crossing, and the crossing bytes copied."""
    return f.crossings * cost.sync_ms + _ms(f.boundary_bytes, cost.transfer_bytes_per_second)


def predict_ms(f: GpuFeatures, cost: GpuCost) -> float:
    """The whole inference from the features' totals (the sum :func:`estimate` splits);
    a model an op of which XNNPACK's tables do not cover counts that op as 0."""
    return (f.gpu_ops * cost.op_ms + _ms(f.gpu_macs, cost.macs_per_second)
            + _ms(f.gpu_bytes, cost.memory_bytes_per_second) + transfer_ms(f, cost)
            + (f.cpu_ms or 0.0))


@dataclass(frozen=True)
class GpuLatency:
    """``compatibility.gpu.latency``: the estimated time per inference, split."""

    gpu_ms: float
    transfer_ms: float
    cpu_ms: float
    total_ms: float
    gpu_macs: int
    boundary_bytes: int
    crossings: int
    band: tuple[float, float]
    band_basis: str
    per_op: tuple[OpLatencyRow, ...] = field(default_factory=tuple)


def estimate(model: Model, report: Partitioned, profile: Profile,
             cost: GpuCost) -> GpuLatency | str:
    """The split of one inference under ``cost``, or why there is none."""
    if cost.macs_per_second is None:
        return (f"no latency estimate: profile '{profile.name}' sets no fitted GPU constants "
                f"(gpu.macs_per_second): no published figures of its phone class are fitted")
    f = gpu_features(model, report, profile)
    if f.cpu_ms is None:
        return ("no latency estimate: an op left on the CPU has a dtype no XNNPACK kernel "
                "table covers")
    rows = sorted([*(OpLatencyRow(o.op_index, o.op, o.dtype, o.macs, o.gpu_bytes,
                                  op_ms(o, cost), "gpu") for o in f.per_op), *f.cpu_rows],
                  key=lambda r: r.op_index)
    gpu = sum(r.estimated_ms for r in rows if r.device == "gpu")
    moved = transfer_ms(f, cost)
    band = profile.cost_model.error_band
    basis = ("profile cost_model.error_band (leave-one-figure-out on the published phone-GPU "
             "times)" if band else "uncalibrated (no cost_model.error_band in the profile)")
    if report.precision == "fp32":
        # The published figures are fp16 runs: fp32 kernels are slower than the fitted rate.
        basis += "; the constants are fp16 figures', so with gpu.precision fp32 likely low"
    return GpuLatency(
        gpu_ms=gpu, transfer_ms=moved, cpu_ms=f.cpu_ms, total_ms=gpu + moved + f.cpu_ms,
        gpu_macs=f.gpu_macs, boundary_bytes=f.boundary_bytes, crossings=f.crossings,
        band=band or (0.5, 2.0), band_basis=basis, per_op=tuple(rows))
