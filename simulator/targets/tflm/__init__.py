"""TensorFlow Lite Micro on microcontrollers.

The arena is planned by TFLM's own rules (:mod:`simulator.targets.tflm.planner`: greedy head,
persistent tail), op support comes from the tflite-micro wheel's op resolver
(:mod:`simulator.targets.tflm.ops`), and ``--run`` runs the model in that wheel. TFLM reads an
offline arena plan from the model's metadata, which ``optimize`` writes.

What ``--run`` measures beyond outputs and times (the arena, the cross-check against
LiteRT's reference kernels) is :mod:`.measured`. ``--run --target-build DIR`` also builds
TFLM from the user's checkout for the profile's core and kernel library (:mod:`.build`) and
measures the model on it under QEMU (:mod:`.qemu`, with the harness ``harness.cc`` shipped
beside them).
"""

from __future__ import annotations

from devicefit.simulator.target import (
    CodeSize,
    CrossChecker,
    DeviceBuild,
    Exporter,
    HostRuntime,
    OpTable,
    Planner,
    RunReader,
    Target,
    lazy,
)
from devicefit.simulator.targets.tflm.settings import PROFILE_KEYS, settings

TARGET = Target(
    name="tflm",
    title="TensorFlow Lite Micro",
    device_kinds=("mcu",),
    kernels=("reference", "cmsis-nn", "esp-nn", "andes-nn"),
    delegates=(),
    planner=lazy(Planner, "devicefit.simulator.targets.tflm.planner:plan_tflm"),
    check_ops=lazy(OpTable, "devicefit.simulator.targets.tflm.ops:check"),
    runner="tflm",
    host_runtime=lazy(HostRuntime, "devicefit.simulator.targets.tflm.runner:TflmRunner"),
    # TFLM has no hybrid (dynamic-range) kernels and no float16 DEQUANTIZE.
    quant_schemes=("int8", "int16x8", "float32"),
    int16_io=True,
    sparse_weights="TFLite-Micro kernels do not skip zero weights",
    offline_plan=True,
    resizes_inputs=False,
    section=None,
    wheel="tflite-micro",
    second_opinion="litert",
    read_run=lazy(RunReader, "devicefit.simulator.targets.tflm.measured:read_run"),
    cross_check=lazy(CrossChecker, "devicefit.simulator.targets.tflm.measured:cross_check"),
    device_build=lazy(DeviceBuild, "devicefit.simulator.targets.tflm.measured:device_build"),
    code_size=lazy(CodeSize, "devicefit.simulator.targets.tflm.code:code_size"),
    export=lazy(Exporter, "devicefit.simulator.targets.tflm.export:firmware"),
    failed_node=r"Node (?P<op>[A-Z0-9_]+) \(number (?P<index>\d+)\)",
    profile_keys=PROFILE_KEYS,
    settings=settings,
)
