"""The phone GPU target's own profile keys (under ``gpu``) and their typed settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devicefit.simulator.infra.schema import integer, one_of

if TYPE_CHECKING:
    from devicefit.simulator.profile_types import Profile

PROFILE_KEYS = {"gpu": {
    "max_partitions": integer(1),
    "precision": one_of("fp16", "fp32"),
}}


@dataclass(frozen=True)
class GpuSettings:
    """The delegate options that change the partition and the memory."""

    #: ``max_delegated_partitions``: the delegate's default is 1 (``GetOpsToReplace``).
    max_partitions: int = 1
    #: "fp16": precision loss allowed (LiteRT's ``GpuOptions.enforce_f32`` is False by
    #: default, benchmark_model's ``--gpu_precision_loss_allowed`` true); "fp32" otherwise.
    precision: str = "fp16"

    @classmethod
    def from_values(cls, values: Mapping[str, Mapping[str, Any]]) -> GpuSettings:
        """From the parsed values of :data:`PROFILE_KEYS` a profile sets."""
        gpu = values.get("gpu", {})
        return cls(max_partitions=gpu.get("max_partitions", 1),
                   precision=gpu.get("precision", "fp16"))


def gpu_settings(profile: Profile | None) -> GpuSettings:
    """The GPU settings of ``profile``; the delegate's defaults for any other profile."""
    found = profile.target_settings if profile is not None else None
    return found if isinstance(found, GpuSettings) else GpuSettings()
