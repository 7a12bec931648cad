"""Plain-text sections for what the running half adds: measured vs predicted, latency, ops.

Used by :mod:`simulator.views.text`; a view only formats numbers the report already holds.
"""

from __future__ import annotations

from simulator.report import Report
from simulator.units import format_time_ms
from simulator.views.text import _bytes as _b
from simulator.views.text import _columns as _rows


def measured_lines(report: Report) -> list[str]:
    m = report.measured
    if not m:
        return []
    lines = [f"Measured (real {m['runtime']} interpreter, child process)"]
    if m.get("skipped"):
        return lines + [f"  {m['skipped']}"]
    if m.get("arena_head_bytes") is not None:
        diff = m["head_difference_bytes"]
        rows = [["", "measured", "predicted", ""],
                ["arena head", _b(m["arena_head_bytes"]), _b(m["predicted_head_bytes"]),
                 "same to the byte" if diff == 0 else f"differs by {diff:+,} B"],
                ["arena tail", _b(m["arena_tail_bytes"]), _b(report.memory.arena_tail_bytes),
                 "64-bit host, reference kernels" if m["tail_basis"] != "measured" else ""],
                ["device arena", _b(m["arena_bytes"]), "",
                 "measured head + " + ("measured tail" if m["tail_basis"] == "measured"
                                       else "predicted device tail")]]
        lines += _rows(rows)
        if m.get("over_budget_bytes"):
            lines.append(f"  needs {_b(m['over_budget_bytes'])} more than the arena budget "
                         f"of {_b(m['arena_budget_bytes'])}")
    agree = m.get("outputs_agree")
    cc = m.get("cross_check") or {}
    if cc.get("error"):
        lines.append(f"  outputs      cross-check failed, a finding: {cc['error']}")
    elif cc.get("skipped"):
        lines.append(f"  outputs      not cross-checked: {cc['skipped']}")
    elif agree is None:
        lines.append("  outputs      not cross-checked (float model or TFLM cannot run it)")
    else:
        cc = m["cross_check"]
        diff = cc["max_abs_difference"]
        verdict = ("agree bit for bit" if agree else "DISAGREE (" + (
            "different output shapes" if diff is None else f"max difference {diff:g}") + ")")
        lines.append(f"  outputs      {' vs '.join(cc['runtimes'])}: {verdict}")
    lines.append(f"  inputs       {m['inputs']}")
    return lines


def latency_lines(report: Report, top: int = 5) -> list[str]:
    lat = report.latency
    if not lat:
        return []
    lines = ["Latency"]
    host = lat.get("host_ms")
    if host:
        lines.append(f"  host         {host['runtime']}, {host['threads']} thread(s), "
                     f"{host['runs']} runs: median {format_time_ms(host['median'])}, "
                     f"p90 {format_time_ms(host['p90'])}, min {format_time_ms(host['min'])}")
    if lat.get("estimated_device_ms") is None:
        lines.append(f"  device       no estimate: {lat.get('no_estimate') or 'no cost model'}")
        return lines
    estimate = format_time_ms(lat["estimated_device_ms"])
    if lat.get("band_ms"):
        lo, hi = lat["band_ms"]
        estimate += f", likely {format_time_ms(lo)}–{format_time_ms(hi)}"
    if lat.get("split"):  # a target's own estimate (the Edge TPU), shown in its section
        lines.append(f"  device       {estimate} (estimated), split in {lat['split']}")
        return lines
    where = (f"{lat['cpu']} + {lat['kernels']} kernels"
             + (f", runtime {lat['runtime_version']}" if lat.get("runtime_version") else "")
             if lat.get("basis") == "registry" else "the profile's cost table")
    lines.append(f"  device       {estimate} (estimated at {lat['clock_hz'] / 1e6:g} MHz, "
                 f"{where})")
    if lat.get("band_basis"):
        lines.append(f"  band         {lat['band_basis']}")
    slow = sorted(lat["per_op"], key=lambda o: -o["estimated_ms"])[:top]
    if slow:
        lines.append(f"  slowest operators (estimated, top {len(slow)} of {len(lat['per_op'])})")
        lines += _rows([["op", "type", "MACs", "ms"]] +
                       [[o["op_index"], o["op"], f"{o['macs']:,}", f"{o['estimated_ms']:.3f}"]
                        for o in slow], indent="    ")
    return lines


def compatibility_lines(report: Report) -> list[str]:
    c = report.compatibility
    if not c:
        return []
    if c["supported"]:
        return ["Compatibility", f"  {_supported_line(c)}"]
    lines = ["Compatibility", f"  UNSUPPORTED by the {c['table']} op table:"]
    lines += _rows([[f"op {u['op_index']}", u["op"], u["reason"]]
                    for u in c["unsupported_ops"]], indent="    ")
    return lines


def _supported_line(c: dict) -> str:
    """What "supported" means: on the Edge TPU, ops the TPU cannot take still run, on the
    host CPU (the partition in ``compatibility.edgetpu`` says how many)."""
    etpu = c.get("edgetpu")
    if etpu:
        return (f"every operator can run ({etpu['mapped_ops']} on the Edge TPU, "
                f"{etpu['cpu_ops']} on the CPU)")
    return f"every operator is supported by the {c['table']} op table"


def run_sections(report: Report) -> list[str]:
    """Blank-line separated sections for the report's running-half figures."""
    out: list[str] = []
    for part in (compatibility_lines(report), measured_lines(report), latency_lines(report)):
        if part:
            out += ["", *part]
    return out
