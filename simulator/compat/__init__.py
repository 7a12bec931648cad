"""Operator support: can the target's runtime run every operator of a model?

Each target's op table is one module exposing ``check(model, profile) -> list[UnsupportedOp]``,
bound by the target's record (:mod:`simulator.targets`); :data:`CHECKERS` is keyed by the
profile's ``ops.table``, else its runtime name. On top of the table, a profile's ``ops.allow`` list (builtin names) is enforced for
every target. The verdict fails when any operator is unsupported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from simulator.model import Model
from simulator.profiles import Profile
from simulator.targets import TARGETS, TargetView


@dataclass(frozen=True)
class UnsupportedOp:
    op_index: int
    op: str
    reason: str
    subgraph: int = 0


@dataclass
class Compatibility:
    table: str
    supported: bool
    unsupported_ops: list[UnsupportedOp] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """One line naming each unsupported op, where it is and why, for messages."""
        by_op: dict[tuple[str, str], list[str]] = {}
        for u in self.unsupported_ops:
            where = f"{u.subgraph}:{u.op_index}" if u.subgraph else str(u.op_index)
            by_op.setdefault((u.op, u.reason), []).append(where)
        return "; ".join(f"{op} (op{'s' if len(at) > 1 else ''} {', '.join(at)}: {reason})"
                         for (op, reason), at in by_op.items())


Checker = Callable[[Model, Profile], list[UnsupportedOp]]

#: Custom op codes an accelerator's compiler leaves in a model: the compiled part of the
#: graph is one such op, which only that accelerator's driver can run.
ACCELERATOR_OPS: dict[str, str] = {
    "ethos-u": "Arm Ethos-U NPU (compiled by Vela)",
    "edgetpu-custom-op": "Coral Edge TPU (compiled by edgetpu_compiler)",
}


def accelerator_op(code: str) -> str | None:
    """The compatibility finding for a custom op compiled for an accelerator, else None."""
    target = ACCELERATOR_OPS.get(code)
    if target is None:
        return None
    return (f"compiled for the {target}: this op is the accelerator's part of the graph and "
            f"runs only where its driver is; give the uncompiled .tflite or a profile for "
            f"that accelerator")


#: Op table name (a target's name) → the target's checker: a view of the target registry.
CHECKERS: Mapping[str, Checker] = TargetView(lambda t: t.check_ops)

#: Op table name → the target's own section, ``compatibility.<table>`` of the report, for
#: targets whose op support is static analysis (the Edge TPU partition).
SECTIONS: Mapping[str, Callable[[Model, Profile], dict]] = TargetView(lambda t: t.section)


def section_type(table: str) -> type | None:
    """The class of ``compatibility.<table>`` (to read a report back from JSON), None for a
    table without a section."""
    target = TARGETS.get(table)
    return target.section_type() if target is not None and target.section_type else None


def table_for(profile: Profile) -> str:
    return profile.ops.table or profile.runtime.name


def check_ops(model: Model, profile: Profile) -> Compatibility:
    """Check every operator of ``model`` against ``profile``'s op table and allow-list."""
    table = table_for(profile)
    checker = CHECKERS.get(table)
    found = list(checker(model, profile)) if checker is not None else []
    if profile.ops.allow is not None:
        allowed = set(profile.ops.allow)
        flagged = {(u.subgraph, u.op_index) for u in found}
        for sg in model.subgraphs:
            for op in sg.operators:
                if op.op_name not in allowed and (sg.index, op.index) not in flagged:
                    found.append(UnsupportedOp(op.index, op.op_name,
                                               f"not in profile '{profile.name}' ops.allow",
                                               sg.index))
    found.sort(key=lambda u: (u.subgraph, u.op_index))
    return Compatibility(table=table, supported=not found, unsupported_ops=found)


def static_compatibility(model: Model, profile: Profile) -> dict:
    """``report.compatibility`` on the static path: op support against the profile's table
    and allow-list, plus the target's own section where it has one (the Edge TPU partition).
    All of it is read from the file, so ``check`` gates on it without running anything."""
    table = table_for(profile)
    section = {table: SECTIONS[table](model, profile)} if table in SECTIONS else {}
    return {**check_ops(model, profile).to_dict(), **section}


def static_latency(compatibility: dict, profile: Profile) -> dict | None:
    """A section's own device-latency estimate, for ``report.latency`` (the Edge TPU splits
    an inference into TPU compute, link transfers and CPU fallback); None if it has none."""
    section = compatibility.get(table_for(profile))
    if section is None:
        return None
    split = section.get("latency")
    if not split:
        why = [n for n in section.get("notes", ()) if "latency" in n]
        return {"estimated_device_ms": None, "band_ms": None, "no_estimate": "; ".join(why)
                or "no latency split", "per_op": [], "sources": [], "host_ms": None,
                "host_per_op_ms": None, "clock_hz": profile.device.clock_hz,
                "threads": profile.runtime.threads}
    band = list(split["band"])
    return {"estimated_device_ms": split["total_ms"],
            "band_ms": [split["total_ms"] * band[0], split["total_ms"] * band[1]],
            "band": band, "band_basis": split["band_basis"], "basis": "edgetpu split",
            "no_estimate": None, "cpu": profile.device.cpu, "kernels": profile.runtime.kernels,
            "runtime_version": profile.runtime.version, "clock_hz": profile.device.clock_hz,
            "threads": profile.runtime.threads, "per_op": split["per_op"],
            "sources": list(profile.cost_model.sources), "host_ms": None,
            "host_per_op_ms": None, "split": f"compatibility.{table_for(profile)}.latency"}
