"""The pictures agree with the verdict, looked at in headless Chromium (issue 32).

One page holds every section (one Chromium start): a model that fails its arena budget
although its head alone fits, the same model passing, the Edge TPU's predicted and
compiled partitions, and a public model Vela compiles for the Ethos-U. A script added to
the page writes the drawn elements' boxes into the DOM, so the test measures what a
reader sees: which bars stand above the budget line, whether the legend stays inside a
narrow window, which colours the tensors got.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devicefit.simulator.report.layers import peak
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.html import Section, render_html
from devicefit.simulator.simulate import simulate
from tests.browser import measure
from tests.corpus import corpus
from tests.edgetpu_models import compiled_model
from tests.zoo import model_path

#: A window narrower than the page's pictures (960 px): they must scale, the legend wrap.
WINDOW = "820,4000"

GEOMETRY = """(() => {
const box = e => { const r = e.getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height,
          fill: e.getAttribute('fill'), tensor: e.dataset.tensor, text: e.textContent}; };
const all = (root, sel) => Array.from(root.querySelectorAll(sel)).map(box);
const out = {width: document.documentElement.clientWidth, sections: {}};
for (const s of document.querySelectorAll('section[id^=section-]')) {
  const svg = c => s.querySelector('svg.' + c);
  const layers = s.querySelector('table.layers');
  const col = layers ? Array.from(layers.tHead.rows[0].cells)
    .findIndex(h => h.dataset.col === 'estimated_ms') : -1;
  const pics = {};
  for (const c of ['timeline', 'layout']) {
    const g = svg(c);
    pics[c] = {bars: all(g, 'rect.live, rect.tail, rect.buffer'),
               budget: all(g, '.arena-budget'), judged: all(g, '.arena-judged'),
               lower: all(g, '.lower-bound'), buffers: all(g, 'rect.buffer'),
               live: all(g, 'rect.live')};
  }
  out.sections[s.id] = {...pics,
    svgs: all(s, 'svg'), legend: all(s, 'ul.legend li'),
    per_op: s.querySelector('svg.per-op') ? all(svg('per-op'), 'rect.op') : null,
    per_op_ticks: s.querySelector('svg.per-op') ? all(svg('per-op'), 'text.tick') : [],
    estimated: col < 0 ? [] : Array.from(layers.tBodies[0].rows)
      .map(r => r.cells[col].textContent),
    vela_layers: s.querySelector('svg.ethos-u-layers') ? all(svg('ethos-u-layers'), 'rect.op')
      : null};
}
return out;
})()"""


def _arena_profile(folder: Path, budget: str) -> Path:
    path = folder / f"arena-{budget}.yaml"
    path.write_text(f"name: nrf52840-arena-{budget}\nextends: nrf52840-cortex-m4\n"
                    f"budgets:\n  arena: {budget}\n")
    return path


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Report]:
    folder = tmp_path_factory.mktemp("pictures")
    mobilenet = model_path("mobilenet_v1_96_int8")
    compiled = folder / "compiled_edgetpu.tflite"
    compiled.write_bytes(compiled_model())
    [speech] = corpus(names=["mltk_tflite_micro_speech"])
    found = {
        # The case: 54 KiB of head fit 64 KiB; head + its 26.3 KiB tail do not.
        "fail": simulate(mobilenet, _arena_profile(folder, "64KiB"), probe=False),
        "pass": simulate(mobilenet, _arena_profile(folder, "96KiB"), probe=False),
        "edgetpu": simulate(model_path("chain_int8"), "coral-edgetpu", probe=False),
        "edgetpu-cpu": simulate(model_path("leaky_mid_int8"), "coral-edgetpu", probe=False),
        "edgetpu-compiled": simulate(compiled, "coral-edgetpu", probe=False),
        "ethos-u": simulate(speech.path, "ethos-u55-128", probe=False),
    }
    mem = found["fail"].memory
    assert mem.lower_bound_bytes <= mem.arena_head_bytes < 64 * 1024 < mem.arena_bytes, \
        "the case needs the tail"
    assert found["fail"].verdict == "fail" and found["pass"].verdict == "pass"
    return found


@pytest.fixture(scope="module")
def page(reports, tmp_path_factory) -> dict:
    """The rendered page: its DOM, its text and the geometry by section."""
    names = list(reports)
    text = render_html("pictures", [Section(n, reports[n]) for n in names])
    path = tmp_path_factory.mktemp("page") / "pictures.html"
    shown, geometry = measure(path, text, GEOMETRY, size=WINDOW)
    assert shown.console == [], shown.console
    sections = {n: geometry["sections"][f"section-{i}"] for i, n in enumerate(names)}
    dom = {n: re.search(rf'<section id="section-{i}">(.*?)</section>(?=<section id|<p)',
                        shown.dom, re.S).group(1) for i, n in enumerate(names)}
    return {"width": geometry["width"], "sections": sections, "dom": dom}


def _tops(items: list[dict]) -> list[float]:
    return [i["top"] for i in items if i["height"] > 0]


@pytest.mark.parametrize("picture", ["timeline", "layout"])
def test_the_budget_line_separates_a_failing_arena_from_a_passing_one(page, picture):
    """FAIL: the judged arena and the peak bar (tail + live head) stand above the budget
    line although the head alone is under it; PASS: every bar and the judged arena lie
    under it. Both pictures draw the budget."""
    failing, passing = page["sections"]["fail"][picture], page["sections"]["pass"][picture]
    for pic in (failing, passing):
        assert len(pic["budget"]) == 1 and len(pic["judged"]) == 1
    budget = failing["budget"][0]["top"]
    assert failing["judged"][0]["top"] < budget
    assert min(_tops(failing["bars"])) < budget
    budget = passing["budget"][0]["top"]
    assert passing["judged"][0]["top"] > budget
    assert min(_tops(passing["bars"])) > budget


def test_nothing_is_drawn_above_the_judged_arena(page, reports):
    """Vela's plan puts the Ethos-U op's input and output inside its scratch: the bars count
    the bytes they cover, so no bar rises above the arena (nor the lower bound above the
    head), as the report's own timeline says."""
    for name in ("ethos-u", "fail", "pass", "edgetpu"):
        for picture in ("timeline", "layout"):
            pic = page["sections"][name][picture]
            assert min(_tops(pic["bars"])) >= pic["judged"][0]["top"] - 1, (name, picture)
        layout = page["sections"][name]["layout"]
        assert layout["lower"][0]["top"] >= min(_tops(layout["buffers"])) - 1, name
    assert any(b.offline for b in reports["ethos-u"].memory.plan)


def test_each_buffer_has_its_own_colour_in_both_pictures(page, reports):
    for name, report in reports.items():
        pics = page["sections"][name]
        fills = [b["fill"] for b in pics["layout"]["buffers"]]
        assert len(fills) == len(report.memory.plan)
        assert len(set(fills)) == len(fills), name
        by_tensor = {b["tensor"]: b["fill"] for b in pics["layout"]["buffers"]
                     if int(b["tensor"]) >= 0}
        for bar in pics["timeline"]["live"]:
            if int(bar["tensor"]) >= 0:
                assert bar["fill"] == by_tensor[bar["tensor"]], name


def test_pictures_and_legend_stay_inside_a_narrow_window(page, reports):
    """Every buffer is in the legend (not only those live at the peak), each entry wrapped
    inside the window; the pictures scale down to it."""
    width = page["width"]
    for name in reports:
        pics = page["sections"][name]
        legend = pics["legend"]
        assert legend, name
        assert all(li["right"] <= width for li in legend), name
        assert all(svg["right"] <= width for svg in pics["svgs"]), name
    drawn = reports["fail"].memory.plan
    entries = page["sections"]["fail"]["legend"]
    assert len(entries) == min(len(drawn), 16) + (len(drawn) > 16)
    step = peak(reports["fail"].memory.timeline).first_step
    peak_only = [b for b in drawn if b.first_step <= step <= b.last_step]
    assert len(entries) > len(peak_only)


def test_edge_tpu_page_shows_per_op_times_and_the_partition(page, reports):
    """chain_int8 on the Coral: 1.63 ms, almost all invoke overhead. The per-op chart and
    the layer table show the TPU's sub-microsecond times (not "0 us"), a sentence says how
    much of the estimate they are, and the partition and the latency split are drawn."""
    pics, dom = page["sections"]["edgetpu"], page["dom"]["edgetpu"]
    report = reports["edgetpu"]
    assert sum(bar["height"] > 1 for bar in pics["per_op"]) >= len(pics["per_op"]) // 2
    ticks = [t["text"] for t in pics["per_op_ticks"]]
    assert len(set(ticks)) == len(ticks) >= 3 and len({t.split()[1] for t in ticks}) == 1, ticks
    assert pics["estimated"] and not all(cell == "0 us" for cell in pics["estimated"])
    assert "per inference, not per operator" in dom
    parts = [float(ms) for ms in re.findall(r'<rect class="part" data-part="[^"]+" '
                                            r'data-ms="([^"]+)"', dom)]
    assert sum(parts) == pytest.approx(report.latency.estimated_device_ms, rel=1e-3)
    for name in ("edgetpu", "edgetpu-cpu", "edgetpu-compiled"):
        dom = page["dom"][name]
        section = reports[name].compatibility.section
        partition = re.search(r'<section class="edgetpu-partition">(.*?)</section>', dom, re.S)
        assert partition, name
        rows = re.findall(r'<tr class="(tpu|cpu)"', partition.group(1))
        assert rows == [p.device for p in section.ops], name
        assert f"{section.cpu_ops} op(s) on the CPU" in partition.group(1)
    assert "cpu" in re.findall(r'<tr class="(tpu|cpu)"', page["dom"]["edgetpu-cpu"])
    share = reports["edgetpu-cpu"].compatibility.section.cpu_share
    assert f"{share:.0%} of the MACs on the CPU" in page["dom"]["edgetpu-cpu"]


def test_ethos_u_page_tells_the_users_model_from_the_compiled_one(page, reports):
    """The model table names the user's file with its size and the compiled file with its
    own; the empty per-op chart gives way to a sentence and a chart of the user's operators
    by Vela's cycles; no band of zero width is printed."""
    from devicefit.simulator.infra.units import format_size

    report, dom = reports["ethos-u"], page["dom"]["ethos-u"]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
    src = report.model.source
    assert src is not None
    assert f"your model {report.model.path} its size {format_size(src.size_bytes)}" in text
    assert f"compiled size {format_size(report.model.size_bytes)}" in text
    assert page["sections"]["ethos-u"]["per_op"] is None
    assert "No per-op figures in this report. Every operator's work is inside" in text
    layers = page["sections"]["ethos-u"]["vela_layers"]
    section = report.compatibility.section
    # One bar per operator of the user's file, named by its index, type and output tensor.
    assert len(layers) == len(section.partition) > 0
    assert all(bar["text"].startswith(f"op {p.where} {p.op} '{p.name}'\n")
               for bar, p in zip(layers, section.partition, strict=True))
    assert max(bar["height"] for bar in layers) > 100
    assert not re.search(r"likely ([\d.]+ \w+)–\1\b", text)


def test_the_png_draws_what_is_judged_against_the_budget(reports):
    """``--plot``: the tail under the live bytes, the judged arena and the budget as lines;
    on the failing model the peak bar rises above the budget line, on the passing one it
    stays under."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from devicefit.simulator.report.views.png import draw_timeline

    for name, above in (("fail", True), ("pass", False)):
        report = reports[name]
        fig, ax = plt.subplots()
        draw_timeline(ax, report, name)
        lines = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()
                 if line.get_label().startswith(("arena budget", "judged arena"))}
        budget = next(v for k, v in lines.items() if k.startswith("arena budget"))
        judged = next(v for k, v in lines.items() if k.startswith("judged arena"))
        tops = [bar.get_y() + bar.get_height() for bar in ax.patches]
        plt.close(fig)
        assert budget == _limit(report) / 1024
        assert judged == pytest.approx(report.memory.arena_bytes / 1024)
        assert bool(max(tops) > budget) is above and bool(judged > budget) is above


def _limit(report: Report) -> float:
    return next(b.limit for b in report.budgets if b.name == "arena")
