"""Every view prints the same figure for the same fact (issue 46, "numbers that disagree").

For one report per kind of target (TFLM, LiteRT, the Edge TPU with all and with part of the
model on the TPU, the Ethos-U) and a failing one, each size and time the report holds is
looked for in the text, Markdown and HTML views (and the strings of the JSON) and in
``check``'s Markdown and page of a project of that one target. Every printing of it,
wherever it is, must be the same text: no view reads ``1 us`` where another reads
``0.61 us``, ``293.6 KiB`` where another reads ``300.6 kB``, or ``1020.5 KiB`` for a
mebibyte. A printed figure stands for every value it rounds from (``1 us`` for 0.5–1.5 us),
so a coarser or differently prefixed printing of a fact is found wherever it sits; a zero
stands for zero (the formatters print one for nothing else). An exact byte count with its
readable size beside it (``125,304 B (122.4 KiB)``) is read as the readable size. The axes'
tick labels are round values, not figures of the report, and are left out, as is the
profile's description.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views import render
from devicefit.simulator.simulate import simulate
from tests.zoo import model_path

#: A unit → (its dimension, its size in bytes or ms).
UNITS = {"B": ("size", 1.0), "KiB": ("size", 1024.0), "MiB": ("size", 1024.0 ** 2),
         "GiB": ("size", 1024.0 ** 3), "kB": ("size", 1e3), "MB": ("size", 1e6),
         "GB": ("size", 1e9), "us": ("time", 1e-3), "ms": ("time", 1.0), "s": ("time", 1e3)}
_NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
_UNIT = "|".join(sorted(UNITS, key=len, reverse=True))
#: A figure, or an exact byte count with its readable size in brackets beside it.
FIGURE = re.compile(rf"(?<![\w.,<-])(?<!< )(?P<n>{_NUMBER}) ?(?P<u>{_UNIT})(?![\w])"
                    rf"(?: \((?P<rn>{_NUMBER}) ?(?P<ru>{_UNIT})\))?")
#: Figures of these fields are a size or a time (a report's other numbers are counts).
SUFFIXES = {"_bytes": "size", "_ms": "time"}

CASES = {
    "tflm": ("mobilenet_v1_96_int8", "nrf52840-cortex-m4"),
    "litert": ("mobilenet_v1_96_int8", "android-arm64-cpu"),  # a flash budget in MB
    "edgetpu": ("chain_int8", "coral-edgetpu"),
    "edgetpu-cpu": ("leaky_mid_int8", "coral-edgetpu"),
    "ethos-u": ("mobilenet_v1_96_int8", "ethos-u55-128"),
    # A failing arena (the Markdown's problems, the text's OVER) and a flash budget in kB.
    "tflm-over": ("mobilenet_v1_96_int8", "over.yaml"),
}
#: The profiles of the cases above that are not shipped: (extends, budgets).
PROFILES = {"over.yaml": ("stm32h743-cortex-m7", "  arena: 64KiB\n  flash: 1500kB\n")}


@dataclasses.dataclass(frozen=True)
class Printed:
    """A figure as a view printed it: its text, dimension and the values it rounds from."""

    text: str
    dimension: str
    low: float
    high: float

    def shows(self, dimension: str, value: float) -> bool:
        slack = 1e-9 * max(abs(value), 1e-9)
        return dimension == self.dimension and self.low - slack <= value <= self.high + slack


def printed(text: str) -> list[Printed]:
    found = []
    for m in FIGURE.finditer(text):
        number, unit = (m["rn"], m["ru"]) if m["rn"] else (m["n"], m["u"])
        dimension, size = UNITS[unit]
        digits = number.split(".")[1] if "." in number else ""
        value, half = float(number.replace(",", "")), 0.5 * 10.0 ** -len(digits)
        half = half if value else 0.0  # the formatters print a zero only for a zero
        found.append(Printed(f"{number} {unit}", dimension, (value - half) * size,
                             (value + half) * size))
    return found


def html_text(page: str) -> str:
    """What a reader of the page sees, hover texts included, without the axes' ticks."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    page = re.sub(r'<text class="tick"[^>]*>.*?</text>', " ", page, flags=re.S)
    # A figure kept whole on one line (<span class="fig">) is read as the text around it.
    page = re.sub(r'<span class="fig">(.*?)</span>', r"\1", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " | ", page))


def json_strings(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)
    elif isinstance(value, str):
        yield value


def views(report: Report) -> dict[str, str]:
    """Each view's text, ``check``'s Markdown and page of a project of this one target
    among them, without the profile's description: the profile's own words (``1 MiB
    flash``, the device's), not a figure of the report."""
    from devicefit.sdk.check import views as check_views
    from devicefit.sdk.check.gate import CheckResult, Outcome

    # (check's run time, 12.3 s, is far from any figure of these reports)
    project = CheckResult("devicefit.yaml", (Outcome(
        Path(report.model.path).name, report.model.path, report.profile.name, report),),
        run=False, baseline=None, seconds=12.3)
    shown = {"text": str(render("text", report)),
             "text --layers": str(render("text", report, layers=True)),
             "markdown": str(render("markdown", report)),
             "html": html_text(str(render("html", report))),
             "json": "\n".join(json_strings(json.loads(render("json", report)))),
             "check markdown": check_views.markdown(project),
             "check html": html_text(check_views.html(project))}
    words = report.profile.description
    return {name: text.replace(words, " ") if words else text for name, text in shown.items()}


def facts(value: object, path: str = "report") -> Iterator[tuple[str, str, float]]:
    """(where, dimension, value) of every size and time the report holds: fields named
    ``*_bytes``/``*_ms`` (and their pairs, such as a band) and each budget's figures."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        unit = getattr(value, "unit", None)
        budget = {"bytes": "size", "ms": "time"}.get(str(unit)) if hasattr(value, "margin") else None
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            dimension = budget if f.name in ("value", "limit", "margin", "band") else next(
                (d for suffix, d in SUFFIXES.items() if f.name.endswith(suffix)), None)
            where = f"{path}.{f.name}"
            if dimension and isinstance(item, (int, float)) and not isinstance(item, bool):
                yield where, dimension, float(item)
            elif dimension and isinstance(item, (tuple, list)):
                yield from ((f"{where}[{i}]", dimension, float(v)) for i, v in enumerate(item)
                            if isinstance(v, (int, float)))
            else:
                yield from facts(item, where)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from facts(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from facts(item, f"{path}[{key!r}]")


def disagreements(report: Report) -> list[str]:
    """Each fact printed as more than one text across the views, with where each text is."""
    shown = {name: printed(text) for name, text in views(report).items()}
    found = []
    for where, dimension, value in facts(report):
        if not math.isfinite(value):
            continue
        texts: dict[str, set[str]] = {}
        for name, figures in shown.items():
            for p in figures:
                if p.shows(dimension, value):
                    texts.setdefault(p.text, set()).add(name)
        if len(texts) > 1:
            found.append(f"{where} = {value:g}: " + "; ".join(
                f"{text!r} in {', '.join(sorted(names))}" for text, names in sorted(texts.items())))
    return found


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Report]:
    folder = tmp_path_factory.mktemp("profiles")
    for name, (parent, budgets) in PROFILES.items():
        (folder / name).write_text(f"name: {Path(name).stem}\nextends: {parent}\n"
                                   f"budgets:\n{budgets}")
    return {name: simulate(model_path(model),
                           str(folder / profile) if profile in PROFILES else profile,
                           probe=False)
            for name, (model, profile) in CASES.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_every_view_prints_a_fact_as_one_text(reports, case) -> None:
    report = reports[case]
    if case == "tflm-over":
        assert report.verdict == "fail" and " kB " in str(render("markdown", report))
    assert sum(1 for _ in facts(report)) > 20  # the walk found the report's figures
    assert disagreements(report) == []


def test_the_check_finds_a_fact_printed_two_ways() -> None:
    """The comparison itself: a coarser printing and another prefix are both found."""
    assert printed("TPU 1 us + link") == [Printed("1 us", "time", 0.5e-3, 1.5e-3)]
    assert printed("125,304 B (122.4 KiB)")[0].text == "122.4 KiB"
    assert printed("< 0.001 us") == []
    one_us, finer = printed("1 us"), printed("0.61 us")
    assert one_us[0].shows("time", 0.00061) and finer[0].shows("time", 0.00061)
    kib, kb = printed("293.6 KiB")[0], printed("300.6 kB")[0]
    assert kib.shows("size", 300_624) and kb.shows("size", 300_624) and kib.text != kb.text


def test_the_check_finds_the_edge_tpu_split_rounded_in_one_view(reports, monkeypatch) -> None:
    """The old formatter back in the Edge TPU's lines only (they import it when they run;
    the page's split bar keeps its own): the text's ``TPU 1 us`` beside the page's
    ``0.81 us`` is found."""
    from devicefit.simulator.infra import units

    shown = units.format_time_ms
    monkeypatch.setattr(units, "format_time_ms", lambda ms: (
        f"{ms * 1000:.0f} us" if ms is not None and 0 < abs(ms) < 1e-3 else shown(ms)))
    found = disagreements(reports["edgetpu"])
    assert any(f.startswith("report.compatibility.section.latency.tpu_compute_ms")
               and "'1 us' in check html, html, text" in f and "'0.81 us' in check html, html;" in f
               for f in found), found
