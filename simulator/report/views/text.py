"""The plain-text view of a simulate report (what ``devicefit simulate`` prints).

Every figure says whether it reproduces the runtime ("exact"), was measured, or is an
estimate, so a user knows how much to trust it. The running half's sections (measured vs
predicted, latency, op support) are drawn here too; a target's own section gives its lines
as data (:meth:`~simulator.report.report.TargetSection.text_lines`), which this view places.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from devicefit.simulator.errors import CompileRefusal
from devicefit.simulator.infra.escape import clean
from devicefit.simulator.infra.units import format_band, format_bytes, format_count, format_time_ms
from devicefit.simulator.report.report import (
    CompatibilityReport,
    MeasuredReport,
    MemoryReport,
    Report,
    TargetMeasurement,
)
from devicefit.simulator.report.views.base import View, flash_basis
from devicefit.simulator.report.views.columns import columns
from devicefit.simulator.report.views.layertable import text_lines as layer_lines
from devicefit.simulator.report.views.messages import (
    conversion_text,
    decimal_budget,
    decimal_sizes,
    signature_line,
    training_heading,
    training_rows,
    verdict_causes,
)
from devicefit.simulator.types import BudgetName, LatencyBasis, Status

#: A budget's status as the text views print it.
STATUS_WORDS = {Status.PASS: "ok", Status.FAIL: "OVER", Status.AT_RISK: "AT RISK"}


_bytes = format_bytes


def _trust(key: str, exact: Sequence[str], estimated: Sequence[str]) -> str:
    if key in exact:
        return "exact"
    return "estimated" if key in estimated else ""


def render_text(report: Report, top: int = 8, layers: bool = False) -> str:
    """The report as readable text; ``top`` operators with the most live bytes are listed,
    or with ``layers`` every operator (:mod:`simulator.report.views.layertable`)."""
    m, p, mem = report.model, report.profile, report.memory
    lines = []
    ops = ", ".join(f"{k}×{v}" for k, v in sorted(m.op_types.items(), key=lambda kv: -kv[1]))
    params = ", ".join(f"{k} {v:,}" for k, v in m.parameters.items()) or "none"
    # The model file is what the flash budget judges: its sizes in that budget's prefixes.
    file_size = partial(format_bytes, decimal=decimal_sizes(report, BudgetName.FLASH))
    if m.source is None:
        lines.append(f"Model    {Path(m.path).name}  {file_size(m.size_bytes)}  sha256 "
                     f"{m.sha256[:12]}")
    else:
        src = m.source
        lines += [f"Model    {Path(m.path).name}  {file_size(src.size_bytes)}  sha256 "
                  f"{src.sha256[:12]}  ({src.operators} operators)",
                  f"         compiled for the {src.compiled_for}: {file_size(m.size_bytes)}  "
                  f"sha256 {m.sha256[:12]}; the figures below are the compiled model's"]
    macs = " on the CPU (the accelerator's are inside its compiled ops)" if m.source else ""
    lines += [f"         {m.operators} operators: {ops}",
              f"         parameters: {params}; {report.compute.macs:,} MACs{macs}"]
    if m.conversion:
        # One terminal line: the top-level settings; the HTML page shows the nested ones too.
        settings = {k: v for k, v in m.conversion.items() if not isinstance(v, (dict, list))}
        lines.append(f"         converted by devicefit: {conversion_text(settings)}")
    lines.append(f"Profile  {p.name}  ({p.device_class}, runtime {p.runtime}, "
                 f"{p.kernels} kernels)")
    if report.compile_refusal is not None:
        lines += ["", *refusal_lines(report.compile_refusal)]
    if mem is not None:
        lines += memory_lines(mem, report)
    lines += training_lines(report)
    if layers:
        lines += ["", *layer_lines(report.layers)]
    elif mem is not None and mem.timeline:
        peak = sorted(mem.timeline, key=lambda s: (-s.live_bytes, s.op_index))[:top]
        lines += ["", f"Operators with the most live bytes (top {len(peak)} of "
                      f"{len(mem.timeline)})"]
        lines += columns([["op", "type", "live"]] +
                         [[s.op_index, s.op, _bytes(s.live_bytes)] for s in peak], header=True)
    lines += run_sections(report)
    section = report.compatibility.section if report.compatibility else None
    if section is not None:
        lines += ["", *section.text_lines()]
    if report.budgets:
        lines += ["", "Budgets"]
        rows = []
        for b in report.budgets:
            fmt = (partial(format_bytes, decimal=decimal_budget(b)) if b.unit == "bytes"
                   else format_time_ms)
            value = fmt(b.value) + (f", likely {format_band(b.band, fmt)}" if b.band
                                    else "")
            source = "" if b.limit_from == "budgets" else f" ({b.limit_from})"
            rows.append([b.name, value, "of", fmt(b.limit) + source, STATUS_WORDS[b.status],
                         f"margin {fmt(b.margin)}", b.basis])
        lines += columns(rows)
    if report.notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in report.notes]
    causes = verdict_causes(report)
    risk = f" ({causes})" if causes else ""
    if report.ok and report.unchecked_budgets:  # never a bare PASS on an unknown figure
        risk += (" for the checked budgets; " + "; ".join(
            f"{name} NOT CHECKED ({why})" for name, why in report.unchecked_budgets.items()))
    lines += ["", f"Verdict: {report.verdict.upper()}{risk}"]
    # Names in the model and the profile reach the terminal only through here.
    return clean("\n".join(lines)) + "\n"


def refusal_lines(refusal: CompileRefusal) -> list[str]:
    """The target's compiler refused the model: which operator and why in its words (its
    whole message when it names none), what to do, and what is left unchecked."""
    said = refusal.operator()
    lines = [f"Not compiled: {refusal.compiler} could not compile the model"]
    if said is not None:
        lines.append(f"  {said}")
    else:
        lines += [f"  {refusal.compiler} said:",
                  *(f"    {ln.rstrip()}" for ln in refusal.message.splitlines() if ln.strip())]
    if refusal.advice:
        lines.append(f"  next: {refusal.advice}")
    lines.append("  not checked: memory, op support and latency (figures of the compiled model, "
                 "which does not exist)")
    return lines


def training_lines(report: Report) -> list[str]:
    """The model's signatures, and the memory its ``train`` signature needs on the device
    (planned, by part) or why it cannot run there."""
    signatures = signature_line(report)
    if signatures is None:
        return []
    lines = ["", f"Signatures  {signatures}"]
    if report.no_training is not None:
        lines.append(f"  {report.no_training}")
    heading = training_heading(report)
    if heading is None:
        return lines
    size = partial(format_bytes, decimal=decimal_sizes(report, BudgetName.TRAIN_MEMORY))
    return [*lines, heading,
            *columns([[label, size(value)] for label, value in training_rows(report)])]


def memory_lines(mem: MemoryReport, report: Report) -> list[str]:
    """The arena plan's figures, each with how far to trust it, named for the build they
    are of: the profile's runtime and kernels (a host wheel's reference kernels give TFLM
    another head); sizes in the prefixes of the budget that judges them."""
    profile = report.profile
    lines = ["", f"Memory (planner {mem.planner}, for {profile.runtime} with "
                 f"{profile.kernels} kernels)"]
    ex, est = mem.exact, mem.estimated
    arena = partial(format_bytes, decimal=decimal_sizes(report, BudgetName.ARENA))
    flash = decimal_sizes(report, BudgetName.FLASH)
    rows = [["arena head", arena(mem.arena_head_bytes), _trust("arena_head", ex, est)],
            ["arena tail", arena(mem.arena_tail_bytes), _trust("arena_tail", ex, est)],
            ["arena total", arena(mem.arena_bytes),
             "exact" if {"arena_head", "arena_tail"} <= set(ex) else "estimated"],
            *([["arena to start", arena(mem.arena_required_bytes), "estimated (planning room)"]]
              if mem.arena_required_bytes > mem.arena_bytes else []),
            ["lower bound", arena(mem.lower_bound_bytes), _trust("lower_bound", ex, est)],
            ["flash", format_bytes(mem.flash_bytes, flash), flash_basis(mem, flash)]]
    return lines + columns(rows)


def measured_lines(report: Report) -> list[str]:
    m, mem = report.measured, report.memory
    if m is None or mem is None:  # (a model its compiler refused is never run)
        return []
    lines = [f"Measured (real {m.runtime} interpreter, child process)"]
    if m.skipped:
        return lines + [f"  {m.skipped}"]
    if m.failure is not None:
        return lines + [f"  FAILED: {m.runtime} {m.failure.line()}", f"  inputs       {m.inputs}"]
    if m.arena_head_bytes is not None:
        diff = m.head_difference_bytes
        measured_tail = m.tail_basis == "measured"
        rows = [["", "measured", "predicted", ""],
                ["arena head", _bytes(m.arena_head_bytes), _bytes(m.predicted_head_bytes or 0),
                 ("same to the byte" if diff == 0 else f"differs by {diff:+,} B")
                 + ("" if measured_tail else " (both: reference kernels)")],
                ["arena tail", _bytes(m.arena_tail_bytes or 0),
                 _bytes(mem.arena_tail_bytes),
                 "" if measured_tail else "measured: 64-bit host; predicted: the device"],
                _device_arena_row(m, mem)]
        judged = next((b for b in report.budgets if b.name == "arena"), None)
        if judged is not None and m.arena_bytes is not None and judged.value > m.arena_bytes:
            rows.append(["start arena", "", _bytes(judged.value),
                         "TFLM's room while planning: the budget judges this"])
        lines += columns(rows, header=True)
        if m.over_budget_bytes:
            lines.append(f"  needs {_bytes(m.over_budget_bytes)} more than the arena budget "
                         f"of {_bytes(m.arena_budget_bytes or 0)}")
    cc = m.cross_check
    if cc is not None and cc.error:
        lines.append(f"  outputs      cross-check failed, a finding: {cc.error}")
    elif cc is not None and cc.skipped:
        lines.append(f"  outputs      not cross-checked: {cc.skipped}")
    elif cc is None or m.outputs_agree is None:
        lines.append("  outputs      not cross-checked (float model or TFLM cannot run it)")
    else:
        worst = cc.max_abs_difference
        verdict = ("agree bit for bit" if m.outputs_agree else "DISAGREE (" + (
            "different output shapes" if worst is None else f"max difference {worst:g}") + ")")
        lines.append(f"  outputs      {' vs '.join(cc.runtimes)}: {verdict}")
    lines += target_build_lines(m.target_build, mem)
    lines.append(f"  inputs       {m.inputs}")
    return lines


def _device_arena_row(m: MeasuredReport, mem: MemoryReport) -> list[str]:
    """The device's arena and the terms it adds up, each saying whether it was measured."""
    head, tail = m.device_head_bytes or 0, mem.arena_tail_bytes
    if m.tail_basis == "measured":  # a host-like profile: the interpreter's own figures
        tail = m.arena_tail_bytes or 0
    head_word = "measured" if m.device_head_basis == "measured" else "predicted"
    tail_word = "measured" if m.tail_basis == "measured" else "predicted"
    total = m.arena_bytes or 0
    terms = (f"= {head_word} head {format_count(head)} B + {tail_word} tail "
             f"{format_count(tail)} B"
             if head + tail == total else "the interpreter's own total")
    both = "measured" if head_word == tail_word == "measured" else ""
    return ["device arena", _bytes(total) if both else "", "" if both else _bytes(total), terms]


def target_build_lines(t: TargetMeasurement | None, mem: MemoryReport) -> list[str]:
    """The model on the device's own TFLM build (``--target-build``), beside the prediction."""
    if t is None:
        return []
    what = ("verified as exported" if t.verified and t.export_sha256 else
            "NOT MEASURED" if t.setup_failed else t.status if t.ok else t.status.upper())
    lines = [f"  target build {t.build}: {what}"
             + (f" (export {t.export_sha256[:12]})" if t.export_sha256 else "")]
    if t.unsupported_ops:
        lines.append(f"    the build lacks {', '.join(t.unsupported_ops)}: a finding")
    if not t.ok:
        lines += [f"    {t.message}"] if t.message else []
        return lines + _flash_lines(t)
    rows = [["", "measured", "predicted", ""],
            ["head", _bytes(t.head or 0), _bytes(mem.arena_head_bytes),
             _diff(t.head, mem.arena_head_bytes)],
            ["tail", _bytes(t.tail or 0), _bytes(mem.arena_tail_bytes),
             _diff(t.tail, mem.arena_tail_bytes)],
            ["start arena", _bytes(t.total or 0), _bytes(mem.arena_required_bytes),
             _diff(t.total, mem.arena_required_bytes)],
            ["smallest arena", _bytes(t.min_arena_bytes or 0), "",
             "multiple of 16" + ("" if t.min_arena_invokes else ", Invoke FAILED there")]]
    if t.arena_constant is not None:
        starts = {True: "started and ran", False: "DID NOT START",
                  None: "not run"}[t.arena_constant_starts]
        above = (f", {t.arena_constant - t.min_arena_bytes:+,} B over the smallest"
                 if t.min_arena_bytes else "")
        rows.append(["arena constant", "", _bytes(t.arena_constant), f"{starts}{above}"])
    lines += columns(rows, indent="    ", header=True)
    scratch = t.scratch_buffers
    if scratch:
        lines.append(f"    scratch buffers {len(scratch)}: "
                     + ", ".join(_bytes(b.size) for b in scratch[:6])
                     + (" ..." if len(scratch) > 6 else ""))
    if t.example_ok is not None:
        lines.append(f"    example      {'ran to its end' if t.example_ok else 'FAILED'}")
    lines += _output_lines(t)
    return lines + _flash_lines(t)


def _output_lines(t: TargetMeasurement) -> list[str]:
    """Each output of the build against the host run, in quantization steps."""
    if t.outputs_agree is None:
        return []
    if t.outputs_agree:
        return [f"    outputs vs {t.compared_with}: agree bit for bit"]
    if t.outputs_within_tolerance is None:  # a record from before the tolerance
        return [f"    outputs vs {t.compared_with}: differ (max difference "
                f"{t.max_abs_difference:g})"]
    within = "within" if t.outputs_within_tolerance else "BEYOND"
    lines = [f"    outputs vs {t.compared_with}: differ, {within} the tolerance "
             f"({t.tolerance})"]
    for d in t.output_diffs:
        by = (f"{d.max_steps} step(s)" if d.max_steps is not None
              else f"{d.max_abs:.3g} ({d.relative:.2%} of its largest magnitude)")
        lines.append(f"      output {d.index} ({d.dtype}): {d.differing} of {d.elements} "
                     f"elements differ, by at most {by}")
    return lines


def _flash_lines(t: TargetMeasurement) -> list[str]:
    f = t.flash
    if f is None:
        return []
    parts = ", ".join(f"{p.name} {_bytes(p.bytes)}" for p in f.parts if p.bytes)
    return [f"    flash        {_bytes(f.total_bytes)} measured: {parts}",
            f"                 ({f.image})"]


def _diff(measured: int | None, predicted: int) -> str:
    if measured is None:
        return ""
    d = predicted - measured
    return "same to the byte" if d == 0 else f"predicted {d:+,} B"


def latency_lines(report: Report, top: int = 5) -> list[str]:
    lat = report.latency
    if lat is None:
        return []
    lines = ["Latency"]
    host = lat.host_ms
    if host:
        lines.append(f"  host         {host.runtime}, {host.threads} thread(s), "
                     f"{host.runs} runs: median {format_time_ms(host.median)}, "
                     f"p90 {format_time_ms(host.p90)}, min {format_time_ms(host.min)}")
    if lat.estimated_device_ms is None:
        lines.append(f"  device       no estimate: {lat.no_estimate or 'no cost model'}")
        return lines
    estimate = format_time_ms(lat.estimated_device_ms)
    if lat.band_ms:
        estimate += f", likely {format_band(lat.band_ms)}"
    if lat.split:  # a target's own estimate (the Edge TPU), shown in its section
        lines.append(f"  device       {estimate} (estimated), split in {lat.split}")
        return lines
    where = (f"{lat.cpu} + {lat.kernels} kernels"
             + (f", runtime {lat.runtime_version}" if lat.runtime_version else "")
             if lat.basis == LatencyBasis.REGISTRY else "the profile's cost table")
    lines.append(f"  device       {estimate} (estimated at {(lat.clock_hz or 0) / 1e6:g} MHz, "
                 f"{where})")
    if lat.band_basis:
        lines.append(f"  band         {lat.band_basis}")
    slow = sorted(lat.per_op, key=lambda o: -o.estimated_ms)[:top]
    if slow:
        lines.append(f"  slowest operators (estimated, top {len(slow)} of {len(lat.per_op)})")
        lines += columns([["op", "type", "MACs", "time"]] +
                         [[o.op_index, o.op, f"{o.macs:,}", format_time_ms(o.estimated_ms)]
                          for o in slow], indent="    ", header=True)
    return lines


def compatibility_lines(report: Report) -> list[str]:
    c = report.compatibility
    if c is None:
        return []
    if c.supported:
        lines = ["Compatibility", f"  {_supported_line(c)}"]
    else:
        lines = ["Compatibility", f"  UNSUPPORTED by the {c.table} "
                 f"{'runtime' if c.disagreements else 'op table'}:"]
        lines += columns([[f"op {u.op_index}", u.op, u.reason] for u in c.unsupported_ops],
                         indent="    ")
    if c.disagreements:
        lines.append("  the op table and the runtime DISAGREE (the runtime's answer stands):")
        lines += columns([[f"op {d.op_index}", d.op, f"table: {d.table}",
                            f"runtime ({d.source}): {d.runtime}"] for d in c.disagreements],
                         indent="    ")
    if c.probe is not None:
        p = c.probe
        lines.append(f"  asked of {p.runtime}: {p.signatures} operator signatures, "
                     f"{p.cached} cached, {p.probed} probed now"
                     + (f"; not asked: {_not_asked(p.not_probed)}" if p.not_probed else ""))
    return lines


_NOT_ASKED = re.compile(r"(?P<op>\S+) \(op (?P<where>[^)]+)\): (?P<why>.*)", re.S)


def _not_asked(entries: Sequence[str]) -> str:
    """The operators not asked of the runtime, one clause per reason: a trainable model
    has dozens of VAR_HANDLE and READ_VARIABLE operators, all for one reason."""
    by_reason: dict[str, list[str]] = {}
    for entry in entries:
        m = _NOT_ASKED.fullmatch(entry)
        op, why = (f"{m['op']} (op {m['where']})", m["why"]) if m else (entry, "")
        by_reason.setdefault(why, []).append(op)
    return "; ".join(
        (", ".join(ops) if len(ops) <= 3 else
         ", ".join(f"{name}×{n}" for name, n in Counter(o.split(" ")[0] for o in ops).items()))
        + (f": {why}" if why else "") for why, ops in by_reason.items())


def _supported_line(c: CompatibilityReport) -> str:
    """What "supported" means: a target's own section may say more (on the Edge TPU, ops
    the TPU cannot take still run, on the host CPU)."""
    if c.section is not None:
        return c.section.supported_line()
    return f"every operator is supported by the {c.table} op table"


def run_sections(report: Report) -> list[str]:
    """Blank-line separated sections for the report's running-half figures."""
    out: list[str] = []
    for part in (compatibility_lines(report), measured_lines(report), latency_lines(report)):
        if part:
            out += ["", *part]
    return out


VIEW = View("text", ".txt", render_text)
