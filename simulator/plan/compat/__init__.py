"""Operator support: can the target's runtime run every operator of a model?

Each target's op table is one module exposing ``check(model, profile) -> list[UnsupportedOp]``,
bound by the target's record (:mod:`simulator.targets`); :data:`CHECKERS` is keyed by the
profile's ``ops.table``, else its runtime name. On top of the table, a profile's ``ops.allow`` list (builtin names) is enforced for
every target. The verdict fails when any operator is unsupported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import INTEGER_DTYPES, Model, Tensor
from devicefit.simulator.report.report import (
    CompatibilityReport,
    Disagreement,
    ProbeSummary,
)
from devicefit.simulator.target import OpTable, SectionMaker, TargetView
from devicefit.simulator.types import UnsupportedOp

#: Op table name (a target's name) → the target's checker: a view of the target registry.
CHECKERS: Mapping[str, OpTable] = TargetView(lambda t: t.check_ops)

#: Op table name → the target's own section, ``compatibility.<table>`` of the report, for
#: targets whose op support is static analysis (the Edge TPU partition).
SECTIONS: Mapping[str, SectionMaker] = TargetView(lambda t: t.section)


def table_for(profile: Profile) -> str:
    return profile.ops.table or profile.runtime.name


def bad_scale(t: Tensor) -> str | None:
    """Why a quantized tensor's scale makes every runtime refuse the op, else None.

    A requantizing kernel divides by the scale: TFLM stops at prepare
    (``no_integer_overflow_from_quantization``), LiteRT's XNNPACK delegate rejects the tensor
    ("unsupported scale value (0.000000)"). A converter writes such a scale when a layer's
    calibrated range is empty (e.g. all weights of a channel at zero)."""
    q = t.quantization
    if q is None or not q.scale or t.dtype not in INTEGER_DTYPES:
        return None
    bad = [s for s in q.scale if not (math.isfinite(s) and s > 0)]
    if not bad:
        return None
    return (f"tensor {t.index} ({t.name}) has quantization scale {bad[0]:g}: runtimes "
            f"refuse to requantize with it (TFLM and LiteRT stop at prepare)")


def check_ops(model: Model, profile: Profile, *, probe: bool = False) -> CompatibilityReport:
    """Check every operator of ``model`` against ``profile``'s op table, then the ones it
    passes for a quantized tensor whose scale no runtime can use; with ``probe`` the
    runtime itself is asked about each operator signature and wins where it answers
    otherwise (:mod:`simulator.run.probe`); last, the profile's allow-list. One reason
    per op, the first that applies."""
    table = table_for(profile)
    checker = CHECKERS.get(table)
    found = list(checker(model, profile)) if checker is not None else []
    flagged = {(u.subgraph, u.op_index) for u in found}
    for sg in model.subgraphs:
        for op in sg.operators:
            why = next((w for i in (*op.inputs, *op.outputs) if i >= 0
                        if (w := bad_scale(sg.tensors[i]))), None)
            if why and (sg.index, op.index) not in flagged:
                found.append(UnsupportedOp(op.index, op.op_name, why, sg.index))
    disagreements: tuple[Disagreement, ...] = ()
    summary: ProbeSummary | None = None
    if probe:
        from devicefit.simulator.run.probe import probe_runtime, reconcile

        if (runtime := probe_runtime(table, profile)) is not None:
            found, disagreements, summary = reconcile(model, table, runtime, found)
    if profile.ops.allow is not None:
        allowed = set(profile.ops.allow)
        flagged = {(u.subgraph, u.op_index) for u in found}
        found += [UnsupportedOp(op.index, op.op_name,
                                f"not in profile '{profile.name}' ops.allow", sg.index)
                  for sg in model.subgraphs for op in sg.operators
                  if op.op_name not in allowed and (sg.index, op.index) not in flagged]
    found.sort(key=lambda u: (u.subgraph, u.op_index))
    return CompatibilityReport(table=table, supported=not found, unsupported_ops=tuple(found),
                               disagreements=disagreements, probe=summary)


def static_compatibility(model: Model, profile: Profile, *, probe: bool = False
                         ) -> CompatibilityReport:
    """``report.compatibility`` on the static path: op support against the profile's table
    (asked of the runtime too with ``probe``) and allow-list, plus the target's own section
    where it has one (the Edge TPU partition). ``check`` gates on it without running the
    model."""
    table = table_for(profile)
    found = check_ops(model, profile, probe=probe)
    if table not in SECTIONS:
        return found
    return dataclasses.replace(found, section=SECTIONS[table](model, profile))
