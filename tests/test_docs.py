"""The docs say what the code does: they build strictly, their links lead somewhere, their
generated tables are current and every ``$ devicefit`` example prints what it shows
(:mod:`tests.doccheck`; ``python -m tests.doccheck --update`` rewrites what changed)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from tests import doccheck, ops_table
from tests.docs_models import recorded, workspace
from tests.paths import ROOT


def test_the_docs_build_strictly(tmp_path):
    """mkdocs fails on a page missing from the nav, a broken link or anchor between pages."""
    # Not --quiet: it hides the warnings that --strict counts, and the build passes them.
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "check" / "index.html").is_file()
    site = tmp_path / "site"
    assert "A tour: convert" in (site / "index.html").read_text()  # the README's, copied
    # A pipe escaped for a Markdown table inside code is shown with its backslash
    # (`list\|show` on the home page once): no page may show one.
    shown = [page.relative_to(site) for page in site.rglob("*.html") if "\\|" in page.read_text()]
    assert not shown, shown


def test_every_relative_link_and_anchor_resolves():
    """README.md too, which mkdocs does not build."""
    problems = [p for path in doccheck.doc_files() for p in doccheck.broken_links(path)]
    assert not problems, "\n".join(problems)


def test_the_link_checker_finds_a_broken_file_and_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# A heading `with code`\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading-with-code) [again](other.md#twice_1) "
                    "[gone](nowhere.md) [anchor](other.md#no-such-heading) "
                    "`[in code](nowhere.md)` [web](https://example.org/x.md)\n")
    problems = doccheck.broken_links(page)
    assert len(problems) == 2, problems
    assert "no file nowhere.md" in problems[0] and "no heading #no-such-heading" in problems[1]


def test_benchmark_citations_name_a_section(tmp_path):
    """Code, comments and profiles cite a benchmark section by its title, as in
    ``docs/benchmarks.md "Device latency"`` (or the log's): the title names a heading there.
    BENCHMARKS.md, now a pointer, has no sections to cite."""
    assert not doccheck.stale_citations(), "\n".join(doccheck.stale_citations())
    page, pointer = "docs/benchmarks" + ".md", "BENCHMARKS" + ".md"  # no citations themselves
    cites = tmp_path / "cites.py"
    cites.write_text(f'"""{page} "Device latency", {page} "No such area",\n'
                     f'{pointer} "Device latency"."""\n# ({page}\n# "Edge TPU")\n')
    problems = doccheck.stale_citations([cites])
    assert len(problems) == 2, problems
    assert '"No such area": no such heading' in problems[0]
    assert "BENCHMARKS.md has no sections" in problems[1]


def test_the_home_page_copies_the_readme_tour_which_runs_once():
    """The site is built from docs/ alone, so the home page holds the README's start and
    tour (a generated part); its examples run in README.md, where the tour writes the files
    the pages after it use, and are marked so in the copy."""
    tour = doccheck.readme_tour()
    assert "### A tour: convert → simulate → check" in tour and "### Start" in tour
    assert not [line for line in tour if "](docs/" in line]  # links made relative to docs/
    copied = [b for b in doccheck.blocks(ROOT / "docs" / "index.md")
              if b.markers.get("skip", "").startswith("README.md's tour")]
    readme = doccheck.blocks(ROOT / "README.md")
    assert [(b.language, b.body) for b in copied] == [(b.language, b.body) for b in readme]


def test_generated_tables_are_current():
    stale = [s for path in doccheck.doc_files() for s in doccheck.stale_generated(path)]
    assert not stale, "\n".join(stale)
    text = (ROOT / "docs" / "profiles.md").read_text()
    assert "`ethos-u55-128`" in text and "`coral-edgetpu`" in text


def test_the_ops_page_follows_the_tables_the_simulator_decides_with(monkeypatch):
    """docs/ops.md is made from the probed tables and the Edge TPU's rules: a kernel that
    refuses one more type combination makes the page stale (and `make test` fail)."""
    from devicefit.simulator.targets.tflm import ops as tflm

    page = ROOT / "docs" / "ops.md"
    assert not doccheck.stale_generated(page)
    assert "| `CONV_2D` | yes, except" in page.read_text()
    table = copy.deepcopy(tflm.support())
    table["combinations"]["CONV_2D"]["int8/int8/int8"] = "invoke: Type INT8 not supported."
    monkeypatch.setattr(tflm, "support", lambda: table)
    assert doccheck.stale_generated(page) == [
        "docs/ops.md: the generated part 'ops' is stale (python -m tests.doccheck --update)"]
    assert "| `CONV_2D` | yes, except int8, uint8, float32" in "\n".join(ops_table.table())


def test_wildcards_match_and_update_keeps_them():
    expected = ["head", "...", "took ... s", "tail"]
    actual = ["head", "a", "b", "took 1.5 s", "tail"]
    assert doccheck.matches(expected, actual)
    assert not doccheck.matches(expected, ["head", "took 1.5 s", "tail", "extra"])
    assert doccheck.matches(["a", "...", "b"], ["a", "b"])  # `...` may stand for no line
    # An update keeps the wildcard lines that still match, and the elision.
    assert doccheck.updated(expected, ["head", "x", "took 2 s", "tail", "new"]) == [
        "head", "...", "took ... s", "tail", "new"]
    assert doccheck.updated(["a", "b"], ["a", "c"]) == ["a", "c"]


def test_a_changed_output_fails_with_a_diff_and_update_rewrites_it(tmp_path):
    """The doc shows an old message; the check names the example, --update takes the new one
    and keeps what the doc elided."""
    (tmp_path / "board.yaml").write_text("extends: stm32l4r5-cortex-m4\nbudgets:\n  arenna: 1KiB\n")
    doc = tmp_path / "page.md"
    doc.write_text("Intro.\n\n<!-- doccheck: exit 2 -->\n```console\n"
                   "$ devicefit profiles validate board.yaml\n"
                   "devicefit: error: board.yaml:3: an old message\n```\n")
    (failure,) = doccheck.check_file(doc, tmp_path)
    assert failure.where == f"{doc}:4" and "-devicefit: error: board.yaml:3: an old" in \
        failure.message and "+devicefit: error: board.yaml:3: unknown key" in failure.message
    doccheck.check_file(doc, tmp_path, update=True)
    assert "did you mean 'arena'" in doc.read_text() and "Intro." in doc.read_text()
    assert doccheck.check_file(doc, tmp_path) == []


def test_every_example_is_run_or_says_why():
    """A block with a devicefit command is a transcript the checker runs, or carries a skip
    marker with a reason."""
    unchecked = [b.where for path in doccheck.doc_files() for b in doccheck.blocks(path)
                 if b.language in doccheck.SHELL_LANGUAGES and b.mentions_devicefit()
                 and not b.commands and not b.markers.get("skip")]
    assert not unchecked, unchecked


@pytest.mark.slow  # on first use, the tour's conversion (tests/docs_models.py)
def test_every_command_example_prints_what_the_docs_show():
    """README first: its tour writes the files the pages use. All failures at once, each
    with a diff; ``python -m tests.doccheck --update`` takes the new output."""
    failures = []
    runs = recorded()
    with workspace() as folder:
        for path in doccheck.doc_files():
            failures += doccheck.check_file(path, folder, recorded=runs)
    assert not failures, "\n\n".join(f"{f.where}: $ {f.command}\n{f.message}"
                                      for f in failures) + \
        "\n\n(python -m tests.doccheck --update rewrites these outputs; review with git diff)"
