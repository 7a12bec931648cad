"""The Ethos-U target's bindings: the functions its :data:`TARGET` record names.

Imported on first use only (the registry is read by the profile schema, which this module's
imports need).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.targets.ethos_u.analysis import (
    ETHOS_U_OP,
    compile_file,
    compiled_model,
    config_for,
    float_compute,
    section_for,
)
from devicefit.simulator.targets.ethos_u.section import CPU, EthosUSection
from devicefit.simulator.types import MemoryPlan, UnsupportedOp

NAME = "ethos-u"


def prepare(model: Model, profile: Profile) -> Model:
    """The model the device runs: Vela's compilation of ``model`` (or ``model`` itself when
    Vela compiled it already)."""
    return compiled_model(model, profile)


def plan(model: Model, profile: Profile, order: Sequence[int] | None = None) -> MemoryPlan:
    """TFLM's arena of the compiled model: the NPU's scratch tensors (Vela's offline plan
    places them) plus whatever the Cortex-M part needs."""
    from devicefit.simulator.targets.tflm.planner import plan_tflm

    return plan_tflm(model, profile, order)


def check_ops(model: Model, profile: Profile) -> list[UnsupportedOp]:
    """Op support of what stays on the Cortex-M: TFLM's table for the CPU operators (the
    ``ethos-u`` ops run on the NPU), and every float operator, which the NPU cannot take."""
    from devicefit.simulator.targets.tflm import ops as tflm

    section = section_for(model, profile)
    reasons = {(p.subgraph, p.compiled_index): p.reason for p in section.partition
               if p.unit == CPU and p.reason}
    found = [u for u in tflm.check(model, profile) if u.op != ETHOS_U_OP]
    wrong = _other_accelerator(section, profile)
    if wrong is not None:
        found += [UnsupportedOp(op.index, op.op_name, wrong, sg.index)
                  for sg in model.subgraphs for op in sg.operators if op.op_name == ETHOS_U_OP]
    flagged = {(u.subgraph, u.op_index) for u in found}
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.op_name == ETHOS_U_OP or (sg.index, op.index) in flagged:
                continue
            dtype = float_compute(model, sg.index, op.index)
            if dtype is not None:
                vela = reasons.get((sg.index, op.index))
                found.append(UnsupportedOp(
                    op.index, op.op_name,
                    f"{dtype} operator: the Ethos-U NPU runs int8/int16 only, so it stays "
                    f"on the Cortex-M" + (f" (Vela: {vela})" if vela else "")
                    + f"; quantize the model (devicefit convert --profile {profile.name})",
                    sg.index))
    return found


def _other_accelerator(section: EthosUSection, profile: Profile) -> str | None:
    """Why the ``ethos-u`` ops cannot run on this profile's NPU, if Vela compiled them for
    another configuration (known from the record of a compiled file)."""
    if section.figures is None:
        return None
    made_for = section.figures.accelerator.lower().replace("_", "-")
    wanted = config_for(profile).accelerator
    if made_for == wanted:
        return None
    return (f"compiled by Vela for {made_for}, but this profile's NPU is {wanted}: the "
            f"command stream runs only on the configuration it was compiled for; compile the "
            f"int8 model for this profile")


def section(model: Model, profile: Profile) -> EthosUSection:
    """``compatibility.ethos-u`` (JSON: with its latency split under ``latency``)."""
    return section_for(model, profile)


def after_convert(int8_path: Path, profile: Profile) -> EthosUSection:
    """``convert``'s Vela step: ``<out>_vela.tflite`` beside the int8 file, with the record
    of Vela's figures (``<out>_vela.vela.json``) that a later ``simulate`` of it reads."""
    out = int8_path.with_name(f"{int8_path.stem}_vela.tflite")
    _, found = compile_file(int8_path, out, profile)
    return found
