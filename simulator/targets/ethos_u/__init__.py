"""The Arm Ethos-U target: models compiled by the real Vela compiler, judged as they ship.

On an Ethos-U profile (``runtime.name: ethos-u``, an ``ethos_u:`` section, see
:mod:`.config`) a plain int8 ``.tflite`` is compiled by Vela in a child process
(:mod:`.vela`) and the report describes the compiled file (:mod:`.analysis`): its TFLM arena
(the ``ethos-u`` op's scratch tensors are tensors of it, placed by Vela's offline plan), its
size as the flash figure, Vela's SRAM/flash/encoded-weight figures and cycles, the latency at
the profile's NPU clock plus devicefit's estimate for the operators left on the Cortex-M,
the user's operators split into NPU and CPU with Vela's reason for each CPU one, and op
support of the CPU part against TFLM's table (:mod:`.section`). A file Vela already compiled
is taken as it is. ``convert`` writes ``<out>_vela.tflite`` beside the int8 file
(:func:`after_convert`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.compat import UnsupportedOp
from simulator.model import Model
from simulator.planners.base import MemoryPlan
from simulator.profiles import Profile
from simulator.targets.ethos_u.analysis import (
    ETHOS_U_OP,
    FLOATS,
    compile_file,
    compiled_model,
    is_compiled,
    section_for,
)
from simulator.targets.ethos_u.config import PROFILE_KEYS, SECTION
from simulator.targets.ethos_u.section import CPU, EthosUSection

NAME = "ethos-u"
TITLE = "Arm Ethos-U NPU (Vela) + TFLite Micro"


def prepare(model: Model, profile: Profile) -> Model:
    """The model the device runs: Vela's compilation of ``model`` (or ``model`` itself when
    Vela compiled it already)."""
    return compiled_model(model, profile)


def plan(model: Model, profile: Profile, order: Any = None) -> MemoryPlan:
    """TFLM's arena of the compiled model: the NPU's scratch tensors (Vela's offline plan
    places them) plus whatever the Cortex-M part needs."""
    from simulator.planners.tflm import plan_tflm

    return plan_tflm(model, profile, order)


def check_ops(model: Model, profile: Profile) -> list[UnsupportedOp]:
    """Op support of what stays on the Cortex-M: TFLM's table for the CPU operators (the
    ``ethos-u`` ops run on the NPU), and every float operator, which the NPU cannot take."""
    from simulator.compat import tflm

    section = section_for(model, profile)
    reasons = {(p.subgraph, p.op_index): p.reason for p in section.partition if p.unit == CPU}
    found = [u for u in tflm.check(model, profile) if u.op != ETHOS_U_OP]
    flagged = {(u.subgraph, u.op_index) for u in found}
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.op_name == ETHOS_U_OP or (sg.index, op.index) in flagged:
                continue
            floats = [sg.tensors[i].dtype for i in (*op.inputs, *op.outputs)
                      if i >= 0 and not sg.tensors[i].has_data and sg.tensors[i].dtype in FLOATS]
            if floats:
                vela = reasons.get((sg.index, op.index)) if is_compiled(model) else None
                found.append(UnsupportedOp(
                    op.index, op.op_name,
                    f"{floats[0]} operator: the Ethos-U NPU runs int8/int16 only, so it stays "
                    f"on the Cortex-M" + (f" (Vela: {vela})" if vela else "")
                    + f"; quantize the model (devicefit convert --profile {profile.name})",
                    sg.index))
    return found


def section(model: Model, profile: Profile) -> EthosUSection:
    return section_for(model, profile)


def latency(model: Model, profile: Profile) -> dict[str, Any]:
    """``report.latency``: Vela's cycles at its clock plus the Cortex-M part's estimate."""
    s = section_for(model, profile)
    cpu = profile.device
    base: dict[str, Any] = {"cpu": cpu.cpu, "kernels": profile.runtime.kernels,
                            "runtime_version": profile.runtime.version,
                            "clock_hz": s.figures.core_clock_hz if s.figures else None,
                            "threads": 1, "per_op": [], "sources": [],
                            "host_ms": None, "host_per_op_ms": None,
                            "split": f"compatibility.{NAME}"}
    total, band = s.latency_ms, s.latency_band_ms
    if total is None or band is None:
        why = next((n for n in s.notes if "latency" in n or "Cortex-M part" in n),
                   "no Vela cycles for this model")
        return {**base, "estimated_device_ms": None, "band_ms": None, "no_estimate": why}
    return {**base, "estimated_device_ms": total, "band_ms": list(band),
            "band": [band[0] / total, band[1] / total] if total else [1.0, 1.0],
            "band_basis": "Vela's cycle estimate as it is; the Cortex-M part's band from "
                          "devicefit's kernel tables",
            "basis": "vela cycles + cortex-m estimate", "no_estimate": None,
            "npu_ms": s.npu_ms, "cpu_ms": s.cpu_ms}


def after_convert(int8_path: Path, profile: Profile) -> EthosUSection:
    """``convert``'s Vela step: ``<out>_vela.tflite`` beside the int8 file, with the record
    of Vela's figures (``<out>_vela.vela.json``) that a later ``simulate`` of it reads."""
    out = int8_path.with_name(f"{int8_path.stem}_vela.tflite")
    _, found = compile_file(int8_path, out, profile)
    return found


__all__ = ["NAME", "PROFILE_KEYS", "SECTION", "TITLE", "after_convert", "check_ops", "latency",
           "plan", "prepare", "section"]
