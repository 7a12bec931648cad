"""A phone's GPU through LiteRT's GPU delegate, beside LiteRT on the phone's CPU.

The delegate takes the operators its rules accept, in its largest partition(s); the rest
run on the CPU (XNNPACK). So the arena is LiteRT's, op support is the host LiteRT's (an op
the delegate refuses still runs, on the CPU), ``--run`` runs the CPU reference in LiteRT
and then asks the delegate itself where a GPU adapter is present (:mod:`.runner`), and the
target's own section is the predicted partition, the CPU↔GPU traffic at its
boundaries and the GPU memory (:mod:`simulator.targets.gpu.partition`).
"""

from __future__ import annotations

from devicefit.simulator.target import (
    AcceleratorAsk,
    AcceleratorEval,
    OpTable,
    SectionMaker,
    Target,
    lazy,
    lazy_class,
)
from devicefit.simulator.targets.gpu.settings import PROFILE_KEYS, GpuSettings
from devicefit.simulator.targets.litert import TARGET as LITERT

TARGET = Target(
    name="gpu",
    title="LiteRT GPU delegate",
    device_kinds=("mobile-gpu",),
    kernels=("gpu", "xnnpack"),
    delegates=("gpu", "xnnpack"),
    planner=LITERT.planner,
    # The phone's LiteRT runs a train signature on its CPU (the delegate has no training).
    signature_planner=LITERT.signature_planner,
    check_ops=lazy(OpTable, "devicefit.simulator.targets.gpu.partition:check"),
    runner="litert",
    host_runtime=None,
    quant_schemes=("float16", "float32", "int8", "dynamic"),
    int16_io=False,
    sparse_weights="LiteRT's GPU accelerator refuses DENSIFY: sparse weights stay on the CPU",
    offline_plan=False,
    section=lazy(SectionMaker, "devicefit.simulator.targets.gpu.partition:section"),
    section_type=lazy_class("devicefit.simulator.targets.gpu.partition:GpuReport"),
    cpu_kernels={"gpu": "xnnpack"},
    bench_tool="benchmark_model",
    profile_keys=PROFILE_KEYS,
    settings=GpuSettings.from_values,
    ask_accelerator=lazy(AcceleratorAsk, "devicefit.simulator.targets.gpu.runner:ask"),
    accelerator_eval=lazy(AcceleratorEval,
                          "devicefit.simulator.targets.gpu.runner:convert_check"),
)
