"""HTML report of a 200-op model: size, and time to render in headless Chromium.

Target (issue 9): under 2 MB and rendered in under 2 s. Chromium's own start-up dominates a
cold render, so the script also renders an empty page in the same run and prints the
difference and the ratio, which are what the report itself costs.

Run: .venv/bin/python -m benchmarks.bench_html
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from devicefit.simulator.report.views.html import Section, render_html
from devicefit.simulator.simulate import simulate
from tests.browser import render
from tests.zoo import model_path

REPEATS = 5


def _time_render(page: Path) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        shown = render(page)
        times.append(time.perf_counter() - start)
        assert not shown.console, shown.console
    return statistics.median(times)


def main() -> int:
    report = simulate(model_path("deep_mlp_int8"), "android-arm64-cpu")
    start = time.perf_counter()
    page_text = render_html("deep_mlp_int8", [Section("deep_mlp_int8", report)])
    build_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as d:
        page = Path(d) / "report.html"
        page.write_text(page_text)
        blank = Path(d) / "blank.html"
        blank.write_text("<!DOCTYPE html><html><body></body></html>")
        t_blank = _time_render(blank)
        t_page = _time_render(page)
    print(f"operators: {report.model.operators}, planned buffers: {len(report.memory.plan)}")
    print(f"page size: {len(page_text.encode()) / 1024:.1f} KiB (target < 2048 KiB)")
    print(f"build the HTML in Python: {build_s * 1000:.1f} ms")
    print(f"chromium load+render, median of {REPEATS}: blank {t_blank:.2f} s, "
          f"report {t_page:.2f} s; report - blank = {t_page - t_blank:.2f} s "
          f"(target < 2 s), ratio {t_page / t_blank:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
