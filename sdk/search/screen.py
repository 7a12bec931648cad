"""The static screen: every candidate built with random weights, converted to full-integer
int8 and judged by the simulator for the profile, before anything is trained.

Conversion needs no data of the user's: the int8 converter calibrates on
:data:`CALIBRATION_SAMPLES` random samples of the input shape. Their ranges set the
quantization scales, which change no size: flash, arena, operator set and latency estimate
are those of the trained model converted the same way.

One TensorFlow child converts a whole batch (``python -m devicefit.sdk.search.child WORK``,
forked from the converter's zygote, :data:`sdk.convert.tfprocess.PRELOAD`): starting
TensorFlow costs seconds, one conversion of a tiny model a fraction of one. The child writes
``NNNN.tflite`` and one JSON line per candidate into WORK; the parent then judges each file
with :func:`simulator.simulate.simulate` (``strict``: a budget without a figure fails), after
the offline arena plan (:mod:`simulator.optimize`, without running anything) on targets that
take one, so the arena judged is the one the written file needs.

A candidate the int8 conversion rejects on flash alone gets a twin with int4 weights where the
profile's runtime takes them (issue 47): a second child converts those candidates to float32,
AI Edge Quantizer writes them with 4-bit weights, asking the runtime per layer
(:func:`sdk.convert.lowbit.int4_weights`, calibrated on the same random samples), and the
twin is judged like the others, listed right after its int8 row. So a wider net whose int8
weights miss the flash budget may survive at 4 bits; its row and the report say which
layers went to int4.

When fewer int4 layers than all the runtime takes would bring the int8 flash figure within
the budget (each layer at int4 saves its int4 bytes), an ``auto`` twin follows: int4 on
those layers only, the largest first, as few as the budget needs by their bytes. With random
weights nothing can say which layers cost accuracy, so the screen counts bytes; a survivor
with auto weights is trained and then converted by ``--weights auto``'s rule
(:func:`sdk.convert.lowbit.int4_under_budget`: the layers that cost least accuracy per byte,
measured on the evaluation data, as few as the budget needs). Fewer int4 layers risk less
accuracy and, on TFLM's reference kernels, need less arena (each int4 filter is unpacked into
scratch), so an auto twin may fit where the all-int4 one does not. Its cost is bounded: one
more AI Edge Quantizer run and one judging per int4 twin, no more conversions in TensorFlow.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devicefit.sdk.convert.diagnose import ConversionError
from devicefit.sdk.convert.lowbit import LowBitReport
from devicefit.sdk.convert.spec import MemoryOptimization
from devicefit.sdk.convert.tfprocess import PRELOAD, STALL_TIMEOUT_S
from devicefit.sdk.search.candidate import ArchCandidate
from devicefit.simulator import errors
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.judge.verdict import static_arena_bytes
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report.report import Report
from devicefit.simulator.run import zygote
from devicefit.simulator.target import target_for
from devicefit.simulator.types import BudgetName, Status, StrEnum

#: Random samples of the input shape the int8 converter calibrates on (shape only).
CALIBRATION_SAMPLES = 4
SEED = 0
RESULTS_FILE = "results.jsonl"
ERROR_FILE = "error.json"


class Rejection(StrEnum):
    """What rejects a candidate: a budget, or why it has no verdict."""

    FLASH = "flash"
    ARENA = "arena"
    LATENCY = "latency"
    #: An operator the target's runtime does not run.
    OPS = "ops"
    #: A latency budget the cost model has no estimate for (strict: not shown to fit).
    UNESTIMATED = "latency unestimated"
    #: The family could not build it or the converter could not convert it.
    ERROR = "error"


@dataclass(frozen=True)
class Screened:
    """The static verdict on one candidate."""

    candidate: ArchCandidate
    verdict: Status
    #: The verdict, or "at-risk" when it passes on an estimate whose band crosses a budget.
    status: Status
    rejected_by: tuple[Rejection, ...] = ()
    flash_bytes: int | None = None
    #: The arena the arena budget is judged on (TFLM: what it needs to start, with the
    #: offline plan written where it lowers the head).
    arena_bytes: int | None = None
    #: Bytes the offline plan took off the arena head (0: TFLM's own plan was as good).
    offline_plan_saved_bytes: int = 0
    latency_ms: float | None = None
    latency_band_ms: tuple[float, float] | None = None
    parameters: int | None = None
    convert_seconds: float = 0.0
    judge_seconds: float = 0.0
    #: The judged file, when the screen was given a folder to keep them in.
    path: str | None = None
    note: str = ""
    #: An int4 candidate: each layer's weight bits and why it is not int4.
    low_bit: LowBitReport | None = None

    @property
    def fits(self) -> bool:
        return self.verdict == Status.PASS


@dataclass(frozen=True)
class ScreenRun:
    results: tuple[Screened, ...]
    #: Wall time of the TensorFlow child (start, imports not done by the zygote, builds and
    #: conversions) and of the judging in this process.
    child_seconds: float
    judge_seconds: float

    @property
    def convert_seconds(self) -> float:
        """Build + conversion time the child measured, summed over candidates."""
        return sum(r.convert_seconds for r in self.results)

    @property
    def fitting(self) -> tuple[Screened, ...]:
        return tuple(r for r in self.results if r.fits)


def screen(candidates: Sequence[ArchCandidate], profile: Profile | str, *,
           keep: Path | None = None, profiles_dirs: Sequence[str | Path] = (),
           memory: MemoryOptimization | None = None, int4: bool = True) -> ScreenRun:
    """Convert ``candidates`` in one TensorFlow child and judge each for ``profile``.

    ``keep``: a folder the judged ``.tflite`` files are written to (``<key>.tflite``);
    without it they go with the work folder. ``memory`` (``--patches``): the offline plan
    also tries running the first stage patch by patch, kept where it lowers the arena
    (within its extra-MAC limit; the latency is judged on the rewritten file). ``int4``:
    a candidate int8 rejects on flash alone gets an int4 twin (module doc) when the
    profile allows int4 weights.
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile, list(profiles_dirs))
    if not candidates:
        raise errors.UsageError("nothing to screen: no candidates")
    from devicefit.sdk.convert.quantize import resolve

    quant = resolve(prof, "int8", None)
    work = Path(tempfile.mkdtemp(prefix="devicefit-screen-"))
    try:
        started = time.perf_counter()
        converted = _convert(candidates, quant.io_type, quant.per_channel, work)
        child_seconds = time.perf_counter() - started
        started = time.perf_counter()
        results = [_judge(c, converted.get(i), prof, work, keep, memory)
                   for i, c in enumerate(candidates)]
        judge_seconds = time.perf_counter() - started
        missed = [r for r in results if r.rejected_by == (Rejection.FLASH,)]
        if int4 and missed and int4_allowed(prof, quant.scheme, quant.io_type):
            twins, seconds = _int4_twins(missed, prof, work / "int4", keep, memory)
            child_seconds += seconds
            judge_seconds += sum(t.judge_seconds for t in twins)
            of: dict[ArchCandidate, list[Screened]] = {}
            for twin in twins:
                of.setdefault(replace(twin.candidate, weights="int8"), []).append(twin)
            results = [r for own in results for r in (own, *of.get(own.candidate, []))]
        return ScreenRun(tuple(results), child_seconds, judge_seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def int4_allowed(profile: Profile, scheme: str, io_type: str) -> bool:
    """Whether int4 weights may be tried for ``profile`` at all: int8 activations and AI
    Edge Quantizer installed (the runtime is asked per layer later)."""
    from devicefit.sdk.convert.lowbit import check_request

    try:
        check_request(scheme, io_type, False)
    except errors.UsageError:
        return False
    return True


def _int4_twins(missed: Sequence[Screened], profile: Profile, work: Path,
                keep: Path | None, memory: MemoryOptimization | None
                ) -> tuple[list[Screened], float]:
    """The int4 twins of the ``missed`` candidates that have at least one int4 layer (the
    runtime refusing int4 on every layer leaves none), each followed by its auto twin where
    fewer layers would do (module doc), judged, and the float child's wall time (the twins'
    judge_seconds include AI Edge Quantizer's)."""
    import numpy as np

    from devicefit.sdk.convert.data import Dataset
    from devicefit.sdk.convert.lowbit import int4_as_before, int4_weights

    work.mkdir()
    started = time.perf_counter()
    candidates = [r.candidate for r in missed]
    converted = _convert(candidates, "float32", True, work, float32=True)
    child_seconds = time.perf_counter() - started
    rng = np.random.default_rng(SEED)
    twins = []
    for i, (cand, int8) in enumerate(zip(candidates, missed, strict=True)):
        line = converted.get(i)
        if line is None or "error" in line:
            continue  # converted to int8 a moment ago: the int8 row says enough
        started = time.perf_counter()
        samples = rng.standard_normal((CALIBRATION_SAMPLES, *cand.params.input_shape))
        float_tflite = (work / f"{i:04d}.tflite").read_bytes()
        calibration = Dataset(samples.astype(np.float32), None, "random")
        data, low_bit = int4_weights(float_tflite, calibration, profile, cand.label())
        if not low_bit.int4_layers:
            continue
        twin = replace(cand, weights="int4")
        write_atomic(work / f"{i:04d}.int4.tflite", data)
        judged = _judge(twin, {**line, "index": f"{i:04d}.int4"}, profile, work, keep, memory)
        # Which layers: the JSON's low_bit (the table's row stays one line).
        note = f"int4 on {low_bit.int4_layers} of {len(low_bit.layers)} layers"
        twins.append(replace(judged, low_bit=low_bit, note=judged.note or note,
                             judge_seconds=time.perf_counter() - started))
        fewer = _fewer_int4(low_bit, int8.flash_bytes, profile.budgets.flash_bytes)
        if fewer is None:
            continue
        started = time.perf_counter()
        data, auto_bit = int4_as_before(float_tflite, float_tflite, calibration, fewer,
                                        cand.label())
        write_atomic(work / f"{i:04d}.auto.tflite", data)
        judged = _judge(replace(cand, weights="auto"), {**line, "index": f"{i:04d}.auto"},
                        profile, work, keep, memory)
        note = (f"auto: int4 on {auto_bit.int4_layers} of {len(auto_bit.layers)} layers, the "
                "largest, as few as the flash budget needs by their bytes")
        twins.append(replace(judged, low_bit=auto_bit, note=judged.note or note,
                             judge_seconds=time.perf_counter() - started))
    return twins, child_seconds


def _fewer_int4(low_bit: LowBitReport, int8_flash: int | None, limit: int | None
                ) -> LowBitReport | None:
    """``low_bit`` with int4 on only the largest of its int4 layers whose savings (each its
    int4 bytes: half its int8 bytes) bring ``int8_flash`` within ``limit``; None when that
    takes all of them (the int4 twin is the auto one) or a figure is missing."""
    if int8_flash is None or limit is None:
        return None
    four = sorted((w for w in low_bit.layers if w.bits == 4), key=lambda w: -w.weight_bytes)
    chosen, saved = set(), 0
    for w in four:
        if int8_flash - saved <= limit:
            break
        chosen.add(w.op_index)
        saved += w.weight_bytes
    if len(chosen) == len(four):
        return None
    return replace(low_bit, layers=tuple(
        w if w.bits != 4 or w.op_index in chosen else
        replace(w, bits=8, why="not needed for the flash budget (by bytes)")
        for w in low_bit.layers))


def _convert(candidates: Sequence[ArchCandidate], io_type: str, per_channel: bool,
             work: Path, float32: bool = False) -> dict[int, dict[str, Any]]:
    """Index → the child's line for it (``seconds``, ``parameters`` or ``error``)."""
    request = {"candidates": [c.to_dict() for c in candidates], "io_type": io_type,
               "per_channel": per_channel, "samples": CALIBRATION_SAMPLES, "seed": SEED,
               "float": float32}
    (work / "request.json").write_text(json.dumps(request))
    (work / "tmp").mkdir()
    env = zygote.child_env(TF_CPP_MIN_LOG_LEVEL="1")
    env["TMPDIR"] = str(work / "tmp")  # TensorFlow's autograph files go with the folder
    done = zygote.run("devicefit.sdk.search.child", [str(work)], preload=PRELOAD, env=env,
                      timeout_s=STALL_TIMEOUT_S * len(candidates), work=work)
    lines = {}
    if (work / RESULTS_FILE).exists():
        for line in (work / RESULTS_FILE).read_text().splitlines():
            entry = json.loads(line)
            lines[int(entry["index"])] = entry
    if (work / ERROR_FILE).exists():
        reported = json.loads((work / ERROR_FILE).read_text())
        raise errors.UsageError(reported["message"])
    if done.code != 0:
        at = candidates[len(lines)].label() if len(lines) < len(candidates) else "the end"
        how = "ran out of time" if done.code is None else f"exit {done.code}"
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise ConversionError(f"the screening conversion process failed at {at} ({how})"
                              + (f": {tail[0]}" if tail else ""))
    return lines


def _judge(candidate: ArchCandidate, converted: dict[str, Any] | None, profile: Profile,
           work: Path, keep: Path | None, memory: MemoryOptimization | None) -> Screened:
    if converted is None or "error" in converted:
        note = converted["error"] if converted else "not converted"
        return Screened(candidate, Status.FAIL, Status.FAIL, (Rejection.ERROR,), note=note)
    from devicefit.simulator.simulate import simulate

    started = time.perf_counter()
    index = converted["index"]
    name = f"{index:04d}" if isinstance(index, int) else index
    data, saved = planned((work / f"{name}.tflite").read_bytes(), profile, candidate.label(),
                          memory)
    path = (keep or work) / f"{candidate.key}.tflite"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
    report = simulate(path, profile, strict=True)
    return Screened(
        candidate, report.verdict, report.status, rejections(report),
        flash_bytes=report.memory.flash_bytes if report.memory is not None else None,
        arena_bytes=static_arena_bytes(report), offline_plan_saved_bytes=saved,
        latency_ms=report.latency.estimated_device_ms if report.latency else None,
        latency_band_ms=report.latency.band_ms if report.latency else None,
        parameters=int(converted["parameters"]), convert_seconds=float(converted["seconds"]),
        judge_seconds=time.perf_counter() - started, path=str(path) if keep else None)


def planned(data: bytes, profile: Profile, name: str,
            memory: MemoryOptimization | None = None) -> tuple[bytes, int]:
    """``data`` with TFLM's offline arena plan where the target takes one and it lowers the
    arena (planned without running anything; with ``memory``'s patches where they lower it
    more), and the bytes it saved (0: TFLM's own plan was as good). The screen judges this
    file and the search writes it: the same arena."""
    if not target_for(profile).offline_plan:
        return data, 0
    from devicefit.simulator.optimize import optimize_model_bytes

    options = memory.options() if memory is not None else {}
    data, plan = optimize_model_bytes(data, profile, verify=False, name=name, **options)
    return data, plan.reduction_bytes if plan.changed else 0


def rejections(report: Report) -> tuple[Rejection, ...]:
    out = [Rejection(b.name) for b in report.budgets if not b.ok]
    if report.compatibility is not None and not report.compatibility.supported:
        out.append(Rejection.OPS)
    if BudgetName.LATENCY in report.unchecked_budgets:
        out.append(Rejection.UNESTIMATED)
    if not out and not report.ok:  # a verdict with no named cause: never pass it silently
        out.append(Rejection.ERROR)
    return tuple(out)
