"""The process plumbing of TensorFlow conversion: :mod:`sdk.convert.transform` (the work)
runs in a child process, like the native runtimes.

The parent (the CLI) never imports TensorFlow for a model given as a path: it starts
``python -m sdk.convert.tfprocess WORKDIR`` and talks to it with JSON lines. The child reports
each stage as it starts and progress within it; once the model is loaded it asks for data
(``need_data`` with the input shape), which the parent loads, checks and hands over as
``.npy`` files; at the end it writes the ``.tflite`` (and optional float baseline and float
reference outputs) into WORKDIR. The child's stderr (TensorFlow's native log: absl, oneDNN
and CUDA start-up lines, the MLIR quantizer's ``fully_quantize: …`` lines; faulthandler's
stack on a crash, tracebacks) goes to ``WORKDIR/converter.log``, never to the terminal; the
log is kept and named in the message when the conversion fails, and deleted when it
succeeds.

A native crash (the child dies of a signal), a hang (no event for :data:`STALL_TIMEOUT_S`)
or an error becomes one :class:`~simulator.errors.DevicefitError` naming the stage.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from devicefit.sdk.convert import diagnose
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.diagnose import ConversionError
from devicefit.sdk.types import Progress
from devicefit.simulator import errors
from devicefit.simulator.infra.signals import deferred, delivered
from devicefit.simulator.run import zygote

#: Seconds without any event from the child before it counts as hung. Fine-tuning reports
#: every batch and calibration every sample; MLIR conversion of a big model is the longest
#: silent step (minutes). ``DEVICEFIT_CONVERT_STALL_S`` overrides it.
STALL_TIMEOUT_S = 900.0
LOG_NAME = "converter.log"
#: Longest wait for the child's next event before looking again: a signal that another
#: thread took (NumPy's, the progress bar's) does not wake the wait, and its handler runs
#: only when the wait ends.
POLL_S = 0.5
#: Error classes the child may report by name (a missing extra's message is already whole).
_ERRORS = {cls.__name__: cls for cls in (
    errors.UsageError, errors.InputError, errors.ProfileError, errors.ModelFormatError,
    errors.RuntimeFailure)} | {errors.MissingExtra.__name__: errors.UsageError}

#: Imported once by the zygote the conversion children are forked from
#: (:mod:`simulator.run.zygote`): a conversion after the first in a process starts in
#: milliseconds instead of TensorFlow's ~8 s import.
PRELOAD = ("numpy", "devicefit.sdk.convert.transform", "tensorflow", "keras")


# --------------------------------------------------------------------------- parent side
def run_in_child(request: Any, supply: Callable[[tuple[int, ...]], Any],
                 stage: Callable[[str], None], progress: Progress | None = None) -> Any:
    """Run :func:`sdk.convert.transform.run` for ``request`` in a child; return its TFResult.

    The work folder is made, and the ``try`` that removes it entered, with the stopping
    signals held: a signal anywhere after it was made, while the fork server starts
    (TensorFlow's import, seconds) included, removes it with the child."""
    with deferred():
        work = Path(tempfile.mkdtemp(prefix="devicefit-convert-"))
        child: zygote.Started | None = None
        keep_log = False
        try:
            with delivered():
                child = _start(request, work)
                return _converse(child, work, supply, stage, progress)
        except ConversionError as exc:
            keep_log = "converter log:" in str(exc)
            raise
        finally:  # signals held: the child and its folder go whole, whatever comes now
            if child is not None:
                if child.poll() is None:
                    zygote.kill(child)
                _close(*(s for s in (child.stdin, child.stdout) if s is not None))
            _cleanup(work, keep_log)


def _start(request: Any, work: Path) -> zygote.Started:
    """The conversion child for ``request``, working in ``work``."""
    (work / "request.json").write_text(json.dumps(dataclasses.asdict(request)))
    env = zygote.child_env(TF_CPP_MIN_LOG_LEVEL="1")  # its stderr is the log: TF's warnings
    # TensorFlow leaves __autograph_generated_file* and folders in $TMPDIR, and a killed
    # child cleans nothing: its temp files go where this process removes them.
    (work / "tmp").mkdir()
    env["TMPDIR"] = str(work / "tmp")
    with open(work / LOG_NAME, "wb") as log:
        return zygote.popen("devicefit.sdk.convert.tfprocess", [str(work)], preload=PRELOAD,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=log)


def _converse(child: zygote.Started, work: Path, supply: Callable[[tuple[int, ...]], Any],
              stage: Callable[[str], None], progress: Progress | None) -> Any:
    """The child's events to its end: its TFResult, or the error it reported or died of."""
    from devicefit.sdk.convert.transform import TFResult

    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None  # both PIPE
    log_path = work / LOG_NAME
    stall = float(os.environ.get("DEVICEFIT_CONVERT_STALL_S", STALL_TIMEOUT_S))
    state = {"stage": "start"}
    reported: dict[str, Any] | None = None
    done: dict[str, Any] | None = None
    for event in _stalled_is_an_error(_events(child, stdout, stall), state, stall, log_path):
        if "stage" in event:
            state["stage"] = event["stage"]
            stage(event["stage"])
        elif "progress" in event and progress is not None:
            progress(*event["progress"])
        elif "need_data" in event:
            bundle = supply(tuple(event["need_data"]))
            try:
                stdin.write((json.dumps(_save_bundle(bundle, work)) + "\n").encode())
                stdin.flush()
            except BrokenPipeError:  # it died meanwhile: its exit status says how
                pass
        elif "error" in event:
            reported = event["error"]
        elif "done" in event:
            done = event["done"]
    code = child.wait()
    current = state["stage"]
    if code < 0:
        raise ConversionError(diagnose.crash(code, current, _read(log_path),
                                             reported_layers(work))
                              + f" (converter log: {log_path})")
    if reported is not None:
        cls = _ERRORS.get(reported["type"], ConversionError)
        message = reported["message"]
        if cls is ConversionError:
            message += f" (converter log: {log_path})"
        raise cls(message)
    if code != 0 or done is None:
        raise ConversionError(f"the conversion process failed in stage '{current}' "
                              f"(exit {code}) (converter log: {log_path})")
    return TFResult(tflite=(work / "model.tflite").read_bytes(),
                    baseline=_read_optional(work / "baseline.tflite"),
                    reference=np.load(work / "reference.npy")
                    if (work / "reference.npy").exists() else None,
                    **{**done, "input_shape": tuple(done["input_shape"])})


def _stalled_is_an_error(events: Iterator[dict[str, Any]], state: dict[str, str], stall: float,
                         log_path: Path) -> Iterator[dict[str, Any]]:
    try:
        yield from events
    except TimeoutError:
        raise ConversionError(
            f"TensorFlow stopped responding in stage '{state['stage']}' (nothing for "
            f"{stall:.0f} s); the conversion process was stopped (converter log: {log_path})"
        ) from None


def reported_layers(work: Path) -> dict[str, str]:
    """Layer name → class, as the child wrote it after loading (empty before that)."""
    try:
        return json.loads((work / "layers.json").read_text())
    except (OSError, ValueError):
        return {}


def _events(child: zygote.Started, stdout: IO[bytes], stall: float
            ) -> Iterator[dict[str, Any]]:
    """JSON events from the child's ``stdout`` until it closes; a stall kills the child and
    raises TimeoutError."""
    sel = selectors.DefaultSelector()
    sel.register(stdout, selectors.EVENT_READ)
    buffer = b""
    last = time.monotonic()
    try:
        while True:
            if not sel.select(timeout=min(POLL_S, stall)):
                if time.monotonic() - last > stall:
                    zygote.kill(child)
                    raise TimeoutError
                continue
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                return
            last = time.monotonic()
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
    finally:
        sel.close()


def _save_bundle(bundle: Any, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("calibration", "evaluation", "training"):
        ds: Dataset | None = getattr(bundle, name)
        if ds is None:
            continue
        np.save(work / f"{name}_x.npy", ds.x)
        if ds.y is not None:
            np.save(work / f"{name}_y.npy", ds.y)
        out[name] = {"source": ds.source, "random": ds.random, "y": ds.y is not None}
    return out


def _close(*streams: IO[bytes]) -> None:
    for stream in streams:
        try:
            stream.close()
        except OSError:  # a dead child's stdin: nothing left to flush
            pass


def _cleanup(work: Path, keep_log: bool) -> None:
    if not keep_log:
        shutil.rmtree(work, ignore_errors=True)
        return
    for f in work.iterdir():
        if f.is_dir():
            shutil.rmtree(f, ignore_errors=True)
        elif f.name != LOG_NAME:
            f.unlink(missing_ok=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _read_optional(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


# --------------------------------------------------------------------------- child side
def main(work_dir: str) -> int:
    import faulthandler

    work = Path(work_dir)
    # The protocol keeps the real stdout; everything else printed (Keras' exporter, native
    # TensorFlow code writing to fd 1) goes to the log with stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    faulthandler.enable(file=sys.stderr)

    def emit(**event: Any) -> None:
        proto.write(json.dumps(event) + "\n")

    def save_layers(layers: dict[str, str]) -> None:
        (work / "layers.json").write_text(json.dumps(layers))

    try:
        from devicefit.sdk.convert import transform

        request = transform.TFRequest(**json.loads((work / "request.json").read_text()))
        result = transform.run(request, None, _supplier(work, emit), lambda n: emit(stage=n),
                            _throttled(emit), on_layers=save_layers)
        (work / "model.tflite").write_bytes(result.tflite)
        if result.baseline is not None:
            (work / "baseline.tflite").write_bytes(result.baseline)
        if result.reference is not None:
            np.save(work / "reference.npy", result.reference)
        emit(done={"source": result.source, "kind": result.kind,
                   "input_shape": list(result.input_shape), "converter": result.converter,
                   "float_weight_bytes": result.float_weight_bytes, "layers": result.layers,
                   "sparsity": result.sparsity})
        return 0
    except Exception as exc:
        traceback.print_exc()
        known = exc if isinstance(exc, errors.DevicefitError) else \
            errors.missing_extra(exc, "the converter")
        if known is not None:
            emit(error={"type": type(known).__name__, "message": str(known)})
            return 2
        emit(error={"type": "internal", "message": f"internal error: {type(exc).__name__}: "
                    f"{diagnose.first_error_line(str(exc)) if str(exc) else ''}"})
        return 3


def _supplier(work: Path, emit: Callable[..., None]) -> Callable[[tuple[int, ...]], Any]:
    from devicefit.sdk.convert.transform import DataBundle

    def supply(shape: tuple[int, ...]) -> DataBundle:
        emit(need_data=list(shape))
        answer = json.loads(sys.stdin.readline() or "{}")
        bundle = DataBundle()
        for name, meta in answer.items():
            y = np.load(work / f"{name}_y.npy") if meta["y"] else None
            setattr(bundle, name, Dataset(np.load(work / f"{name}_x.npy"), y, meta["source"],
                                          meta["random"]))
        return bundle
    return supply


def _throttled(emit: Callable[..., None]) -> Progress:
    last = {"t": 0.0}

    def progress(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - last["t"] > 0.2:
            last["t"] = now
            emit(progress=[stage, done, total])
    return progress


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
