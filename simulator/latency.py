"""Device latency estimate from a profile's ``cost_model`` (no device needed).

Per operator::

    cycles = MACs × cycles_per_mac(op, dtype) + bytes_moved × cycles_per_byte
    ms     = cycles / clock_hz × 1000 / speedup(threads) + op_overhead_ms

``cycles_per_mac`` is looked up as ``"<OP>.<dtype>"``, then ``"<dtype>"``, then
``"default"``; the dtype is the op's activation type (its first non-constant input).
``speedup = 1 + (threads − 1) × parallel_efficiency``. MACs and bytes per op come from the
compute stage (``report.compute.per_op``). The constants of the built-in MCU profiles are
fitted to published on-board measurements (see the profile YAML and BENCHMARKS.md "Device
latency"), so this is an estimate of the right order, not a cycle-accurate simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from simulator.errors import ProfileError
from simulator.model import Model, Operator, Subgraph
from simulator.profiles import CostModel, Profile
from simulator.report import OpCompute


@dataclass(frozen=True)
class OpLatency:
    op_index: int
    op: str
    dtype: str
    macs: int
    bytes_moved: int
    cycles: float
    ms: float


@dataclass
class LatencyEstimate:
    total_ms: float
    clock_hz: float
    threads: int
    per_op: list[OpLatency] = field(default_factory=list)
    #: The cost-model sources the profile cites, carried into the report.
    sources: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def op_dtype(sg: Subgraph, op: Operator) -> str:
    """The op's activation dtype: its first non-constant input, else its first output."""
    for i in op.inputs:
        if i >= 0 and not sg.tensors[i].has_data:
            return sg.tensors[i].dtype
    for i in op.outputs:
        if i >= 0:
            return sg.tensors[i].dtype
    return "default"


def cycles_per_mac(cost: CostModel, op: str, dtype: str) -> float:
    table = cost.cycles_per_mac
    for key in (f"{op}.{dtype}", dtype, "default"):
        if key in table:
            return table[key]
    raise ProfileError(f"cost_model.cycles_per_mac has no entry for '{op}.{dtype}', '{dtype}' "
                       f"or 'default' (has: {', '.join(sorted(table)) or 'nothing'})")


def estimate_latency(model: Model, per_op: Sequence[OpCompute], profile: Profile) -> LatencyEstimate:
    """Estimated on-device latency of ``model`` (main graph ops in ``per_op``) on ``profile``."""
    cost = profile.cost_model
    clock = profile.device.clock_hz
    if not clock:
        raise ProfileError(f"profile '{profile.name}' has no device.clock: cannot estimate latency")
    if not cost.cycles_per_mac:
        raise ProfileError(f"profile '{profile.name}' has no cost_model.cycles_per_mac: "
                           f"cannot estimate latency")
    threads = max(1, profile.runtime.threads)
    speedup = 1.0 + (threads - 1) * cost.parallel_efficiency
    sg = model.main
    ops: list[OpLatency] = []
    for c in per_op:
        dtype = op_dtype(sg, sg.operators[c.op_index])
        # Ops without MACs (control flow, reshapes, casts) cost only their memory traffic.
        mac_cycles = c.macs * cycles_per_mac(cost, c.op, dtype) if c.macs else 0.0
        cycles = mac_cycles + c.bytes_moved * (cost.cycles_per_byte or 0.0)
        ms = cycles / clock * 1e3 / speedup + cost.op_overhead_ms
        ops.append(OpLatency(c.op_index, c.op, dtype, c.macs, c.bytes_moved, cycles, ms))
    return LatencyEstimate(total_ms=sum(o.ms for o in ops), clock_hz=clock, threads=threads,
                           per_op=ops, sources=list(cost.sources))


def latency_section(model: Model, profile: Profile, per_op: Sequence[OpCompute]) -> dict:
    """``report.latency`` with the device estimate (host figures are added by a run)."""
    est = estimate_latency(model, per_op, profile)
    return {
        "estimated_device_ms": est.total_ms,
        "clock_hz": est.clock_hz,
        "threads": est.threads,
        "per_op": [{"op_index": o.op_index, "op": o.op, "dtype": o.dtype, "macs": o.macs,
                    "bytes_moved": o.bytes_moved, "estimated_ms": o.ms} for o in est.per_op],
        "sources": est.sources,
        "host_ms": None,
        "host_per_op_ms": None,
    }
