"""Coral Edge TPU: a USB/PCIe accelerator beside a host CPU running LiteRT.

The TPU runs the one segment of full-integer ops the compiler maps; the rest falls back to
LiteRT on the host. So the arena is LiteRT's, op support is the compiler's rules table plus
the host's LiteRT (:mod:`simulator.targets.edgetpu.partition`), ``--run`` runs the CPU reference in
LiteRT, and the target's own report section is the predicted partition, parameter cache and
latency split (TPU compute, link, CPU fallback on XNNPACK).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from devicefit.simulator.target import (
    OpTable,
    SectionMaker,
    Target,
    lazy,
    lazy_class,
)
from devicefit.simulator.targets.edgetpu.cost import PROFILE_KEYS, EdgeTpuCost
from devicefit.simulator.targets.litert import TARGET as LITERT

if TYPE_CHECKING:
    from devicefit.simulator.profile_types import Profile
    from devicefit.simulator.targets.edgetpu.partition import EdgeTpuReport


def _after_convert(path: Path, profile: Profile) -> EdgeTpuReport:
    """The predicted partition of the model ``convert`` wrote, for its report."""
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.targets.edgetpu.partition import partition

    return partition(read_model(path), profile)


TARGET = Target(
    name="edgetpu",
    title="Coral Edge TPU",
    device_kinds=("edgetpu",),
    kernels=("edgetpu", "xnnpack", "reference"),
    delegates=("edgetpu", "xnnpack"),
    planner=LITERT.planner,
    # The host's LiteRT runs a train signature on its CPU (the TPU runs compiled inference).
    signature_planner=LITERT.signature_planner,
    check_ops=lazy(OpTable, "devicefit.simulator.targets.edgetpu.partition:check"),
    runner="litert",
    host_runtime=None,
    quant_schemes=("int8",),
    int16_io=False,
    sparse_weights="the Edge TPU compiler does not use sparse weights",
    offline_plan=False,
    section=lazy(SectionMaker, "devicefit.simulator.targets.edgetpu.partition:section"),
    section_type=lazy_class("devicefit.simulator.targets.edgetpu.partition:EdgeTpuReport"),
    cpu_kernels={"edgetpu": "xnnpack"},
    profile_keys=PROFILE_KEYS,
    settings=EdgeTpuCost.from_values,
    after_convert=_after_convert,
    compiled_op="edgetpu-custom-op",
)
