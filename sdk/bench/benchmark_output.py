"""Parse what TFLite's ``benchmark_model`` prints into a :class:`BenchmarkOutput`.

The tool logs one fact per line, and the wording moved between releases, so each figure
has its own pattern and any may be missing (None). Lines may carry a prefix: ``INFO: ``
(TF >= 2.4), ``INFO: [file.cc:12] ``, or an Android logcat header when the output was
captured from the benchmark APK; the patterns search inside the line rather than anchor.

Formats handled (``tensorflow/lite/tools/benchmark/benchmark_model.cc`` and
``xla/tsl/util/stats_calculator.h``; real captures are in tests/fixtures/benchmark_model):

- ``The input model file size (MB): X``; ``Initialized session in Xms.``
- timing statistics, in microseconds, one line per phase (warm-up first, then the timed
  runs): ``count=N first=A curr=B min=C max=D avg=E std=F`` or, when every run took the
  same time, ``count=N curr=B(all same)``; builds that keep percentiles append
  `` p5=P median=M p95=Q``.
- ``Inference timings in us: Init: A, First inference: B, Warmup (avg): C, Inference
  (avg): D``; before TF 2.3: ``Average inference timings in us: Warmup: C, Init: A,
  Inference: D`` (older still: ``no stats: D``).
- ``Memory footprint delta from the start of the tool (MB): init=X overall=Y`` (called
  ``Peak memory footprint (MB): init=X overall=Y`` in TF 2.3) and ``Overall peak memory
  footprint (MB) via periodic monitoring: Z``.
- ``--enable_op_profiling`` tables: ``Run Order`` rows and ``Summary by node type`` rows
  of the regular runs (the initialization profile is skipped); columns are read from the
  bracketed header, since TF dropped ``[start]`` in later releases.
- delegate coverage: ``Replacing N out of M node(s) with delegate (D) node, yielding K
  partitions``, the older ``Replacing N node(s) with delegate (D) node, yielding K
  partitions``, ``D delegate: N nodes delegated out of M nodes with K partitions``, and
  the GPU/NNAPI "will (not) be executed by the delegate" notices.
- the GPU delegate's own lines (``tflite/delegates/gpu/delegate.cc``,
  ``common/model_builder.cc``): ``Created N GPU delegate kernels.``, ``Initialized
  OpenCL-based API.``, and its partition: ``Following operations are not supported by GPU
  delegate:`` with one ``OP: reason`` line each, then ``N operations will run on the GPU,
  and the remaining M operations will run on the CPU.`` (or ``No operations will run on the
  GPU, and all M ...``); when it could not run, why (:func:`gpu_failure`).
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from devicefit.simulator.errors import ToolFailure
from devicefit.simulator.report.benchmark import (
    BenchmarkOutput,
    DelegateCoverage,
    GpuDelegateLog,
    OpProfileRow,
    OpTypeSummary,
    RunStats,
)

log = logging.getLogger(__name__)

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
#: Android logcat header ("05-31 10:31:13.023 21767 21767 I tflite  : ") and log levels.
_PREFIX = re.compile(
    r"^(?:\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+\d+\s+\d+\s+[VDIWEF]\s+[^:]*:\s?)?"
    r"(?:(?:INFO|VERBOSE|WARNING|ERROR|DEBUG)\s*:\s*)?(?:\[[^\]]*\.\w+:\d+\]\s*)?"
)
_STAT_LINE = re.compile(r"^count=(\d+)\b(.*)$")
_KEY_VALUE = re.compile(rf"(\w+)=({_NUM})")
_MODEL_SIZE = re.compile(rf"The input model file size \(MB\):\s*({_NUM})")
_SESSION_INIT = re.compile(rf"Initialized session in\s*({_NUM})\s*ms")
_TIMINGS = re.compile(r"(?:Average )?[Ii]nference timings in us:\s*(.*)$")
_TIMING_ITEM = re.compile(rf"([A-Za-z][A-Za-z ()]*?):\s*({_NUM})")
_MEMORY_DELTA = re.compile(
    rf"(?:Memory footprint delta from the start of the tool|Peak memory footprint) \(MB\):"
    rf"\s*init=({_NUM})\s+overall=({_NUM})")
_MEMORY_PEAK = re.compile(rf"Overall peak memory footprint \(MB\) via periodic monitoring:\s*({_NUM})")
_REPLACING = re.compile(
    r"Replacing (\d+)(?: out of (\d+))? node\(s\) with delegate \(([^)]+)\) node,"
    r" yielding (\d+) partitions")
_DELEGATED_OUT_OF = re.compile(
    r"(\S+) delegate: (\d+) nodes delegated out of (\d+) nodes(?: with (\d+) partitions)?")
_WHOLE_GRAPH = re.compile(
    r"(?:Explicitly applied|Though) (\w+) delegate(?: is explicitly applied)?, "
    r"(?:and )?the model graph will (not )?be (completely |partially )?executed by the delegate")
_CREATED = re.compile(r"Created TensorFlow Lite (?:(\w+) )?delegate for (\w+)")
_GPU_KERNELS = re.compile(r"Created (\d+) GPU delegate kernels")
_GPU_API = re.compile(r"Initialized (OpenCL|OpenGL)-based API")
_GPU_REFUSED = "Following operations are not supported by GPU delegate:"
_GPU_SPLIT = re.compile(r"(?:(\d+) operations will run on the GPU, and the remaining (\d+)"
                        r"|No operations will run on the GPU, and all (\d+)) operations will "
                        r"run on the CPU")
#: The GPU delegate's kernel name in TFLite's "Replacing N out of T node(s)" line.
GPU_KERNEL_NAME = "TfLiteGpuDelegateV2"
#: Lines that say why the GPU delegate could not run (``delegate.cc``: its kernel's Init
#: and Prepare; ``opencl_wrapper.cc``; ``gl/api2.cc``), and benchmark_model's own words
#: when it gave up on the delegate (``benchmark_tflite_model.cc``).
_GPU_WHY = re.compile(r"TfLiteGpuDelegate (?:Init|Prepare|Invoke)(?: \(async\))?: (?!delegate "
                      r"is not initialized)(.+)")
_GPU_GAVE_UP = re.compile(r"Failed to apply GPU delegate")
_TABLE_TITLE = re.compile(r"^=+ (.+?) =+$")
_HEADER_CELL = re.compile(r"\[([^\]]+)\]")

#: Timing-line keys (old and new wording) → BenchmarkOutput field (the line is in µs).
_TIMING_KEYS = {
    "init": "init_ms",
    "first inference": "first_inference_ms",
    "warmup (avg)": "warmup_avg_ms",
    "warmup": "warmup_avg_ms",
    "inference (avg)": "inference_avg_ms",
    "inference": "inference_avg_ms",
    "no stats": "inference_avg_ms",
}


class BenchmarkOutputError(ToolFailure):
    """benchmark_model ran but printed nothing this parser recognises as a result (or a log
    handed to ``calibrate`` holds none): the output failed, not the model."""


def _f(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        return float(text.rstrip("%"))
    except ValueError:
        return None


def _i(text: str | None) -> int | None:
    value = _f(text)
    return None if value is None or not math.isfinite(value) else int(value)


def _us_to_ms(value: float | None) -> float | None:
    # Rounded so that 56265.8 µs reads 56.2658 ms, not 56.265800000000006.
    return None if value is None else round(value / 1000.0, 9)


def strip_prefix(line: str) -> str:
    """The message part of a log line (no log level, source location or logcat header)."""
    return _PREFIX.sub("", line.rstrip("\r\n"), count=1)


def parse_stat_line(line: str) -> RunStats | None:
    """``count=N first=.. curr=..`` (µs) → RunStats (ms); None if ``line`` is not one."""
    m = _STAT_LINE.match(strip_prefix(line).strip())
    if not m:
        return None
    values: dict[str, float | None] = {k: float(v) for k, v in _KEY_VALUE.findall(m.group(2))}
    curr = values.get("curr")
    if "(all same)" in m.group(2) or (int(m.group(1)) == 1 and "min" not in values):
        # Every run took the same time: the tool prints only curr.
        for key in ("first", "min", "max", "avg"):
            values.setdefault(key, curr)
        values.setdefault("std", 0.0)
    return RunStats(count=int(m.group(1)),
                    **{f"{k}_ms": _us_to_ms(values.get(k))
                       for k in ("first", "curr", "min", "max", "avg", "std", "p5", "median",
                                 "p95")})


def _table_rows(lines: list[str], start: int) -> tuple[list[str], list[list[str]], int]:
    """Header cell names and the tab-separated rows of the table whose header is at start."""
    header = [h.strip().lower() for h in _HEADER_CELL.findall(lines[start])]
    rows: list[list[str]] = []
    i = start + 1
    while i < len(lines) and strip_prefix(lines[i]).strip():
        cells = [c.strip() for c in strip_prefix(lines[i]).split("\t") if c.strip()]
        if len(cells) == len(header):
            rows.append(cells)
        else:
            log.debug("skipping profile row with %d cells (header has %d): %r",
                      len(cells), len(header), lines[i])
        i += 1
    return header, rows, i


def _op_row(header: list[str], cells: list[str]) -> OpProfileRow:
    col = dict(zip(header, cells, strict=True))
    return OpProfileRow(
        node_type=col.get("node type", ""), name=col.get("name", "").strip("[]"),
        first_ms=_f(col.get("first")), avg_ms=_f(col.get("avg ms")), percent=_f(col.get("%")),
        cdf_percent=_f(col.get("cdf%")), mem_kb=_f(col.get("mem kb")),
        times_called=_i(col.get("times called")))


def _summary_row(header: list[str], cells: list[str]) -> OpTypeSummary:
    col = dict(zip(header, cells, strict=True))
    return OpTypeSummary(
        node_type=col.get("node type", ""), count=_i(col.get("count")),
        avg_ms=_f(col.get("avg ms")), percent=_f(col.get("avg %")),
        cdf_percent=_f(col.get("cdf %")), mem_kb=_f(col.get("mem kb")),
        times_called=_i(col.get("times called")))


def _parse_profile(raw_lines: list[str]) -> tuple[list[OpProfileRow], list[OpTypeSummary]]:
    """The ``Run Order`` and ``Summary by node type`` rows of the regular runs."""
    # The initialization profile (AllocateTensors, ModifyGraphWithDelegate) comes first under
    # its own heading; only the tables of the regular runs describe inference.
    lines = [strip_prefix(line) for line in raw_lines]
    in_init = False
    title = ""
    op_profile: list[OpProfileRow] = []
    op_summary: list[OpTypeSummary] = []
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        if text.startswith("Profiling Info for Benchmark Initialization"):
            in_init = True
        elif "Profiling Info for Regular Benchmark Runs" in text:
            in_init = False
        elif m := _TABLE_TITLE.match(text):
            title = m.group(1).strip().lower()
        elif text.startswith("[node type]") or text.startswith("[Node type]"):
            header, rows, i = _table_rows(lines, i)
            if not in_init and title == "run order" and not op_profile:
                op_profile = [_op_row(header, r) for r in rows]
            elif not in_init and title == "summary by node type" and not op_summary:
                op_summary = [_summary_row(header, r) for r in rows]
            continue
        i += 1
    return op_profile, op_summary


def _figures(line: str, found: dict[str, Any], coverage: dict[str, dict[str, Any]],
             created: list[str]) -> None:
    """What one line of the output says, into ``found`` (BenchmarkOutput's fields by name),
    ``coverage`` (DelegateCoverage's by delegate) and ``created`` (delegates, in order)."""
    if m := _MODEL_SIZE.search(line):
        found["model_size_mb"] = float(m.group(1))
    elif m := _SESSION_INIT.search(line):
        found["init_ms"] = float(m.group(1))
    elif m := _TIMINGS.search(line):
        for key, value in _TIMING_ITEM.findall(m.group(1)):
            if attr := _TIMING_KEYS.get(key.strip().lower()):
                found[attr] = _us_to_ms(float(value))
    elif m := _MEMORY_DELTA.search(line):
        found["memory_init_mb"], found["memory_overall_mb"] = float(m[1]), float(m[2])
    elif m := _MEMORY_PEAK.search(line):
        found["memory_peak_mb"] = float(m.group(1))
    elif m := _REPLACING.search(line):
        coverage.setdefault(m.group(3), {}).update(
            nodes_delegated=int(m.group(1)), nodes_total=_i(m.group(2)),
            partitions=int(m.group(4)))
    elif m := _DELEGATED_OUT_OF.search(line):
        coverage.setdefault(m.group(1), {}).update(
            nodes_delegated=int(m.group(2)), nodes_total=int(m.group(3)),
            partitions=_i(m.group(4)))
    elif m := _WHOLE_GRAPH.search(line):
        coverage.setdefault(m.group(1), {})["whole_graph"] = (
            m.group(2) is None and m.group(3) != "partially ")
    elif m := _CREATED.search(line):
        if (name := m.group(1) or m.group(2)) not in created:
            created.append(name)


def parse_benchmark_output(text: str) -> BenchmarkOutput:
    """Every figure the output holds; raises :class:`BenchmarkOutputError` if none is a latency."""
    raw_lines = text.splitlines()
    stats: list[RunStats] = []
    found: dict[str, Any] = {}
    coverage: dict[str, dict[str, Any]] = {}
    created: list[str] = []
    for raw in raw_lines:
        line = strip_prefix(raw)
        if (s := parse_stat_line(line)) is not None:
            stats.append(s)
        else:
            _figures(line, found, coverage, created)
    inference = stats[-1] if stats else None
    warmup = stats[0] if len(stats) > 1 else None
    # Pre-2.3 tools print no "First inference": the first warm-up run is the same figure.
    if found.get("first_inference_ms") is None and warmup is not None:
        found["first_inference_ms"] = warmup.first_ms
    if found.get("inference_avg_ms") is None and inference is not None:
        found["inference_avg_ms"] = inference.avg_ms
    op_profile, op_summary = _parse_profile(raw_lines)
    out = BenchmarkOutput(
        **found, warmup=warmup, inference=inference, delegates_created=created,
        delegate_coverage=[DelegateCoverage(name, **c) for name, c in coverage.items()],
        op_profile=op_profile, op_summary=op_summary,
        gpu=parse_gpu_log(raw_lines, coverage.get(GPU_KERNEL_NAME, {})))
    if out.inference_avg_ms is None:
        raise BenchmarkOutputError(
            "benchmark_model printed no inference timings; its last lines: "
            + tail(text))
    _check_figures(out)
    return out


#: The most "OP: reason" lines kept: the delegate lists each pair once, so a real one has a
#: few dozen at most.
MAX_REFUSED = 500


def parse_gpu_log(raw_lines: list[str], replacing: dict[str, Any]) -> GpuDelegateLog | None:
    """The GPU delegate's own lines; ``replacing``: TFLite's "Replacing" line for its kernel
    (the operator counts when the delegate took every operator and so listed none)."""
    found: dict[str, Any] = {}
    refused: list[str] = []
    in_refused = False
    for raw in raw_lines:
        line = strip_prefix(raw).strip()
        if _GPU_REFUSED in line:
            in_refused, refused = True, []
        elif m := _GPU_SPLIT.search(line):
            in_refused = False
            on_gpu = int(m[1]) if m[1] is not None else 0
            found["ops_on_gpu"] = on_gpu
            found["ops_total"] = on_gpu + int(m[2] if m[1] is not None else m[3])
        elif in_refused and line:
            refused.append(brief(line))
        elif m := _GPU_KERNELS.search(line):
            found["kernels"] = int(m[1])
        elif m := _GPU_API.search(line):
            found["backend"] = m[1]
    if not found and not refused:
        return None
    if len(refused) > MAX_REFUSED:  # a device printing without end; the delegate lists a set
        refused = [*refused[:MAX_REFUSED], f"… {len(refused) - MAX_REFUSED:,} more lines"]
    if "ops_on_gpu" not in found and replacing.get("nodes_delegated") is not None:
        found["ops_on_gpu"] = replacing["nodes_delegated"]
        found["ops_total"] = replacing.get("nodes_total")
    return GpuDelegateLog(**found, refused=refused)


def gpu_failure(text: str) -> str | None:
    """Why the GPU delegate could not run the model, in its own words, when benchmark_model
    gave up on it ("Failed to apply GPU delegate."); None when it did not."""
    lines = [strip_prefix(ln).strip() for ln in text[-256 * 1024:].splitlines()]
    if not any(_GPU_GAVE_UP.search(ln) for ln in lines):
        return None
    why = [m[1] for ln in lines if (m := _GPU_WHY.search(ln))]
    # The first reason is the cause; OpenCL's failure comes before its OpenGL fallback's.
    opencl = [ln for ln in lines if ln.startswith("Can not open OpenCL library")]
    said = "; ".join(brief(w) for w in [*opencl[:1], *why[:1]]) or "no reason given"
    return f"{said} (benchmark_model: Failed to apply GPU delegate.)"


#: Figures that are differences and may be negative (memory freed since the tool started).
_SIGNED = {"memory_init_mb", "memory_overall_mb"}
#: Larger than any figure a run can print: a day in ms, a TiB in MB (model size, memory).
_MAX_FIGURE = {"_ms": 86_400_000.0, "_mb": 1_048_576.0}


def _impossible(name: str, value: float) -> bool:
    if not math.isfinite(value) or (value < 0 and name not in _SIGNED):
        return True
    limit = next((v for suffix, v in _MAX_FIGURE.items() if name.endswith(suffix)), None)
    return limit is not None and abs(value) > limit


def _check_figures(out: BenchmarkOutput) -> None:
    """Refuse NaN, infinite, negative and absurdly large figures, and statistics over no
    run: a device (or a tool build) that prints them would otherwise pass or fail the
    latency budget on nothing."""
    found: list[tuple[str, float]] = []

    def visit(prefix: str, obj: object) -> None:
        for name, value in vars(obj).items():
            if isinstance(value, float) and _impossible(name, value):
                found.append((prefix + name, value))
            elif isinstance(value, RunStats | OpProfileRow | OpTypeSummary):
                visit(f"{prefix}{name}.", value)
        if isinstance(obj, RunStats) and obj.count < 1:
            found.append((prefix + "count", float(obj.count)))

    visit("", out)
    for i, row in enumerate([*out.op_profile, *out.op_summary]):
        visit(f"operator row {i}: ", row)
    if found:
        name, value = found[0]
        raise BenchmarkOutputError(
            f"benchmark_model reported {name} = {value!r}, which no run can measure; "
            f"{len(found)} such figure(s) in all. The tool or the device is broken: nothing "
            f"is judged on it")


#: How much of a device's text an error message quotes: a line, and all of it.
LINE_CHARS, MESSAGE_CHARS = 200, 800


def brief(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more)"


def tail(text: str, n: int = 6) -> str:
    """The last ``n`` non-empty lines of ``text`` joined on one line (for one-line errors),
    each line and the whole bounded: a device can print megabytes on one line."""
    lines = [brief(ln.strip()) for ln in text[-64 * 1024:].splitlines() if ln.strip()]
    return brief(" | ".join(lines[-n:]), MESSAGE_CHARS) if lines else "(no output)"
