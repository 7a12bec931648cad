"""The fit report: trials, the chosen candidate and why, or the closest miss; its views.

One report, many views: :class:`FitReport` holds every number; ``to_dict`` is the JSON
view, :func:`trial_rows` feeds the CLI table and :func:`render_fit_html` the HTML page
(trials table, Pareto front as inline SVG, the verified candidate's simulation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from devicefit.sdk.convert.distill import DistillSettings
from devicefit.sdk.convert.lowbit import LowBitReport
from devicefit.sdk.fit.record import FitTrial, read_trial
from devicefit.sdk.fit.space import SearchSpace
from devicefit.sdk.study import Stopped, TrialRecord, TrialStage, Unshown
from devicefit.simulator.infra.units import (
    format_estimate,
    format_percent,
    format_points,
    format_size,
    format_time_ms,
)
from devicefit.simulator.profile_types import Budgets
from devicefit.simulator.report.report import Report, from_fields, plain_fields
from devicefit.simulator.report.views.html import Section, escape, html_table, render_html
from devicefit.simulator.target import read_report
from devicefit.simulator.types import BudgetName, Unit

#: The plot's size; TOP is a band over it for the budget's name, PAD keeps the largest mark
#: (the chosen one, radius 7) inside the plot at the ends of its axes.
PLOT_W, PLOT_H, LEFT, BOTTOM, STRIP_H, TOP, PAD = 1280, 300, 70, 30, 24, 28, 10


@dataclass(frozen=True)
class Miss:
    budget: BudgetName
    limit: float
    value: float
    unit: Unit
    #: value - limit (bytes or ms) and as a share of the limit.
    over: float
    over_fraction: float


@dataclass(frozen=True)
class FitBudgets:
    """The profile's budgets the candidates were judged against (None: not set)."""

    flash: float | None
    arena: float | None
    latency_ms: float | None

    @classmethod
    def of(cls, budgets: Budgets) -> FitBudgets:
        return cls(budgets.flash_bytes, budgets.arena_bytes, budgets.latency_ms)


@dataclass(frozen=True)
class FitSettings:
    """How the search was asked to run."""

    max_trials: int
    time_budget_s: float | None
    jobs: int
    #: The optuna storage URL without its password (reports and studies are shared).
    storage: str | None
    epochs: int
    distill: DistillSettings | None
    cluster: int | None
    seed: int
    patches: str | None
    runtime_code_bytes: int | None


@dataclass(frozen=True)
class Clustering:
    """What weight clustering of the chosen candidate did (``fit --cluster K``)."""

    clusters: int
    gzip_before: int
    #: Of the file as written (with devicefit's metadata).
    gzip_after: int
    bytes_before: int
    bytes_after: int
    accuracy_before: float | None
    accuracy_after: float | None
    #: Weight tensor → most distinct values in one of its channels.
    distinct_values: dict[str, int]
    distinct_values_measured_on: str = "the written .tflite (max per channel)"
    fine_tune_loss: tuple[float, ...] = ()
    note: str = ("clustering shrinks the gzip-compressed download only; the runtime stores "
                 "int8 weights uncompressed, so flash and arena do not change")


@dataclass(frozen=True)
class StudyRecord:
    """The optuna study the search ran in, and this process's part in it."""

    name: str
    #: The artifact folder shared by the study's workers, if any.
    artifacts: str | None
    #: This process (host:pid) and whether it wrote the winner; None before the search.
    worker: str | None = None
    writer: bool | None = None
    #: Written by ``fit --export``, which runs no search.
    exported: bool = False

    def to_dict(self) -> dict[str, Any]:
        # Only what applies to the process that wrote the report.
        out: dict[str, Any] = {"name": self.name, "artifacts": self.artifacts}
        if self.worker is not None:
            out["worker"] = self.worker
        if self.writer is not None:
            out["writer"] = self.writer
        if self.exported:
            out["exported"] = True
        return out


@dataclass
class FitReport:
    """Filled in as the search runs (trials, then the winner or the closest miss), so not
    frozen; its parts are. :meth:`to_dict` is its JSON form, :meth:`from_dict` reads it."""

    source: str
    profile: str
    runtime: str
    budgets: FitBudgets
    space: SearchSpace
    settings: FitSettings
    float_accuracy: float | None
    eval_samples: int
    trials: list[FitTrial] = field(default_factory=list)
    chosen: int | None = None
    reason: str = ""
    closest: int | None = None
    closest_misses: list[Miss] = field(default_factory=list)
    output: str | None = None
    #: The signal that ended the search early (Ctrl-C, SIGTERM, SIGHUP) and the trials it
    #: cut short; the winner is the best of the trials judged before it.
    stopped: Stopped | None = None
    search_seconds: float = 0.0
    #: ``simulate(output, run=True)`` of the written model (the real runtime run).
    verification: Report | None = None
    clustering: Clustering | None = None
    study: StudyRecord | None = None
    #: Trial numbers the study used without a record, and why (the table skips them).
    unshown: tuple[Unshown, ...] = ()

    @property
    def found(self) -> bool:
        return self.chosen is not None

    @property
    def interrupted(self) -> bool:
        return self.stopped is not None

    @property
    def another_worker_writes(self) -> bool:
        """A worker of a shared study that leaves writing the winner to another."""
        return self.study is not None and self.study.writer is False

    def trial(self, number: int | None) -> FitTrial | None:
        return next((t for t in self.trials if t.number == number), None)

    @property
    def accuracy_loss_pp(self) -> float | None:
        chosen = self.trial(self.chosen)
        if chosen is None or chosen.accuracy is None or self.float_accuracy is None:
            return None
        return 100.0 * (self.float_accuracy - chosen.accuracy)

    def to_dict(self) -> dict[str, Any]:
        return {**plain_fields(self), "found": self.found, "interrupted": self.interrupted,
                "accuracy_loss_pp": self.accuracy_loss_pp, "pareto": pareto_front(self.trials)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FitReport:
        """The inverse of :meth:`to_dict` (``found``, ``interrupted``, ``accuracy_loss_pp``
        and ``pareto`` follow from the rest); ``KeyError``/``TypeError``/``ValueError`` if malformed."""
        report: FitReport = from_fields(
            cls, {k: v for k, v in data.items() if k not in ("verification", "trials")})
        report.trials = [read_trial(t) for t in data.get("trials", [])]
        if data.get("verification") is not None:
            report.verification = read_report(data["verification"])
        return report


def pareto_front(trials: list[FitTrial]) -> list[int]:
    """Trials not beaten on accuracy, flash and arena at once, among those evaluated."""
    # Each as (number, key): the key says "larger is better" on all three at once.
    scored = [(t.number, (t.accuracy, -t.flash_bytes, -(t.arena_bytes or 0))) for t in trials
              if t.accuracy is not None and t.flash_bytes is not None]

    def beats(ka: tuple[float, int, int], kb: tuple[float, int, int]) -> bool:
        return all(x >= y for x, y in zip(ka, kb, strict=True)) and ka != kb

    return sorted(n for n, k in scored if not any(beats(o, k) for _, o in scored))


def choose(trials: list[FitTrial]) -> list[FitTrial]:
    """Fitting candidates, best first: accuracy, then smaller flash, arena, trial number."""
    fitting = [(accuracy, t) for t in trials if t.fits and (accuracy := t.accuracy) is not None]
    return [t for _, t in sorted(fitting, key=lambda at: (-at[0], at[1].flash_bytes or 0,
                                                           at[1].arena_bytes or 0, at[1].number))]


def closest_miss(trials: list[FitTrial]) -> tuple[FitTrial | None, list[Miss]]:
    """The built candidate whose worst budget overshoot is smallest, and every miss of it."""
    built = [t for t in trials if t.stage != TrialStage.SKIPPED and t.budgets]
    if not built:
        return None, []
    best = min(built, key=lambda t: (max(t.misses().values(), default=0.0), t.number))
    misses = [Miss(b.name, b.limit, b.value, b.unit, b.value - b.limit,
                   (b.value - b.limit) / b.limit if b.limit else 0.0)
              for b in best.budgets if not b.ok]
    return best, misses


def reason_for(chosen: FitTrial, fitting: list[FitTrial], float_accuracy: float | None,
               trials: list[FitTrial]) -> str:
    built = sum(1 for t in trials if t.stage not in (TrialStage.SKIPPED, TrialStage.ERROR))
    trained = sum(1 for t in trials if t.stage == TrialStage.TRAINED)
    loss = "" if float_accuracy is None or chosen.accuracy is None else \
        f" ({format_points(100 * (chosen.accuracy - float_accuracy))} vs the float model)"
    others = len(fitting) - 1
    why = f"highest accuracy{loss} of the {len(fitting)} candidates that pass every budget"
    if others and len(fitting) > 1:
        runner = fitting[1]
        why += (f"; next best: trial {runner.number} ({runner.candidate.label()}) at "
                f"{format_percent(runner.accuracy)}")
    twin = qat_twin(chosen, trials)
    if twin is not None:
        why += (f"; its {'PTQ' if chosen.candidate.qat else 'QAT'} twin (trial {twin.number}, "
                f"same {chosen.payload.epochs} training epochs) reached "
                f"{format_percent(twin.accuracy)}")
    return f"{why}; {built} candidates judged, {trained} of them trained"


def qat_twin(record: FitTrial, trials: list[FitTrial]) -> FitTrial | None:
    """The measured trial that differs from ``record`` only in QAT vs PTQ (both trained the
    same epochs with the same schedule), if any: the like-for-like comparison."""
    c, epochs = record.candidate, record.payload.epochs
    for t in trials:
        o = t.candidate
        if t.accuracy is not None and o.qat != c.qat and (o.scheme, o.prune, o.nm, o.layers,
                                                          o.weights) \
                == (c.scheme, c.prune, c.nm, c.layers, c.weights) and t.payload.epochs == epochs:
            return t
    return None


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return format_time_ms(value) if unit == "ms" else format_size(value)


MISS_COLUMNS = ("budget", "limit", "value", "over by", "over by %")


def miss_row(m: Miss) -> tuple[Any, ...]:
    """A missed budget as a row of the pages' tables (:data:`MISS_COLUMNS`)."""
    return (m.budget, format_value(m.limit, m.unit), format_value(m.value, m.unit),
            format_value(m.over, m.unit), format_percent(m.over_fraction, 1, signed=True))


def miss_text(m: Miss) -> str:
    """A missed budget in words, as the summaries say it (``flash 150 KiB > 132 KiB by …``)."""
    return (f"{m.budget} {format_value(m.value, m.unit)} > {format_value(m.limit, m.unit)} "
            f"by {format_value(m.over, m.unit)} "
            f"({format_percent(m.over_fraction, 1, signed=True)})")


def trial_rows(report: FitReport) -> list[tuple[Any, ...]]:
    """Rows for the trials table: what the CLI and the HTML page show."""
    rows = []
    for t in report.trials:
        skipped = t.stage == TrialStage.SKIPPED
        rows.append((
            t.number, t.candidate.label(),
            "-" if t.accuracy is None else f"{format_percent(t.accuracy)}",
            "-" if skipped else format_size(t.flash_bytes),
            "-" if skipped else format_size(t.arena_bytes),
            "-" if skipped or t.latency_ms is None else latency_text(t),
            "-" if skipped else format_size(t.payload.gzip_bytes),
            ("PASS" if t.fits else "fail") + ("  ← chosen" if t.number == report.chosen else ""),
            f"{t.seconds:.1f}s", t.note or t.stage.value))
    return rows


def trials_note(records: Sequence[TrialRecord[Any, Any]], unshown: Sequence[Unshown],
                max_trials: int) -> str | None:
    """What the trials table holds besides ``--max-trials`` judged candidates: the ones
    skipped without building (they cost nothing, so they do not count) and the numbers it
    skips (proposals optuna numbered that judged nothing), each with why; None if nothing."""
    parts = []
    skipped = [r.number for r in records if r.stage == TrialStage.SKIPPED]
    if skipped:
        judged = len(records) - len(skipped)
        parts.append(f"{judged} candidate{'s' if judged != 1 else ''} judged (--max-trials "
                     f"{max_trials}); not counted: {_numbers(skipped)}, skipped without "
                     "building (an earlier trial shows it misses)")
    reasons: dict[str, list[int]] = {}
    for u in unshown:
        reasons.setdefault(u.why, []).append(u.number)
    parts += [f"no {_numbers(numbers)}: {why}" for why, numbers in reasons.items()]
    return "; ".join(parts) or None


def _numbers(numbers: list[int]) -> str:
    return ("trial " if len(numbers) == 1 else "trials ") + ", ".join(map(str, numbers))


def written_as(verification: Report | None, judged: TrialRecord[Any, Any] | None) -> str:
    """The file as written, named against the trial it came from: ``trial 4's model + 488
    B (devicefit's metadata)``. The trials table gives that trial's file as judged, the
    verification the written one, which carries devicefit's metadata too: each flash
    figure then says which file it is; empty when there is nothing to compare."""
    if verification is None or verification.memory is None or judged is None or \
            judged.flash_bytes is None:
        return ""
    extra = verification.memory.flash_bytes - judged.flash_bytes
    return f"trial {judged.number}'s model" + (
        "" if extra == 0 else f" {'+' if extra > 0 else '-'} {format_size(abs(extra))} "
        "(devicefit's metadata)")


def latency_text(t: FitTrial) -> str:
    """The estimate with its band, as everywhere else an estimate shows."""
    assert t.latency_ms is not None  # callers show "-" for a trial without an estimate
    return format_estimate(t.latency_ms, "ms", t.latency_band_ms)


WEIGHT_COLUMNS = ("op", "layer", "weights", "bytes", "why not int4")


def weight_rows(low_bit: LowBitReport) -> list[tuple[Any, ...]]:
    """An int4 candidate's layers with weights (fit's or search's): bits and granularity,
    bytes in the file, and why a layer is not int4 (the runtime's or compiler's refusal)."""
    # The converter joins fused ops' names with ';': the first is the layer's own.
    return [(layer.op, layer.layer.split(";")[0], f"int{layer.bits} {layer.granularity}",
             format_size(layer.weight_bytes), layer.why or "-") for layer in low_bit.layers]


def low_bit_lines(low_bit: LowBitReport) -> list[str]:
    """The text view of :func:`weight_rows`: a summary line, then one line a layer."""
    return [f"weights ({low_bit.engine}): int4 on {low_bit.int4_layers} of "
            f"{len(low_bit.layers)} layers, {format_size(low_bit.weight_bytes)}"] + \
        [f"  {op} {layer}: {bits}, {size}" + ("" if why == "-" else f" ({why})")
         for op, layer, bits, size, why in weight_rows(low_bit)]


def weights_lines(report: FitReport) -> list[str]:
    """What the text view says of int4 weights: the chosen candidate's layers, or why the
    search had none."""
    chosen = report.trial(report.chosen)
    if chosen is not None and chosen.payload.low_bit is not None:
        return low_bit_lines(chosen.payload.low_bit)
    return [report.space.weights_note] if report.space.weights_note else []


TRIAL_COLUMNS = ("#", "candidate", "accuracy", "flash", "arena", "est. latency", "gzip",
                 "verdict", "time", "note")


def pareto_svg(trials: list[FitTrial], budget: float | None, chosen: int | None,
               metric: str = "flash") -> str:
    """Accuracy against ``metric`` ("flash" or "arena") for every judged candidate: the
    Pareto front joined by a dashed line, the budget as a vertical line named at the top,
    candidates rejected before training (no accuracy: nothing to put on the y axis) as
    hollow squares at their size in a strip of their own under the plot. Deterministic."""
    # (trial, size) of the judged and (trial, size, accuracy) of the evaluated.
    judged = [(t, size) for t in trials if t.stage != TrialStage.SKIPPED
              and (size := t.flash_bytes if metric == "flash" else t.arena_bytes)]
    points = [(t, size, t.accuracy) for t, size in judged if t.accuracy is not None]
    if not points:
        return '<p class="note">No candidate was evaluated for accuracy.</p>'
    rejected = [t for t, _ in judged if t.accuracy is None]
    xs = [size for _, size in judged] + ([budget] if budget else [])
    x_lo, x_hi = min(xs) * 0.95, max(xs) * 1.05
    accs = [accuracy for _, _, accuracy in points]
    y_lo, y_hi = max(min(accs) - 0.02, 0.0), min(max(accs) + 0.02, 1.0)
    y_hi = y_hi if y_hi > y_lo else y_lo + 0.01
    strip = STRIP_H if rejected else 0
    bottom = TOP + PLOT_H + strip  # the x axis: under the plot and the strip
    height = bottom + BOTTOM + 10
    right = PLOT_W - 20

    def x(v: float) -> float:
        return LEFT + PAD + (right - LEFT - 2 * PAD) * (v - x_lo) / max(x_hi - x_lo, 1e-9)

    def y(v: float) -> float:
        return TOP + PAD + (PLOT_H - 2 * PAD) * (1 - (v - y_lo) / (y_hi - y_lo))

    def num(v: float) -> str:
        return f"{v:.2f}".rstrip("0").rstrip(".")

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pareto" data-metric="{metric}" '
             f'width="{PLOT_W}" height="{height}" viewBox="0 0 {PLOT_W} {height}" role="img" '
             f'aria-label="accuracy vs {metric}">',
             f'<rect x="{LEFT}" y="{TOP}" width="{right - LEFT}" height="{PLOT_H}" '
             'fill="#fafafa" stroke="#ccc"/>']
    if rejected:
        parts.append(f'<rect class="rejected-strip" x="{LEFT}" y="{TOP + PLOT_H + 4}" '
                     f'width="{right - LEFT}" height="{strip - 4}" fill="#fdf1f1" stroke="#ccc"/>'
                     f'<text x="{LEFT - 6}" y="{TOP + PLOT_H + strip / 2 + 6}" '
                     'text-anchor="end">not trained</text>')
    for frac in (0.0, 0.5, 1.0):
        av = y_lo + (y_hi - y_lo) * frac
        fv = x_lo + (x_hi - x_lo) * frac
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{num(y(av) + 4)}" '
                     f'text-anchor="end">{format_percent(av)}</text><text class="tick" x="{num(x(fv))}" '
                     f'y="{bottom + 16}" text-anchor="middle">{escape(format_size(fv))}</text>')
    bx = x(budget) if budget else None
    if bx is not None:
        # Named in the band over the plot, where no mark is, on the side with room.
        label = f"{metric} budget {format_size(budget)}"
        after = bx + 6 * len(label) + 8 < right
        parts.append(f'<line class="budget" x1="{num(bx)}" x2="{num(bx)}" y1="{TOP}" '
                     f'y2="{bottom}" stroke="#c00"/><text class="budget-label" '
                     f'x="{num(bx + 4 if after else bx - 4)}" y="{TOP - 8}" '
                     f'text-anchor="{"start" if after else "end"}">{escape(label)}</text>')
    front = sorted((p for p in points if p[0].number in pareto_front(trials)),
                   key=lambda p: p[1])
    if len(front) > 1:
        path = " ".join(f"{num(x(size))},{num(y(accuracy))}" for _, size, accuracy in front)
        parts.append(f'<polyline class="pareto-front" points="{path}" fill="none" '
                     'stroke="#4e79a7" stroke-dasharray="5 3"/>')
    for t, size in sorted(judged, key=lambda ts: ts[0].number):
        title = (f"trial {t.number}: {t.candidate.label()}\naccuracy "
                 + ("not measured" if t.accuracy is None else f"{format_percent(t.accuracy)}")
                 + f"\nflash {format_size(t.flash_bytes)}, arena {format_size(t.arena_bytes)}"
                 f"\n{'passes every budget' if t.fits else t.note}")
        cx = num(x(size))
        if t.accuracy is None:
            parts.append(f'<rect class="rejected" data-trial="{t.number}" '
                         f'x="{num(x(size) - 4)}" y="{num(TOP + PLOT_H + strip / 2 - 2)}" '
                         f'width="8" height="8" fill="none" stroke="#e15759">'
                         f'<title>{escape(title)}</title></rect>')
            continue
        colour = "#59a14f" if t.fits else "#e15759"
        parts.append(f'<circle class="trial" data-trial="{t.number}" cx="{cx}" '
                     f'cy="{num(y(t.accuracy))}" r="{7 if t.number == chosen else 4}" '
                     f'fill="{colour}" stroke="#333" '
                     f'stroke-width="{1.5 if t.number == chosen else 0.5}">'
                     f'<title>{escape(title)}</title></circle>')
    parts += _trial_labels([t for t, _, _ in points],
                           [(x(size), y(accuracy)) for _, size, accuracy in points],
                           (LEFT, TOP, right, TOP + PLOT_H), bx,
                           [(x(size), y(accuracy)) for _, size, accuracy in front])
    what = "model + runtime code" if metric == "flash" else "tensor arena"
    parts.append(f'<text x="{LEFT}" y="{height - 4}">{metric} ({what}) →, accuracy ↑</text>'
                 '</svg><p class="note">Green: passes every budget, red: misses one, large: '
                 'chosen; □ (in the strip under the plot): rejected before training, so no '
                 'accuracy; dashed: Pareto front. Hover a mark for its trial.</p>')
    return "".join(parts)


#: Where a trial's label may go, relative to its mark: beside it (right, then left), then
#: a line lower or higher, and so on; the first place that covers nothing is taken.
LABEL_SHIFTS = tuple((side, dy) for dy in (0, 12, -12, 24, -24, 36, -36, 48, -48)
                     for side in (1, -1))


def _trial_labels(points: list[FitTrial], at: list[tuple[float, float]],
                  plot: tuple[float, float, float, float], budget_x: float | None,
                  front: list[tuple[float, float]]) -> list[str]:
    """``trial 1, 4`` beside each mark (trials at the same spot share one label), placed
    where it covers no other label, no mark, not the budget line nor the front's dashed
    line (each of its segments as the box around it), inside the plot."""
    groups: dict[tuple[float, float], list[int]] = {}
    for t, (px, py) in zip(points, at, strict=True):
        groups.setdefault((round(px, 1), round(py, 1)), []).append(t.number)
    left, top, right, bottom = plot
    # Boxes (x0, y0, x1, y1) a label must not cover: every mark, then each label placed.
    taken = [(px - 8, py - 8, px + 8, py + 8) for px, py in groups]
    if budget_x is not None:
        taken.append((budget_x - 2, top, budget_x + 2, bottom))
    taken += [(min(ax, bx), min(ay, by) - 2, max(ax, bx), max(ay, by) + 2)
              for (ax, ay), (bx, by) in zip(front, front[1:])]
    out = []
    for (px, py), numbers in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        text = "trial " + ", ".join(str(n) for n in sorted(numbers))
        width = 6 * len(text)

        def box(side: int, dy: float, px: float = px, py: float = py,
                width: int = width) -> tuple[float, float, float, float]:
            x0 = px + 10 if side > 0 else px - 10 - width
            return (x0, py + dy - 8, x0 + width, py + dy + 5)

        fits = [b for side, dy in LABEL_SHIFTS if (b := box(side, dy))[0] >= left
                and b[2] <= right and b[1] >= top and b[3] <= bottom]
        free = [b for b in fits if not any(b[0] < o[2] and o[0] < b[2] and b[1] < o[3]
                                           and o[1] < b[3] for o in taken)]
        chosen = (free or fits or [box(1, 0)])[0]
        taken.append(chosen)
        x0, y0 = chosen[0], chosen[1]
        out.append(f'<text class="trial-label" x="{x0:.1f}" y="{y0 + 12:.1f}">'
                   f"{escape(text)}</text>")
    return out


def render_fit_html(report: FitReport) -> str:
    """The fit report as one self-contained HTML page."""
    verification = report.verification
    chosen = report.trial(report.chosen)
    if chosen is not None:
        summary = (f"<p><b>Chosen:</b> trial {chosen.number}, {escape(chosen.candidate.label())}"
                   f" — {escape(report.reason)}.</p>")
    else:
        closest = report.trial(report.closest)
        summary = ("<p><b>No candidate passes every budget.</b> Closest: "
                   + (f"trial {closest.number}, {escape(closest.candidate.label())}"
                      if closest else "none built") + "</p>"
                   + html_table(MISS_COLUMNS, [miss_row(m) for m in report.closest_misses]))
    facts = [("profile", report.profile), ("float accuracy", "-" if report.float_accuracy is None
                                            else f"{format_percent(report.float_accuracy)}"),
             ("trials", str(len(report.trials)) + (f" ({note})" if (note := trials_note(
                 report.trials, report.unshown, report.settings.max_trials)) else "")),
             ("search time", f"{report.search_seconds:.1f} s"),
             ("interrupted", "yes" if report.interrupted else "no")]
    if report.clustering:
        c = report.clustering
        facts.append(("clustering", f"{c.clusters} clusters per layer: gzip download "
                      f"{format_size(c.gzip_before)} → {format_size(c.gzip_after)}; "
                      f"at most {max(c.distinct_values.values(), default=0)} distinct int8 "
                      "values per channel in the written file; "
                      "flash and arena unchanged (weights stored uncompressed)"))
    flash_budget = report.budgets.flash
    code = report.settings.runtime_code_bytes or 0
    intro = (summary + html_table(("", ""), facts)
             + "<h2>Accuracy vs flash</h2>"
             + pareto_svg(report.trials, flash_budget, report.chosen, "flash")
             + "<h2>Accuracy vs arena</h2>"
             + pareto_svg(report.trials, report.budgets.arena, report.chosen, "arena")
             + (f'<p class="note">flash includes {escape(format_size(code))} of runtime code.'
                "</p>" if code else "")
             + "<h2>Trials</h2>" + html_table(TRIAL_COLUMNS, trial_rows(report))
             + _weights_html(report))
    written = written_as(verification, chosen)
    sections = [Section(f"Chosen candidate on {report.profile}, the file as written"
                        + (f": {written}" if written else "") + " (verified in the runtime)",
                        verification)] if verification is not None else []
    return render_html(f"devicefit fit: {report.source}", sections, intro=intro)


def weights_html(low_bit: LowBitReport) -> str:
    """The chosen candidate's layers with weights (fit's or search's) as an HTML section."""
    return (f"<h2>Weights of the chosen candidate ({escape(low_bit.engine)})</h2>"
            + html_table(WEIGHT_COLUMNS, weight_rows(low_bit)))


def _weights_html(report: FitReport) -> str:
    chosen = report.trial(report.chosen)
    if chosen is not None and chosen.payload.low_bit is not None:
        return weights_html(chosen.payload.low_bit)
    note = report.space.weights_note
    return f'<p class="note">{escape(note)}</p>' if note else ""
