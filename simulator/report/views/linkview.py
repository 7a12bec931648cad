"""Views of a :class:`simulator.firmware.check.LinkCheck` (``devicefit link-check``): a table
of the checks (check, found, expected, status), why each that failed or was not done, and a
verdict line; or JSON. They show what the check found; none judges anything."""

from __future__ import annotations

from devicefit.simulator.firmware.check import LinkCheck, Outcome
from devicefit.simulator.infra import jsonout
from devicefit.simulator.infra.escape import clean
from devicefit.simulator.report.views.columns import columns


def verdict(result: LinkCheck) -> str:
    counted = f"{len(result.checks)} check{'s' if len(result.checks) != 1 else ''}"
    if result.failed:
        return (f"Verdict: FAIL ({len(result.failed)} of {counted} failed: "
                f"{', '.join(c.name for c in result.failed)})")
    unchecked = result.not_checked
    return f"Verdict: PASS ({counted}" + (
        f"; {len(unchecked)} NOT CHECKED: {', '.join(c.name for c in unchecked)})"
        if unchecked else ", all ok)")


def render_text(result: LinkCheck) -> str:
    files = " + ".join(f"{f} ({kind})" for f, kind in zip(result.files, result.formats))
    lines = [f"Link check of {files}",
             f"  held to {result.expected.source}; RAM reserve: "
             f"{result.expected.reserve_source}", ""]
    lines += columns([("check", "found", "expected", "status"),
                      *((c.name, c.found, c.expected, c.outcome.value) for c in result.checks)],
                     header=True)
    for title, outcome in (("Failed", Outcome.FAIL), ("Not checked", Outcome.NOT_CHECKED)):
        if explained := [c for c in result.checks if c.outcome == outcome]:
            lines += ["", title, *(f"  {c.name}: {c.why}" for c in explained)]
    if result.notes:
        lines += ["", "Notes", *(f"  {n}" for n in result.notes)]
    lines += ["", verdict(result)]
    return clean("\n".join(lines)) + "\n"


def render_json(result: LinkCheck) -> str:
    return jsonout.dumps(result.to_dict(), indent=2) + "\n"
