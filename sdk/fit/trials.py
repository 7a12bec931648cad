"""fit's trials in the study (:mod:`sdk.study`): optuna proposes compression settings,
:mod:`sdk.fit.candidate` judges them, cheapest first.

The first trial is the plain post-training conversion; if it misses flash alone and the
space has int4 weights, the same with int4 weights follows (no training either), then, when
that fits, with "auto" weights (int4 only where the flash budget needs it), and when the
better of them loses more than :data:`sdk.convert.lowbit.COSTLY_DROP_PP` against the float
model, its QAT version (4-bit layers trained on the int4 grid); then the pruning
ratio is bisected (:func:`_bisect`) to train the least-pruned candidate that fits and its QAT
twin first; then the sampler proposes the rest. A candidate whose structure is already known to miss a budget
(the same scheme and sparsity with at least as much pruning missed flash, arena or latency,
or used an unsupported op) is skipped without any work (:func:`blocking`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devicefit.sdk.convert.lowbit import COSTLY_DROP_PP
from devicefit.sdk.fit.candidate import Context, evaluate
from devicefit.sdk.fit.record import FitPayload, FitTrial, read_trial
from devicefit.sdk.fit.space import Candidate, SearchSpace
from devicefit.sdk.study import Direction, Run, SearchSettings, StudyResult, TrialStage, run_study
from devicefit.simulator.types import BudgetName, Status

#: Budgets that can only get worse with less pruning (so a miss rules out larger variants).
MONOTONE_BUDGETS = ("flash", "arena", "latency")

FitRun = Run[Candidate, FitPayload]


def study_name(source: str, profile: str, space: SearchSpace) -> str:
    """The same model, profile and space give the same name, so machines sharing a storage
    join one study."""
    path = Path(source)
    digest = hashlib.sha256(path.read_bytes() if path.is_file() else source.encode())
    digest.update(f"{profile}|{space.to_dict()}".encode())
    return f"devicefit-fit-{digest.hexdigest()[:12]}"


def covers(a: Candidate, b: Candidate, groups: tuple[str, ...]) -> bool:
    """True when ``a`` prunes every layer group at least as much as ``b``."""
    if not a.layers and not b.layers:
        return a.prune >= b.prune
    return all(a.ratio_of(g) >= b.ratio_of(g) for g in groups)


def blocking(candidate: Candidate, done: list[FitTrial], groups: tuple[str, ...] = ()
             ) -> FitTrial | None:
    """A finished record proving ``candidate`` cannot fit without building it."""
    for r in done:
        if r.candidate.structure != candidate.structure:
            continue
        if r.stage == TrialStage.ERROR:  # the converter or the profile cannot take it
            return r
        if r.stage != TrialStage.STATIC:
            continue
        missed = set(r.misses())
        # Neither the op set nor the cost model's coverage depends on pruning.
        unsupported = "unsupported" in r.note or "not estimated" in r.note
        if unsupported or (missed and missed <= set(MONOTONE_BUDGETS)
                           and covers(r.candidate, candidate, groups)):
            return r
    return None


@dataclass
class FitTrials:
    """fit's :class:`~sdk.study.trials.Trials`: the space's candidates, judged by
    :func:`sdk.fit.candidate.evaluate`."""

    ctx: Context
    space: SearchSpace
    directions: tuple[Direction, ...] = ("maximize",)

    @property
    def size(self) -> int:
        return self.space.size

    def suggest(self, trial: Any) -> Candidate:
        return self.space.suggest(trial)

    def describe(self, candidate: Candidate) -> dict[str, Any]:
        return candidate.to_dict()

    def read(self, data: Mapping[str, Any]) -> FitTrial:
        return read_trial(data)

    def skip(self, candidate: Candidate, number: int, done: list[FitTrial]) -> FitTrial | None:
        """The record of a candidate a finished trial proves cannot fit: the blocker's
        figures, nothing built."""
        blocker = blocking(candidate, done, self.space.groups)
        if blocker is None:
            return None
        return replace(blocker, number=number, candidate=candidate, stage=TrialStage.SKIPPED,
                       accuracy=None, seconds=0.0, path=None,
                       payload=replace(blocker.payload, keras_path=None, fine_tune=()),
                       note=f"not built: trial {blocker.number} ({blocker.candidate.label()}): "
                       f"{blocker.note}")

    def untried(self, taken: Callable[[Candidate], bool]) -> dict[str, Any] | None:
        return None  # the sampler's repeats are pruned; PROPOSALS_PER_TRIAL bounds them

    def evaluate(self, candidate: Candidate, number: int) -> FitTrial:
        return evaluate(self.ctx, candidate, number)

    def failed(self, candidate: Candidate, number: int, note: str) -> FitTrial:
        return FitTrial(number, candidate, TrialStage.ERROR, Status.FAIL, note=note,
                        payload=FitPayload())

    def value(self, record: FitTrial) -> float:
        """What fit maximises: accuracy if it fits, minus its worst miss if not."""
        if record.fits:
            return record.accuracy if record.accuracy is not None else 0.0
        return -max(record.misses().values(), default=1.0)


@dataclass(frozen=True)
class _Workers:
    """Makes a ``--jobs`` worker's trials in its process: the model is loaded from
    ``model_path`` there (a Keras model does not pickle)."""

    model_path: str
    ctx: Context
    space: SearchSpace

    def __call__(self) -> FitTrials:
        from devicefit.sdk.convert import loading

        loaded = loading.load(self.model_path)
        ctx = replace(self.ctx, loaded=replace(self.ctx.loaded, keras_model=loaded.keras_model))
        return FitTrials(ctx, self.space)


def _workers(ctx: Context, model_path: Path | None, space: SearchSpace) -> _Workers:
    if model_path is None:
        model_path = ctx.workdir / "model.keras"
        ctx.model.save(model_path)
    shared = replace(ctx, loaded=replace(ctx.loaded, keras_model=None), progress=None)
    return _Workers(str(model_path), shared, space)


def run_trials(ctx: Context, space: SearchSpace, settings: SearchSettings, *, name: str,
               model_path: Path | None = None,
               on_trial: Callable[[FitTrial], None] | None = None
               ) -> StudyResult[Candidate, FitPayload]:
    """Run fit's study; Ctrl-C ends it early with what has been found so far.

    With ``settings.jobs`` > 1 the worker processes load the model from ``model_path``
    (saved to the work folder when None).
    """
    settings = settings.shared_by_jobs(ctx.workdir / "fit.db")
    workers = _workers(ctx, model_path, space) if settings.jobs > 1 else None

    def first(run: FitRun) -> None:
        plain = _probe(run, space, Candidate(space.schemes[0], 0.0))
        if plain is not None and set(plain.misses()) == {BudgetName.FLASH} and \
                space.int4_for(space.schemes[0]):
            _four_bits(run, space, ctx.float_accuracy)
        _bisect(run, space)

    return run_study(FitTrials(ctx, space), settings, name, workers=workers, first=first,
                     on_trial=on_trial)


def _four_bits(run: FitRun, space: SearchSpace, float_accuracy: float | None) -> None:
    """Only flash missed: 4-bit weights may be enough, and they need no training. All the
    runtime takes first (does 4 bits fit at all?), then auto (fewer int4 layers, less
    accuracy lost), then QAT on the better one's 4-bit layers if it loses too much."""
    scheme = space.schemes[0]
    tried = [_probe(run, space, Candidate(scheme, 0.0, weights="int4"))]
    if tried[0] is None or not tried[0].fits:
        return
    if "auto" in space.weights and not run.stop.finished(run.study):
        tried.append(_probe(run, space, Candidate(scheme, 0.0, weights="auto")))
    done = [t for t in tried if t is not None and t.fits and t.accuracy is not None]
    if not done or float_accuracy is None or not space.qat or run.stop.finished(run.study):
        return
    best = max(done, key=lambda t: t.accuracy or 0.0)
    if 100.0 * (float_accuracy - (best.accuracy or 0.0)) > COSTLY_DROP_PP:
        _probe(run, space, replace(best.candidate, qat=True))


def _bisect(run: FitRun, space: SearchSpace) -> None:
    """Find the least channel pruning whose structure fits, for the first scheme, by
    bisection (sizes, arena and MACs shrink as pruning grows), then try QAT on it.

    Accuracy usually falls as pruning grows, so the least-pruned fitting candidate is the
    one to train first; each failed probe costs one static check, and every ratio below a
    failed one is skipped without work afterwards.
    """
    ratios = space.prune_ratios
    scheme = space.schemes[0]
    lo, hi = 0, len(ratios)  # ratios[lo] is known to miss; ratios[hi:] fit (hi: unknown yet)
    first = run.records()
    if not first or first[0].stage != TrialStage.STATIC or len(ratios) < 2:
        return
    while hi - lo > 1 and not run.stop.finished(run.study):
        mid = (lo + hi) // 2
        done = _probe(run, space, Candidate(scheme, ratios[mid]))
        if done is None:
            return
        if done.fits:
            hi = mid
        else:
            lo = mid
    if hi < len(ratios) and space.qat and scheme == "int8" and \
            not run.stop.finished(run.study):
        _probe(run, space, Candidate(scheme, ratios[hi], None, True))


def _probe(run: FitRun, space: SearchSpace, candidate: Candidate) -> FitTrial | None:
    """Run ``candidate`` as the next trial (or find it done); None if the search stopped."""
    known = next((r for r in run.records() if r.candidate == candidate), None)
    if known is not None:
        return known
    params: dict[str, Any] = {"scheme": candidate.scheme, "prune": candidate.prune,
                              "nm": candidate.nm}
    if space.qat and candidate.scheme == "int8" and candidate.nm is None:
        params["qat"] = candidate.qat
    if space.int4_for(candidate.scheme):
        params["weights"] = candidate.weights
    if space.per_layer:
        params["per_layer"] = bool(candidate.layers)
        params.update({f"prune[{g}]": r for g, r in candidate.layers})
    # Another worker may have queued the same probe: one queued copy is enough.
    run.study.enqueue_trial(params, skip_if_exists=run.settings.distributed)
    run.optimize(n_trials=1)
    return next((r for r in run.records() if r.candidate == candidate), None)
