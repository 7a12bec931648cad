"""The docs' command examples, links and generated tables, checked against the code.

A ```` ```console ```` block in README.md or docs/*.md is a transcript: each ``$ devicefit …``
line is run (in this process, through :func:`devicefit.sdk.cli.main`, stdout and stderr
together as a terminal shows them) and what it prints must match the lines under it. Two
wildcards cover what differs between machines or runs:

- a line that is only ``...`` stands for any number of lines (none included);
- ``...`` inside a line stands for any text on that line (``stages: load ...s, …``).

An HTML comment right before a fence tells the checker more (it is invisible on GitHub and
in the built site):

- ``<!-- doccheck: skip WHY -->``: not run, and why (a TFLM build, a phone, TensorFlow
  training); every block with a ``devicefit`` command is run or says why not;
- ``<!-- doccheck: exit N -->``: the commands of the block exit with N (default 0);
- ``<!-- doccheck: file NAME -->``: the block is a file the later examples use; it is
  written as NAME into the folder the commands run in.

A block with commands but no output lines is run for its exit code alone.

``<!-- doccheck: generated NAME -->`` … ``<!-- doccheck: end -->`` encloses text made by
:data:`GENERATED` (the profiles table, from the shipped profiles; the supported-operators
tables, from the op tables and rules the simulator decides with).

The files the examples name are those ``make demo`` writes (``build/demo/…``) and the
tour's conversion (``digits.tflite``): :func:`tests.docs_models.workspace` lays them out.

``python -m tests.doccheck --update`` rewrites the expected outputs (keeping the lines with
wildcards that still match) and the generated parts from what the code prints now; review
the result with ``git diff``.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests import ops_table
from tests.paths import ROOT

DOCS_DIR = ROOT / "docs"
MARKER = re.compile(r"<!--\s*doccheck:\s*(\w[\w-]*)\s*(.*?)\s*-->")
FENCE = re.compile(r"^(`{3,})\s*([\w-]*)")
ELLIPSIS = "..."
#: Languages whose blocks may hold commands for a shell.
SHELL_LANGUAGES = ("", "console", "sh", "bash", "shell")


def doc_files() -> list[Path]:
    """README first (its tour writes what the pages use), then BENCHMARKS.md (a pointer into
    docs/, whose links are checked too) and the pages."""
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted(DOCS_DIR.glob("*.md"))]


@dataclass
class Command:
    argv: list[str]
    text: str
    #: Line numbers (0-based, in the file) of the expected output: [start, end).
    start: int
    end: int
    expected: list[str]


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    body: list[str]
    markers: dict[str, str] = field(default_factory=dict)
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{_shown(self.path)}:{self.line}"

    def mentions_devicefit(self) -> bool:
        return any(re.match(r"\s*(\$\s+)?devicefit\s", line) for line in self.body)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the doccheck markers right before it."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        fence, start = m.group(1), i
        indent = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = [line[indent:] for line in lines[i + 1:j]]
        markers = {}
        k = start - 1
        while k >= 0 and (not lines[k].strip() or MARKER.search(lines[k])):
            for mm in MARKER.finditer(lines[k]):
                markers.setdefault(mm.group(1), mm.group(2))
            k -= 1
        block = Block(path, start + 1, m.group(2), body, markers)
        if block.language == "console":
            block.commands = _commands(body, start + 1)
        found.append(block)
        i = j + 1
    return found


def _commands(body: list[str], first: int) -> list[Command]:
    commands: list[Command] = []
    i = 0
    while i < len(body):
        if not body[i].startswith("$ "):
            raise DocError(f"line {first + i + 1}: output before the first '$ ' command")
        text = body[i][2:]
        while text.endswith("\\") and i + 1 < len(body):
            i += 1
            text = text[:-1] + " " + body[i].strip()
        i += 1
        start = i
        while i < len(body) and not body[i].startswith("$ "):
            i += 1
        commands.append(Command(shlex.split(text, comments=True), text, first + start,
                                first + i, body[start:i]))
    return commands


class DocError(Exception):
    """A docs problem, named with its file and line."""


# --------------------------------------------------------------------------- matching
def _line_pattern(expected: str) -> re.Pattern:
    parts = [re.escape(p) for p in expected.rstrip().split(ELLIPSIS)]
    return re.compile("[^\n]*?".join(parts))


def _is_gap(line: str) -> bool:
    return line.strip() == ELLIPSIS


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is what ``expected`` shows, wildcards included."""
    pattern = "".join("(?:[^\n]*\n)*?" if _is_gap(e) else _line_pattern(e).pattern + "\n"
                      for e in expected)
    text = "".join(a.rstrip() + "\n" for a in actual)
    return re.fullmatch(pattern, text) is not None


def updated(expected: list[str], actual: list[str]) -> list[str]:
    """``actual``, keeping the expected lines (wildcards) that still match and a ``...``
    where the expected output elided lines: the longest alignment of expected lines to
    actual ones, each expected line matching as a pattern."""
    literal = [(i, _line_pattern(e)) for i, e in enumerate(expected) if not _is_gap(e)]
    n, m = len(literal), len(actual)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for a in range(n - 1, -1, -1):
        for b in range(m - 1, -1, -1):
            hit = literal[a][1].fullmatch(actual[b].rstrip()) is not None
            best[a][b] = max(best[a + 1][b], best[a][b + 1], best[a + 1][b + 1] + 1 if hit else 0)
    out: list[str] = []
    a = b = 0
    last = -1  # index in expected of the last kept line

    def gap_between(lo: int, hi: int) -> bool:
        return any(_is_gap(e) for e in expected[lo + 1:hi])

    pending: list[str] = []

    def flush(upto: int) -> None:
        if pending:
            out.extend([ELLIPSIS] if gap_between(last, upto) else pending)
            pending.clear()

    while a < n and b < m:
        i, pattern = literal[a]
        if pattern.fullmatch(actual[b].rstrip()) and best[a][b] == best[a + 1][b + 1] + 1:
            flush(i)
            out.append(expected[i])
            last, a, b = i, a + 1, b + 1
        elif best[a + 1][b] >= best[a][b + 1]:
            a += 1
        else:
            pending.append(actual[b].rstrip())
            b += 1
    pending.extend(x.rstrip() for x in actual[b:])
    flush(len(expected))
    return out


# --------------------------------------------------------------------------- running
def run_cli(argv: list[str]) -> tuple[int, list[str]]:
    """``devicefit ARGS`` in this process: exit code and what it printed (stdout and stderr
    in the order they were written)."""
    from devicefit.sdk.cli import main

    if argv[:1] != ["devicefit"]:
        raise DocError(f"only devicefit commands run here, not {shlex.join(argv)!r}: mark the "
                       f"block <!-- doccheck: skip WHY -->")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv[1:])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue().splitlines()


@dataclass
class Failure:
    where: str
    command: str
    message: str


#: Commands that start TensorFlow: run once for the docs and recorded
#: (:func:`tests.docs_models.recorded`), or not run at all.
TENSORFLOW_COMMANDS = ("convert", "fit", "plan-batch")


def check_file(path: Path, folder: Path, update: bool = False,
               recorded: dict | None = None) -> list[Failure]:
    """Run the file's examples in ``folder`` (written files land there); ``recorded`` maps a
    command line to the result of an earlier run of it. With ``update``, rewrite the
    outputs that differ. Returns what did not match."""
    recorded = recorded or {}
    failures: list[Failure] = []
    rewrites: list[tuple[int, int, list[str], int]] = []
    for block in blocks(path):
        if "file" in block.markers:
            (folder / block.markers["file"]).write_text("\n".join(block.body) + "\n")
            continue
        if block.language not in SHELL_LANGUAGES or not block.mentions_devicefit():
            continue
        if "skip" in block.markers:
            if not block.markers["skip"]:
                failures.append(Failure(block.where, "", "a skip marker must say why"))
            continue
        if not block.commands:
            failures.append(Failure(block.where, "", "a block with devicefit commands is a "
                                    "```console transcript ($ lines) or says why it is not run "
                                    "(<!-- doccheck: skip WHY -->)"))
            continue
        want_code = int(block.markers.get("exit", "0"))
        indent = _indent(path, block.line)
        with working_dir(folder):
            for cmd in block.commands:
                if (done := recorded.get(" ".join(cmd.argv))) is not None:
                    code, actual = done.code, list(done.lines)
                elif cmd.argv[1:2] and cmd.argv[1] in TENSORFLOW_COMMANDS:
                    failures.append(Failure(block.where, cmd.text, "starts TensorFlow: record "
                                            "it in tests/docs_models.py or mark the block "
                                            "<!-- doccheck: skip WHY -->"))
                    continue
                else:
                    code, actual = run_cli(cmd.argv)
                if code != want_code:
                    failures.append(Failure(block.where, cmd.text, f"exit {code}, the doc says "
                                            f"{want_code}:\n" + "\n".join(actual[-15:])))
                    continue
                if not cmd.expected or matches(cmd.expected, actual):
                    continue
                # Against the output --update would write: the wildcards that still match
                # stay, so the diff shows only what changed.
                new = updated(cmd.expected, actual)
                diff = "\n".join(difflib.unified_diff(cmd.expected, new, "the doc",
                                                      "printed", lineterm=""))
                failures.append(Failure(block.where, cmd.text, diff))
                rewrites.append((cmd.start, cmd.end, new, indent))
    if update and rewrites:
        lines = path.read_text().splitlines()
        for start, end, new, indent in sorted(rewrites, reverse=True):
            lines[start:end] = [" " * indent + x if x else x for x in new]
        path.write_text("\n".join(lines) + "\n")
    return failures


def _indent(path: Path, line: int) -> int:
    text = path.read_text().splitlines()[line - 1]
    return len(text) - len(text.lstrip())


@contextlib.contextmanager
def working_dir(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


# --------------------------------------------------------------------------- links
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs (Python-Markdown's toc) makes it: the heading rendered,
    its tags dropped (code keeps its underscores, emphasis loses its marks), slugified."""
    import html

    import markdown
    from markdown.extensions.toc import slugify

    text = html.unescape(re.sub(r"<[^>]+>", "", markdown.markdown(heading)))
    return slugify(text, "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            base, n = slug(m.group(1)), 1
            name = base
            while name in found:  # toc numbers repeated headings: name_1, name_2
                name, n = f"{base}_{n}", n + 1
            found.add(name)
    return found


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    """Relative links (and their #anchors) of a Markdown file that lead nowhere."""
    problems: list[str] = []
    text = path.read_text()
    text = re.sub(r"^(`{3,}).*?^\1", "", text, flags=re.S | re.M)  # code blocks
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{_shown(path)}: ({target})"
        if not dest.exists():
            problems.append(f"{where}: no file {file_part}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading #{anchor} in {_shown(dest)}")
    return problems


#: Where code, comments and profiles cite a section of the benchmark pages by its title:
#: ``docs/benchmarks.md "Device latency"`` (the title may wrap onto a comment's next line).
CITATION = re.compile(r'(BENCHMARKS\.md|docs/benchmarks(?:-log)?\.md)[\s#:,(]+'
                      r'"([^"\n]{1,80}(?:\n[^"\n]{1,80})?)"')
#: The files whose citations are checked (the docs link to the sections instead).
CITING = ("simulator/**/*.py", "sdk/**/*.py", "benchmarks/**/*.py", "tests/**/*.py",
          "examples/**/*.py", "device_profiles/*.yaml")


def headings(path: Path) -> list[str]:
    """A page's headings as text (code and emphasis marks dropped)."""
    found, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            found.append(re.sub(r"[`*]", "", m.group(1)))
    return found


def stale_citations(files: list[Path] | None = None) -> list[str]:
    """Citations of a benchmark section that name no heading of the page they cite (a
    title may be the start of a heading: "Calibration on the board")."""
    if files is None:
        files = sorted({f for pattern in CITING for f in ROOT.glob(pattern)})
    pages: dict[str, list[str]] = {}
    problems = []
    for path in files:
        for m in CITATION.finditer(path.read_text(errors="replace")):
            page, title = m.group(1), re.sub(r"\s*\n\s*(#:?\s*)?", " ", m.group(2)).strip()
            where = f"{_shown(path)}: {page} \"{title}\""
            if page == "BENCHMARKS.md":
                problems.append(f"{where}: BENCHMARKS.md has no sections, it points to "
                                "docs/benchmarks.md (current figures) and docs/benchmarks-log.md")
                continue
            if page not in pages:
                pages[page] = headings(ROOT / page)
            if not any(h == title or h.startswith(title) for h in pages[page]):
                problems.append(f"{where}: no such heading in {page}")
    return problems


# --------------------------------------------------------------------------- generated
def profiles_table() -> list[str]:
    """The built-in profiles, as the profile loader resolves them."""
    from devicefit.sdk.commands.profiles import _budget as budget_size  # as `profiles list`
    from devicefit.simulator.infra.units import format_time_ms
    from devicefit.simulator.profiles import ProfileStore

    rows = ["| profile | target | runtime | flash / arena / latency budget |",
            "| --- | --- | --- | --- |"]
    store = ProfileStore(None)
    for name in store.names():
        p = store.load(name)
        b = p.budgets
        budgets = " / ".join("-" if v is None else f(v) for v, f in (
            (b.flash_bytes, budget_size), (b.arena_bytes, budget_size),
            (b.latency_ms, format_time_ms)))
        rows.append(f"| `{p.name}` | {p.description} | {p.runtime.name} + "
                    f"{p.runtime.kernels} kernels | {budgets} |")
    return rows


#: The README's sections the site's home page shows too (mkdocs builds docs/ only).
README_SECTIONS = ("Start", "A tour: convert → simulate → check")
#: Put before each block of the copy: its examples run where they are written, in README.md
#: (its tour writes the files the pages after it use; run twice, `check` would find the
#: baseline the first run wrote).
COPY_SKIP = "<!-- doccheck: skip README.md's tour, copied here; the docs check runs it there -->"


def readme_tour() -> list[str]:
    """README.md's start and tour, one heading level down, its links made relative to
    docs/ and its blocks marked as run in README.md."""
    out: list[str] = []
    keep = fenced = False
    for line in (ROOT / "README.md").read_text().splitlines():
        if FENCE.match(line.strip()):
            if not fenced:
                while out and MARKER.fullmatch(out[-1].strip()):
                    out.pop()
                if keep:
                    out.append(COPY_SKIP)
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            keep = line[3:] in README_SECTIONS
            if keep:
                line = "#" + line
        if keep:
            out.append(line.replace("](docs/", "]("))
    while out and not out[-1]:
        out.pop()
    return out


GENERATED: dict[str, Callable[[], list[str]]] = {
    "profiles": profiles_table,  # docs/profiles.md
    "readme_tour": readme_tour,  # docs/index.md
    # docs/ops.md: from the op tables and rules the simulator decides with (tests/ops_table.py)
    "ops": ops_table.table,
    "custom_ops": ops_table.custom_table,
    "edgetpu_rules": ops_table.edgetpu_requirements,
}
_GENERATED = re.compile(r"(<!--\s*doccheck:\s*generated\s+(\w+)\s*-->\n)(.*?)(<!--\s*doccheck:"
                        r"\s*end\s*-->)", re.S)


def stale_generated(path: Path, update: bool = False) -> list[str]:
    """Generated parts that differ from what their generator makes now."""
    text = path.read_text()
    stale: list[str] = []

    def fresh(m: re.Match) -> str:
        name = m.group(2)
        if name not in GENERATED:
            stale.append(f"{_shown(path)}: unknown generated part {name!r}")
            return m.group(0)
        now = "\n".join(GENERATED[name]()) + "\n"
        if m.group(3) != now:
            stale.append(f"{_shown(path)}: the generated part {name!r} is stale "
                         f"(python -m tests.doccheck --update)")
        return m.group(1) + now + m.group(4)

    new = _GENERATED.sub(fresh, text)
    if update and new != text:
        path.write_text(new)
    return stale


def main(argv: list[str]) -> int:
    """``python -m tests.doccheck [--update]``: check (or update) every doc."""
    from tests.docs_models import recorded, workspace

    update = "--update" in argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    problems: list[str] = []
    with workspace() as folder:
        for path in doc_files():
            problems += stale_generated(path, update)
            problems += broken_links(path)
            problems += [f"{f.where}: $ {f.command}\n{f.message}"
                         for f in check_file(path, folder, update, recorded())]
    problems += stale_citations()
    print("\n\n".join(problems) or "docs: every example, link and table is current")
    return 1 if problems and not update else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
