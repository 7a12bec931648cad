"""Edge TPU: which operators the Edge TPU compiler maps to the TPU, which stay on the CPU, why,
and what that costs (parameter cache, link traffic, latency).

The op table and its constraint checks live in :mod:`.edgetpu_rules` (data in
``edgetpu_ops.yaml``, every rule cited), the real compiler's runner and log parser in
:mod:`.edgetpu_compiler`; this module partitions, sizes the cache, estimates latency and
reports.

Partition, as the compiler does it by default (one Edge TPU subgraph, edgetpu#461), by data
flow (:func:`_place`): unmappable ops in front of the first mappable one stay on the CPU and
feed the TPU (e.g. a float input QUANTIZE); after that an op maps when it can map by itself
and reads no result of an op left on the CPU after the subgraph began — mappable ops that
do are left on the CPU with "More than one subgraph is not supported". Parameters of mapped
ops, sized as the compiler lays them out (:mod:`.edgetpu_layout`), are cached on chip in
execution order, an op's whole or not at all, while they fit the profile's
``param_cache_bytes``; the rest, and element-wise constant operands always, are streamed
over the link every inference. The figures are predictions;
:func:`run_compiler` runs the real ``edgetpu_compiler`` when it is installed and
:func:`parse_compiler_log` reads its output. A model compiled already is read instead
(:func:`compiled_partition`, :mod:`.edgetpu_compiled`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.report.display import Row, SectionDisplay, Split, Table
from devicefit.simulator.report.report import LatencyReport, OpLatencyRow
from devicefit.simulator.targets.edgetpu.compiled import COMPILED_OP, CompiledOp, compiled_ops
from devicefit.simulator.targets.edgetpu.compiler import (
    COMPILER,
    CompilerLog,
    OpTableRow,
    compiler_available,
    parse_compiler_log,
    run_compiler,
)
from devicefit.simulator.targets.edgetpu.cost import edgetpu_cost
from devicefit.simulator.targets.edgetpu.layout import (
    ONE_PAIR_RULES,
    cache_split,
    layout_params,
    stored_ops,
)
from devicefit.simulator.targets.edgetpu.rules import (
    MODEL_CHECKS,
    OP_CHECKS,
    CheckSpec,
    OpContext,
    OpTable,
    load_table,
)
from devicefit.simulator.types import UnsupportedOp

log = logging.getLogger(__name__)

#: Re-exported for callers of this module (the converter, the tests, the text view).
__all__ = ["MODEL_CHECKS", "OP_CHECKS", "CompilerLog", "EdgeTpuReport", "OpTableRow",
           "check", "edgetpu_partition", "edgetpu_report", "load_table", "parse_compiler_log",
           "partition", "run_compiler", "section", "text_lines"]

# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class OpPlacement:
    index: int
    op: str
    version: int
    device: str  # "tpu" | "cpu"
    #: The compiler's status text: "Mapped to Edge TPU" or why not.
    status: str
    #: What exactly is wrong, for a person ("" when mapped).
    reason: str = ""
    #: The op's parameter bytes as the compiler lays them out (:mod:`.edgetpu_layout`).
    param_bytes: int = 0
    #: Where the op's parameters live: "on-chip", "off-chip" (streamed) or "" (none / CPU).
    params_in: str = ""
    #: The layout rule that sized them ("tflite": not modelled, the TFLite bytes).
    param_rule: str = ""





@dataclass(frozen=True)
class FirstUnmapped:
    index: int
    op: str
    reason: str
    status: str


@dataclass(frozen=True)
class LatencySplit:
    """Estimated time per inference, from the profile's cost model."""

    tpu_compute_ms: float
    link_ms: float
    cpu_ms: float
    #: The fixed cost of invoking the TPU once (driver, USB/PCIe round trips); 0 with no
    #: op on the TPU.
    invoke_ms: float
    total_ms: float
    #: Bytes over USB/PCIe per inference: TPU segment inputs/outputs + streamed parameters.
    link_bytes: int
    boundary_in_bytes: int
    boundary_out_bytes: int
    tpu_macs: int
    cpu_macs: int
    per_op: tuple[OpLatencyRow, ...] = ()
    #: (low, high) multipliers of total_ms where the real latency likely lies.
    band: tuple[float, float] = (0.5, 2.0)
    band_basis: str = ""





@dataclass(frozen=True)
class EdgeTpuReport:
    """``compatibility.edgetpu`` of the simulate report: the predicted partition, the
    parameter cache, the latency split and, when installed, the real compiler's figures."""

    compiler_version: str
    #: "predicted" from the op table, or "compiler" when a real compiler run is attached.
    basis: str
    #: Why the compiler would produce no Edge TPU model at all (None when it compiles).
    compile_error: str | None
    total_ops: int
    mapped_ops: int
    cpu_ops: int
    tpu_subgraphs: int
    #: First and last op index of the TPU segment (inclusive), or None.
    segment: tuple[int, int] | None
    first_unmapped: FirstUnmapped | None
    param_cache_bytes: int | None
    onchip_param_bytes: int
    offchip_param_bytes: int
    ops: list[OpPlacement]
    table: list[OpTableRow]
    latency: LatencySplit | None = None
    compiler: CompilerLog | None = None
    notes: list[str] = field(default_factory=list)
    #: Share of the model's MACs left on the host CPU (of its ops when it has no MACs),
    #: and the most the profile accepts (``ops.max_cpu_share``). None for a compiled model:
    #: its TPU part's MACs are compiled away.
    cpu_share: float | None = 0.0
    max_cpu_share: float | None = None
    #: The model's ``edgetpu-custom-op``s when it is compiled already (basis "compiled"):
    #: the partition and the parameter split are read from them, not predicted.
    compiled: tuple[CompiledOp, ...] = ()
    #: MACs of the ops on the host CPU.
    cpu_macs: int = 0

    @property
    def precompiled(self) -> bool:
        return bool(self.compiled)

    @property
    def fully_mapped(self) -> bool:
        return self.compile_error is None and self.cpu_ops == 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text_lines(self) -> list[str]:
        return text_lines(self)

    def display(self) -> SectionDisplay:
        return display(self)

    def summary_lines(self) -> list[str]:
        first = self.first_unmapped
        return [f"Edge TPU: {self.mapped_ops}/{self.total_ops} ops mapped"
                + (f"; first on CPU: op {first.index} {first.op}: {first.reason}" if first else "")
                + (f"; {self.compile_error}" if self.compile_error else "")]

    def supported_line(self) -> str:
        if self.precompiled:
            data = sum(c.data_bytes for c in self.compiled)
            return (f"compiled for the Edge TPU already: {self.mapped_ops} edgetpu-custom-op "
                    f"({data:,} B of compiled program and parameters) on the TPU, "
                    f"{self.cpu_ops} operator(s) left on the CPU ({self.cpu_macs:,} MACs)")
        # Ops the TPU cannot take still run, on the host CPU.
        return (f"every operator can run ({self.mapped_ops} on the Edge TPU, {self.cpu_ops} on "
                f"the CPU)")

    def latency_report(self, profile: Profile, split: str) -> LatencyReport:
        """``report.latency`` from the split: its total, band and per-op rows."""
        why = "; ".join(n for n in self.notes if "latency" in n) or "no latency split"
        return LatencyReport.of_split(profile, split,
                                      None if self.precompiled else self.latency, why)


def _first_failure(ctx: OpContext, table: OpTable, specs: Iterable[CheckSpec],
                   skip: tuple[str, ...] = (), prefix: str = "") -> tuple[str, str] | None:
    for spec in specs:
        if spec.name not in skip:
            ok, detail = OP_CHECKS[spec.name](ctx)
            if not ok:
                return table.status(spec.status), prefix + detail
    return None


def _own_status(ctx: OpContext, table: OpTable) -> tuple[str, str] | None:
    """Why the op cannot map by itself, as (status, reason); None when it can."""
    op = ctx.op
    rule = table.ops.get(op.op_name)
    failure = _first_failure(ctx, table, table.op_requirements, rule.skip if rule else ())
    if failure or rule is None:
        kind = "custom op" if op.is_custom else op.op_name
        return failure or (table.status("not_supported"), f"{kind} is not in the Edge TPU op table")
    failure = _first_failure(ctx, table, table.supported_op_requirements, rule.skip)
    if failure is None and rule.max_version is not None and op.version > rule.max_version:
        failure = table.status("version"), (
            f"{op.op_name} v{op.version}: the compiler maps up to v{rule.max_version} "
            "(v3 comes from half_pixel_centers/align_corners; resize without them)")
    return failure or _first_failure(ctx, table, rule.checks, prefix=f"{op.op_name}: ")


def _compile_error(model: Model, table: OpTable) -> str | None:
    for spec in table.model_requirements:
        ok, detail = MODEL_CHECKS[spec.name](model)
        if not ok:
            return detail
    for op in model.main.operators:
        limit = table.parse_max_versions.get(op.op_name)
        if limit is not None and op.version > limit.max_version:
            return (f"op {op.index} {op.op_name} is version {op.version} but compiler "
                    f"{table.compiler_version} reads up to v{limit.max_version} ({limit.why}): "
                    "the compiler cannot parse the model")
    return None


def _group(ops: list[OpPlacement]) -> list[OpTableRow]:
    """Rows like the compiler's log: one per (operator, status), in order of appearance."""
    counts: dict[tuple[str, str], int] = {}
    for p in ops:
        counts[(p.op, p.status)] = counts.get((p.op, p.status), 0) + 1
    return [OpTableRow(op, n, status) for (op, status), n in counts.items()]


def _place(model: Model, own: list[tuple[str, str] | None]) -> tuple[list[bool], list[int]]:
    """Which ops go on the TPU, as the compiler does by default (one subgraph), and for each
    mappable op left on the CPU the CPU op whose result it reads (-1 otherwise).

    Unmappable ops in front of the first mappable one feed the subgraph from the CPU. After
    that an op maps when it can map by itself and reads no result of an op left on the CPU
    after the subgraph began (the data flow, not the execution order: a mappable op that
    only reads TPU results maps after CPU ops; ``partition`` in edgetpu_ops.yaml says whose
    compiled files show it)."""
    sg = model.main
    cpu_result: dict[int, int] = {}  # tensor -> the CPU op after the start that computed it
    on_tpu = [False] * len(sg.operators)
    blocked_by = [-1] * len(sg.operators)
    started = False
    for op, status in zip(sg.operators, own):
        back = next((cpu_result[t] for t in op.inputs if t in cpu_result), None)
        if status is None:
            if back is None:
                on_tpu[op.index] = started = True
                continue
            blocked_by[op.index] = back
        if started:
            cpu_result.update({t: op.index for t in op.outputs})
    return on_tpu, blocked_by


def partition(model: Model, profile: Profile | None = None) -> EdgeTpuReport:
    """Predict the compiler's partition and parameter caching (no latency, no compiler run);
    for a model compiled already, read them from its ``edgetpu-custom-op``."""
    if any(op.op_name == f"CUSTOM:{COMPILED_OP}" for op in model.main.operators):
        return compiled_partition(model, profile)
    table = load_table()
    sg = model.main
    error = _compile_error(model, table)
    own: list[tuple[str, str] | None] = []
    for op in sg.operators:
        own.append(("", error) if error else _own_status(OpContext(model, sg, op), table))
    on_tpu, blocked_by = _place(model, own)
    cache = edgetpu_cost(profile).param_cache_bytes
    mapped = [i for i, tpu in enumerate(on_tpu) if tpu]
    stored = stored_ops(model, mapped)
    major = int(table.compiler_version.split(".")[0])
    layout = {i: layout_params(stored[i], compiler=major) for i in mapped}
    placed = dict(zip(mapped, cache_split(list(layout.values()), cache)))
    onchip = sum(layout[i].cached for i in mapped if placed[i])
    offchip = sum(layout[i].streamed + (0 if placed[i] else layout[i].cached) for i in mapped)
    placements = []
    for op, status in zip(sg.operators, own):
        if on_tpu[op.index]:
            params, fits = layout[op.index], placed[op.index]
            where = ("off-chip" if params.streamed or not fits else "on-chip") \
                if params.cached + params.streamed else ""
            placements.append(OpPlacement(op.index, op.op_name, op.version, "tpu",
                                          table.status("mapped"), "",
                                          params.cached + params.streamed, where,
                                          params.rule))
        elif error:
            placements.append(OpPlacement(op.index, op.op_name, op.version, "cpu",
                                          "Model not compiled", error))
        elif status is None:  # mappable, but it reads a result the CPU brought back
            back = blocked_by[op.index]
            placements.append(OpPlacement(
                op.index, op.op_name, op.version, "cpu", table.status("subgraph"),
                f"reads the result of op {back} ({sg.operators[back].op_name}), which runs on "
                "the CPU after the Edge TPU subgraph began: mapping it would need a second "
                "Edge TPU subgraph"))
        else:
            placements.append(OpPlacement(op.index, op.op_name, op.version, "cpu", *status))
    unmodelled = sorted({p.op for p in placements if p.param_rule in ("unmodelled", "tflite")})
    notes = [f"the compiled parameter layout of {', '.join(unmodelled)} is not modelled: "
             "counted as its TFLite bytes, so the parameter figures are low (compiler 16 "
             "stores 34,944 B for the 4,160 B of keras_lstm_mnist's LSTM)"
             ] if unmodelled else []
    for rule, pair in ONE_PAIR_RULES.items():
        ops = sorted({p.op for p in placements if p.param_rule == rule})
        if ops:
            notes.append(f"the parameter layout of {', '.join(ops)} is read from one public "
                         f"compiled model ({pair}, compiler 16): not verified on other "
                         "shapes")
    first = next((p for p in placements if p.device == "cpu"
                  and p.status != table.status("subgraph")), None)
    tpu = [p.index for p in placements if p.device == "tpu"]
    share, cpu_macs = cpu_work(model, placements)
    return EdgeTpuReport(
        compiler_version=table.compiler_version,
        basis="predicted",
        compile_error=error,
        total_ops=len(placements),
        mapped_ops=len(tpu),
        cpu_ops=len(placements) - len(tpu),
        tpu_subgraphs=1 if tpu else 0,
        segment=(tpu[0], tpu[-1]) if tpu else None,
        first_unmapped=FirstUnmapped(first.index, first.op, first.reason, first.status)
        if first else None,
        param_cache_bytes=cache,
        onchip_param_bytes=onchip,
        offchip_param_bytes=offchip,
        ops=placements,
        table=_group(placements),
        notes=notes,
        cpu_share=share,
        max_cpu_share=profile.ops.max_cpu_share if profile is not None else None,
        cpu_macs=cpu_macs,
    )


def compiled_partition(model: Model, profile: Profile | None = None) -> EdgeTpuReport:
    """The partition a compiled model holds: its ``edgetpu-custom-op``s on the TPU, the ops
    the compiler left beside them on the CPU, the parameter split its packages state."""
    from devicefit.simulator.estimate.compute import op_work

    compiled = {c.op_index: c for c in compiled_ops(model)}
    placements = []
    for op in model.main.operators:
        c = compiled.get(op.index)
        if c is not None:
            placements.append(OpPlacement(
                op.index, op.op_name, op.version, "tpu", "Compiled for the Edge TPU", c.error,
                c.cached_param_bytes + c.streamed_param_bytes,
                "off-chip" if c.streamed_param_bytes else "on-chip"))
        else:
            placements.append(OpPlacement(
                op.index, op.op_name, op.version, "cpu", "Left on the CPU by the compiler",
                "compiled before devicefit saw it: the compiler's reason is not in the file"))
    cpu = {p.index for p in placements if p.device == "cpu"}
    versions = sorted({c.compiler_version for c in compiled.values() if c.compiler_version})
    unread = [c for c in compiled.values() if c.error]
    notes = [f"op {c.op_index}: {c.error}: its parameter split is unknown" for c in unread]
    return EdgeTpuReport(
        compiler_version=", ".join(versions) or "unknown",
        basis="compiled",
        compile_error=None,
        total_ops=len(placements),
        mapped_ops=len(compiled),
        cpu_ops=len(cpu),
        tpu_subgraphs=len(compiled),
        segment=(min(compiled), max(compiled)),
        first_unmapped=None,
        param_cache_bytes=edgetpu_cost(profile).param_cache_bytes,
        onchip_param_bytes=sum(c.cached_param_bytes for c in compiled.values()),
        offchip_param_bytes=sum(c.streamed_param_bytes for c in compiled.values()),
        ops=placements,
        table=_group(placements),
        notes=notes,
        cpu_share=None,
        max_cpu_share=profile.ops.max_cpu_share if profile is not None else None,
        compiled=tuple(compiled.values()),
        cpu_macs=sum(w.macs for w in op_work(model) if w.op_index in cpu),
    )


def cpu_work(model: Model, placements: list[OpPlacement]) -> tuple[float, int]:
    """The share of the main graph's MACs that run on the CPU (by op count when it has no
    MACs), and those MACs."""
    from devicefit.simulator.estimate.compute import op_work

    if not placements:
        return 0.0, 0
    on_cpu = {p.index for p in placements if p.device == "cpu"}
    work = op_work(model)
    total = sum(w.macs for w in work)
    cpu_macs = sum(w.macs for w in work if w.op_index in on_cpu)
    if total == 0:
        return len(on_cpu) / len(placements), 0
    return cpu_macs / total, cpu_macs


# --------------------------------------------------------------------------- latency


def _boundary_bytes(model: Model, inside: set[int]) -> tuple[int, int]:
    """Bytes into and out of the TPU ops per inference (graph I/O and CPU hand-overs)."""
    sg = model.main
    produced_by: dict[int, int] = {t: op.index for op in sg.operators for t in op.outputs}
    consumed_by: dict[int, set[int]] = {}
    for op in sg.operators:
        for t in op.inputs:
            consumed_by.setdefault(t, set()).add(op.index)
    ins: set[int] = set()
    outs: set[int] = set()
    for i in inside:
        op = sg.operators[i]
        ins.update(t for t in op.inputs if t >= 0 and not sg.tensors[t].has_data
                   and produced_by.get(t, -1) not in inside)
        outs.update(t for t in op.outputs if t >= 0 and (
            t in sg.outputs or any(c not in inside for c in consumed_by.get(t, ()))))
    return (sum(sg.tensors[t].nbytes for t in ins), sum(sg.tensors[t].nbytes for t in outs))


def estimate_split_latency(model: Model, report: EdgeTpuReport,
                           profile: Profile) -> LatencySplit | None:
    """TPU compute + link traffic + a fixed invoke cost + CPU fallback, from the cost model.

    TPU: mapped MACs at ``tpu_macs_per_second × tpu_efficiency`` (the peak is never reached
    on real layers). Link: the segment's input and output tensors plus the streamed
    (off-chip) parameters cross USB/PCIe every inference, at ``link_bandwidth``. Invoke:
    ``invoke_overhead`` once per inference when any op runs on the TPU (driver and link round
    trips; it dominates small models). CPU: the ops left on the host, with the host CPU cost
    model (:func:`simulator.estimate.latency.estimate_latency`). The built-in profile's
    constants are fitted to Coral's published latencies
    (``benchmarks/bench_edgetpu_latency.py``), and its band (``cost_model.error_band``) is that
    fit's leave-one-out spread. None when the host has no estimate for an op left on the CPU
    (an op dtype no kernel table covers).
    """
    from devicefit.simulator.estimate.compute import op_work
    from devicefit.simulator.estimate.latency import estimate_latency
    from devicefit.simulator.report.report import OpCompute

    cost = edgetpu_cost(profile)
    # edgetpu_partition asks for a split only when the profile sets both rates.
    assert cost.tpu_macs_per_second is not None and cost.link_bytes_per_second is not None
    tpu_rate = cost.tpu_macs_per_second * cost.tpu_efficiency
    work = op_work(model)
    on_tpu = {p.index for p in report.ops if p.device == "tpu"}
    tpu_macs = sum(w.macs for w in work if w.op_index in on_tpu)
    cpu_work = [OpCompute(w.op_index, w.op, w.macs, w.bytes_moved)
                for w in work if w.op_index not in on_tpu]
    cpu = estimate_latency(model, cpu_work, profile) if cpu_work else None
    if cpu is not None and cpu.total_ms is None:
        return None
    cpu_ms = {o.op_index: o.ms for o in cpu.per_op} if cpu else {}
    b_in, b_out = _boundary_bytes(model, on_tpu)
    link_bytes = b_in + b_out + report.offchip_param_bytes
    per_op = []
    for w in work:
        device = "tpu" if w.op_index in on_tpu else "cpu"
        ms = 1e3 * w.macs / tpu_rate if device == "tpu" else cpu_ms[w.op_index]
        per_op.append(OpLatencyRow(w.op_index, w.op, w.dtype, w.macs, w.bytes_moved, ms, device))
    tpu_ms = sum(o.estimated_ms for o in per_op if o.device == "tpu")
    link_ms = 1e3 * link_bytes / cost.link_bytes_per_second
    invoke_ms = cost.invoke_overhead_ms if on_tpu else 0.0
    total_cpu = cpu.total_ms if cpu and cpu.total_ms is not None else 0.0
    band = profile.cost_model.error_band
    return LatencySplit(
        tpu_compute_ms=tpu_ms, link_ms=link_ms, cpu_ms=total_cpu, invoke_ms=invoke_ms,
        total_ms=tpu_ms + link_ms + invoke_ms + total_cpu, link_bytes=link_bytes,
        boundary_in_bytes=b_in, boundary_out_bytes=b_out, tpu_macs=tpu_macs,
        cpu_macs=sum(c.macs for c in cpu_work), per_op=tuple(per_op),
        band=band or (0.5, 2.0),
        band_basis=("profile cost_model.error_band (leave-one-out on Coral's figures)" if band
                    else "uncalibrated (no cost_model.error_band in the profile)"))


# --------------------------------------------------------------------------- entry points


def edgetpu_partition(model: Model, profile: Profile) -> EdgeTpuReport:
    """The Edge TPU prediction for ``model`` on an ``edgetpu`` ``profile``: partition,
    parameter cache and latency split. Static analysis only (no compiler run)."""
    report = partition(model, profile)
    cost = edgetpu_cost(profile)
    notes: list[str] = []
    latency = None
    if cost.tpu_macs_per_second and cost.link_bytes_per_second:
        latency = estimate_split_latency(model, report, profile)
        if latency is None:
            notes.append("no latency estimate: an op left on the host CPU has a dtype no "
                         "kernel table covers")
    else:
        notes.append(f"profile '{profile.name}' lacks cost_model.tpu_macs_per_second or "
                     "link_bandwidth: no latency split")
    if cost.param_cache_bytes is None and not report.precompiled:
        notes.append(f"profile '{profile.name}' has no cost_model.param_cache: every "
                     "parameter counted as cached on chip")
    if report.precompiled and latency is not None:
        from devicefit.simulator.infra.units import format_time_ms

        notes.append(
            "the Edge TPU part of a compiled model is opaque (its MACs are not in the file), "
            f"so its latency is unknown; the known parts are invoke {format_time_ms(latency.invoke_ms)} + link "
            f"{format_time_ms(latency.link_ms)} ({latency.link_bytes:,} B: TPU I/O and streamed "
            f"parameters) + CPU {format_time_ms(latency.cpu_ms)} ({latency.cpu_macs:,} MACs) = "
            f"{format_time_ms(latency.total_ms)}, a lower bound; simulate the uncompiled "
            ".tflite for an estimate")
    return dataclasses.replace(report, latency=latency, notes=[*report.notes, *notes])


def edgetpu_report(model: Model, profile: Profile, *, use_compiler: bool = True) -> EdgeTpuReport:
    """:func:`edgetpu_partition` plus the real compiler's figures when it is installed."""
    report = edgetpu_partition(model, profile)
    if report.precompiled:  # the compiler has run already: its partition is in the file
        return report
    if use_compiler and compiler_available():
        compiler = run_compiler(model.path)
        return dataclasses.replace(report, compiler=compiler, basis="compiler"
                                   if compiler.error is None else "predicted")
    return dataclasses.replace(report, notes=[
        *report.notes, f"{COMPILER} is not installed: figures are predicted from the compiler "
                       f"{report.compiler_version} op table"])


def check(model: Model, profile: Profile) -> list[UnsupportedOp]:
    """Ops that stop the model from running on the target (the compat registry's contract).

    LiteRT runs the ops that fall back to the CPU on the host, so a few are no failure
    (their cost is in the latency estimate). The model fails when the Edge TPU cannot be
    used at all — the compiler would refuse it, or not one op maps — when more of its MACs
    stay on the CPU than the profile's ``ops.max_cpu_share`` accepts (one RESHAPE on the
    TPU and the convolutions on the host is not an Edge TPU model), or when the host's
    LiteRT lacks an op. A model compiled for the Edge TPU already (``edgetpu-custom-op``)
    is judged by its host ops only: its TPU part is opaque.
    """
    from devicefit.simulator.targets.litert import ops as litert

    found = [u for u in litert.check(model, profile) if u.op != f"CUSTOM:{COMPILED_OP}"]
    report = partition(model, profile)
    if report.precompiled:
        return found  # the compiler's partition, whatever it cost, is what the file is
    f = report.first_unmapped
    assert report.cpu_share is not None  # None only for a compiled model, returned above
    if report.mapped_ops == 0 and f is not None:
        found.append(UnsupportedOp(f.index, f.op, f"no op maps to the Edge TPU: {f.reason}"))
    elif f is not None and report.cpu_share > profile.ops.max_cpu_share:
        found.append(UnsupportedOp(
            f.index, f.op, f"{report.cpu_share:.0%} of the model's MACs stay on the CPU "
            f"({report.cpu_ops} of {report.total_ops} ops), more than the "
            f"{profile.ops.max_cpu_share:.0%} profile '{profile.name}' accepts "
            f"(ops.max_cpu_share); the first CPU op is this one: {f.reason}"))
    return found


def section(model: Model, profile: Profile) -> EdgeTpuReport:
    """``compatibility.edgetpu`` of the simulate report."""
    return edgetpu_report(model, profile)


# --------------------------------------------------------------------------- its lines (the text view prints them)


def text_lines(section: EdgeTpuReport) -> list[str]:
    """``compatibility.edgetpu`` as the lines ``devicefit simulate`` prints (no new figures)."""
    from devicefit.simulator.infra.units import format_band, format_bytes, format_time_ms

    def b(n: int | None) -> str:
        return "-" if n is None else format_bytes(n)

    compiler = section.compiler
    basis = {"compiler": "real compiler output below",
             "compiled": "read from the compiled model's edgetpu-custom-op"}.get(
        section.basis, f"predicted from the compiler {section.compiler_version} op table")
    lines = [f"Edge TPU ({basis})"]
    if section.compile_error:
        lines.append(f"  NOT COMPILED  {section.compile_error}")
    seg = section.segment
    where = f" (one subgraph: ops {seg[0]}-{seg[1]})" if seg and not section.precompiled else ""
    lines.append(f"  mapped       {section.mapped_ops} of {section.total_ops} ops on the TPU"
                 f"{where}; {section.cpu_ops} on the CPU ({section.cpu_macs:,} MACs)")
    for c in section.compiled:
        lines.append(f"  compiled     op {c.op_index} edgetpu-custom-op: {b(c.data_bytes)} "
                     f"({b(c.instruction_bytes)} of instructions, {c.executables} executables, "
                     # compiler 16 often writes a bare "cl/" (no change-list number)
                     f"compiler {c.compiler_version if c.compiler_version.strip('cl/') else 'not recorded'})"
                     + (f"; {c.error}" if c.error else ""))
    if section.cpu_share is not None and section.max_cpu_share is not None:
        lines.append(f"  CPU share    {section.cpu_share:.0%} of the MACs on the CPU "
                     f"(the profile accepts {section.max_cpu_share:.0%})")
    first = section.first_unmapped
    if first and not section.compile_error:
        lines.append(f"  first CPU op op {first.index} {first.op}: {first.reason}")
    cache = section.param_cache_bytes
    lines.append(f"  parameters   {b(section.onchip_param_bytes)} cached on chip"
                 + (f" of {b(cache)}" if cache is not None else "")
                 + f"; {b(section.offchip_param_bytes)} streamed every inference")
    lat = section.latency
    if lat and not section.precompiled:
        lo, hi = (lat.total_ms * f for f in lat.band)
        lines.append(f"  latency      {format_time_ms(lat.total_ms)} (likely "
                     f"{format_band((lo, hi))}) = invoke "
                     f"{format_time_ms(lat.invoke_ms)} + TPU "
                     f"{format_time_ms(lat.tpu_compute_ms)} + link "
                     f"{format_time_ms(lat.link_ms)} ({b(lat.link_bytes)}) + CPU "
                     f"{format_time_ms(lat.cpu_ms)} (estimated)")
    rows = [("Operator", "Count", "Status")] + [
        (r.operator, str(r.count), r.status) for r in section.table]
    width = max(len(r[0]) for r in rows)
    lines += [f"  {op.ljust(width)}  {count.rjust(5)}  {status}" for op, count, status in rows]
    lines += [f"  note         {n}" for n in section.notes]
    if compiler:
        if compiler.error:
            lines.append(f"  compiler     {compiler.error}")
        else:
            lines.append(f"  compiler {compiler.version}: {compiler.tpu_ops} TPU / "
                         f"{compiler.cpu_ops} CPU ops, on-chip "
                         f"{b(compiler.on_chip_used_bytes)}, off-chip "
                         f"{b(compiler.off_chip_bytes)}")
    return lines


# --------------------------------------------------------------------------- the page


def display(section: EdgeTpuReport) -> SectionDisplay:
    """``compatibility.edgetpu`` as a page shows it: its text lines (without the op table),
    the latency split (per inference: invoke and link are no op's, so the per-op chart shows
    only part of the estimate) and the partition, one row per op."""
    from devicefit.simulator.infra.units import format_size

    lines = text_lines(section)
    table_rows = {f"  {r.operator}" for r in section.table}
    facts = tuple(line.strip() for line in lines[1:]
                  if not any(line.startswith(r) for r in table_rows)
                  and not line.startswith("  Operator "))
    lat = section.latency
    split: tuple[Split, ...] = ()
    if lat is not None and not section.precompiled:
        split = (Split(
            "edgetpu-split", "Latency split (estimated, per inference)",
            (("invoke", lat.invoke_ms), ("TPU compute", lat.tpu_compute_ms),
             (f"link ({lat.link_bytes:,} B)", lat.link_ms), ("CPU ops", lat.cpu_ms)),
            "The estimate is made of these parts. TPU compute and the CPU ops are the per-op "
            "bars above; the invoke overhead and the link traffic are per inference."),)
    rows = tuple(Row((str(p.index), p.op, p.device.upper(), p.status, p.reason,
                      format_size(p.param_bytes) if p.param_bytes else "-",
                      p.params_in or "-"), p.device, p.device == "cpu") for p in section.ops)
    partition = Table(f"Partition: {_tpu_part(section)}, {section.cpu_ops} op(s) on the CPU"
                      f"{_cpu_share(section)}",
                      ("op", "type", "runs on", "status", "why", "parameters", "kept"), rows,
                      numeric=(5,))
    return SectionDisplay("edgetpu-partition", lines[0], facts, (*split, partition))


def _tpu_part(section: EdgeTpuReport) -> str:
    if section.precompiled:
        return f"{section.tpu_subgraphs} compiled TPU segment(s) (edgetpu-custom-op)"
    seg = section.segment
    return f"{section.mapped_ops} op(s) on the TPU" + (
        f" in one segment (ops {seg[0]}–{seg[1]})" if seg else "")


def _cpu_share(section: EdgeTpuReport) -> str:
    if section.cpu_share is None:
        return ""
    return f"; {section.cpu_share:.0%} of the MACs on the CPU" + (
        f" (the profile accepts {section.max_cpu_share:.0%})"
        if section.max_cpu_share is not None else "")
