"""Run a model for real in its target's runtime, always in a child process.

Native interpreters (TFLite-Micro, LiteRT) can segfault, abort or hang on a model they do
not like, and some crash at teardown. So a run (:meth:`RunSetup.run`, or :func:`run_model`
for a file not read yet) never loads them in this process: it starts ``python -m
simulator.run.runtimes._worker`` with a timeout, exchanges inputs and outputs as ``.npz`` files
in a private temporary folder, and turns a crash, a hang or a refusal into one :class:`RuntimeFailure` naming the runtime and the stage (load / allocate /
invoke) it died in. The worker writes the stage it enters to a file before entering it, so
the stage survives a crash.

Runners (one module each, behind :class:`Runner`) are brought by targets
(:mod:`simulator.targets`): :data:`RUNNERS` is keyed by the target that brings one, and a
target names the runner its models run in (the Edge TPU's CPU reference runs in LiteRT).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.simulator.errors import InputError, RuntimeFailure, UsageError
from devicefit.simulator.infra.fileio import temporary_folder
from devicefit.simulator.read.model import Model
from devicefit.simulator.target import TargetView, runner_for
from devicefit.simulator.types import Runner, RunOptions, RunResult

log = logging.getLogger(__name__)

#: Seed of the default random inputs, so two runs (and two runtimes) see the same data.
INPUT_SEED = 0
#: The most input + output bytes a run handles: a 300-byte model can declare a [1, 2**29]
#: input, and a runner holds inputs and outputs several times over.
MAX_RUN_IO_BYTES = 1024**3
#: Address space of the worker process: a runtime or an input that asks for more fails there,
#: as a refusal, instead of swapping the machine.
WORKER_MEMORY_BYTES = 8 * 1024**3


#: Runner name → factory of its runner (imported lazily: only the child needs the natives):
#: the targets that bring a host runtime (:mod:`simulator.targets`).
RUNNERS: Mapping[str, Callable[[], Runner]] = TargetView(lambda t: t.host_runtime)


def runner_name(runtime: str) -> str:
    """The name of the runner that runs models of the target named ``runtime``
    (:func:`simulator.target.runner_for`)."""
    return runner_for(runtime).name


# --------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    #: ``shape_signature`` (-1 = any size), when the input has dynamic dimensions.
    signature: tuple[int, ...] | None = None

    def accepts(self, shape: tuple[int, ...]) -> bool:
        """True for the stored shape, or any size along a dynamic dimension."""
        if shape == self.shape:
            return True
        sig = self.signature
        return sig is not None and len(sig) == len(shape) and all(
            d < 0 or d == n for d, n in zip(sig, shape))


def input_specs(model: Model) -> list[InputSpec]:
    """The main subgraph's inputs of a :class:`simulator.read.model.Model` (dynamic dims → 1)."""
    sg = model.main
    return [InputSpec(sg.tensors[i].name, tuple(max(d, 1) for d in sg.tensors[i].shape),
                      sg.tensors[i].dtype,
                      sg.tensors[i].shape_signature if sg.tensors[i].is_dynamic else None)
            for i in sg.inputs]


def _numpy_dtype(spec: InputSpec) -> np.dtype:
    try:
        return np.dtype(spec.dtype)
    except TypeError:
        raise InputError(f"input '{spec.name}' has dtype {spec.dtype}, which devicefit cannot "
                         f"generate or check; the runtimes take no {spec.dtype} inputs from "
                         f"Python") from None


def random_inputs(specs: list[InputSpec], seed: int = INPUT_SEED) -> list[np.ndarray]:
    """Random data covering each input's whole quantized range (floats in [-1, 1))."""
    rng = np.random.default_rng(seed)
    out = []
    for s in specs:
        dt = _numpy_dtype(s)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            # int32/int64 inputs are usually indices or lengths: keep them small and valid.
            lo, hi = (info.min, info.max) if dt.itemsize <= 2 else (0, 1)
            out.append(rng.integers(lo, hi, size=s.shape, endpoint=True, dtype=dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 1, size=s.shape, endpoint=True).astype(bool))
        elif dt.kind == "f":
            out.append(rng.uniform(-1.0, 1.0, size=s.shape).astype(dt))
        else:
            raise InputError(f"input '{s.name}' has dtype {s.dtype}; give data with --input")
    return out


def load_inputs(path: str | Path, specs: list[InputSpec]) -> list[np.ndarray]:
    """User data from ``.npy`` (one input) or ``.npz`` (by input name, else in file order).

    Arrays are checked against each input's shape and dtype; a missing batch dimension is
    added, nothing else is converted silently.
    """
    p = Path(path)
    try:
        loaded = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"{p}: cannot read input data ({exc or type(exc).__name__}); give a "
                         f".npy or .npz file") from exc
    if isinstance(loaded, np.ndarray):
        arrays = [loaded]
    else:
        with loaded:
            by_name = {k: loaded[k] for k in loaded.files}
        names = [s.name for s in specs]
        arrays = ([by_name[n] for n in names] if set(names) <= set(by_name)
                  else list(by_name.values()))
    if len(arrays) != len(specs):
        raise InputError(f"{p}: has {len(arrays)} array(s), the model has {len(specs)} input(s) "
                         f"({', '.join(s.name for s in specs)})")
    out = []
    for a, s in zip(arrays, specs, strict=True):
        if not s.accepts(a.shape) and s.accepts((1, *a.shape)):
            a = a[None]
        if not s.accepts(a.shape) or a.dtype != _numpy_dtype(s):
            any_size = " (-1: any size)" if s.signature else ""
            raise InputError(f"{p}: input '{s.name}' needs shape {list(s.signature or s.shape)} "
                             f"{s.dtype}{any_size}, got {list(a.shape)} {a.dtype}")
        out.append(a)
    return out


# --------------------------------------------------------------------------- parent side
@dataclass(frozen=True)
class RunSetup:
    """What every run of one model shares: the model, read once (its file is what the child
    runs), its inputs and the timeout.

    Inputs are ``inputs``, else read from ``input_path`` (:func:`load_inputs`), else
    :func:`random_inputs` (at ``input_shapes``, input name → shape, where given: the
    dynamic dimensions resolved with ``--input-shape``); the last two are made in the child,
    under its memory limit, so a hostile data file or input shape costs the child, not this
    process. Two runs of one setup see the same data (the same file, or the same seed).
    """

    model: Model
    inputs: list[np.ndarray] | None = None
    input_path: str | Path | None = None
    input_shapes: Mapping[str, Sequence[int]] | None = None
    timeout_s: float = 60

    def __post_init__(self) -> None:
        _check_timeout(self.timeout_s)

    def input_request(self, work: Path) -> dict[str, Any]:
        """Where a child in the folder ``work`` takes this setup's inputs from (its
        :func:`worker_inputs` makes or checks them, without reading the model); given
        inputs are written into ``work``."""
        if self.inputs is not None:
            np.savez(work / "inputs.npz", *self.inputs)
            source: dict[str, Any] = {"given": True}
        elif self.input_path is not None:
            source = {"file": str(Path(self.input_path).resolve())}
        else:
            source = {"seed": INPUT_SEED,
                      "shapes": {k: list(v) for k, v in (self.input_shapes or {}).items()}}
        source["specs"] = [asdict(spec) for spec in input_specs(self.model)]
        return source

    def run(self, runtime: str, options: RunOptions) -> RunResult:
        """Run the model in ``runtime`` (a key of :data:`RUNNERS`) in a child process.

        Raises :class:`InputError` for inputs that do not fit the model,
        :class:`RuntimeFailure` when the runtime refuses the model, crashes or exceeds the
        timeout (the child is killed).
        """
        name = runner_name(runtime)
        model, timeout_s = self.model, self.timeout_s
        _check_io_bytes(model)
        # Data read from --input is checked in the child; the placeholder shape shows only
        # here.
        hint = (_stored_shape_hint(model, self.inputs)
                if self.input_path is None and not self.input_shapes else "")
        options = dataclasses.replace(options,
                                      arena_size=options.arena_size or starting_arena(model))
        with temporary_folder("devicefit-run-") as tmp:
            work = Path(tmp)
            request = {"runtime": name, "model": str(Path(model.path).resolve()),
                       "num_outputs": len(model.main.outputs), "options": asdict(options),
                       "dir": str(work), "inputs": self.input_request(work),
                       "memory_bytes": WORKER_MEMORY_BYTES}
            (work / "request.json").write_text(json.dumps(request))
            proc, timed_out = spawn(work, timeout_s)
            stage = _read_stage(work)
            result_file = work / "result.json"
            if timed_out:
                raise RuntimeFailure(f"{name}: no answer after {timeout_s:g} s during "
                                     f"'{stage}' (the model hangs the runtime or needs a "
                                     f"longer --timeout)", stage=stage)
            assert proc is not None  # spawn gives no process only with timed_out
            if result_file.exists():
                result = json.loads(result_file.read_text())
                if not result["ok"] and result["stage"] == "inputs":
                    raise InputError(result["error"])
                if not result["ok"]:
                    raise RuntimeFailure(f"{name} refused the model during "
                                         f"'{result['stage']}': {result['error']}{hint}",
                                         stage=result["stage"])
                if proc.returncode == 0 or stage == "done":
                    return _result_from(result, work)
            freed = (" (the invokes returned; freeing the interpreter found memory a kernel "
                     "had damaged)" if stage == "release" else "")
            raise RuntimeFailure(f"{name} crashed during '{stage}'{freed} "
                                 f"({describe_exit(proc.returncode)})"
                                 f"{_stderr_tail(proc.stderr)}; the model is malformed or hits "
                                 f"a bug in {name} (devicefit ran it in a child process)",
                                 stage=stage, crashed=True)


def run_model(path: str | Path, runtime: str, *, inputs: list[np.ndarray] | None = None,
              input_path: str | Path | None = None,
              runs: int = 1, warmup: int = 1, threads: int = 1, xnnpack: bool = True,
              reference_kernels: bool = False, timeout_s: float = 60,
              arena_size: int | None = None,
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> RunResult:
    """Read ``path`` and run it once in ``runtime`` (see :class:`RunSetup`, whose
    :meth:`~RunSetup.run` a caller with the model already read uses instead)."""
    from devicefit.simulator.read.reader import read_model

    runner_name(runtime)
    options = RunOptions(runs=runs, warmup=warmup, threads=threads, xnnpack=xnnpack,
                         reference_kernels=reference_kernels, arena_size=arena_size)
    _check_timeout(timeout_s)
    setup = RunSetup(read_model(path), inputs, input_path, input_shapes, timeout_s)
    return setup.run(runtime, options)


def _check_timeout(timeout_s: float) -> None:
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise UsageError(f"the timeout must be a finite number > 0 (got {timeout_s:g} s)")


def _stored_shape_hint(model: Model, inputs: list[np.ndarray] | None) -> str:
    """A hint for a refusal when a dynamic input ran at the placeholder shape in the file
    (often [1, 1]: too small for the model's first window or convolution); ``inputs`` None:
    the child generated them at that shape."""
    sg = model.main
    for k, index in enumerate(sg.inputs):
        t = sg.tensors[index]
        stored = tuple(max(d, 1) for d in t.shape)
        if t.is_dynamic and (inputs is None or tuple(inputs[k].shape) == stored):
            return (f" (input '{t.name}' has dynamic dimensions {list(t.shape_signature or ())}"
                    f" and ran at the shape stored in the file, {list(stored)}; give data of "
                    f"a real size with --input)")
    return ""


def _check_io_bytes(model: Model) -> None:
    sg = model.main
    total = sum(sg.tensors[i].nbytes for i in (*sg.inputs, *sg.outputs) if i >= 0)
    if total > MAX_RUN_IO_BYTES:
        raise InputError(f"{model.path}: its inputs and outputs take {total:,} bytes; --run "
                         f"handles up to {MAX_RUN_IO_BYTES:,} (the static figures need no run)")


def worker_inputs(request: dict) -> list[np.ndarray]:
    """The inputs a worker runs with, as :meth:`RunSetup.run` asked for them (child side)."""
    work, source = Path(request["dir"]), request["inputs"]
    if source.get("given"):
        with np.load(work / "inputs.npz", allow_pickle=False) as z:
            return [z[f"arr_{i}"] for i in range(len(z.files))]
    specs = [InputSpec(s["name"], tuple(s["shape"]), s["dtype"],
                       None if s["signature"] is None else tuple(s["signature"]))
             for s in source["specs"]]
    if "file" in source:
        return load_inputs(source["file"], specs)
    shapes = source.get("shapes", {})
    specs = [dataclasses.replace(s, shape=tuple(shapes[s.name])) if s.name in shapes else s
             for s in specs]
    return random_inputs(specs, seed=source["seed"])


def starting_arena(model: Model) -> int:
    """A TFLM arena to try first: twice every non-constant tensor plus room for the tail.

    It only has to be large enough (the planner's placement and the kernels' persistent
    data do not depend on it); the runner grows it if TFLM reports bytes missing.
    """
    activations = sum(t.nbytes for sg in model.subgraphs for t in sg.tensors if not t.has_data)
    return 2 * activations + 256 * 1024 + 64 * sum(len(sg.operators) for sg in model.subgraphs)


#: What a worker imports before it reads its request: the zygote imports it once.
#: (``importlib.metadata``: the target registry reads installed distributions' entry points.)
WORKER_PRELOAD = ("numpy", "importlib.metadata", "devicefit.simulator.run.runtimes._worker",
                  "devicefit.simulator.run.runtimes._probe_worker", "ai_edge_litert.interpreter",
                  "tflite_micro")


def spawn(work: Path, timeout_s: float, module: str = "devicefit.simulator.run.runtimes._worker"
          ) -> tuple[subprocess.CompletedProcess | None, bool]:
    """Run ``python -m <module> WORK/request.json`` in a new session
    (forked from a :mod:`~simulator.run.zygote` that has its imports done), its stderr in
    ``WORK/stderr.txt``; (the finished process, False) or (None, True) on a timeout."""
    from devicefit.simulator.run import zygote

    env = zygote.child_env()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = [str(work / "request.json")]
    done = zygote.run(module, argv, preload=WORKER_PRELOAD, env=env, timeout_s=timeout_s,
                      work=work)
    if done.code is None:
        return None, True
    return subprocess.CompletedProcess([sys.executable, "-m", module, *argv], done.code, None,
                                       done.stderr), False


def _read_stage(work: Path) -> str:
    try:
        return (work / "stage").read_text().strip() or "start"
    except OSError:
        return "start"


#: What a fatal signal from a native runtime usually means.
_SIGNAL_HINTS = {
    "SIGSEGV": "a kernel read or wrote outside its buffers",
    "SIGABRT": "an internal check of the runtime failed, e.g. a quantization scale its "
               "kernels do not accept",
    "SIGBUS": "a misaligned or truncated buffer",
    "SIGFPE": "an arithmetic fault such as an integer division by zero",
}


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"killed by signal {-code}"
        hint = _SIGNAL_HINTS.get(name)
        return f"killed by {name}" + (f": {hint}" if hint else "")
    return f"exit status {code}"


def _stderr_tail(stderr: bytes | None, lines: int = 3) -> str:
    text = (stderr or b"").decode("utf-8", "replace").strip().splitlines()
    useful = [t for t in text if t.strip()][-lines:]
    return (": " + " | ".join(useful)) if useful else ""


def _result_from(result: dict, work: Path) -> RunResult:
    with np.load(work / "outputs.npz", allow_pickle=False) as z:
        outputs = [z[f"arr_{i}"] for i in range(len(z.files))]
    fields = {k: v for k, v in result.items() if k not in ("ok", "stage")}
    return RunResult(outputs=outputs, **fields)


def compare_outputs(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[bool, float | None]:
    """(bit-exact?, max absolute difference) over all outputs of two runs; the difference is
    None when the outputs do not even have the same number or shapes."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return False, None
    diff = max((float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
                for x, y in zip(a, b, strict=True) if x.size), default=0.0)
    exact = all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    return exact, diff
