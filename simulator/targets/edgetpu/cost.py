"""The Edge TPU's own profile keys and the constants they give its latency split.

Only the Edge TPU target uses these, so they are not :class:`simulator.profiles.CostModel`
fields: the target declares the keys (under ``cost_model``, where profiles have always had
them) and the profile keeps the parsed values as its ``target_settings``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devicefit.simulator.infra.schema import BANDWIDTH, MEMORY, TIME, fraction, number

if TYPE_CHECKING:
    from devicefit.simulator.profile_types import Profile

#: The keys an Edge TPU profile may set, by section.
PROFILE_KEYS = {"cost_model": {
    "tpu_macs_per_second": number(),
    "tpu_efficiency": fraction(),
    "invoke_overhead": TIME,
    "link_bandwidth": BANDWIDTH,
    "param_cache": MEMORY,
}}


@dataclass(frozen=True)
class EdgeTpuCost:
    """TPU latency = invoke_overhead + TPU MACs / (peak × efficiency) + link bytes / link rate
    + CPU fallback (see :func:`simulator.targets.edgetpu.partition.estimate_split_latency`)."""

    #: Peak MAC/s of the TPU (4 TOPS int8 = 2e12 MAC/s).
    tpu_macs_per_second: float | None = None
    #: Fraction of ``tpu_macs_per_second`` an accelerator reaches on real layers.
    tpu_efficiency: float = 1.0
    #: Fixed cost of one accelerator inference (host driver, USB/PCIe round trips).
    invoke_overhead_ms: float = 0.0
    link_bytes_per_second: float | None = None
    #: On-chip SRAM that caches parameters; the rest is streamed every inference.
    param_cache_bytes: int | None = None

    @classmethod
    def from_values(cls, values: Mapping[str, Mapping[str, Any]]) -> EdgeTpuCost:
        """From the parsed values of :data:`PROFILE_KEYS` a profile sets."""
        cm = values.get("cost_model", {})
        return cls(tpu_macs_per_second=cm.get("tpu_macs_per_second"),
                   tpu_efficiency=cm.get("tpu_efficiency", 1.0),
                   invoke_overhead_ms=cm.get("invoke_overhead", 0.0),
                   link_bytes_per_second=cm.get("link_bandwidth"),
                   param_cache_bytes=cm.get("param_cache"))


def edgetpu_cost(profile: Profile | None) -> EdgeTpuCost:
    """The Edge TPU constants of ``profile``; the defaults (no latency split, every
    parameter cached) for a profile of another target checked against the Edge TPU table."""
    settings = profile.target_settings if profile is not None else None
    return settings if isinstance(settings, EdgeTpuCost) else EdgeTpuCost()
