"""LiteRT (TensorFlow Lite) on phones and application processors.

The arena is planned by LiteRT's arena planner rules (:mod:`simulator.targets.litert.planner`),
a signature's subgraph's too (a trainable model's ``train``: :mod:`simulator.plan.training`),
op support comes from the ai-edge-litert wheel and XNNPACK's rules
(:mod:`simulator.targets.litert.ops`), and ``--run`` runs the model in that wheel. ``devicefit
bench`` measures it on a phone with LiteRT's ``benchmark_model`` over adb.
"""

from __future__ import annotations

from devicefit.simulator.target import (
    HostRuntime,
    OpTable,
    Planner,
    ShapeOracle,
    SignaturePlanner,
    Target,
    lazy,
)

TARGET = Target(
    name="litert",
    title="LiteRT",
    device_kinds=("mobile-cpu",),
    kernels=("xnnpack", "reference"),
    delegates=("xnnpack", "gpu", "nnapi"),
    planner=lazy(Planner, "devicefit.simulator.targets.litert.planner:plan_litert"),
    check_ops=lazy(OpTable, "devicefit.simulator.targets.litert.ops:check"),
    runner="litert",
    host_runtime=lazy(HostRuntime, "devicefit.simulator.targets.litert.runner:LiteRTRunner"),
    quant_schemes=("int8", "int16x8", "float16", "dynamic", "float32"),
    int16_io=True,
    sparse_weights=None,
    offline_plan=False,
    section=None,
    bench_tool="benchmark_model",
    wheel="ai-edge-litert",
    xnnpack_option=True,
    failed_node=r"Node number (?P<index>\d+) \((?P<op>[A-Z0-9_]+)\)",
    shapes=lazy(ShapeOracle, "devicefit.simulator.targets.litert.shapes:litert_shapes"),
    signature_planner=lazy(SignaturePlanner,
                           "devicefit.simulator.targets.litert.planner:plan_subgraph"),
)
