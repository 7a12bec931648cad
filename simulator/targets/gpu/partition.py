"""The phone GPU: the partition LiteRT's GPU delegate makes, what crosses CPU↔GPU, and the
GPU memory it holds.

Each operator is judged by the delegate's rules (:mod:`.rules`). The graph is then cut as
TFLite cuts it for a delegate (``PartitionGraphIntoIndependentNodeSubsets``,
``tflite/core/graph_info.cc``: subsets of one kind, supported or not, each grown while an
operator of that kind has all its inputs ready, stateful operators kept in file order), and the delegate keeps its
``max_delegated_partitions`` largest supported subsets (``GetOpsToReplace``: 1 by default);
the rest run on the CPU (XNNPACK). Every kept partition reads its inputs from CPU memory
and writes its outputs back, once per inference: those are the boundary bytes. GPU memory
is estimated as the partitions' weights and tensors in the GPU's precision (fp16 unless
``gpu.precision`` says fp32) — an upper bound on the tensors, as the delegate's own planner
shares buffers between tensors that do not live at once, which this does not model.
Latency is estimated by :mod:`.latency` from the profile's fitted constants.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Subgraph
from devicefit.simulator.report.display import Row, SectionDisplay, Split, Table
from devicefit.simulator.report.report import LatencyReport
from devicefit.simulator.targets.gpu.latency import GpuLatency, estimate
from devicefit.simulator.targets.gpu.live import (
    WAYS,
    LiveDelegate,
    PrecisionCheck,
    live_lines,
    live_summary,
)
from devicefit.simulator.targets.gpu.rules import SOURCE, verdict
from devicefit.simulator.targets.gpu.settings import PRECISION_BYTES, gpu_settings
from devicefit.simulator.types import UnsupportedOp


@dataclass(frozen=True)
class GpuOp:
    index: int
    op: str
    #: "gpu" | "cpu"
    device: str
    #: The delegate's words when it refuses the op; "" when it takes it, or why a
    #: supported op still runs on the CPU (a partition beyond the delegate's limit).
    reason: str = ""
    rule: str = ""
    #: The GPU partition it runs in (0 = the largest), or None on the CPU.
    partition: int | None = None
    #: Its first output tensor: the layer's name in the user's model ("" if it has none),
    #: as the Ethos-U's partition names it.
    layer: str = ""


@dataclass(frozen=True)
class GpuPartition:
    ops: tuple[int, ...]
    #: Bytes read from CPU memory and written back to it per inference.
    in_bytes: int
    out_bytes: int
    #: Estimated GPU memory: weights and tensors in the GPU's precision.
    weight_bytes: int
    tensor_bytes: int
    #: Of ``in_bytes``: weights the CPU makes from constants (DENSIFY, DEQUANTIZE left on
    #: it). TFLite computes those once; whether the delegate uploads them once or every
    #: inference is not checked, so they are counted every inference.
    cpu_made_weight_bytes: int = 0


@dataclass(frozen=True)
class GpuReport:
    """``compatibility.gpu`` of the simulate report: the predicted delegate partition."""

    source: str
    precision: str
    max_partitions: int
    total_ops: int
    gpu_ops: int
    cpu_ops: int
    #: Supported subsets the graph cut into, before the delegate kept its largest.
    candidate_partitions: int
    partitions: tuple[GpuPartition, ...]
    ops: tuple[GpuOp, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: What ``--run`` asked the delegate itself (:mod:`.runner`); None: not run.
    live: LiveDelegate | None = None
    #: The estimated time per inference, split; None: ``no_latency`` says why.
    latency: GpuLatency | None = None
    no_latency: str = ""

    @property
    def boundary_bytes(self) -> int:
        return sum(p.in_bytes + p.out_bytes for p in self.partitions)

    @property
    def gpu_memory_bytes(self) -> int:
        return sum(p.weight_bytes + p.tensor_bytes for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text_lines(self) -> list[str]:
        return text_lines(self)

    def display(self) -> SectionDisplay:
        return display(self)

    def summary_lines(self) -> list[str]:
        return [f"GPU delegate: {self.gpu_ops}/{self.total_ops} ops on the GPU in "
                f"{len(self.partitions)} partition(s); {self.cpu_ops} on the CPU",
                *live_summary(self.live)]

    def supported_line(self) -> str:
        # Ops the delegate refuses still run, on the CPU.
        return (f"every operator can run ({self.gpu_ops} on the GPU, {self.cpu_ops} on the "
                f"CPU)")

    def latency_report(self, profile: Profile, split: str) -> LatencyReport:
        """``report.latency`` from the split: its total, band and per-op rows."""
        return LatencyReport.of_split(profile, split, self.latency,
                                      self.no_latency or "no latency split")


#: Control-flow ops ``Subgraph::OpMightHaveSideEffect`` counts as stateful, beside any op
#: reading or writing a resource tensor (a variable).
SIDE_EFFECT_OPS = frozenset({"IF", "WHILE", "CALL_ONCE"})
#: Where the cut's rules are read.
GRAPH_SOURCE = ("google-ai-edge/LiteRT tflite/core/graph_info.cc "
                "(PartitionGraphIntoIndependentNodeSubsets), tflite/core/subgraph.cc "
                "(OpMightHaveSideEffect)")


def _side_effects(sg: Subgraph) -> list[int]:
    return [op.index for op in sg.operators if op.op_name in SIDE_EFFECT_OPS or any(
        t >= 0 and sg.tensors[t].dtype == "resource" for t in (*op.inputs, *op.outputs))]


def subsets(sg: Subgraph, supported: list[bool]) -> list[tuple[bool, list[int]]]:
    """The graph cut as ``PartitionGraphIntoIndependentNodeSubsets`` cuts it: each subset
    of one kind, its kind set by the first operator ready; an operator joins while all its
    inputs are ready (graph inputs, constants, or outputs of subsets already made) and, if
    it might have side effects, the one before it in file order that might too has run
    (the "dependency chain between stateful ops" the partitioner adds)."""
    produced = {t for op in sg.operators for t in op.outputs if t >= 0}
    ready = {t for t in range(len(sg.tensors)) if t not in produced}
    stateful = _side_effects(sg)
    after = dict(zip(stateful[1:], stateful))
    done = [False] * len(sg.operators)
    out: list[tuple[bool, list[int]]] = []
    while not all(done):
        kind: bool | None = None
        nodes: list[int] = []
        grew = True
        while grew:
            grew = False
            for op in sg.operators:
                i = op.index
                if done[i] or any(t >= 0 and t not in ready for t in op.inputs) or (
                        i in after and not done[after[i]]):
                    continue
                if kind is None:
                    kind = supported[i]
                if supported[i] != kind:
                    continue
                done[i] = grew = True
                nodes.append(i)
                ready.update(t for t in op.outputs if t >= 0)
        if not nodes:  # a cycle or an unreadable input: nothing more is ready
            break
        out.append((bool(kind), nodes))
    return out


def _partition_figures(sg: Subgraph, ops: list[int], element_bytes: int,
                       fp16: set[int]) -> GpuPartition:
    """The partition's crossings and memory. The consumers of an fp16 weights' DEQUANTIZE
    read the fp16 weights themselves (``RemapFp16InputTensors``): weights, not traffic."""
    remap = {sg.operators[i].outputs[0]: sg.operators[i].inputs[0] for i in fp16}
    inside = set(ops) - fp16
    produced_by = {t: op.index for op in sg.operators for t in op.outputs if t >= 0}
    consumers: dict[int, set[int]] = {}
    for op in sg.operators:
        for t in op.inputs:
            consumers.setdefault(t, set()).add(op.index)
    ins: set[int] = set()
    outs: set[int] = set()
    weights: set[int] = set()
    tensors: set[int] = set()
    for i in sorted(inside):
        op = sg.operators[i]
        for t in (remap.get(x, x) for x in op.inputs if x >= 0):
            if sg.tensors[t].has_data:
                weights.add(t)
            elif produced_by.get(t) not in inside:
                ins.add(t)
        for t in (x for x in op.outputs if x >= 0):
            tensors.add(t)
            if t in sg.outputs or any(c not in inside for c in consumers.get(t, ())):
                outs.add(t)
    tensors |= ins

    def gpu_bytes(indices: set[int]) -> int:
        # Float and quantized values alike are held in the GPU's float precision: the
        # delegate dequantizes int8 models (its quant_conversion_map) and computes in float.
        return sum(sg.tensors[t].num_elements * element_bytes for t in indices)

    made = {t for t in ins if t in produced_by
            and sg.operators[produced_by[t]].op_name in ("DENSIFY", "DEQUANTIZE")}
    return GpuPartition(tuple(ops), sum(sg.tensors[t].nbytes for t in ins),
                        sum(sg.tensors[t].nbytes for t in outs), gpu_bytes(weights),
                        gpu_bytes(tensors), sum(sg.tensors[t].nbytes for t in made))


#: Where a DEQUANTIZE of fp16 weights runs when the delegate takes only part of the graph.
FP16_DEQUANTIZE_ON_CPU = ("fp16 weights' DEQUANTIZE kept on the CPU when the delegate takes "
                          "part of the graph (FP16GraphPartitionHelper)")
#: The partitioning's source (GetOpsToReplace is in :data:`.rules.SOURCE`).
PARTITION_SOURCE = ("google-ai-edge/LiteRT tflite/delegates/utils.cc "
                    "(GraphPartitionHelper, FP16GraphPartitionHelper)")


def _fp16_dequantize(sg: Subgraph) -> set[int]:
    """DEQUANTIZE ops of constant fp16 tensors: ``FP16GraphPartitionHelper::IsNodeSupported``
    refuses them for the cut and points their consumers at the fp16 weights."""
    return {op.index for op in sg.operators if op.op_name == "DEQUANTIZE" and op.inputs
            and sg.tensors[op.inputs[0]].dtype == "float16"
            and sg.tensors[op.inputs[0]].has_data}


def partition(model: Model, profile: Profile | None = None) -> GpuReport:
    """The delegate's partition of ``model``'s main graph under ``profile``'s settings."""
    sg = model.main
    settings = gpu_settings(profile)
    verdicts = [verdict(sg, op) for op in sg.operators]
    fp16 = _fp16_dequantize(sg)
    supported = [v.supported and op.index not in fp16 for op, v in zip(sg.operators, verdicts)]
    cut = subsets(sg, supported)
    candidates = [nodes for kind, nodes in cut if kind]
    if sum(supported) + len(fp16) == len(sg.operators):
        # FP16GraphPartitionHelper, "Scenario 1: Full Delegation": every node, one partition.
        kept = [[op.index for op in sg.operators]] if sg.operators else []
    else:
        # GetFirstNLargestPartitions: by size, largest first (ties: the earlier subset).
        kept = sorted(candidates, key=len, reverse=True)[:settings.max_partitions]
    where = {i: n for n, nodes in enumerate(kept) for i in nodes}
    ops = []
    for op, v in zip(sg.operators, verdicts):
        on_gpu = op.index in where
        reason, rule = v.reason, v.rule
        if v.supported and not on_gpu and op.index in fp16:
            reason, rule = FP16_DEQUANTIZE_ON_CPU, "FP16GraphPartitionHelper: Scenario 2"
        elif v.supported and not on_gpu:
            reason = (f"supported, but in a partition beyond the delegate's "
                      f"{settings.max_partitions} largest (max_delegated_partitions)")
            rule = "GetOpsToReplace: GetNodesOfFirstNLargestPartitions"
        layer = next((sg.tensors[i].name for i in op.outputs if i >= 0), "")
        ops.append(GpuOp(op.index, op.op_name, "gpu" if on_gpu else "cpu",
                         "" if on_gpu else reason, rule, where.get(op.index), layer))
    element = PRECISION_BYTES[settings.precision]
    parts = tuple(_partition_figures(sg, nodes, element, fp16) for nodes in kept)
    gpu = sum(len(p.ops) for p in parts)
    notes = [f"rules: {SOURCE} (NewOperationParser, GetOpsToReplace), {PARTITION_SOURCE}, "
             f"{GRAPH_SOURCE}; per-op option checks of gpu_compatibility.cc not encoded",
             "GPU memory: weights and tensors in " + settings.precision + ", an upper bound "
             "(the delegate's planner shares tensor buffers)"]
    if len(model.subgraphs) > 1:
        notes.append("only the main graph is partitioned: control-flow bodies run on the CPU")
    return GpuReport(SOURCE, settings.precision, settings.max_partitions, len(sg.operators),
                     gpu, len(sg.operators) - gpu, len(candidates), parts, tuple(ops),
                     tuple(notes))


def check(model: Model, profile: Profile) -> list[UnsupportedOp]:
    """Ops that stop the model from running: the host LiteRT's. Ops the delegate refuses
    run on the CPU, so they are the section's findings, not failures."""
    from devicefit.simulator.targets.litert import ops as litert

    return litert.check(model, profile)


def section(model: Model, profile: Profile) -> GpuReport:
    """``compatibility.gpu`` of the simulate report: the partition and its latency."""
    report = partition(model, profile)
    found = estimate(model, report, profile, gpu_settings(profile).cost)
    if isinstance(found, str):
        return dataclasses.replace(report, no_latency=found)
    return dataclasses.replace(report, latency=found)


def text_lines(section: GpuReport) -> list[str]:
    """``compatibility.gpu`` as ``devicefit simulate`` prints it."""
    from devicefit.simulator.infra.units import format_band, format_bytes, format_time_ms

    lines = [f"GPU delegate (predicted from its rules; {section.precision})",
             f"  partition    {section.gpu_ops} of {section.total_ops} ops on the GPU in "
             f"{len(section.partitions)} partition(s) (of {section.candidate_partitions} "
             f"supported; the delegate keeps {section.max_partitions}); "
             f"{section.cpu_ops} on the CPU"]
    for n, p in enumerate(section.partitions):
        lines.append(f"  partition {n}  ops {_span(p.ops)}: CPU→GPU {format_bytes(p.in_bytes)}, "
                     f"GPU→CPU {format_bytes(p.out_bytes)} per inference (estimated); "
                     f"GPU memory {format_bytes(p.weight_bytes)} weights + "
                     f"{format_bytes(p.tensor_bytes)} tensors (estimated)")
        if p.cpu_made_weight_bytes:
            lines.append(f"  partition {n}  of CPU→GPU, {format_bytes(p.cpu_made_weight_bytes)} "
                         "are weights the CPU makes (DENSIFY, DEQUANTIZE): TFLite makes them "
                         "once; whether the delegate uploads them once is not checked")
    lat = section.latency
    if lat is not None:
        lo, hi = (lat.total_ms * f for f in lat.band)
        lines.append(f"  latency      {format_time_ms(lat.total_ms)} (likely "
                     f"{format_band((lo, hi))}) = GPU {format_time_ms(lat.gpu_ms)} + "
                     f"transfers {format_time_ms(lat.transfer_ms)} ({lat.crossings} "
                     f"crossing(s), {format_bytes(lat.boundary_bytes)}) + CPU "
                     f"{format_time_ms(lat.cpu_ms)} (estimated)")
    elif section.no_latency:
        lines.append(f"  latency      {section.no_latency}")
    fallbacks: dict[tuple[str, str], list[GpuOp]] = {}
    for op in section.ops:
        if op.device == "cpu":
            fallbacks.setdefault((op.op, op.reason), []).append(op)
    for (name, reason), at in fallbacks.items():
        lines.append(f"  on CPU       {name} (op{'s' if len(at) > 1 else ''} "
                     f"{_span(tuple(o.index for o in at))}{_layers(at)}): {reason}")
    lines += live_lines(section.live)
    lines += [f"  note         {n}" for n in section.notes]
    return lines


def _layers(ops: list[GpuOp]) -> str:
    """``, layer 'model/dense/MatMul'`` (the first 2, then a count), "" when none is named.
    A converter names a fused op's output after each op fused (``a/Relu;a/convolution``):
    the first names the layer, and the page's table has the whole name."""
    named = [o.layer.split(";")[0] for o in ops if o.layer]
    if not named:
        return ""
    shown = ", ".join(f"'{n}'" for n in named[:2])
    more = f" and {len(named) - 2} more" if len(named) > 2 else ""
    return f", layer{'s' if len(named) > 1 else ''} {shown}{more}"


def _span(indices: tuple[int, ...]) -> str:
    shown = ", ".join(str(i) for i in indices[:8])
    return shown + (f" … ({len(indices)} ops)" if len(indices) > 8 else "")


def display(section: GpuReport) -> SectionDisplay:
    """``compatibility.gpu`` as a page shows it: its lines and the partition, op by op."""
    lines = text_lines(section)
    # The output tensor last, as the Ethos-U's table: a converter's names run long.
    rows = tuple(Row((str(o.index), o.op, o.device.upper(),
                      "-" if o.partition is None else str(o.partition), o.reason or "-",
                      o.rule if o.device == "cpu" and o.rule else "-", o.layer or "-"),
                     o.device, o.device == "cpu") for o in section.ops)
    table = Table(f"Partition: {section.gpu_ops} op(s) on the GPU, {section.cpu_ops} on the CPU",
                  ("op", "type", "runs on", "partition", "why on the CPU", "rule",
                   "output tensor (your layer)"), rows)
    lat = section.latency
    split: tuple[Split, ...] = ()
    if lat is not None:
        split = (Split(
            "gpu-split", "Latency split (estimated, per inference)",
            (("GPU ops", lat.gpu_ms), (f"transfers ({lat.boundary_bytes:,} B)", lat.transfer_ms),
             ("CPU ops", lat.cpu_ms)),
            "The estimate is made of these parts. The GPU and CPU ops are the per-op bars "
            "above; the transfers (a sync per crossing and the copy) are per inference."),)
    check = section.live.precision if section.live else None
    # A measured fp16 check is its table (its heading line and the ways under it), not facts.
    facts = tuple(x.strip() for x in lines[1:]
                  if check is None or not x.startswith(("  fp16 ", " " * 17)))
    return SectionDisplay("gpu-partition", lines[0], facts,
                          (*split, *(() if check is None else (_fp16_table(check),)), table))


def _fp16_table(check: PrecisionCheck) -> Table:
    """The fp16 check as a table: one row per way the outputs were computed (measured)."""
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    rows = tuple(Row((w.way, w.error or "-", "-" if w.max_abs_diff is None
                      else f"{w.max_abs_diff:.3g}",
                      "identical" if w.sqnr_db is None and not w.error else
                      "-" if w.sqnr_db is None else f"{w.sqnr_db:.1f} dB",
                      pct(w.top1_agreement), pct(w.accuracy), f"{w.nonfinite:,}",
                      f"{w.seconds:.2f} s"),
                     "gpu" if w.way.startswith(WAYS["gpu"]) else "cpu",
                     not w.way.startswith(WAYS["gpu"])) for w in check.ways)
    ref = ("" if check.reference_accuracy is None
           else f"; the fp32 reference's accuracy {check.reference_accuracy:.1%}")
    return Table(f"fp16: outputs against the CPU's fp32 on {check.samples} sample(s) of "
                 f"{check.inputs} (measured{ref})",
                 ("computed as", "no outputs because", "max |diff|", "SQNR", "top-1 agreement",
                  "accuracy", "overflows (inf/nan)", "time"), rows, numeric=(2, 3, 4, 5, 6, 7))
