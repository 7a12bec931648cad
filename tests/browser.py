"""Headless Chromium for tests that look at pages (Debian's `chromium`, installed by `make test`)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

MISSING = ("Chromium is missing: the HTML-report tests look at pages in a headless Chromium "
           "and no `chromium` or `chromium-browser` is on PATH. Install Debian's: "
           "`sudo apt-get install -y chromium` (`make test` installs it itself when run as "
           "root, via `make debian`).")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class Rendered:
    dom: str
    console: list[str]


def render(page: Path, screenshot: Path | None = None, size: str = "1200,2400",
           query: str = "") -> Rendered:
    """Load ``page`` from disk (``query``: its ``?a=b`` part, for pages that read it); return
    the DOM after load and every console message."""
    url = page.resolve().as_uri() + (f"?{query}" if query else "")
    binary = chromium()
    if binary is None:
        pytest.fail(MISSING, pytrace=False)
    with tempfile.TemporaryDirectory() as profile_dir:
        args = [binary, *FLAGS, f"--user-data-dir={profile_dir}", f"--window-size={size}"]
        if screenshot is not None:
            shot = subprocess.run([*args, f"--screenshot={screenshot}", url],
                                  capture_output=True, text=True, timeout=120)
            assert shot.returncode == 0, shot.stderr[-2000:]
        run = subprocess.run([*args, "--dump-dom", url],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(run.stdout, console)


def measure(page: Path, html_text: str, script: str, size: str = "1200,2400"
            ) -> tuple[Rendered, object]:
    """Write ``html_text`` to ``page`` with ``script`` run after load, render it, and return
    the DOM with what the script measured: ``script`` is a JavaScript expression whose value
    (boxes of elements, say) is written into the page as JSON for the test to read back."""
    probe = ("<script>(function(){const pre = document.createElement('pre');"
             f"pre.id = 'geometry'; pre.textContent = JSON.stringify({script});"
             "document.body.appendChild(pre);})();</script></body>")
    page.write_text(html_text.replace("</body>", probe, 1))
    shown = render(page, size=size)
    found = re.search(r'<pre id="geometry">(.*?)</pre>', shown.dom, re.S)
    assert found, "the measuring script did not run"
    return shown, json.loads(html.unescape(found.group(1)))


#: The window the pages are laid out for, and the share of its width they must use.
WIDE = "1400,2400"
MIN_SHARE = 0.8

#: A script for :func:`measure` that finds what a reader would see as a layout fault: a
#: chart's text over another text, a bar, a trial's mark or a drawn line (straight or a
#: polyline), or cut by the picture's edge; a matplotlib legend over its plot; a table
#: cell that breaks a figure from its unit (``172.6 / KiB``) or a one-word cell (a profile
#: name) over two lines. It also reports the width the pictures and tables use.
LAYOUT = r"""(() => {
const box = e => e.getBoundingClientRect();
const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
const name = e => `${e.getAttribute('class') || e.id || e.tagName} "${
  (e.textContent || '').trim().slice(0, 50)}"`;
const lines = r => new Set(Array.from(r.getClientRects()).filter(q => q.width > 0)
  .map(q => Math.round(q.top))).size;
const problems = [];
const SHAPES = 'rect.live, rect.buffer, rect.op, rect.part, circle.trial, rect.rejected, ' +
  'line.arena-budget, line.arena-judged, line.lower-bound, line.budget, #peak-step';
for (const svg of document.querySelectorAll('svg')) {
  const texts = Array.from(svg.querySelectorAll('text'))
    .filter(t => t.textContent.trim() && box(t).width > 0);
  const shapes = Array.from(svg.querySelectorAll(SHAPES)), frame = box(svg);
  texts.forEach((t, i) => {
    const a = box(t);
    if (a.left < frame.left - 1 || a.right > frame.right + 1) problems.push(
      `${name(t)} cut by its picture's edge`);
    for (const u of texts.slice(i + 1)) if (hit(a, box(u))) problems.push(
      `${name(t)} over ${name(u)}`);
    for (const s of shapes) if (hit(a, box(s))) problems.push(`${name(t)} over ${name(s)}`);
  });
  // A drawn polyline (the Pareto front, the diff's two sides), walked in 2 px steps.
  for (const line of svg.querySelectorAll('polyline')) {
    const m = line.getScreenCTM(), pts = Array.from(line.points)
      .map(q => new DOMPoint(q.x, q.y).matrixTransform(m));
    const on = [];
    pts.slice(1).forEach((b, i) => { const a = pts[i];
      const n = Math.max(1, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y) / 2));
      for (let k = 0; k <= n; k++) on.push([a.x + (b.x - a.x) * k / n, a.y + (b.y - a.y) * k / n]);
    });
    for (const t of texts) { const a = box(t);
      if (on.some(([x, y]) => a.left < x && x < a.right && a.top < y && y < a.bottom))
        problems.push(`${name(t)} over ${line.getAttribute('class')}`); }
  }
  const legend = svg.querySelector('g[id^=legend]'), axes = svg.querySelector('g#patch_2');
  if (legend && axes && hit(box(legend), box(axes))) problems.push('legend over the plot');
}
const FIGURE = /[-+~≈<>±]?\d[\d,.]*\s(?:[kMG]?B|[KMG]iB|[num]?s|us|%|x)(?!\w)/g;
for (const td of document.querySelectorAll('td')) {
  const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (const m of n.data.matchAll(FIGURE)) {
      const r = document.createRange();
      r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
      if (lines(r) > 1) problems.push(`a cell breaks "${m[0]}"`);
    }
  }
  const text = td.textContent.trim();
  const r = document.createRange(); r.selectNodeContents(td);
  if (text && !/\s/.test(text) && lines(r) > 1) problems.push(`a cell breaks "${text}"`);
}
const used = Math.max(0, ...Array.from(document.querySelectorAll('svg, tr'))
  .map(e => box(e).right));
return {problems, used, window: window.innerWidth,
        figures: document.querySelectorAll('svg').length};
})()"""


def layout_problems(geometry: object) -> list[str]:
    """What :data:`LAYOUT` found wrong, the page's width share among it."""
    assert isinstance(geometry, dict)
    found = list(geometry["problems"])
    share = geometry["used"] / geometry["window"]
    if share < MIN_SHARE:
        found.append(f"the pictures and tables use {share:.0%} of the window's "
                     f"{geometry['window']} px (at least {MIN_SHARE:.0%} expected)")
    return found
