"""What changed between two reports: model A vs model B on one profile, or one model on two
profiles (``devicefit diff``).

The comparison is computed here, once, from two judged :class:`~simulator.report.report.Report`\\ s;
the text, JSON and HTML views (:mod:`simulator.report.views.diffview`) only show it. Layers are
paired by index when both graphs run the same operator sequence (the same model, or a model
whose weights or quantization changed), else by operator type and output shape in order
(:class:`difflib.SequenceMatcher`): an operator a pruning step removed shows as removed, the
rest stay paired.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devicefit.simulator.report.report import LayerRow, MemoryReport, Report
from devicefit.simulator.types import StrEnum, Unit


class Matching(StrEnum):
    INDEX = "index"
    TYPE_AND_SHAPE = "op type + output shape"


class Change(StrEnum):
    SAME = "same"
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"


@dataclass(frozen=True)
class Figure:
    """One figure of both sides; None where a side has none (no latency estimate)."""

    name: str
    unit: str
    a: float | None
    b: float | None
    #: (low, high) error bands of estimates (latency).
    a_band: tuple[float, float] | None = None
    b_band: tuple[float, float] | None = None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def ratio(self) -> float | None:
        """B / A (None when either is missing or A is 0)."""
        return None if self.a is None or self.b is None or self.a == 0 else self.b / self.a

    @property
    def bands_overlap(self) -> bool | None:
        """Estimates whose bands overlap may not differ on the device at all."""
        if self.a_band is None or self.b_band is None:
            return None
        return self.a_band[0] <= self.b_band[1] and self.b_band[0] <= self.a_band[1]


@dataclass(frozen=True)
class OpCount:
    op: str
    a: int
    b: int


#: Figures of a layer compared between the sides, in the order the views show them.
LAYER_FIGURES = ("macs", "params", "param_bytes", "live_bytes", "estimated_ms")


@dataclass(frozen=True)
class LayerChange:
    change: Change
    a: LayerRow | None
    b: LayerRow | None

    def delta(self, figure: str) -> float | None:
        """B − A of a :data:`LAYER_FIGURES` figure (None: a side lacks it)."""
        x = getattr(self.a, figure, None) if self.a else None
        y = getattr(self.b, figure, None) if self.b else None
        return None if x is None or y is None else y - x


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its label (the file or the profile) and its report."""

    label: str
    report: Report


@dataclass(frozen=True)
class ReportDiff:
    #: "models": two models on one profile; "profiles": one model on two profiles.
    kind: str
    a: Side
    b: Side
    figures: tuple[Figure, ...]
    #: From the models' ``devicefit.conversion`` metadata; empty when neither records any.
    accuracy: tuple[Figure, ...]
    op_counts: tuple[OpCount, ...]
    matching: Matching
    layers: tuple[LayerChange, ...]

    @property
    def changed_layers(self) -> list[LayerChange]:
        return [c for c in self.layers if c.change != Change.SAME]

    def to_dict(self) -> dict[str, Any]:
        def figure(f: Figure) -> dict[str, Any]:
            return {**dataclasses.asdict(f), "delta": f.delta, "ratio": f.ratio,
                    **({"bands_overlap": f.bands_overlap} if f.a_band or f.b_band else {})}

        def row(r: LayerRow | None) -> dict[str, Any] | None:
            return None if r is None else dataclasses.asdict(r)

        return {
            "kind": self.kind,
            "a": {"label": self.a.label, "model": self.a.report.model.path,
                  "profile": self.a.report.profile.name, "verdict": self.a.report.verdict.value},
            "b": {"label": self.b.label, "model": self.b.report.model.path,
                  "profile": self.b.report.profile.name, "verdict": self.b.report.verdict.value},
            "figures": [figure(f) for f in self.figures],
            "accuracy": [figure(f) for f in self.accuracy],
            "op_counts": [dataclasses.asdict(c) for c in self.op_counts],
            "layer_matching": self.matching.value,
            "layers": [{"change": c.change.value, "a": row(c.a), "b": row(c.b),
                        "delta": {f: c.delta(f) for f in LAYER_FIGURES}}
                       for c in self.layers]}


def diff_reports(a: Side, b: Side, kind: str) -> ReportDiff:
    """The comparison of two judged reports (``kind``: "models" or "profiles")."""
    ra, rb = a.report, b.report
    matching, layers = match_layers(ra.layers, rb.layers)
    types = sorted(set(ra.model.op_types) | set(rb.model.op_types))
    return ReportDiff(
        kind=kind, a=a, b=b, figures=_figures(ra, rb), accuracy=_accuracy(ra, rb),
        op_counts=tuple(OpCount(t, ra.model.op_types.get(t, 0), rb.model.op_types.get(t, 0))
                        for t in types),
        matching=matching, layers=tuple(layers))


def _figures(ra: Report, rb: Report) -> tuple[Figure, ...]:
    def both(name: str, unit: str, get: Callable[[Report], float | None]) -> Figure:
        return Figure(name, unit, get(ra), get(rb))

    def memory(name: str, get: Callable[[MemoryReport], float]) -> Figure:
        """A figure of the memory plan, which a model its compiler refused has none of."""
        return both(name, Unit.BYTES, lambda r: None if r.memory is None else get(r.memory))

    def latency(r: Report) -> float | None:
        return r.latency.estimated_device_ms if r.latency else None

    def band(r: Report) -> tuple[float, float] | None:
        return r.latency.band_ms if r.latency else None

    def measured(r: Report) -> float | None:
        return r.bench.result.results.inference_avg_ms if r.bench else None

    out = [both("model size", Unit.BYTES, lambda r: r.model.size_bytes),
           memory("flash", lambda m: m.flash_bytes),
           memory("arena", lambda m: m.arena_bytes),
           memory("arena head", lambda m: m.arena_head_bytes),
           memory("lower bound", lambda m: m.lower_bound_bytes),
           both("operators", "", lambda r: r.model.operators),
           both("MACs", "", lambda r: r.compute.macs),
           both("parameters", "", lambda r: sum(r.model.parameters.values())),
           Figure("latency (estimated)", Unit.MS, latency(ra), latency(rb), band(ra), band(rb))]
    if ra.bench or rb.bench:
        out.append(both("latency (measured on the device)", Unit.MS, measured))
    return tuple(out)


#: Conversion-metadata keys that record a model's quality (numbers): the name the views
#: (and the JSON) give them, and their unit ("fraction": a share, shown as a percentage).
ACCURACY_KEYS = {"accuracy": ("accuracy", "fraction"),
                 "reference_accuracy": ("float accuracy", "fraction"),
                 "accuracy_drop_pp": ("accuracy drop (pp)", "pp"),
                 "sqnr_db": ("SQNR (dB)", "dB"), "output_sqnr_db": ("SQNR (dB)", "dB"),
                 "agreement": ("top-1 agreement", "fraction")}


def _accuracy(ra: Report, rb: Report) -> tuple[Figure, ...]:
    def number(r: Report, key: str) -> float | None:
        conv = r.model.conversion or {}
        nested = conv["accuracy"] if isinstance(conv.get("accuracy"), dict) else {}
        value = nested.get(key, conv.get(key))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None

    out = []
    for key, (name, unit) in ACCURACY_KEYS.items():
        x, y = number(ra, key), number(rb, key)
        if x is not None or y is not None:
            out.append(Figure(name, unit, x, y))
    return tuple(out)


def _key(r: LayerRow) -> tuple[int, str, tuple[tuple[int, ...], ...]]:
    return (r.subgraph, r.op, r.output_shapes)


def match_layers(a: list[LayerRow], b: list[LayerRow]
                 ) -> tuple[Matching, list[LayerChange]]:
    """Pairs of rows: by index when both graphs run the same operator sequence, else by
    (subgraph, op type, output shape) in order; unpaired rows are added or removed."""
    if [(r.subgraph, r.op) for r in a] == [(r.subgraph, r.op) for r in b]:
        return Matching.INDEX, [_pair(x, y) for x, y in zip(a, b, strict=True)]
    out: list[LayerChange] = []
    blocks = difflib.SequenceMatcher(a=[_key(r) for r in a], b=[_key(r) for r in b],
                                     autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in blocks:
        if tag == "equal":
            out += [_pair(x, y) for x, y in zip(a[i1:i2], b[j1:j2], strict=True)]
        else:
            out += [LayerChange(Change.REMOVED, x, None) for x in a[i1:i2]]
            out += [LayerChange(Change.ADDED, None, y) for y in b[j1:j2]]
    return Matching.TYPE_AND_SHAPE, out


def _pair(x: LayerRow, y: LayerRow) -> LayerChange:
    same = all(getattr(x, f) == getattr(y, f)
               for f in (*LAYER_FIGURES, "dtype", "input_shapes", "output_shapes"))
    return LayerChange(Change.SAME if same else Change.CHANGED, x, y)
