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

import dataclasses
import hashlib
import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.infra import distributions
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Operator, Subgraph, Tensor
from devicefit.simulator.read.reader import constant_ints
from devicefit.simulator.report.report import Disagreement, ProbeSummary
from devicefit.simulator.target import TARGETS
from devicefit.simulator.types import UnsupportedOp

#: Version of the signature and answer format: part of every cache key.
FORMAT = 4
#: Seconds the children of one model and runtime may take together, and how many may be
#: started (a crash ends one, and an op that crashed after others is asked again alone): a
#: hostile file whose every op kills its child, or hangs it, costs a bounded wait; what is
#: left unasked keeps the table's answer, with why.
PROBE_BUDGET_S = 45.0
MAX_CHILDREN = 128
#: How every reason for an op the runtime was not asked about starts.
NO_ANSWER = "no answer:"
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
    #: The profile's interpreter threads: a kernel's memory use can depend on them.
    threads: int = 1

    @property
    def label(self) -> str:
        delegate = {True: " (XNNPACK)", False: " (builtin kernels)"}[self.xnnpack]
        threads = f", {self.threads} threads" if self.threads != 1 else ""
        return self.wheel + (delegate if self.honours_xnnpack else "") + threads

    def other_path(self) -> ProbeRuntime | None:
        """The same runtime with LiteRT's default delegate switched the other way (None
        for a runner without one): asked where the profile's own path refuses an op, so
        the report says what each path does."""
        if not self.honours_xnnpack:
            return None
        return dataclasses.replace(self, xnnpack=not self.xnnpack)


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
    version = distributions.version(target.wheel)
    if version is None:  # where the quick look cannot tell: importlib.metadata (~0.03 s)
        from importlib import metadata

        try:
            version = metadata.version(target.wheel)
        except metadata.PackageNotFoundError:
            return None
    xnnpack = target.xnnpack_option and "xnnpack" in profile.runtime.delegates
    return ProbeRuntime(table, xnnpack, f"{target.wheel} {version}", target.xnnpack_option,
                        max(1, profile.runtime.threads))


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
        values = constant_ints(model, t)
        if values is not None:
            found["values"] = list(values)
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
    #: Where the profile's path refused an op: what the runtime's other path does with it
    #: (LiteRT without, or with, its default XNNPACK delegate), and that path's label.
    elsewhere: dict[tuple[int, int], ProbeAnswer] = dataclasses.field(default_factory=dict)
    other_label: str = ""


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
    asked = _ask_all(model.path, runtime, cuts)
    answers: dict[tuple[int, int], ProbeAnswer] = {}
    unanswered = []
    for (sgi, index), k in keys.items():
        a, op = asked.known.get(k), model.subgraphs[sgi].operators[index]
        if (isinstance(a, ProbeAnswer) and not a.ok and a.stage == "invoke"
                and not _TYPE_REFUSAL.search(a.message)
                and _integer_fed(model.subgraphs[sgi], op, constants[sgi])):
            a = (f"refused at invoke on the integers the probe made up for its run-time "
                 f"shape or index inputs ({a.message}): not counted")
        if isinstance(a, ProbeAnswer):
            answers[(sgi, index)] = a
        else:
            where = f"{sgi}:{index}" if sgi else str(index)
            unanswered.append(f"{op.op_name} (op {where}): {a or NO_ANSWER + ' none came'}")
    other = runtime.other_path()
    refused = {k: cuts[k] for k, a in asked.known.items()
               if k in cuts and isinstance(a, ProbeAnswer) and not a.ok}
    elsewhere: dict[tuple[int, int], ProbeAnswer] = {}
    children = asked.children
    if other is not None and refused:
        # Where the profile's path refuses an op, the other path is asked too, so the
        # report says both (LiteRT's builtin kernels run inside XNNPACK's path as well).
        other_keys = {k: signature_key(op_signature_of(model, cuts[k]), other)
                      for k in refused}
        second = _ask_all(model.path, other, {other_keys[k]: refused[k] for k in refused})
        children += second.children
        elsewhere = {where: a for where, k in keys.items() if k in other_keys
                     and isinstance(a := second.known.get(other_keys[k]), ProbeAnswer)}
    summary = ProbeSummary(runtime=runtime.label, signatures=len(cuts),
                           cached=asked.cached, probed=asked.probed,
                           children=children, not_probed=tuple(skipped + unanswered))
    return ProbeOutcome(answers, summary, elsewhere, other.label if other else "")


def op_signature_of(model: Model, cut: tuple[int, list[int]]) -> dict:
    """The signature of the op a cut ``(subgraph, [producers..., op])`` asks about."""
    sg = model.subgraphs[cut[0]]
    return op_signature(model, sg, sg.operators[cut[1][-1]], folded(sg))


@dataclass(frozen=True)
class _Asked:
    """Answers by signature key (cached or fresh; a string: why none), and what it took."""

    known: dict[str, ProbeAnswer | str]
    cached: int
    probed: int
    children: int


def _ask_all(path: str, runtime: ProbeRuntime, cuts: dict[str, tuple[int, list[int]]]
             ) -> _Asked:
    """Every cut answered from the cache, the rest asked of ``runtime`` in children; only
    what a child answered is stored (a budget spent is no answer of the runtime's)."""
    folder = cache_dir()
    known = {k: a for k in cuts if (a := _cached(folder, k, runtime)) is not None}
    missing = [(sgi, ops, k) for k, (sgi, ops) in cuts.items() if k not in known]
    got, unasked, children = (_probe_in_children(path, runtime, missing) if missing
                              else ({}, {}, 0))
    for key, answer in got.items():
        _store(folder, key, runtime, answer)
    known.update(got)
    known.update(unasked)
    return _Asked(known, len(cuts) - len(missing),
                  sum(isinstance(a, ProbeAnswer) for a in got.values()), children)


#: The stages a probe child reports (``done``: it ran; ``release``: it ran, then freeing
#: the interpreter crashed: the kernel wrote outside its buffers).
STAGES = frozenset({"build", "load", "allocate", "invoke", "release", "done"})
#: The largest cache entry read: an answer is a few hundred bytes.
MAX_ENTRY_BYTES = 16 * 1024
_MESSAGE_CHARS = 1000


def answer_from(data: object) -> ProbeAnswer | str | None:
    """An answer as the child wrote it or the cache stored it — a :class:`ProbeAnswer`, or
    why the op cannot be asked alone — or None when it is not one: every field of the
    right type (``ok`` a real bool, not the string "false"), a known stage, ``ok`` exactly
    when the stage is ``done``."""
    if not isinstance(data, dict):
        return None
    if "skipped" in data:
        why = data["skipped"]
        return why if isinstance(why, str) and 0 < len(why) <= _MESSAGE_CHARS else None
    ok, stage, message = data.get("ok"), data.get("stage"), data.get("message")
    if (not isinstance(ok, bool) or not isinstance(stage, str) or stage not in STAGES
            or not isinstance(message, str) or len(message) > _MESSAGE_CHARS
            or ok != (stage == "done")):
        return None
    return ProbeAnswer(ok, stage, message)


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a symlink, FIFO or device) of at
    most ``limit`` bytes, else None. Opened without following a symlink and without
    blocking (a FIFO would wait for a writer forever), then checked on the open file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _cached(folder: Path, key: str, runtime: ProbeRuntime) -> ProbeAnswer | str | None:
    """The stored answer, or why the op cannot be asked alone; None: not stored, or not a
    valid entry of this key and runtime (it is asked again and overwritten, never
    trusted)."""
    raw = read_bounded(folder / f"{key}.json", MAX_ENTRY_BYTES)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if (not isinstance(data, dict) or data.get("key") != key
            or data.get("runtime") != runtime.label):
        return None
    return answer_from({k: v for k, v in data.items() if k not in ("key", "runtime")})


def _store(folder: Path, key: str, runtime: ProbeRuntime, answer: ProbeAnswer | str) -> None:
    entry = ({"skipped": answer} if isinstance(answer, str) else
             {"ok": answer.ok, "stage": answer.stage, "message": answer.message})
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"{key}.json",
                     json.dumps({"key": key, "runtime": runtime.label, **entry}))
    except (OSError, DevicefitError):
        pass  # a read-only or full cache costs the next run its speed, not this answer


Ask = tuple[int, list[int], str]
#: glibc's messages when it finds its heap damaged.
_HEAP = re.compile(r"double free|corrupt|^(malloc|free|realloc|munmap_chunk)\(\)")


@dataclass(frozen=True)
class _Child:
    """What one probe child left: its answers, the op it was on, the stage it was in, its
    exit code (None: killed on the timeout)."""

    answers: dict[str, ProbeAnswer | str]
    current: str | None
    stage: str
    code: int | None
    #: The C library's last complaint about its heap on stderr ("double free or
    #: corruption (!prev)"), which says a kernel wrote outside its buffers.
    heap: str = ""


def _one_child(path: str, runtime: ProbeRuntime, todo: list[Ask], timeout_s: float
               ) -> _Child:
    from devicefit.simulator.run.runtimes import spawn

    with tempfile.TemporaryDirectory(prefix="devicefit-probe-") as tmp:
        work = Path(tmp)
        (work / "request.json").write_text(json.dumps(
            {"runtime": runtime.runner, "xnnpack": runtime.xnnpack, "threads": runtime.threads,
             "model": str(Path(path).resolve()), "ops": todo, "dir": str(work),
             "memory_bytes": CHILD_MEMORY_BYTES}))
        proc, timed_out = spawn(work, timeout_s, "devicefit.simulator.run.runtimes._probe_worker")
        lines = (proc.stderr or b"").decode("utf-8", "replace").splitlines() if proc else []
        heap = next((line.strip() for line in reversed(lines) if _HEAP.search(line)), "")
        return _Child(_answers(work / "answers.jsonl"), _read(work / "current"),
                      _read(work / "stage") or "load",
                      None if timed_out or proc is None else proc.returncode, heap[:120])


def _probe_in_children(path: str, runtime: ProbeRuntime, todo: list[Ask]
                       ) -> tuple[dict[str, ProbeAnswer | str], dict[str, str], int]:
    """The children's answers by key (a string: why the op cannot be cut out alone),
    why the others got none, and the number of children it took.

    A child asks its ops one after the other and frees each interpreter before it writes
    the answer, so a kernel that writes outside its buffers crashes while its own op is
    the current one. A crash is that op's answer only when it is the first its child
    asked; after others, what crashed may be memory an earlier op left broken, so the op
    is asked again alone, and if it runs alone, the ops its child asked before it are
    each asked alone too: every answer comes from a child that ran that op first, the
    same on every run. The rest goes on in a new child.
    """
    from devicefit.simulator.run.runtimes import describe_exit

    answers: dict[str, ProbeAnswer | str] = {}
    unasked: dict[str, str] = {}
    children = 0
    deadline = time.monotonic() + PROBE_BUDGET_S
    queue: list[list[Ask]] = [list(todo)]
    #: Op asked again alone → the ops its crashed child had asked before it.
    company: dict[str, list[Ask]] = {}
    while queue:
        left = deadline - time.monotonic()
        if children >= MAX_CHILDREN or left <= 1:
            spent = (f"{NO_ANSWER} the probe's budget ({MAX_CHILDREN} child processes, "
                     f"{PROBE_BUDGET_S:g} s) was spent before it was asked")
            unasked.update({k: spent for group in queue for *_, k in group
                            if k not in answers})
            break
        group = queue.pop(0)
        if not group:
            continue
        keys = [k for *_, k in group]
        child = _one_child(path, runtime, group, left)
        children += 1
        if child.current is None or child.current not in keys:
            why = (f"{NO_ANSWER} the probe's budget was spent before its child started"
                   if child.code is None else
                   f"{NO_ANSWER} the probe child ended before its first operator "
                   f"({describe_exit(child.code if child.code is not None else 1)})")
            unasked.update({k: why for k in keys if k not in answers})
            continue
        at = keys.index(child.current)
        mine = {k: a for k, a in child.answers.items() if k in keys[:at + 1]}
        if child.code == 0:
            answers.update(mine)
            unasked.update({k: f"{NO_ANSWER} the probe child ended without answering it"
                            for k in keys
                            if k not in answers})
            ran_alone = child.current in company and len(group) == 1
            if ran_alone and isinstance(mine.get(child.current), ProbeAnswer):
                # It runs alone: the crash it was in came from an op before it.
                for earlier in company.pop(child.current):
                    answers.pop(earlier[2], None)
                    queue.insert(0, [earlier])
            continue
        if child.code is None:  # hung: the budget is gone with it
            answers.update({k: a for k, a in mine.items() if k != child.current})
            unasked[child.current] = (f"{NO_ANSWER} the runtime hung on it "
                                      f"({left:.0f} s, the rest of the probe's budget)")
            queue.insert(0, group[at + 1:])
            continue
        # Crashed: the answers before the current op stand; the current op is to blame
        # only when its child asked nothing before it.
        answers.update({k: a for k, a in mine.items() if k != child.current})
        rest = group[at + 1:]
        if at == 0:
            answers[child.current] = ProbeAnswer(
                False, child.stage if child.stage in STAGES - {"done"} else "release",
                f"crashed ({describe_exit(child.code)})" if not child.heap else
                f"crashed ({describe_exit(child.code).partition(':')[0]}; the C library "
                f"found its heap damaged, '{child.heap}': the kernel wrote outside its "
                f"buffers)")
            company.pop(child.current, None)
            queue[:0] = [rest] if rest else []
        else:
            company[child.current] = group[:at]
            queue[:0] = [[group[at]], *([rest] if rest else [])]
    return answers, unasked, children


def _answers(path: Path) -> dict[str, ProbeAnswer | str]:
    """The child's answers by key (lines that are not a valid answer are left out: the
    line a crash cut short)."""
    out: dict[str, ProbeAnswer | str] = {}
    raw = read_bounded(path, 64 * 1024 * 1024)
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        try:
            a = json.loads(line)
        except (ValueError, RecursionError):
            continue
        key = a.get("key") if isinstance(a, dict) else None
        answer = answer_from({k: v for k, v in a.items() if k != "key"}) if key else None
        if isinstance(key, str) and answer is not None:
            out[key] = answer
    return out


def _read(path: Path) -> str | None:
    raw = read_bounded(path, 4096)
    return raw.decode("utf-8", "replace").strip() or None if raw is not None else None


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


def describe(label: str, answer: ProbeAnswer) -> str:
    """What runtime ``label`` did with an op, in a sentence."""
    if answer.ok:
        return f"{label} runs it"
    if answer.stage == "release":
        return (f"{label} runs it, then {answer.message} freeing the interpreter: the kernel "
                f"wrote outside its buffers")
    return f"{label} refuses it at {answer.stage}: {answer.message}"


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
            said = f"{describe(runtime.label, answer)} (the profile's configuration)"
            if (elsewhere := outcome.elsewhere.get((sg, index))) is not None:
                same = (elsewhere.ok, elsewhere.stage) == (answer.ok, answer.stage)
                said += (f"; {outcome.other_label}: the same" if same else
                         f"; {describe(outcome.other_label, elsewhere)}")
            if answer.message.startswith("crashed") and "heap" not in answer.message:
                said += f"; its scales: {scales(model.subgraphs[sg], op)}"
            kept.append(UnsupportedOp(index, op.op_name, f"{said} (asked of the runtime with "
                                      f"a one-op model; the {table} table missed it)", sg))
            disagreements.append(Disagreement(index, op.op_name, "supported", said,
                                              "probe", sg))
    kept.sort(key=lambda u: (u.subgraph, u.op_index))
    return kept, tuple(disagreements), outcome.summary
