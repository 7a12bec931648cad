"""Measure an export (:mod:`.export`) on a TFLM target build (:mod:`.build`) under QEMU.

The build compiles the export's own files, with a thin measuring wrapper
(``harness.cc``): the wrapper runs once with a large heap arena and TFLM's
RecordingMicroAllocator — head, tail, total, the tail by category, the planner's buffers —
then the export runs as a firmware uses it (its arena array at its constant, through one
Invoke: its outputs are the ones compared with the host's), then the export's example
program, then the smallest working arena is searched over multiples of 16 (the arena
starts 16-byte aligned and the tail is placed down from its aligned-down end, so only there
is success monotone), one fresh QEMU process per probe: a too-small arena can crash TFLM
instead of failing cleanly. Probes set up the interpreter as an application does
(MicroInterpreter on a plain MicroAllocator) and run AllocateTensors; the smallest size
found is then checked once more through one Invoke. Flash is read from the example linked
as firmware for the core (:mod:`.firmware`).

Debian's ``qemu-arm`` 7.2 aborts in user mode on every M-profile ``-cpu``; the code, all
compiled with ``-mcpu=<core>``, runs on the A-profile cortex-a15 model with semihosting.
The arena figures are the M build's own (they depend on the compiled TFLM and kernels
only); the run proves the kernels execute, not how fast.
"""

from __future__ import annotations

import functools
import hashlib
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.plan.lifetimes import align_up
from devicefit.simulator.report.report import PlannerBuffer, TailCategory, TargetMeasurement
from devicefit.simulator.targets.tflm.build import MemoryMap, TflmBuild
from devicefit.simulator.targets.tflm.export import export_digest
from devicefit.simulator.targets.tflm.firmware import firmware_flash
from devicefit.simulator.types import ExportedFile

QEMU_CPU = "cortex-a15"
#: Cores whose instructions the A-profile model lacks (MVE): built, not run here.
UNRUNNABLE_CORES = {"cortex-m55": "MVE (Helium)", "cortex-m85": "MVE (Helium)"}
#: The largest arena a report run tries (it doubles from the first guess on failure).
MAX_ARENA = 256 * 1024 * 1024
PROBE_TIMEOUT_S = 600.0
#: A probe (no Invoke) that takes this many times the report run (which also invokes), or
#: at least this many seconds, is taken as hung.
PROBE_TIMEOUT_FACTOR = 5.0
PROBE_TIMEOUT_MIN_S = 20.0


@dataclass(frozen=True)
class OutputDigest:
    index: int
    tflite_type: int
    bytes: int
    fnv1a: str


@dataclass(frozen=True)
class HarnessRun:
    """One ``report`` run of the harness, parsed from its ``DF`` lines."""

    ok: bool
    failed_stage: str | None = None
    head: int | None = None
    tail: int | None = None
    total: int | None = None
    tail_breakdown: dict[str, TailCategory] = field(default_factory=dict)
    buffers: tuple[PlannerBuffer, ...] = ()
    #: How many of ``buffers`` are tensors; the rest are the kernels' scratch buffers.
    planned_tensors: int | None = None
    outputs: tuple[OutputDigest, ...] = ()
    resource_variables: int = 0

    @property
    def scratch(self) -> tuple[PlannerBuffer, ...]:
        return self.buffers[self.planned_tensors:] if self.planned_tensors is not None else ()


def parse_report(text: str) -> HarnessRun:
    """The ``DF`` lines of a ``report`` run (other lines are TFLM's messages)."""
    head = tail = total = planned = None
    ok, failed, rvars = False, None, 0
    breakdown: dict[str, TailCategory] = {}
    buffers: list[PlannerBuffer] = []
    outputs: list[OutputDigest] = []
    for line in text.splitlines():
        w = line.split()
        if len(w) < 2 or w[0] != "DF":
            continue
        if w[1] == "arena":
            head, tail, total = int(w[3]), int(w[5]), int(w[7])
        elif w[1] == "tail":
            breakdown[w[2]] = TailCategory(int(w[4]), int(w[6]), int(w[8]))
        elif w[1] == "buffer":
            buffers.append(PlannerBuffer(int(w[4]), int(w[6]), int(w[8]),
                                         int(w[10]) if len(w) > 10 else None))
        elif w[1] == "plan":
            planned = int(w[3])
        elif w[1] == "output":
            outputs.append(OutputDigest(int(w[2]), int(w[4]), int(w[6]), w[8]))
        elif w[1] == "model":
            rvars = int(w[7])
        elif w[1] == "result":
            ok = w[2] == "ok"
            failed = None if ok else (w[3] if len(w) > 3 else "unknown")
    return HarnessRun(ok, failed, head, tail, total, breakdown, tuple(buffers), planned,
                      tuple(outputs), rvars)


def parse_probe(text: str) -> str | None:
    """'ok', 'fail <stage>', or None when the process died before answering."""
    m = re.search(r"^DF probe \d+ (ok|fail \w+)$", text, re.MULTILINE)
    return m.group(1) if m else None


def qemu_command(binary: Path, args: Sequence[str]) -> list[str]:
    return ["qemu-arm", "-cpu", QEMU_CPU, str(binary), *args]


def _run(build: TflmBuild, binary: Path, args: Sequence[str], work: Path,
         timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    """One program under QEMU in ``work`` (file names relative to it: semihosting hands the
    program a command line of limited length); None when it did not finish within
    ``timeout_s`` (killed with its process group: nothing is left running)."""
    try:
        return subprocess.run(qemu_command(binary, args), cwd=work, env=build.env,
                              capture_output=True, text=True, timeout=timeout_s,
                              errors="replace", start_new_session=True)
    except subprocess.TimeoutExpired:
        return None


def _tflm_messages(stderr: str, lines: int = 4) -> str:
    kept = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:])


def search_min_arena(probe: Callable[[int], bool], start: int) -> tuple[int, int]:
    """The smallest multiple of 16 ``probe`` accepts, searched from ``start`` (the recorded
    total: the answer is usually within a few steps of it), and the number of probes.

    Gallops away from ``start`` then bisects; assumes success is monotone in the size.
    """
    probes = 0

    def ok(n: int) -> bool:
        nonlocal probes
        probes += 1
        return probe(n)

    here = align_up(max(start, 16), 16)
    step = 16
    if ok(here):
        hi = here
        while hi - step >= 16 and ok(hi - step):
            hi -= step
            step *= 2
        lo = max(hi - step, 0)
    else:
        lo = here
        while True:
            hi = lo + step
            if hi > MAX_ARENA:
                raise RuntimeFailure(f"no arena up to {MAX_ARENA:,} bytes works")
            if ok(hi):
                break
            lo, step = hi, step * 2
    while hi - lo > 16:  # lo fails (or is 0), hi works
        mid = (lo + hi) // 32 * 16
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, probes


@dataclass(frozen=True)
class ExportRun:
    """An export to measure: its files, the resolver methods it registers, and its figures
    (:mod:`.export`)."""

    files: tuple[ExportedFile, ...]
    methods: tuple[str, ...]
    arena_constant: int
    name: str

    @property
    def digest(self) -> str:
        return export_digest(self.files)


def measure(build: TflmBuild, export: ExportRun, inputs: Sequence[np.ndarray],
            first_arena: int, memory: MemoryMap,
            timeout_s: float = PROBE_TIMEOUT_S) -> tuple[TargetMeasurement, list[np.ndarray]]:
    """Build (incrementally) the export on ``build`` and run it under QEMU; the measurement
    and the raw output bytes of the export's own run (its arena array, its constant; empty
    when it did not get that far)."""
    spec = build.spec
    measured = functools.partial(TargetMeasurement, build=f"{build.label} (qemu)",
                                 core=spec.core, kernels=spec.kernels, tflm=build.source,
                                 export_sha256=export.digest,
                                 arena_constant=export.arena_constant)
    binaries = build.binaries(export.files, export.methods, memory)
    if isinstance(binaries, list):
        return measured(status="unsupported", unsupported_ops=tuple(binaries),
                        message="the build has no kernel for " + ", ".join(binaries)), []
    flash = firmware_flash(binaries.firmware_map.read_text(errors="replace"),
                           build.classifier(export.name), build.firmware_image)
    measured = functools.partial(measured, flash=flash)
    if spec.core in UNRUNNABLE_CORES:
        return measured(
            status="not runnable here",
            message=f"built; qemu-arm's {QEMU_CPU} model lacks {UNRUNNABLE_CORES[spec.core]}"
                    " (an MPS3 board in qemu-system-arm would run it)"), []
    with tempfile.TemporaryDirectory(prefix="devicefit-target-") as tmp:
        work = Path(tmp)
        inputs_file = work / "inputs.bin"
        inputs_file.write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in inputs))
        outputs_file = work / "outputs.bin"
        arena = align_up(first_arena, 16)
        harness = binaries.harness
        while True:
            started = time.monotonic()
            done = _run(build, harness, ["report", str(arena), inputs_file.name, "-"], work,
                        timeout_s)
            if done is None:
                return measured(status="timed out",
                                message=f"qemu-arm gave no answer within {timeout_s:g} s "
                                        "(--timeout)"), []
            run = parse_report(done.stdout)
            # grow only when TFLM said the arena is short ("... missing: N"), not when a
            # kernel's Prepare refused the model
            short = "missing:" in done.stderr
            if run.ok or run.failed_stage != "allocate" or not short or arena >= MAX_ARENA:
                break
            arena = min(arena * 4, MAX_ARENA)  # the first guess was too small
        if not run.ok:
            stage = run.failed_stage or _describe(done.returncode)
            return measured(status=f"failed at {stage}",
                            message=_tflm_messages(done.stderr)
                            or done.stdout.strip()[-300:]), []
        # A too-small arena can also hang TFLM (its allocator objects overwrite the heap):
        # a probe far slower than the whole report run counts as a failure.
        probe_timeout = min(timeout_s, max(PROBE_TIMEOUT_MIN_S,
                                           PROBE_TIMEOUT_FACTOR * (time.monotonic() - started)))

        def probe(n: int, stage: str = "allocate") -> bool:
            answer = _run(build, harness, ["probe", str(n), inputs_file.name, stage],
                          work, timeout_s if stage == "invoke" else probe_timeout)
            return answer is not None and parse_probe(answer.stdout) == "ok"

        as_exported = _run(build, harness, ["export", "-", inputs_file.name,
                                            outputs_file.name], work, timeout_s)
        starts = as_exported is not None and parse_export(as_exported.stdout) == "ok"
        raw = outputs_file.read_bytes() if starts and outputs_file.is_file() else b""
        example = _run(build, binaries.example, [], work, timeout_s)
        smallest, probes = search_min_arena(probe, run.total or 16)
        invokes = probe(smallest, "invoke")
    measurement = measured(
        status="ok", head=run.head, tail=run.tail, total=run.total,
        min_arena_bytes=smallest, min_arena_invokes=invokes, probes=probes + 1,
        tail_breakdown=run.tail_breakdown, planner_buffers=run.buffers,
        planned_tensors=run.planned_tensors, output_hash=hashlib.sha256(raw).hexdigest(),
        arena_constant_starts=starts,
        example_ok=example is not None and example.returncode == 0,
        message=None if starts else "the export's arena constant did not start: "
        + (_tflm_messages(as_exported.stderr) if as_exported else "no answer"))
    return measurement, _split_outputs(raw, run.outputs)


def parse_export(text: str) -> str | None:
    """'ok' or 'fail <stage>' of an ``export`` run, or None when it died before answering."""
    m = re.search(r"^DF export arena \d+ (ok|fail \w+)$", text, re.MULTILINE)
    return m.group(1) if m else None


def _split_outputs(raw: bytes, digests: Sequence[OutputDigest]) -> list[np.ndarray]:
    """The output tensors' bytes, one flat uint8 array each (the caller views them)."""
    out, at = [], 0
    for d in digests:
        out.append(np.frombuffer(raw[at:at + d.bytes], dtype=np.uint8))
        at += d.bytes
    return out


def _describe(code: int) -> str:
    if code < 0:
        return f"a crash (signal {-code})"
    return f"exit {code}"
