"""The Ethos-U section of a report: Vela's figures for one model on one profile.

Every figure in it is Vela's own (read from its summary CSV and its operator database) or
read from the compiled file; devicefit adds the partition in the user's operators (which of
*their* ops run on the NPU, named by their output tensors, what Vela made of each, which stay
on the Cortex-M and Vela's reason), the Cortex-M part's latency and op support. It gives
its text lines and its page (:meth:`display`, data the views render) and goes to JSON as
:meth:`to_dict`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from devicefit.simulator.infra.units import format_band, format_bytes, format_time_ms
from devicefit.simulator.report.display import (
    Bar,
    Note,
    Row,
    SectionDisplay,
    Split,
    Table,
    TimeChart,
)

NPU, CPU = "npu", "cpu"
#: The op Vela leaves in a compiled file for the NPU part.
ETHOS_U_OP = "CUSTOM:ethos-u"
#: The text's heading of its top operators by Vela's cycles (a page has them as a chart).
_MOST_CYCLES = "  most cycles  Vela's, by operator of your model:"


@dataclass(frozen=True)
class PartitionOp:
    """One operator of the model Vela was given, and where it runs."""

    subgraph: int
    op_index: int
    op: str
    unit: str  # NPU or CPU
    #: Vela's words for a CPU op ("Unsupported depth-reduction. ..."), else None.
    reason: str | None = None
    #: A CPU op's index in the compiled file (its subgraph is the same).
    compiled_index: int | None = None
    #: Its first output tensor: the layer's name in the user's model ("" if it has none).
    name: str = ""
    #: Vela's operators made from it, in Vela's order (its per-layer report).
    vela_ops: tuple[str, ...] = ()
    #: Vela's cycles and MACs for them; None where Vela's per-layer report does not cover
    #: its subgraph (or there is no Vela figure: a file compiled elsewhere).
    cycles: int | None = None
    macs: int | None = None
    #: The compiled file's ``ethos-u`` op whose command stream runs it.
    ethos_u_op: int | None = None
    #: The user's operator into whose NPU command Vela fused it.
    fused_into: int | None = None
    #: A CPU op's estimated Cortex-M time (devicefit's kernel tables).
    cpu_ms: float | None = None

    @property
    def where(self) -> str:
        """Its index as the other targets show it (``sg:index`` outside the main graph)."""
        return f"{self.subgraph}:{self.op_index}" if self.subgraph else str(self.op_index)

    def what_vela_did(self) -> str:
        """What Vela made of it and where that runs, in a phrase."""
        npu = "" if self.ethos_u_op is None else f"ethos-u op {self.ethos_u_op}"
        if self.op == ETHOS_U_OP:
            return "compiled by Vela before devicefit saw it: the layers inside are not named " \
                   "in the file"
        if self.unit == CPU:
            at = "" if self.compiled_index is None else f", op {self.compiled_index} of the " \
                                                        "compiled file"
            return f"run on the CPU (TFLM{at})" + (f": {self.reason}" if self.reason else "")
        if self.fused_into is not None:
            return f"fused into op {self.fused_into}'s NPU command" + (f" ({npu})" if npu else "")
        if self.vela_ops:
            ops = (" + ".join(self.vela_ops) if len(self.vela_ops) <= 3 else
                   f"{len(self.vela_ops)} operations ({', '.join(self.vela_ops[:3])}, …)")
            return (f"{npu}: " if npu else "") + f"Vela's {ops}"
        if self.cycles is not None:
            return "compiled away by Vela (no NPU command of its own)"
        return f"{npu or 'in an ethos-u op'}; not in Vela's per-layer figures"


@dataclass(frozen=True)
class CompiledOp:
    """One ``ethos-u`` op of a compiled file, as its inputs tell (TFLM's Ethos-U kernel
    reads them in this order: command stream, read-only data, scratch, fast scratch, then
    the feature maps)."""

    subgraph: int
    op_index: int
    #: The NPU's command stream (constant).
    command_stream_bytes: int
    #: Encoded weights and biases, read from flash (constant).
    weights_bytes: int
    #: The NPU's arena in the TFLM arena, and its fast scratch (0: the same tensor).
    scratch_bytes: int
    fast_scratch_bytes: int
    #: Feature maps in and out.
    inputs: int
    outputs: int


@dataclass(frozen=True)
class LayerCycles:
    """One row of Vela's per-layer report (its rewritten operators) and the operator of the
    user's model it came from, as Vela's operator database says."""

    #: Vela's name for the user's operator's type ("Conv2D").
    original_op: str
    vela_op: str
    unit: str
    cycles: int
    macs: int
    #: Vela's name for its output (a decomposed softmax's parts get made-up names).
    name: str
    #: The user's operator it came from; None where Vela's database names none in the file.
    subgraph: int | None = None
    op_index: int | None = None
    #: The compiled file's ``ethos-u`` op whose command stream runs it.
    ethos_u_op: int | None = None


@dataclass(frozen=True)
class VelaFigures:
    """Vela's summary CSV, in bytes, cycles and seconds."""

    accelerator: str
    system_config: str
    memory_mode: str
    core_clock_hz: float
    sram_used_bytes: int
    dram_used_bytes: int
    on_chip_flash_used_bytes: int
    off_chip_flash_used_bytes: int
    original_weights_bytes: int
    encoded_weights_bytes: int
    npu_cycles: int
    total_cycles: int
    inference_time_s: float
    macs: int


@dataclass(frozen=True)
class EthosUSection:
    """``compatibility.ethos-u``: the NPU/CPU split and Vela's figures (None where the file
    alone cannot tell, e.g. cycles of a model someone else compiled)."""

    #: "vela" (devicefit ran Vela), "vela record" (a compiled file with the record
    #: ``devicefit convert`` wrote beside it) or "compiled file" (no Vela figures).
    basis: str
    vela_version: str | None
    compiled_bytes: int
    ethos_u_ops: int
    npu_ops: int
    cpu_ops: int
    partition: tuple[PartitionOp, ...]
    #: The NPU scratch tensors' bytes in the compiled file (its arena and fast scratch).
    scratch_bytes: int
    figures: VelaFigures | None = None
    per_layer: tuple[LayerCycles, ...] = ()
    #: Vela's total cycles at its clock; the Cortex-M part from devicefit's kernel tables.
    npu_ms: float | None = None
    cpu_ms: float | None = None
    cpu_band: tuple[float, float] | None = None
    #: Vela's own "CPU/NPU operators = N" lines (its rewritten ops; see notes).
    vela_counts: tuple[int | None, int | None] = (None, None)
    command: tuple[str, ...] = ()
    ini: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: What each ``ethos-u`` op's inputs tell (sizes of its command stream, weights ...).
    compiled_ops: tuple[CompiledOp, ...] = ()
    #: MACs of the operators left on the Cortex-M (the NPU's are in its command stream).
    cpu_macs: int | None = None

    @property
    def latency_ms(self) -> float | None:
        if self.npu_ms is None or self.cpu_ms is None:
            return None
        return self.npu_ms + self.cpu_ms

    @property
    def latency_band_ms(self) -> tuple[float, float] | None:
        """Vela's NPU time as it is, the Cortex-M part widened by its kernel tables' band;
        None without a Cortex-M part to widen: nothing here validates Vela's cycle model,
        and a band of zero width would claim it exact."""
        if self.latency_ms is None or self.npu_ms is None or not self.cpu_ms:
            return None
        low, high = self.cpu_band or (1.0, 1.0)
        return (self.npu_ms + self.cpu_ms * low, self.npu_ms + self.cpu_ms * high)

    def cpu_partition(self) -> list[PartitionOp]:
        return [p for p in self.partition if p.unit == CPU]

    def latency_split(self) -> dict | None:
        """The estimate as a target's latency split: Vela's NPU time (as it is: no
        validation of Vela's cycle model exists here) plus the Cortex-M part, whose band
        comes from devicefit's kernel tables. None when a part is unknown."""
        total, band = self.latency_ms, self.latency_band_ms
        if total is None or not total:
            return None
        return {"total_ms": total, "npu_ms": self.npu_ms, "cpu_ms": self.cpu_ms,
                "band": None if band is None else [band[0] / total, band[1] / total],
                "band_basis": "Vela's cycles at the NPU clock as they are; the Cortex-M part "
                              "widened by devicefit's kernel-table band" if band is not None
                else "Vela's cycles at the NPU clock as they are; no band: nothing here "
                     "validates Vela's cycle model and no Cortex-M part runs",
                "per_op": []}

    def latency_report(self, profile: Any, split: str) -> Any:
        """``report.latency``: Vela's cycles at the NPU clock plus the Cortex-M part."""
        from devicefit.simulator.report.report import LatencyReport
        from devicefit.simulator.types import LatencyBasis

        common = {"clock_hz": self.figures.core_clock_hz if self.figures else None,
                  "threads": 1, "cpu": profile.device.cpu, "kernels": profile.runtime.kernels,
                  "runtime_version": profile.runtime.version}
        lat = self.latency_split()
        if lat is None:
            why = [n for n in self.notes if "latency" in n or "Cortex-M part" in n]
            if self.npu_ms is None and self.cpu_ms:
                why.append(f"the Cortex-M part alone is {format_time_ms(self.cpu_ms)} "
                           f"(estimated), a lower bound")
            return LatencyReport(no_estimate="; ".join(why) or "no Vela cycles", **common)
        return LatencyReport(
            estimated_device_ms=lat["total_ms"], band_ms=self.latency_band_ms,
            band=None if lat["band"] is None else (lat["band"][0], lat["band"][1]),
            band_basis=lat["band_basis"],
            basis=LatencyBasis.TARGET, split=split, **common)

    def summary_lines(self) -> list[str]:
        """``convert`` shows Vela's compilation whole: the file it wrote and its figures."""
        return self.text_lines()

    def supported_line(self) -> str:
        return (f"every operator can run ({self.npu_ops} on the NPU, {self.cpu_ops} on the "
                f"Cortex-M)")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["latency"] = self.latency_split()
        return out

    def text_lines(self) -> list[str]:
        f = self.figures
        basis = {"vela": f"Vela {self.vela_version} run by devicefit",
                 "vela record": f"Vela {self.vela_version}, record written by devicefit convert",
                 "compiled file": "read from the compiled file; no Vela figures"}[self.basis]
        lines = [f"Ethos-U NPU ({basis})"]
        if f is not None:
            lines.append(f"  config       {f.accelerator}, system {f.system_config}, memory mode "
                         f"{f.memory_mode}, NPU clock {f.core_clock_hz / 1e6:g} MHz")
        lines.append(f"  partition    {self.npu_ops} ops on the NPU ({self.ethos_u_ops} ethos-u "
                     f"op{'s' if self.ethos_u_ops != 1 else ''}), {self.cpu_ops} on the Cortex-M")
        for p in self.cpu_partition()[:12]:
            lines.append(f"    CPU op {p.where} {p.op} {_quoted(p.name)}: "
                         f"{p.reason or 'left on the CPU by Vela'}")
        if len(self.cpu_partition()) > 12:
            lines.append(f"    ... {len(self.cpu_partition()) - 12} more (JSON has all)")
        if f is not None:
            lines.append(f"  SRAM         {format_bytes(f.sram_used_bytes)} (Vela)"
                         + (f"; DRAM {format_bytes(f.dram_used_bytes)}" if f.dram_used_bytes else ""))
            lines.append(f"  flash        {format_bytes(f.off_chip_flash_used_bytes + f.on_chip_flash_used_bytes)}"
                         f" (Vela); compiled file {format_bytes(self.compiled_bytes)}")
            lines.append(f"  weights      {format_bytes(f.encoded_weights_bytes)} encoded (from "
                         f"{format_bytes(f.original_weights_bytes)})")
            lines.append(f"  cycles       {f.total_cycles:,} (NPU {f.npu_cycles:,}); "
                         f"{f.macs:,} MACs")
        else:
            lines.append(f"  scratch      {format_bytes(self.scratch_bytes)} (NPU arena in the file); "
                         f"compiled file {format_bytes(self.compiled_bytes)}")
        for c in self.compiled_ops:
            where = f"{c.subgraph}:{c.op_index}" if c.subgraph else str(c.op_index)
            fast = format_bytes(c.fast_scratch_bytes) if c.fast_scratch_bytes else "the same tensor"
            lines.append(f"  ethos-u op {where}  command stream {format_bytes(c.command_stream_bytes)}, "
                         f"weights {format_bytes(c.weights_bytes)} (flash), scratch "
                         f"{format_bytes(c.scratch_bytes)}, fast scratch {fast}; {c.inputs} input(s), "
                         f"{c.outputs} output(s)")
        if self.cpu_macs is not None:
            cpu_time = (f", {format_time_ms(self.cpu_ms)} (estimated)"
                        if self.cpu_ms is not None else "")
            lines.append(f"  Cortex-M     {self.cpu_ops} op(s), {self.cpu_macs:,} MACs{cpu_time}"
                         f"; the NPU's MACs are inside its command stream")
        if self.npu_ms is None:
            lines.append("  latency      unknown: the NPU's cycles are not in a compiled file "
                         "(Vela's record or the int8 .tflite gives them)")
        if self.latency_ms is not None and self.npu_ms is not None and self.cpu_ms is not None:
            band = self.latency_band_ms
            likely = f" (likely {format_band(band)})" if band and band[0] != band[1] else ""
            lines.append(f"  latency      {format_time_ms(self.latency_ms)}{likely} = NPU "
                         f"{format_time_ms(self.npu_ms)} (Vela) + Cortex-M "
                         f"{format_time_ms(self.cpu_ms)} (estimated)")
        top = sorted((p for p in self.partition if p.cycles), key=lambda p: -(p.cycles or 0))
        if top:
            lines.append(_MOST_CYCLES)
            top = top[:5]
            ops = [f"op {p.where} {p.op}" for p in top]
            at, width = max(map(len, ops)), max(len(f"{p.cycles:,}") for p in top)
            lines += [f"    {o:<{at}}  {p.cycles or 0:>{width},}  {_quoted(p.name)}"
                      for o, p in zip(ops, top, strict=True)]
        lost = sum(r.cycles for r in self.per_layer if r.op_index is None)
        if lost:
            lines.append(f"  note         {lost:,} of Vela's cycles come from operators its "
                         "database ties to none of this file's")
        lines += [f"  note         {n}" for n in self.notes]
        return lines

    def display(self) -> SectionDisplay:
        """The section as a page shows it: its lines, the latency split, a chart of the
        time per operator of the user's model (they run inside the ``ethos-u`` op, so the
        page's per-op chart has nothing to draw) and the partition, one row per operator
        naming its output tensor and what Vela made of it."""
        lines = self.text_lines()
        facts = tuple(line.strip() for line in lines[1:]
                      if not line.startswith("    ") and line != _MOST_CYCLES)
        split: tuple[Split, ...] = ()
        if self.npu_ms is not None and self.cpu_ms is not None:
            split = (Split("ethos-u-split", "Latency split",
                           (("NPU (Vela)", self.npu_ms), ("Cortex-M (estimated)", self.cpu_ms)),
                           "Vela's cycles at the NPU clock, plus devicefit's estimate of the "
                           "operators left on the Cortex-M."),)
        # The output tensor last, as in Vela's per-layer report: a converter's names run
        # long without a place to break.
        rows = tuple(Row((p.where, p.op, p.unit.upper(), p.what_vela_did(),
                          "-" if p.cycles is None else f"{p.cycles:,}", self._time(p), p.name),
                         p.unit, p.unit == CPU) for p in self.partition)
        partition = Table(None, ("op", "type", "runs on", "what Vela did", "Vela's cycles",
                                 "time", "output tensor (your layer)"), rows, numeric=(4, 5))
        return SectionDisplay("ethos-u-partition", lines[0], facts,
                              (*split, self._layers(), partition))

    def _ms(self, p: PartitionOp) -> float | None:
        """An operator's time: Vela's cycles at the NPU clock, or a CPU op's estimate."""
        if p.unit == CPU:
            return p.cpu_ms
        if p.cycles is None or self.figures is None:
            return None
        return 1e3 * p.cycles / self.figures.core_clock_hz

    def _time(self, p: PartitionOp) -> str:
        ms = self._ms(p)
        if ms is None:
            return "-"
        return format_time_ms(ms) + (" (estimated)" if p.unit == CPU else "")

    def _layers(self) -> TimeChart | Note:
        if self.figures is None:
            return Note("No per-operator figures: Vela's per-layer report is not beside a "
                        "file compiled elsewhere (simulate the int8 .tflite, or the file "
                        "devicefit convert wrote with its record).")
        if not any(p.cycles for p in self.partition):
            return Note("No per-operator figures: Vela's per-layer report gives none of the "
                        "NPU's cycles to this model's operators (with several subgraphs it "
                        "covers one).")
        bars = tuple(Bar(p.where, self._ms(p) or 0.0,
                         f"op {p.where} {p.op} {_quoted(p.name)}\n{p.what_vela_did()}"
                         + (f"\n{p.cycles:,} cycles, {p.macs or 0:,} MACs (Vela)"
                            if p.unit == NPU and p.cycles is not None else "")
                         + f"\n{self._time(p)}") for p in self.partition)
        return TimeChart("ethos-u-layers",
                         "Per operator of your model (NPU: Vela's cycles at the NPU clock; "
                         "CPU: estimated)", bars, "time",
                         "operator index in your model (file order); hover a bar for its "
                         "output tensor and what Vela made of it →")


def _quoted(name: str) -> str:
    """A layer's output tensor as Vela's messages quote it; an operator with none says so."""
    return f"'{name}'" if name else "(no output)"
