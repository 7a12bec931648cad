"""The phone GPU target's own profile keys (under ``gpu``) and their typed settings: the
delegate's options and the fitted constants of the latency estimate (:mod:`.latency`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devicefit.simulator.infra.schema import BANDWIDTH, TIME, Leaf, integer, number, one_of

if TYPE_CHECKING:
    from devicefit.simulator.profile_types import Profile

#: Bytes per element as the GPU holds a float (or dequantized) tensor.
PRECISION_BYTES = {"fp16": 2, "fp32": 4}


def _rate(v: Any) -> float:
    # A rate divides: 0 would be an infinite time, not "no term" (that is leaving it unset).
    rate = float(BANDWIDTH.check(v))
    if rate <= 0:
        raise ValueError("not a positive rate")
    return rate


#: A bandwidth that must be above 0.
RATE = Leaf(_rate, "a rate above 0 such as 320MB/s")

PROFILE_KEYS = {"gpu": {
    "max_partitions": integer(1),
    "precision": one_of("fp16", "fp32"),
    "sync": TIME,
    "op_dispatch": TIME,
    "macs_per_second": number(1.0),
    "memory_bandwidth": RATE,
    "transfer_bandwidth": RATE,
}}


@dataclass(frozen=True)
class GpuCost:
    """A phone GPU's constants (the profile's ``gpu`` keys). No ``macs_per_second``: no
    estimate; a bandwidth left unset: that traffic is not a term of the estimate."""

    #: Fixed cost of one CPU↔GPU crossing (hand-over or wait), per direction.
    sync_ms: float = 0.0
    #: Fixed cost of one GPU op (a kernel dispatch).
    op_ms: float = 0.0
    #: Effective fp16 MACs per second the delegate's kernels reach.
    macs_per_second: float | None = None
    #: Effective bytes per second of a GPU op's reads and writes.
    memory_bytes_per_second: float | None = None
    #: Bytes per second of a boundary tensor's copy between CPU and GPU memory.
    transfer_bytes_per_second: float | None = None


@dataclass(frozen=True)
class GpuSettings:
    """The delegate options that change the partition and the memory."""

    #: ``max_delegated_partitions``: the delegate's default is 1 (``GetOpsToReplace``).
    max_partitions: int = 1
    #: "fp16": precision loss allowed (LiteRT's ``GpuOptions.enforce_f32`` is False by
    #: default, benchmark_model's ``--gpu_precision_loss_allowed`` true); "fp32" otherwise.
    precision: str = "fp16"
    #: The latency constants; rates None (a profile that sets none): no estimate.
    cost: GpuCost = GpuCost()

    @classmethod
    def from_values(cls, values: Mapping[str, Mapping[str, Any]]) -> GpuSettings:
        """From the parsed values of :data:`PROFILE_KEYS` a profile sets."""
        gpu = values.get("gpu", {})
        return cls(max_partitions=gpu.get("max_partitions", 1),
                   precision=gpu.get("precision", "fp16"),
                   cost=GpuCost(sync_ms=gpu.get("sync", 0.0), op_ms=gpu.get("op_dispatch", 0.0),
                                macs_per_second=gpu.get("macs_per_second"),
                                memory_bytes_per_second=gpu.get("memory_bandwidth"),
                                transfer_bytes_per_second=gpu.get("transfer_bandwidth")))


def gpu_settings(profile: Profile | None) -> GpuSettings:
    """The GPU settings of ``profile``; the delegate's defaults for any other profile."""
    found = profile.target_settings if profile is not None else None
    return found if isinstance(found, GpuSettings) else GpuSettings()
