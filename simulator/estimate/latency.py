"""Device latency estimate (no device needed), with the error band its validation gives.

Two ways to cost an operator:

* **Core registry + kernel tables** (the built-in profiles): ``device.cpu`` names a core of
  :mod:`simulator.estimate.cores`, ``runtime.kernels`` a library of
  :mod:`simulator.estimate.kernels`, and ``runtime.version`` may select an older runtime's
  slower kernels. The tables are fitted to
  published on-device latencies, and every estimate carries the band the leave-one-board-out
  validation of its library found (``benchmarks/bench_latency.py``).
* **The profile's own table** (``cost_model.cycles_per_mac``, for a core nobody has measured)::

      cycles = MACs × cycles_per_mac(op, dtype) + bytes_moved × cycles_per_byte

  ``cycles_per_mac`` is looked up as ``"<OP>.<dtype>"``, then ``"<dtype>"``, then
  ``"default"``. Its band is ``cost_model.error_band`` or, if the profile gives none, a wide
  "uncalibrated" one.

Either way an op's cycles are multiplied by ``cost_model.kernel_scale`` for its
``"<kind>.<dtype>"`` (else its ``"default"``, else 1: what ``devicefit calibrate`` fits on
the user's board), and ``ms = cycles / clock_hz × 1000 / speedup(threads) + op_overhead_ms`` with
``speedup = 1 + (threads − 1) × parallel_efficiency``. An operator whose dtype no table
covers makes the whole estimate an explicit "no estimate" (with the reason), not an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.estimate.cores import Core, find_core
from devicefit.simulator.estimate.kernels import (
    DECODE_OP,
    OP_KINDS,
    KernelData,
    LowBitPath,
    OpShape,
    int4_path,
    kernel_data,
    library_for,
    op_cycles,
)
from devicefit.simulator.profile_types import CostModel, Profile
from devicefit.simulator.read.model import Model, Operator, Subgraph
from devicefit.simulator.report.report import (
    CompatibilityReport,
    LatencyReport,
    OpCompute,
    OpLatencyRow,
)
from devicefit.simulator.target import Target, compiled_for, target_for
from devicefit.simulator.types import LatencyBasis

#: Band of an estimate from a table nobody validated: published/estimated in [0.5, 2].
UNCALIBRATED_BAND = (0.5, 2.0)


@dataclass(frozen=True)
class OpLatency:
    op_index: int
    op: str
    dtype: str
    macs: int
    bytes_moved: int
    cycles: float
    ms: float


@dataclass(frozen=True)
class LatencyEstimate:
    #: None: no estimate (``no_estimate`` says why).
    total_ms: float | None
    clock_hz: float
    threads: int
    per_op: list[OpLatency] = field(default_factory=list)
    #: The cost-model sources the profile cites, carried into the report.
    sources: list[str] = field(default_factory=list)
    #: (low, high) multipliers of total_ms where the real latency likely lies.
    band: tuple[float, float] = UNCALIBRATED_BAND
    #: Where the band comes from, for the reader.
    band_basis: str = ""
    #: Core + kernel tables, or the profile's own cycles_per_mac.
    basis: LatencyBasis = LatencyBasis.REGISTRY
    no_estimate: str | None = None

    @property
    def band_ms(self) -> tuple[float, float] | None:
        if self.total_ms is None:
            return None
        return (self.total_ms * self.band[0], self.total_ms * self.band[1])


def op_dtype(sg: Subgraph, op: Operator) -> str:
    """The op's activation dtype: its first non-constant input, else its first output."""
    for i in op.inputs:
        if i >= 0 and not sg.tensors[i].has_data:
            return sg.tensors[i].dtype
    for i in op.outputs:
        if i >= 0:
            return sg.tensors[i].dtype
    return "default"


def cycles_per_mac(cost: CostModel, op: str, dtype: str) -> float | None:
    """A profile's own cycles/MAC for ``op`` on ``dtype`` (None: the table has no entry)."""
    table = cost.cycles_per_mac
    for key in (f"{op}.{dtype}", dtype, "default"):
        if key in table:
            return table[key]
    return None


def op_shape(sg: Subgraph, op: Operator, macs: int, decoded: frozenset[int] = frozenset()
             ) -> OpShape:
    """Kind (1×1 convolutions apart), SIMD channel count and constant bytes of one op;
    ``decoded``: the tensors TFLM's DECODE writes (a filter kept compressed in flash is one:
    its shape and dtype are the filter's, its bytes in the arena)."""
    kind = "decode" if op.op_name == DECODE_OP else OP_KINDS.get(op.op_name, "elementwise")
    ref = op.inputs[1] if len(op.inputs) > 1 else -1
    weights = sg.tensors[ref] if ref >= 0 and (sg.tensors[ref].has_data or ref in decoded) \
        else None
    channels = 0
    if weights is not None and weights.shape:
        # The SIMD loop runs over one output's dot product: kh·kw·in_channels for an im2col
        # convolution, the inputs of a fully connected layer, the channels of a depthwise one.
        channels = max(weights.shape[-1], 0)
        if kind == "conv" and len(weights.shape) == 4:
            channels = max(weights.shape[1] * weights.shape[2] * weights.shape[3], 0)
            if tuple(weights.shape[1:3]) == (1, 1):
                kind = "conv1x1"
    # What the kernel reads from flash: int4 constants packed two per byte.
    weight_bytes = sum(sg.tensors[t].stored_bytes for t in op.inputs
                       if t >= 0 and sg.tensors[t].has_data)
    outputs = sum(sg.tensors[t].num_elements for t in op.outputs if t >= 0) \
        if macs or kind == "decode" else 0
    # Filters: the last weight axis of a depthwise convolution, the first of the others.
    filters = (weights.shape[-1] if kind == "depthwise" else weights.shape[0]) \
        if macs and weights is not None and weights.shape else 0
    return OpShape(op.op_name, op_dtype(sg, op), macs, kind, channels, weight_bytes, outputs,
                   max(filters, 0), weights.dtype if weights is not None else "",
                   weights.num_elements if weights is not None else 0)


def decoded_tensors(sg: Subgraph) -> frozenset[int]:
    """The tensors TFLM's DECODE operators write (:func:`op_shape`'s ``decoded``)."""
    return frozenset(t for op in sg.operators if op.op_name == DECODE_OP
                     for t in op.outputs if t >= 0)


def profile_core(profile: Profile) -> Core | None:
    """The registry core of ``profile`` (None when it brings its own cost table)."""
    if profile.cost_model.cycles_per_mac:
        return None
    if not profile.device.cpu:
        raise ProfileError(f"profile '{profile.name}' has no device.cpu and no "
                           f"cost_model.cycles_per_mac: cannot estimate latency")
    return find_core(profile.device.cpu)


def host_library(profile: Profile) -> str:
    """The kernel library the profile's CPU ops run on (an Edge TPU host runs XNNPACK)."""
    kernels = profile.runtime.kernels
    return target_for(profile).cpu_kernels.get(kernels, kernels)


def estimate_latency(model: Model, per_op: Sequence[OpCompute], profile: Profile,
                     data: KernelData | None = None, *, library: str | None = None
                     ) -> LatencyEstimate:
    """Estimated on-device latency of ``model`` (main graph ops in ``per_op``) on ``profile``;
    ``library``: the kernel library its CPU ops run on (None: :func:`host_library`)."""
    library = library or host_library(profile)
    cost = profile.cost_model
    clock = profile.device.clock_hz
    if not clock:
        raise ProfileError(f"profile '{profile.name}' has no device.clock: cannot estimate latency")
    core = profile_core(profile)
    data = data or kernel_data()
    threads = max(1, profile.runtime.threads)
    speedup = 1.0 + (threads - 1) * cost.parallel_efficiency
    sg = model.main
    ops: list[OpLatency] = []
    missing: list[str] = []
    if (compiled := _compiled_elsewhere(per_op, profile)) is not None:
        return LatencyEstimate(total_ms=None, clock_hz=clock, threads=threads,
                               sources=list(cost.sources), no_estimate=compiled)
    resting: list[tuple[float, float, str]] = []  # (cycles, spread, basis) of int4/DECODE
    decoded = decoded_tensors(sg)
    for c in per_op:
        shape = op_shape(sg, sg.operators[c.op_index], c.macs, decoded)
        low_bit: LowBitPath | None = None
        if core is None:
            per_mac = cycles_per_mac(cost, c.op, shape.dtype)
            if per_mac is None and c.macs:
                missing.append(f"{c.op}.{shape.dtype}")
            # Ops without MACs (control flow, reshapes, casts) cost only their memory traffic.
            cycles = (c.macs * (per_mac or 0.0) + c.bytes_moved * (cost.cycles_per_byte or 0.0))
        else:
            found = op_cycles(data, core, library, profile.runtime.name,
                              profile.runtime.version, shape)
            if found is None:
                missing.append(f"{c.op}.{shape.dtype}")
            cycles = (found or 0.0) + c.bytes_moved * (cost.cycles_per_byte or 0.0)
            low_bit = int4_path(data, core, library, profile.runtime.name,
                                profile.runtime.version, shape)
        cycles *= cost.kernel_scale.get(f"{shape.kind}.{shape.dtype}",
                                        cost.kernel_scale.get("default", 1.0))
        if low_bit is not None:
            resting.append((cycles, low_bit.spread, f"int4 weights: {low_bit.basis}"))
        elif shape.kind == "decode" and core is not None:
            decode = data.decode
            resting.append((cycles, decode.spread if decode else UNCALIBRATED_BAND[1],
                            f"DECODE: {decode.basis}" if decode
                            else "DECODE: no figure, its dispatch only"))
        ms = cycles / clock * 1e3 / speedup + cost.op_overhead_ms
        ops.append(OpLatency(c.op_index, c.op, shape.dtype, c.macs, c.bytes_moved, cycles, ms))
    band, basis = estimate_band(profile, core, data, model, library)
    if core is None and any(t.dtype == "int4" and t.has_data for t in sg.tensors):
        basis += ("; int4-weight layers timed by the profile's cycles_per_mac for their "
                  "activations' dtype")
    band, basis = _widened(band, basis, resting, sum(o.cycles for o in ops))
    total = sum(o.ms for o in ops)
    why = None
    if missing:
        where = ("the profile's cost_model.cycles_per_mac" if core is None
                 else f"the {library} kernel tables")
        why = f"no latency estimate: {where} cover(s) no {', '.join(sorted(set(missing)))}"
    elif not math.isfinite(total):
        # Each figure of the profile is finite, their sum over the operators is not
        # (op_overhead: 1e308ms): no number, rather than "inf s" and a margin of -inf.
        why = (f"no latency estimate: the cost_model of profile '{profile.name}' overflows "
               f"over {len(ops)} operators")
    return LatencyEstimate(total_ms=None if why else total, clock_hz=clock, threads=threads,
                           per_op=ops, sources=list(cost.sources), band=band,
                           band_basis=basis, no_estimate=why,
                           basis=LatencyBasis.PROFILE if core is None
                           else LatencyBasis.REGISTRY)


def _widened(band: tuple[float, float], basis: str, resting: list[tuple[float, float, str]],
             total_cycles: float) -> tuple[tuple[float, float], str]:
    """``band`` widened for the time that rests on int4 and DECODE figures: a share ``s``
    of the cycles whose factor may be off by ``spread`` either way moves the total by
    ``1 - s + s / spread`` down to ``1 - s + s × spread`` up; ``basis`` names each figure."""
    if not resting or total_cycles <= 0:
        return band, basis
    low = high = 1.0
    for cycles, spread, _ in resting:
        share = cycles / total_cycles
        low -= share - share / spread
        high += share * (spread - 1)
    named = list(dict.fromkeys(why for _, _, why in resting))
    share = sum(c for c, _, _ in resting) / total_cycles
    return (band[0] * low, band[1] * high), (
        f"{basis}; {share:.0%} of the time rests on " + "; ".join(named)
        + f" (band widened to x{band[0] * low:.2f}-x{band[1] * high:.2f})")


def _compiled_elsewhere(per_op: Sequence[OpCompute], profile: Profile) -> str | None:
    """Why there is no estimate when an op is another accelerator's compiled part: its work
    is in a command stream no cost table here reads (0 MACs would be a false "fast")."""
    for c in per_op:
        target = compiled_for(c.op.removeprefix("CUSTOM:")) if c.op.startswith("CUSTOM:") \
            else None
        if target is not None and target.name != profile.runtime.name:
            return (f"no latency estimate: op {c.op_index} ({c.op}) is compiled for the "
                    f"{target.title}; its work is inside it, not in the file's operators")
    return None


def estimate_band(profile: Profile, core: Core | None, data: KernelData,
                  model: Model | None = None, library: str | None = None
                  ) -> tuple[tuple[float, float], str]:
    """The (low, high) multipliers of an estimate and where they come from (``library``:
    the kernel library of the CPU ops, None: :func:`host_library`)."""
    if profile.cost_model.error_band is not None:
        return profile.cost_model.error_band, (
            profile.cost_model.calibration
            or f"profile '{profile.name}' cost_model.error_band")
    if core is None:
        return UNCALIBRATED_BAND, "uncalibrated cost table (no error_band in the profile)"
    dtype = _main_dtype(model) if model is not None else "int8"
    lib = library_for(data, library or host_library(profile), dtype)
    if dtype not in lib.calibrated:
        return UNCALIBRATED_BAND, (f"{lib.name} kernels, {dtype}: no published figure "
                                   f"validates them (uncalibrated band)")
    return lib.band, f"{lib.name} kernels, {dtype}: leave-one-board-out validation"


def _main_dtype(model: Model) -> str:
    """The dtype most MAC-heavy ops compute in (it picks the band's library)."""
    sg = model.main
    counts: dict[str, int] = {}
    for op in sg.operators:
        if op.op_name in OP_KINDS:
            d = op_dtype(sg, op)
            counts[d] = counts.get(d, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else "int8"


def device_latency(model: Model, profile: Profile, target: Target,
                   compatibility: CompatibilityReport, per_op: Sequence[OpCompute]
                   ) -> LatencyReport:
    """``report.latency``'s device estimate (host figures are added by a run): the target's
    section's own where it has one (the Edge TPU splits an inference into TPU compute, link
    transfers and CPU fallback; the Ethos-U adds Vela's cycles and the Cortex-M part), else
    the CPU cost model for ``device.cpu`` and the library ``target`` runs its CPU ops on.
    A :class:`ProfileError` when the profile's cost model cannot estimate."""
    section = compatibility.section
    if section is not None:
        own = section.latency_report(profile, f"compatibility.{compatibility.table}.latency")
        if own is not None:
            return own
    kernels = profile.runtime.kernels
    est = estimate_latency(model, per_op, profile,
                           library=target.cpu_kernels.get(kernels, kernels))
    return LatencyReport(
        estimated_device_ms=est.total_ms,
        band_ms=est.band_ms,
        band=est.band,
        band_basis=est.band_basis,
        basis=est.basis,
        no_estimate=est.no_estimate,
        cpu=profile.device.cpu,
        kernels=kernels,
        runtime_version=profile.runtime.version,
        clock_hz=est.clock_hz,
        threads=est.threads,
        per_op=tuple(OpLatencyRow(o.op_index, o.op, o.dtype, o.macs, o.bytes_moved, o.ms)
                     for o in est.per_op),
        sources=tuple(est.sources),
    )
