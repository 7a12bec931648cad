"""From a model and an Ethos-U profile to the compiled model and its :class:`EthosUSection`.

A plain int8 ``.tflite`` is compiled by Vela (:mod:`.vela`); the report then describes the
compiled model — the file that ships — so the arena is TFLM's arena of that file (the
``ethos-u`` op's scratch tensors are ordinary tensors in it, placed by Vela's offline plan)
and the flash figure is its size. A file Vela already compiled is taken as it is; its Vela
figures come from the record ``devicefit convert`` writes beside it
(``<name>_vela.vela.json``, checked against the file's sha256), else only what the file
itself tells (partition, scratch size) is reported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import CompileRefusal, CompilerRefused, InputError, ProfileError
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Subgraph
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.report.report import build
from devicefit.simulator.targets.ethos_u.config import VelaConfig, vela_config
from devicefit.simulator.targets.ethos_u.section import (
    CPU,
    ETHOS_U_OP,
    NPU,
    CompiledOp,
    EthosUSection,
    LayerCycles,
    PartitionOp,
    VelaFigures,
)
from devicefit.simulator.targets.ethos_u.vela import (
    CpuReason,
    VelaLayer,
    VelaRun,
    VelaSource,
    run_vela,
)

log = logging.getLogger(__name__)

RECORD_SUFFIX = ".vela.json"
#: 2: Vela's operator database in place of its per-layer CSV (the user's operator of each
#: of Vela's); a record of format 1 is ignored with a warning (convert again).
RECORD_FORMAT = "devicefit.vela/2"
FLOATS = ("float32", "float16")
#: Float/int conversions at a model's float inputs and outputs: cheap, and TFLM runs them on
#: the Cortex-M; a float model is one whose *computing* operators are float.
CONVERSIONS = ("QUANTIZE", "DEQUANTIZE")

#: (path, sha256, Vela configuration) of a compiled model → its section: simulate's stages (plan, op check,
#: section, latency) all ask about the same compilation, which runs Vela once.
_SECTIONS: dict[tuple[str, str, VelaConfig], EthosUSection] = {}
#: (source sha256, Vela configuration) → Vela's run: convert's verdict (a simulate of the
#: int8 file) and its Vela step share one compilation.
_RUNS: dict[tuple[str, VelaConfig], VelaRun] = {}


#: How many compilations the caches keep (fit and check go through many models).
_KEEP = 8


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    cache[key] = value
    while len(cache) > _KEEP:
        del cache[next(iter(cache))]  # the oldest: dicts keep insertion order
    return value


def _vela(source: Model, data: bytes, config: VelaConfig, profile: Profile) -> VelaRun:
    if hashlib.sha256(data).hexdigest() != source.sha256:
        raise InputError(f"{source.path}: the file changed while devicefit read it")
    key = (source.sha256, config)
    found = _RUNS.get(key)
    if found is not None:
        return found
    try:
        run = run_vela(data, config, name=Path(source.path).stem or "model")
    except CompilerRefused as exc:
        raise CompilerRefused(located(exc.refusal, source, profile)) from exc
    return _remember(_RUNS, key, run)


def located(refusal: CompileRefusal, source: Model, profile: Profile) -> CompileRefusal:
    """Vela's refusal with its operator found in the model (the one operator of that type
    writing the tensor Vela names) and what to do about it."""
    found = [(sg.index, op.index) for sg in source.subgraphs for op in sg.operators
             if op.op_name == refusal.op and refusal.tensor in _outputs(sg, op.outputs)]
    subgraph, index = found[0] if len(found) == 1 else (0, None)
    dtype = float_compute(source, subgraph, index) if index is not None else None
    advice = ["Vela names only the first operator it refuses"] if refusal.op else []
    if dtype is not None:
        advice.append(f"the NPU takes int8/int16 only: quantize the model (devicefit convert "
                      f"--profile {profile.name})")
    return dataclasses.replace(refusal, op_index=index, subgraph=subgraph,
                               advice="; ".join(advice) or None)


def config_for(profile: Profile) -> VelaConfig:
    return vela_config(profile.target_settings or {}, profile.path, profile.name)


def is_compiled(model: Model) -> bool:
    return any(op.op_name == ETHOS_U_OP for sg in model.subgraphs for op in sg.operators)


def compiled_model(model: Model, profile: Profile) -> Model:
    """The model the Ethos-U device runs: ``model`` if Vela compiled it already, else Vela's
    compilation of it (Vela runs here, once per model and profile)."""
    if is_compiled(model):
        if _key(model, profile) not in _SECTIONS:
            _remember(_SECTIONS, _key(model, profile), _precompiled_section(model))
        return model
    run = _vela(model, Path(model.path).read_bytes(), config_for(profile), profile)
    compiled = parse_model(run.compiled, model.path)
    if _key(compiled, profile) not in _SECTIONS:
        _remember(_SECTIONS, _key(compiled, profile),
                  section_from_run(model, compiled, run, "vela", profile))
    return compiled


def section_for(model: Model, profile: Profile) -> EthosUSection:
    """The section of a model :func:`compiled_model` returned (compiled by Vela)."""
    found = _SECTIONS.get(_key(model, profile))
    if found is None:
        found = _precompiled_section(model) if is_compiled(model) else None
    if found is None:
        raise ValueError("section_for() needs the model compiled_model() returned")
    return _with_cpu_latency(found, model, profile)


def _key(model: Model, profile: Profile) -> tuple[str, str, VelaConfig]:
    """A section belongs to a file and a configuration: two configurations can compile a
    model to the same bytes with other cycles (the system's memory timings)."""
    return (model.path, model.sha256, config_for(profile))


# --------------------------------------------------------------------------- partition
def partition(source: Model, compiled: Model, run: VelaRun) -> list[PartitionOp]:
    """Where each of the user's operators runs and what Vela made of it. An operator still
    in the compiled file (same subgraph, type and outputs) stays on the CPU; every other one
    went into an ``ethos-u`` op, as the Vela operators its database ties to it (none: Vela
    compiled it away, e.g. a reshape, which costs the NPU nothing)."""
    kept = {(sg.index, op.op_name, _outputs(sg, op.outputs)): op.index
            for sg in compiled.subgraphs for op in sg.operators if op.op_name != ETHOS_U_OP}
    said: dict[str, str] = {}
    for r in run.cpu_reasons:
        said.setdefault(r.ofm, r.reason)
    rows = layers([len(sg.operators) for sg in source.subgraphs], compiled, run)
    mine: dict[tuple[int, int], list[int]] = {}
    for k, row in enumerate(rows):
        if row.op_index is not None and row.subgraph is not None:
            mine.setdefault((row.subgraph, row.op_index), []).append(k)
    # Vela's per-layer report covers one subgraph of a model with several.
    covered = {row.subgraph for row in rows}
    out = []
    for sg in source.subgraphs:
        for op in sg.operators:
            outputs = _outputs(sg, op.outputs)
            at = kept.get((sg.index, op.op_name, outputs))
            ks = mine.get((sg.index, op.index), [])
            own = [rows[k] for k in ks]
            # The rows whose NPU command carries one of its own (Vela's group).
            heads = [rows[lead] for k in ks if (lead := run.layers[k].fused_with) is not None]
            into = min((h.op_index for h in heads if h.subgraph == sg.index
                        and h.op_index is not None and h.op_index != op.index), default=None)
            stream = next((r.ethos_u_op for r in own if r.ethos_u_op is not None), None)
            found = PartitionOp(
                sg.index, op.index, op.op_name, NPU, name=outputs[0] if outputs else "",
                vela_ops=tuple(r.vela_op for r in own if r.unit == NPU),
                cycles=sum(r.cycles for r in own) if sg.index in covered else None,
                macs=sum(r.macs for r in own) if sg.index in covered else None,
                ethos_u_op=stream, fused_into=into)
            if at is not None:
                why = next((said[n] for n in outputs if n in said), None)
                # Vela counts no cycles for what it leaves to the CPU (its Passthrough).
                found = dataclasses.replace(found, unit=CPU, reason=why, compiled_index=at,
                                            cycles=None, macs=None)
            out.append(found)
    return out


def layers(counts: list[int], compiled: Model, run: VelaRun) -> tuple[LayerCycles, ...]:
    """Vela's per-layer rows, each with the user's operator it came from (Vela's ``source``
    table, trusted only where it lists as many operators as the user's file has in each
    subgraph, ``counts``)
    and the compiled file's ``ethos-u`` op running it (Vela's command streams are the main
    subgraph's ``ethos-u`` ops in file order, trusted where there are as many)."""
    listed = [sum(1 for s in run.sources if s.subgraph == k) for k in range(len(counts))]
    ops = {s.id: s for s in run.sources} if listed == counts and all(
        s.subgraph < len(counts) and s.index < counts[s.subgraph] for s in run.sources) else {}
    npu = [op.index for op in compiled.main.operators if op.op_name == ETHOS_U_OP]
    if len({r.stream for r in run.layers if r.stream is not None}) != len(npu):
        npu = []
    found = []
    for r in run.layers:
        src = ops.get(r.source)
        found.append(LayerCycles(
            src.op if src else "", r.vela_op, r.unit, r.cycles, r.macs, r.name,
            src.subgraph if src else None, src.index if src else None,
            npu[r.stream - 1] if r.stream is not None and 0 < r.stream <= len(npu) else None))
    return tuple(found)


def _outputs(sg: Subgraph, refs: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(sg.tensors[i].name for i in refs if i >= 0)


def _first_output(sg: Subgraph, refs: tuple[int, ...]) -> str:
    return next(iter(_outputs(sg, refs)), "")


def compiled_ops(compiled: Model) -> tuple[CompiledOp, ...]:
    """Each ``ethos-u`` op's command stream, read-only data and scratch sizes, from its
    inputs (a malformed op, with fewer inputs, reports what it has)."""
    found = []
    for sg in compiled.subgraphs:
        for op in sg.operators:
            if op.op_name != ETHOS_U_OP:
                continue

            def size(k: int, refs: tuple[int, ...] = op.inputs, sg: Subgraph = sg) -> int:
                return sg.tensors[refs[k]].nbytes if k < len(refs) and refs[k] >= 0 else 0

            same = len(op.inputs) > 3 and op.inputs[3] == op.inputs[2]
            found.append(CompiledOp(
                sg.index, op.index, command_stream_bytes=size(0), weights_bytes=size(1),
                scratch_bytes=size(2), fast_scratch_bytes=0 if same else size(3),
                inputs=sum(1 for i in op.inputs[4:] if i >= 0),
                outputs=sum(1 for i in op.outputs if i >= 0)))
    return tuple(found)


def scratch_bytes(compiled: Model) -> int:
    """The NPU's scratch tensors (inputs 2 and 3 of each ``ethos-u`` op: its arena and fast
    scratch; one tensor when they coincide), counted once each."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for sg in compiled.subgraphs:
        for op in sg.operators:
            if op.op_name != ETHOS_U_OP:
                continue
            for i in op.inputs[2:4]:
                if i >= 0 and (sg.index, i) not in seen and not sg.tensors[i].has_data:
                    seen.add((sg.index, i))
                    total += sg.tensors[i].nbytes
    return total


# --------------------------------------------------------------------------- sections
def _kib(summary: dict[str, str], key: str) -> int:
    return round(float(summary[key]) * 1024)


def figures(summary: dict[str, str]) -> VelaFigures:
    """Vela's summary row in bytes and cycles (its memory figures are KiB with decimals)."""
    return VelaFigures(
        accelerator=summary["accelerator_configuration"], system_config=summary["system_config"],
        memory_mode=summary["memory_mode"], core_clock_hz=float(summary["core_clock"]),
        sram_used_bytes=_kib(summary, "sram_memory_used"),
        dram_used_bytes=_kib(summary, "dram_memory_used"),
        on_chip_flash_used_bytes=_kib(summary, "on_chip_flash_memory_used"),
        off_chip_flash_used_bytes=_kib(summary, "off_chip_flash_memory_used"),
        original_weights_bytes=int(summary["total_original_weights"]),
        encoded_weights_bytes=int(summary["total_npu_encoded_weights"]),
        npu_cycles=int(summary["cycles_npu"]), total_cycles=int(summary["cycles_total"]),
        inference_time_s=float(summary["inference_time"]), macs=int(summary["nn_macs"]))


def section_from_run(source: Model, compiled: Model, run: VelaRun, basis: str,
                     profile: Profile | None = None,
                     parts: list[PartitionOp] | None = None) -> EthosUSection:
    parts = parts if parts is not None else partition(source, compiled, run)
    fig = figures(run.summary)
    notes = []
    if len(compiled.subgraphs) > 1 and run.vela_cpu_ops is not None:
        notes.append("Vela's own operator counts and per-layer report describe one subgraph of "
                     "this multi-subgraph model; the partition above is read from the "
                     "compiled file")
    if fig.sram_used_bytes and fig.sram_used_bytes != scratch_bytes(compiled) \
            and fig.memory_mode.startswith("Shared"):
        notes.append(f"Vela's SRAM figure ({fig.sram_used_bytes:,} B) differs from the NPU "
                     f"scratch tensors in the file ({scratch_bytes(compiled):,} B)")
    if any(p.unit == CPU and p.compiled_index is not None
           and float_compute(compiled, p.subgraph, p.compiled_index) for p in parts):
        notes.append("float operators stay on the Cortex-M: the Ethos-U runs int8/int16 "
                     "only; quantize the model (devicefit convert --profile "
                     f"{profile.name if profile else '<ethos-u profile>'})")
    return EthosUSection(
        basis=basis, vela_version=run.version, compiled_bytes=len(run.compiled) if run.compiled
        else compiled.size_bytes, ethos_u_ops=_count(compiled, ETHOS_U_OP),
        npu_ops=sum(p.unit == NPU for p in parts), cpu_ops=sum(p.unit == CPU for p in parts),
        partition=tuple(parts), scratch_bytes=scratch_bytes(compiled), figures=fig,
        per_layer=layers(_op_counts(parts), compiled, run),
        npu_ms=fig.total_cycles / fig.core_clock_hz * 1e3,
        vela_counts=(run.vela_cpu_ops, run.vela_npu_ops), command=run.command, ini=run.ini,
        notes=tuple(notes), compiled_ops=compiled_ops(compiled))


def _op_counts(parts: list[PartitionOp]) -> list[int]:
    """Operators per subgraph of the user's file, from its partition (a record has no other
    trace of that file)."""
    counts = [0] * (max((p.subgraph for p in parts), default=-1) + 1)
    for p in parts:
        counts[p.subgraph] += 1
    return counts


def _precompiled_section(model: Model) -> EthosUSection:
    record = read_record(model)
    if record is not None:
        run, parts = record
        return section_from_run(model, model, run, "vela record", parts=parts)
    parts = [PartitionOp(sg.index, op.index, op.op_name, NPU, name=_first_output(sg, op.outputs))
             if op.op_name == ETHOS_U_OP else
             PartitionOp(sg.index, op.index, op.op_name, CPU, "compiled before devicefit saw "
                         "it: Vela's reason is not in the file", op.index,
                         name=_first_output(sg, op.outputs))
             for sg in model.subgraphs for op in sg.operators]
    return EthosUSection(
        basis="compiled file", vela_version=None, compiled_bytes=model.size_bytes,
        ethos_u_ops=_count(model, ETHOS_U_OP), npu_ops=sum(p.unit == NPU for p in parts),
        cpu_ops=sum(p.unit == CPU for p in parts), partition=tuple(parts),
        scratch_bytes=scratch_bytes(model), compiled_ops=compiled_ops(model),
        notes=("no Vela record beside this file (devicefit convert writes one): cycles and "
               "latency are unknown; simulate the int8 .tflite to let devicefit run Vela",))


def _count(model: Model, op_name: str) -> int:
    return sum(op.op_name == op_name for sg in model.subgraphs for op in sg.operators)


def float_compute(model: Model, subgraph: int, op_index: int) -> str | None:
    """The float dtype an operator computes in (conversions aside), else None."""
    sg = model.subgraphs[subgraph]
    op = sg.operators[op_index]
    if op.op_name in CONVERSIONS:
        return None
    return next((sg.tensors[i].dtype for i in (*op.inputs, *op.outputs)
                 if i >= 0 and not sg.tensors[i].has_data and sg.tensors[i].dtype in FLOATS),
                None)


# --------------------------------------------------------------------------- latency
def _with_cpu_latency(section: EthosUSection, compiled: Model, profile: Profile) -> EthosUSection:
    """Add the Cortex-M part: devicefit's kernel tables for the ops Vela left to TFLM."""
    from devicefit.simulator.estimate.compute import op_work
    from devicefit.simulator.estimate.latency import estimate_latency
    from devicefit.simulator.report.report import OpCompute

    work = [OpCompute(w.op_index, w.op, w.macs, w.bytes_moved)
            for w in op_work(compiled) if w.op != ETHOS_U_OP]
    section = dataclasses.replace(section, cpu_macs=sum(w.macs for w in work))
    if not work:
        return dataclasses.replace(section, cpu_ms=0.0)
    host = dataclasses.replace(profile, runtime=dataclasses.replace(profile.runtime, name="tflm"))
    try:
        est = estimate_latency(compiled, work, host)
    except ProfileError as exc:
        return dataclasses.replace(section, notes=(*section.notes, f"Cortex-M part: {exc}"))
    if est.total_ms is None:
        return dataclasses.replace(section, notes=(*section.notes,
                                                   f"Cortex-M part: {est.no_estimate}"))
    ms = {o.op_index: o.ms for o in est.per_op}
    main = compiled.main.index
    parts = tuple(dataclasses.replace(p, cpu_ms=ms.get(p.compiled_index))
                  if p.unit == CPU and p.subgraph == main and p.compiled_index is not None
                  else p for p in section.partition)
    return dataclasses.replace(section, cpu_ms=est.total_ms, cpu_band=est.band, partition=parts)


# --------------------------------------------------------------------------- the record
def record_path(compiled_path: Path) -> Path:
    return compiled_path.with_name(compiled_path.stem + RECORD_SUFFIX)


def write_record(compiled_path: Path, compiled: Model, run: VelaRun,
                 parts: list[PartitionOp]) -> Path:
    """Keep Vela's figures beside the compiled file, so simulating that file later reports
    them (Vela cannot re-read its own output)."""
    data: dict[str, Any] = {
        "format": RECORD_FORMAT, "compiled_sha256": compiled.sha256,
        "run": {k: v for k, v in dataclasses.asdict(run).items() if k != "compiled"},
        "partition": [dataclasses.asdict(p) for p in parts]}
    path = record_path(compiled_path)
    write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())
    return path


def read_record(model: Model) -> tuple[VelaRun, list[PartitionOp]] | None:
    path = record_path(Path(model.path))
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != RECORD_FORMAT or data.get("compiled_sha256") != model.sha256:
            log.warning("%s: not the Vela record of %s (another file, or an older "
                        "devicefit's format: convert the model again); ignored",
                        path, model.path)
            return None
        r = data["run"]
        run = VelaRun(compiled=b"", summary=r["summary"],
                      layers=tuple(VelaLayer(**x) for x in r["layers"]),
                      sources=tuple(VelaSource(**x) for x in r["sources"]),
                      cpu_reasons=tuple(CpuReason(**c) for c in r["cpu_reasons"]),
                      vela_cpu_ops=r["vela_cpu_ops"], vela_npu_ops=r["vela_npu_ops"],
                      version=r["version"], ini=r["ini"], command=tuple(r["command"]))
        return run, [build(PartitionOp, p) for p in data["partition"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s: unreadable Vela record (%s); ignored", path, exc)
        return None


def compile_file(src: Path, dst: Path, profile: Profile) -> tuple[Model, EthosUSection]:
    """Vela's compilation of ``src`` written atomically to ``dst`` with its record beside it
    (``convert``'s Vela step)."""
    source = read_model(src)
    run = _vela(source, src.read_bytes(), config_for(profile), profile)
    compiled = parse_model(run.compiled, str(dst))
    parts = partition(source, compiled, run)
    write_atomic(dst, run.compiled)
    write_record(dst, compiled, run, parts)
    section = section_from_run(source, compiled, run, "vela", profile, parts)
    return compiled, _with_cpu_latency(section, compiled, profile)
