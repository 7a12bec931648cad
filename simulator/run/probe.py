"""Op support asked of the runtime itself, one operator signature at a time.

The op tables (:mod:`simulator.targets.tflm.ops`, :mod:`simulator.targets.litert.ops`) were probed
from the pinned wheels with synthetic one-op models, then generalised; a generalisation can
be wrong on a model nobody probed (TFLM's own ``keyword_scrambled``: an int8 → int16 softmax
whose output zero point is −32768; an untrained MobileNetV2 whose softmax input scale is
7.8e-9, which TFLM aborts on). So for a TFLM or LiteRT profile every distinct operator
*signature* of the model — op and version, options, and for every input, output and
intermediate its type, shape pattern (rank, which dimensions are 1), constness, variable
flag and the quantization its kernel checks (zero points, per-tensor or per-channel, each
scale's power of two) — is cut out of the model with its real tensors and data
(:func:`simulator.read.writer.cut_ops`; weights a DEQUANTIZE or DENSIFY computes from constants
come with their producers, as the runtime folds them) and prepared and invoked once in the
real runtime, in a child process (:mod:`simulator.run.runtimes._probe_worker`, the runners
``--run`` uses).

The table stays the fast first answer; where the runtime answers otherwise, the runtime
wins and the report says so (``compatibility.disagreements``: the operator, the table's
answer, the runtime's). Answers are cached on disk by the signature's hash and the runtime
wheel's version (``$DEVICEFIT_CACHE/op-probe`` or ``~/.cache/devicefit/op-probe``, one
atomically written file per signature), so a model whose signatures were seen before starts
no child at all. Costs: ``benchmarks/bench_op_probe.py`` (docs/benchmarks.md "Public corpus
and op support").

The probe knows the model's constants but not its run-time values, so where its answer
could be about made-up data it does not count, and the table's answer stands (the report
lists each such op with why): control flow (IF, WHILE, CALL_ONCE: their bodies are other
subgraphs), resource/variant/string tensors, ops compiled for an accelerator, files whose
constants lie after the flatbuffer (they cannot be cut up), tensors with dynamic dimensions
past the batch (the stored sizes are placeholders), and a refusal at invoke of an op fed run-time integers
(shapes, indices: "num_input_elements != num_output_elements" on invented values) unless the
kernel refuses a type ("Type 'INT32' is not supported by FLOOR_DIV").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Operator, Subgraph, Tensor
from devicefit.simulator.read.reader import constant_values
from devicefit.simulator.report.report import Disagreement, ProbeSummary
from devicefit.simulator.target import TARGETS
from devicefit.simulator.types import UnsupportedOp

#: Version of the signature and answer format: part of every cache key.
FORMAT = 3
#: Seconds the children of one model and runtime may take together, and how many may be
#: started (a crash ends one): a hostile file whose every op kills its child, or hangs it,
#: costs a bounded wait; what is left unasked keeps the table's answer.
PROBE_BUDGET_S = 45.0
MAX_CHILDREN = 8
_NO_ANSWER = (f"no answer: the runtime hung on it, or the probe's budget ({MAX_CHILDREN} "
              f"child processes, {PROBE_BUDGET_S:g} s) was spent first")
#: Address space of a probe child (as a run's worker).
CHILD_MEMORY_BYTES = 8 * 1024**3
_CONTROL_FLOW = frozenset({"IF", "WHILE", "CALL_ONCE"})
_OPAQUE_DTYPES = frozenset({"resource", "variant", "string"})


@dataclass(frozen=True)
class ProbeRuntime:
    """The runtime a profile's op support is asked of: a runner and how it is set up."""

    runner: str
    xnnpack: bool
    #: ``"<wheel> <version>"``, in every cache key: a new wheel asks again.
    wheel: str
    #: Whether the runner honours ``xnnpack`` (its target's ``xnnpack_option``).
    honours_xnnpack: bool = False

    @property
    def label(self) -> str:
        delegate = {True: " (XNNPACK)", False: " (builtin kernels)"}[self.xnnpack]
        return self.wheel + (delegate if self.honours_xnnpack else "")


@dataclass(frozen=True)
class ProbeAnswer:
    """What the runtime did with one operator's cut-out model."""

    ok: bool
    #: The stage it stopped in (load, allocate, invoke; a crash's message starts with
    #: "crashed"), "done" when it ran.
    stage: str
    message: str = ""


def probe_runtime(table: str, profile: Profile) -> ProbeRuntime | None:
    """The runtime behind op table ``table`` on ``profile``, None for a table whose
    runtime is not a wheel here (Edge TPU, Ethos-U: their own static analysis) or whose
    wheel is not installed."""
    target = TARGETS.get(table)
    if target is None or target.wheel is None:
        return None
    try:
        version = metadata.version(target.wheel)
    except metadata.PackageNotFoundError:
        return None
    xnnpack = target.xnnpack_option and "xnnpack" in profile.runtime.delegates
    return ProbeRuntime(table, xnnpack, f"{target.wheel} {version}", target.xnnpack_option)


def cache_dir() -> Path:
    root = os.environ.get("DEVICEFIT_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "devicefit") / "op-probe"


# --------------------------------------------------------------------------- signatures
def _quantization(t: Tensor) -> dict | None:
    q = t.quantization
    if q is None or not q.scale:
        return None

    def exponent(s: float) -> int | str:
        return math.floor(math.log2(s)) if math.isfinite(s) and s > 0 else repr(s)

    exponents = sorted({exponent(s) for s in q.scale}, key=str)
    zero_points = sorted(set(q.zero_point))
    return {"channels": "one" if len(q.scale) == 1 else "per-channel",
            "dim": q.quantized_dimension, "log2_scale": exponents[:1] + exponents[-1:],
            "zero_points": zero_points if len(zero_points) <= 4 else "many"}


def folded(sg: Subgraph) -> dict[int, int]:
    """Tensors computed from constants only (an fp16 DEQUANTIZE's or a DENSIFY's output),
    each with the op that computes it: runtimes fold them or hand them to their consumer as
    weights, so the probe treats them as constants and cuts their producers out with the
    consumer."""
    out: dict[int, int] = {}
    for op in sg.operators:  # execution order: producers first
        inputs = [i for i in op.inputs if i >= 0]
        if inputs and all(sg.tensors[i].has_data or i in out for i in inputs):
            out.update(dict.fromkeys((i for i in op.outputs if i >= 0), op.index))
    return out


def producers(sg: Subgraph, op: Operator, constant: dict[int, int]) -> list[int]:
    """The ops (execution order) that compute ``op``'s folded inputs, then ``op``."""
    found: set[int] = set()
    todo = [i for i in op.inputs if i in constant]
    while todo:
        producer = constant[todo.pop()]
        if producer not in found:
            found.add(producer)
            todo += [i for i in sg.operators[producer].inputs if i in constant]
    return [*sorted(found), op.index]


#: Integer constants up to this many elements are parameters (SLICE's begin and size, an
#: axis, a permutation, paddings, a new shape), not weights: their values decide what the
#: kernel does — an out-of-range begin crashes it where another begin runs — so they are
#: part of the signature. Weights stay out: their values never decide support.
PARAMETER_ELEMENTS = 8
_PARAMETER_DTYPES = frozenset({"int32", "int64"})


def _tensor_class(model: Model, sg: Subgraph, index: int, constant: dict[int, int]
                  ) -> dict | None:
    if index < 0:
        return None
    t = sg.tensors[index]
    dims = t.shape_signature if t.is_dynamic and t.shape_signature is not None else t.shape
    found = {"dtype": t.dtype, "dims": ["?" if d < 0 else d if d <= 1 else "n" for d in dims],
             "const": (t.has_data and not t.data_after_flatbuffer) or index in constant,
             "variable": t.is_variable, "sparse": t.is_sparse, "quant": _quantization(t)}
    if t.has_data and t.dtype in _PARAMETER_DTYPES and t.num_elements <= PARAMETER_ELEMENTS:
        values = constant_values(model, t)
        if values is not None:
            found["values"] = [int(v) for v in values.reshape(-1)]
    return found


def op_signature(model: Model, sg: Subgraph, op: Operator, constant: dict[int, int]) -> dict:
    """What an op's kernel decides on, without its weights' values or exact sizes (and the
    signatures of the ops that compute its folded weights, which are cut out with it)."""
    def tensors(indices: tuple[int, ...]) -> list[dict | None]:
        return [_tensor_class(model, sg, i, constant) for i in indices]

    chain = producers(sg, op, constant)[:-1]
    return {"op": op.op_name, "version": op.version,
            "options": json.loads(json.dumps(dict(op.options), sort_keys=True, default=str)),
            "inputs": tensors(op.inputs), "outputs": tensors(op.outputs),
            "intermediates": tensors(op.intermediates),
            "folded_from": [op_signature(model, sg, sg.operators[i], constant) for i in chain]}


def signature_key(signature: dict, runtime: ProbeRuntime) -> str:
    text = json.dumps({"format": FORMAT, "runtime": runtime.label, "op": signature},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def not_probed(sg: Subgraph, op: Operator) -> str | None:
    """Why this op is not asked of the runtime on its own, else None."""
    tensors = [sg.tensors[i] for i in (*op.inputs, *op.outputs) if i >= 0]
    if op.op_name in _CONTROL_FLOW:
        return "control flow: its bodies are other subgraphs"
    if op.is_custom and any(t.compiled_op == op.op_name.removeprefix("CUSTOM:")
                            for t in TARGETS.values()):
        return "compiled for an accelerator"
    if any(t.dtype in _OPAQUE_DTYPES for t in tensors):
        return "resource, variant or string tensors only mean something inside the model"
    if any(t.is_dynamic and any(d < 0 for d in (t.shape_signature or ())[1:])
           for t in tensors):
        # A dynamic batch runs at the stored 1, as --run does; other dynamic sizes stored
        # as 1 are placeholders (one audio sample) no real input has.
        return "dynamic dimensions: the sizes stored in the file are placeholders"
    return None


def _integer_fed(sg: Subgraph, op: Operator, constant: dict[int, int]) -> bool:
    """True when the op reads integers computed at run time (shapes, indices, axes): values
    the probe has to invent, so a failure at invoke may be the made-up data's."""
    return any(sg.tensors[i].dtype in ("int32", "int64", "bool") and not sg.tensors[i].has_data
               and i not in constant for i in op.inputs if i >= 0)


#: A kernel refusing a type, not a value ("Type 'INT32' is not supported by FLOOR_DIV").
_TYPE_REFUSAL = re.compile(r"\b(type|Type|TYPE)\b|\b(U?INT\d+|FLOAT\d+|BOOL)\b.*support")


# --------------------------------------------------------------------------- parent side
@dataclass(frozen=True)
class ProbeOutcome:
    """Answers per (subgraph, op index) and what it took to get them."""

    answers: dict[tuple[int, int], ProbeAnswer]
    summary: ProbeSummary


def probe_ops(model: Model, runtime: ProbeRuntime) -> ProbeOutcome:
    """Ask ``runtime`` about every probeable operator of ``model``: cached answers first,
    the rest in child processes (one per batch; a crash ends a child, the next one goes on
    after the operator that killed it)."""
    keys: dict[tuple[int, int], str] = {}
    skipped: list[str] = []
    cuts: dict[str, tuple[int, list[int]]] = {}
    outside = any(t.data_after_flatbuffer for sg in model.subgraphs for t in sg.tensors)
    constants = {sg.index: folded(sg) for sg in model.subgraphs}
    for sg in model.subgraphs:
        constant = constants[sg.index]
        for op in sg.operators:
            where = f"{sg.index}:{op.index}" if sg.index else str(op.index)
            # A file with constants after its flatbuffer cannot be cut up at all.
            why = ("the file keeps constants after its flatbuffer" if outside else
                   None if Path(model.path).is_file() else "the model is not a file here")
            if why := why or not_probed(sg, op):
                skipped.append(f"{op.op_name} (op {where}): {why}")
                continue
            if op.outputs and all(i in constant for i in op.outputs if i >= 0):
                continue  # computes weights from constants: asked with their consumer
            key = signature_key(op_signature(model, sg, op, constant), runtime)
            keys[(sg.index, op.index)] = key
            cuts.setdefault(key, (sg.index, producers(sg, op, constant)))
    folder = cache_dir()
    known = {k: a for k in cuts if (a := _cached(folder, k)) is not None}
    missing = [(sgi, ops, k) for k, (sgi, ops) in cuts.items() if k not in known]
    got, children = _probe_in_children(model.path, runtime, missing) if missing else ({}, 0)
    for key, answer in got.items():
        _store(folder, key, runtime, answer)
    known.update(got)
    answers: dict[tuple[int, int], ProbeAnswer] = {}
    unanswered = []
    for (sgi, index), k in keys.items():
        a, op = known.get(k), model.subgraphs[sgi].operators[index]
        if (isinstance(a, ProbeAnswer) and not a.ok and a.stage == "invoke"
                and not _TYPE_REFUSAL.search(a.message)
                and _integer_fed(model.subgraphs[sgi], op, constants[sgi])):
            a = (f"refused at invoke on the integers the probe made up for its run-time "
                 f"shape or index inputs ({a.message}): not counted")
        if isinstance(a, ProbeAnswer):
            answers[(sgi, index)] = a
        else:
            where = f"{sgi}:{index}" if sgi else str(index)
            unanswered.append(f"{op.op_name} (op {where}): {a or _NO_ANSWER}")
    fresh = [k for k in got if isinstance(got[k], ProbeAnswer)]
    summary = ProbeSummary(runtime=runtime.label, signatures=len(cuts),
                           cached=len(cuts) - len(missing), probed=len(fresh),
                           children=children, not_probed=tuple(skipped + unanswered))
    return ProbeOutcome(answers, summary)


def _cached(folder: Path, key: str) -> ProbeAnswer | str | None:
    """The stored answer, or why the op cannot be asked alone; None: not stored."""
    try:
        data = json.loads((folder / f"{key}.json").read_text())
        if "skipped" in data:
            return str(data["skipped"])
        return ProbeAnswer(bool(data["ok"]), str(data["stage"]), str(data["message"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or damaged: ask again


def _store(folder: Path, key: str, runtime: ProbeRuntime, answer: ProbeAnswer | str) -> None:
    entry = ({"skipped": answer} if isinstance(answer, str) else
             {"ok": answer.ok, "stage": answer.stage, "message": answer.message})
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"{key}.json", json.dumps({"runtime": runtime.label, **entry}))
    except (OSError, DevicefitError):
        pass  # a read-only or full cache costs the next run its speed, not this answer


def _probe_in_children(path: str, runtime: ProbeRuntime,
                       todo: list[tuple[int, list[int], str]]
                       ) -> tuple[dict[str, ProbeAnswer | str], int]:
    """Answers (or why none) by key, and the number of children it took."""
    from devicefit.simulator.run.runtimes import describe_exit, spawn

    answers: dict[str, ProbeAnswer | str] = {}
    children = 0
    deadline = time.monotonic() + PROBE_BUDGET_S
    while todo and children < MAX_CHILDREN and (left := deadline - time.monotonic()) > 1:
        with tempfile.TemporaryDirectory(prefix="devicefit-probe-") as tmp:
            work = Path(tmp)
            (work / "request.json").write_text(json.dumps(
                {"runtime": runtime.runner, "xnnpack": runtime.xnnpack,
                 "model": str(Path(path).resolve()), "ops": todo, "dir": str(work),
                 "memory_bytes": CHILD_MEMORY_BYTES}))
            proc, timed_out = spawn(work, left, "devicefit.simulator.run.runtimes._probe_worker")
            children += 1
            answers.update(_answers(work / "answers.jsonl"))
            current = _read(work / "current")
            stage = _read(work / "stage") or "load"
        if current is None or current in answers:
            if proc is None or proc.returncode != 0:
                break  # died before its first op, or after its last: nothing more to learn
            todo = []
            continue
        if not timed_out and proc is not None:
            answers[current] = ProbeAnswer(False, stage,
                                           f"crashed ({describe_exit(proc.returncode)})")
        done = [k for _, _, k in todo].index(current)
        todo = todo[done + 1:]
    return answers, children


def _answers(path: Path) -> dict[str, ProbeAnswer | str]:
    """The child's answers by key: a :class:`ProbeAnswer`, or why it could not ask."""
    out: dict[str, ProbeAnswer | str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            a = json.loads(line)
        except ValueError:
            continue  # the line a crash cut short
        out[a["key"]] = a["skipped"] if "skipped" in a else ProbeAnswer(a["ok"], a["stage"],
                                                                        a["message"])
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


# --------------------------------------------------------------------------- the verdict
def scales(sg: Subgraph, op: Operator) -> str:
    """The quantization scales of an op's tensors, for a crash message (an abort at
    prepare is most often a scale the kernel cannot turn into a multiplier)."""
    def one(role: str, indices: tuple[int, ...]) -> list[str]:
        out = []
        for k, i in enumerate(indices):
            q = sg.tensors[i].quantization if i >= 0 else None
            if q is not None and q.scale:
                low, high = min(q.scale), max(q.scale)
                span = f"{low:.3g}" if low == high else f"{low:.3g}…{high:.3g}"
                out.append(f"{role} {k} {span}")
        return out
    return ", ".join(one("input", op.inputs) + one("output", op.outputs)) or "none"


def reconcile(model: Model, table: str, runtime: ProbeRuntime,
              findings: Iterable[UnsupportedOp]
              ) -> tuple[list[UnsupportedOp], tuple[Disagreement, ...], ProbeSummary]:
    """The table's ``findings`` with the runtime's answers winning where they differ, the
    differences, and the probe's summary."""
    outcome = probe_ops(model, runtime)
    by_op = {(u.subgraph, u.op_index): u for u in findings}
    kept = [u for where, u in by_op.items() if where not in outcome.answers
            or not outcome.answers[where].ok]
    disagreements = []
    constants = {sg.index: folded(sg) for sg in model.subgraphs}
    for (sg, index), answer in sorted(outcome.answers.items()):
        op = model.subgraphs[sg].operators[index]
        found = by_op.get((sg, index))
        chain = producers(model.subgraphs[sg], op, constants[sg])[:-1]
        if not answer.ok and found is None and any((sg, p) in by_op for p in chain):
            continue  # its weights' producer is refused already: the cut failed there
        if answer.ok and found is not None:
            disagreements.append(Disagreement(index, op.op_name, found.reason,
                                              "runs (one-op model prepared and invoked)",
                                              "probe", sg))
        elif not answer.ok and found is None:
            said = f"{runtime.wheel} refuses it at {answer.stage}: {answer.message}"
            if answer.message.startswith("crashed"):
                said += f"; its scales: {scales(model.subgraphs[sg], op)}"
            kept.append(UnsupportedOp(index, op.op_name, f"{said} (asked of the runtime with "
                                      f"a one-op model; the {table} table missed it)", sg))
            disagreements.append(Disagreement(index, op.op_name, "supported", said,
                                              "probe", sg))
    kept.sort(key=lambda u: (u.subgraph, u.op_index))
    return kept, tuple(disagreements), outcome.summary
