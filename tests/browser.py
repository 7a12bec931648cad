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
