"""TFLite-Micro runner (the ``tflite-micro`` wheel: reference kernels, 64-bit host).

The wheel's interpreter allocates when it is created, reports failures on fd 2 (not in the
Python exception), and prints its RecordingMicroAllocator figures to fd 2 too; so fd 2 is
captured around both. The arena size does not change what the planner places (head) or
what the kernels keep (tail), so the runner starts generous and grows on "missing" bytes.
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from devicefit.simulator.types import RunOptions, RunResult

_TOTAL = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")
_CATEGORY = re.compile(r"'([^']+)' used (\d+) bytes")
_MISSING = re.compile(r"missing: (\d+)")
_START_ARENA = 1 << 20
_ALIGNMENT = 16  # MicroArenaBufferAlignment()
_MAX_ARENA = 1 << 31
_MAX_TRIES = 6
_LIBC = ctypes.CDLL(None)


@contextmanager
def capture_fd2() -> Iterator[list[str]]:
    """Collect what native code writes to fd 2 inside the block (the list fills on exit)."""
    lines: list[str] = []
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            # TFLM's invoke-time messages sit in the C library's stdio buffer until a flush.
            _LIBC.fflush(None)
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode("utf-8", "replace").splitlines())


def parse_allocations(lines: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """``print_allocations()`` lines → ({total, head, tail}, {category: bytes used})."""
    totals: dict[str, int] = {}
    categories: dict[str, int] = {}
    for line in lines:
        if m := _TOTAL.search(line):
            totals[m.group(1)] = int(m.group(2))
        elif m := _CATEGORY.search(line):
            categories[m.group(1)] = int(m.group(2))
    return totals, categories


def _why(lines: list[str]) -> str:
    useful = [ln.strip() for ln in lines if ln.strip()]
    return " | ".join(useful[-3:]) if useful else "no message from TFLM"


class TflmRunner:
    name = "tflm"

    def run(self, model_path: str, inputs: list[np.ndarray], num_outputs: int,
            options: RunOptions, stage: Callable[[str], None]) -> RunResult:
        from tflite_micro.python.tflite_micro import runtime

        data = Path(model_path).read_bytes()
        arena = options.arena_size or _START_ARENA
        stage("allocate")
        interpreter = None
        for _ in range(_MAX_TRIES):
            # A size that is not a multiple of 16 misaligns the arena's end, and the tail
            # (allocated downwards from it) then pays a few bytes of alignment more.
            arena = -(-arena // _ALIGNMENT) * _ALIGNMENT
            with capture_fd2() as err:
                try:
                    interpreter = runtime.Interpreter.from_bytes(data, arena_size=arena)
                except RuntimeError:
                    pass
            if interpreter is not None:
                break
            missing = _MISSING.search(" ".join(err))
            if missing is None or arena >= _MAX_ARENA:
                raise RuntimeError(f"TFLM could not create the interpreter: {_why(err)}")
            arena = min(_MAX_ARENA, max(2 * arena, arena + int(missing.group(1)) + 4096))
        if interpreter is None:
            raise RuntimeError(f"TFLM needs an arena above {arena} bytes: {_why(err)}")
        with capture_fd2() as report:
            interpreter.print_allocations()
        totals, categories = parse_allocations(report)
        stage("invoke")
        host_ms: list[float] = []
        failed: RuntimeError | None
        for i in range(options.warmup + options.runs):
            for index, x in enumerate(inputs):
                interpreter.set_input(x, index)
            with capture_fd2() as err:
                start = time.perf_counter()
                try:
                    interpreter.invoke()
                except RuntimeError as exc:
                    failed = exc
                else:
                    failed = None
                elapsed = (time.perf_counter() - start) * 1e3
            if failed is not None:
                raise RuntimeError(f"TFLM invoke failed: {_why(err)}") from failed
            if i >= options.warmup:
                host_ms.append(elapsed)
            if i == 0:
                # The first invoke's outputs: a stateful model (PCAN, SVDF, a streaming
                # LSTM) answers the same inputs differently on each later one.
                outputs = [np.array(interpreter.get_output(k)) for k in range(num_outputs)]
        return RunResult(
            runtime=self.name, outputs=outputs, host_ms=host_ms,
            arena_head_bytes=totals.get("head"), arena_tail_bytes=totals.get("tail"),
            arena_total_bytes=totals.get("total"), arena_categories=categories,
            per_op_ms=None, arena_size_used=arena,
        )
