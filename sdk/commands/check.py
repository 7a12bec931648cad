"""``devicefit check``: the CI gate over every model × profile of a project file."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from devicefit.simulator.errors import UsageError
from devicefit.simulator.infra import jsonout
from devicefit.simulator.infra.fileio import write_atomic

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from devicefit.sdk.check import CheckResult, Outcome
    from devicefit.sdk.check.shard import Shard
    from devicefit.sdk.terminal import FirstFit

# sdk.check (numpy, the simulator, rich tables) is imported inside the handlers so that
# `devicefit --help` and the other commands do not pay for it.

#: ``check --details``: which targets keep their whole report (per tensor, per operator) in
#: the results and the page. ``auto``: all up to DETAIL_LIMIT targets, then the problems.
DETAILS = ("auto", "all", "problems")
DETAIL_LIMIT = 100


def keeps_details(details: str, targets: int) -> bool:
    """Whether a passing target keeps its whole report (every other target always does)."""
    return details == "all" or (details == "auto" and targets <= DETAIL_LIMIT)


#: Below this many targets a progress bar only flickers.
PROGRESS_MIN_TARGETS = 4
_STATUS = {"pass": "[green]pass[/]", "at-risk": "[bold yellow]AT RISK[/]",
           "fail": "[bold red]FAIL[/]", "error": "[bold red]ERROR[/]"}


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of processes >= 0, got {text!r}")
    return value or (os.cpu_count() or 1)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        description="Simulate every model x profile listed in a project file (static analysis; "
                    "--run adds real inference) and fail when a budget, the runtime's op "
                    "support or a regression rule fails. Exit 0 all pass, 1 something failed, "
                    "2 bad project file or model. Never imports TensorFlow.",
        epilog="example: devicefit check --junit reports/junit.xml "
               "--markdown reports/summary.md --baseline devicefit-baseline.json\n"
               "on a CI matrix of 4 runners, the second runs (each its own K of K/4)\n"
               "  devicefit check --shard 2/4 --results shard-2.json\n"
               "and one job joins the shards (one report, one exit code):\n"
               "  devicefit check merge shard-*.json --junit junit.xml --markdown summary.md")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="project file (default: devicefit.yaml); or 'merge' followed by "
                        "shard results: devicefit check merge SHARD.json ...")
    p.add_argument("shard_results", nargs="*", metavar="SHARD.json", help=argparse.SUPPRESS)
    p.add_argument("--junit", type=Path, metavar="OUT.xml",
                   help="write JUnit XML: one testcase per model x profile x budget/regression")
    p.add_argument("--markdown", type=Path, metavar="OUT.md",
                   help="write a Markdown summary (for $GITHUB_STEP_SUMMARY or an MR comment)")
    p.add_argument("--json", action="store_true",
                   help="print JSON (with every simulate report) instead of the table")
    p.add_argument("--html", type=Path, metavar="OUT.html",
                   help="write one HTML page: the project's table, then each model x profile's "
                        "memory timeline, arena layout, per-op cost and budgets")
    p.add_argument("--baseline", type=Path, metavar="FILE.json",
                   help="baseline for the regression rules (default: 'baseline:' of the project)")
    p.add_argument("--update-baseline", action="store_true",
                   help="write the baseline from this run instead of checking regressions")
    p.add_argument("--run", action="store_true",
                   help="also run each model in its real runtime (slower; measured figures)")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="op support from devicefit's tables only, without asking the TFLM or "
                        "LiteRT wheel about operator signatures not seen before")
    p.add_argument("--jobs", "-j", type=_jobs, default=1, metavar="N",
                   help="simulate in N parallel processes (0: one per CPU; default 1). "
                        "Pays with --run; the static gate is faster in one process")
    p.add_argument("--shard", type=_shard, metavar="K/N",
                   help="check only the K-th of N deterministic parts of the model x profile "
                        "targets (one CI runner each; join them with 'check merge')")
    p.add_argument("--results", type=Path, metavar="OUT.json",
                   help="write the JSON result with its shard placement (what 'check merge' "
                        "reads)")
    p.add_argument("--details", choices=DETAILS, default="auto",
                   help="which targets keep their whole report (memory plan, per-operator "
                        "figures) in --results and --html: all, or only those that did not "
                        f"pass; auto: all up to {DETAIL_LIMIT} targets, then the problems")
    p.add_argument("--fail-on-risk", action="store_true",
                   help="fail (exit 1) on a latency budget the estimate meets but the top of "
                        "its error band does not ('at risk'; passes by default)")
    p.set_defaults(handler=_check)


def _shard(text: str) -> Shard:
    from devicefit.sdk.check.shard import parse_shard

    return parse_shard(text)


def _check(args: argparse.Namespace) -> int:
    from devicefit.sdk.check import DEFAULT_PROJECT_FILE, load_baseline, load_project, run_check
    from devicefit.sdk.check.baseline import first_run_note, starts_baseline
    from devicefit.sdk.check.shard import Shard, select, shard_result
    from devicefit.sdk.console import make_console
    from devicefit.sdk.options import profile_inputs
    from devicefit.simulator.infra.fileio import check_outputs
    from devicefit.simulator.types import MeasureOptions

    if args.file == "merge":
        return _merge(args)
    if args.shard_results:
        raise UsageError(f"check takes one project file, got {args.file} "
                         f"{' '.join(args.shard_results)} (to join shard results: "
                         "devicefit check merge SHARD.json ...)")
    if args.shard is not None and args.update_baseline:
        raise UsageError("--update-baseline needs every target: run it unsharded or on "
                         "'check merge' of all shards")
    project = load_project(args.file or DEFAULT_PROJECT_FILE, args.profiles_dir)
    baseline_path = args.baseline or project.baseline
    if starts_baseline(args.baseline, project.baseline):
        assert baseline_path is not None  # the project's: starts_baseline needs one
        make_console(args.no_color, stderr=True).print(
            first_run_note(baseline_path, sharded=args.shard is not None), markup=False)
        if args.shard is None:
            args.update_baseline = True
        else:  # a shard's figures are not the whole baseline
            baseline_path = None
    if args.update_baseline and baseline_path is None:
        raise UsageError("--update-baseline needs a file: pass --baseline FILE.json or set "
                         "'baseline:' in the project file")
    inputs = [project.path, *project.model_paths]
    if baseline_path is not None and not args.update_baseline:
        inputs.append(baseline_path)
    named_inputs = [("project file", project.path),
                    *(("model", m) for m in project.model_paths),
                    *(i for t in project.targets for i in profile_inputs(t.profile)),
                    ("baseline", None if args.update_baseline else baseline_path)]
    check_outputs([("--junit", args.junit), ("--markdown", args.markdown), ("--html", args.html),
                   ("--results", args.results),
                   ("--update-baseline", baseline_path if args.update_baseline else None)],
                  named_inputs)
    shard = args.shard or Shard(1, 1)
    whole = project
    project, positions = select(project, shard)
    has_rules = any(t.rules for t in project.targets)
    baseline = (load_baseline(baseline_path)
                if baseline_path is not None and has_rules and not args.update_baseline else None)

    err = make_console(args.no_color, stderr=True)
    # Once each, however many targets use the profile (every report also notes them).
    for warning in dict.fromkeys(w for t in project.targets for w in t.profile.warnings):
        err.print(warning, markup=False)
    with _Progress(err, 0 if args.quiet else len(project.targets)) as advance:
        result = run_check(project, run=MeasureOptions() if args.run else None,
                           probe=args.probe, jobs=args.jobs, baseline=baseline,
                           baseline_path=baseline_path if baseline is not None else None,
                           on_done=advance, fail_on_risk=args.fail_on_risk,
                           passing_details=keeps_details(args.details, len(whole.targets)))
    written = []
    if args.results is not None:
        doc = shard_result(result, whole, shard, positions, len(whole.targets)).to_dict()
        write_atomic(args.results, jsonout.dumps(doc, indent=2) + "\n", inputs=inputs)
        written.append(f"{args.results} (shard {shard})")
    return _views(args, result, inputs, written, baseline_path)


def _merge(args: argparse.Namespace) -> int:
    """``check merge``: the shards' results as one run's views and exit code."""
    from devicefit.sdk.check.shard import load_shards, merge

    used = [flag for flag, on in (("--run", args.run), ("--shard", args.shard is not None),
                                  ("--results", args.results is not None),
                                  ("--baseline without --update-baseline",
                                   args.baseline is not None and not args.update_baseline))
            if on]
    if used:
        raise UsageError(f"check merge joins finished shards; {', '.join(used)} belong(s) to "
                         "the shard runs")
    if args.update_baseline and args.baseline is None:
        raise UsageError("check merge --update-baseline needs --baseline FILE.json")
    from devicefit.simulator.infra.fileio import check_outputs

    shards = [Path(p) for p in args.shard_results]
    result = merge(load_shards(shards))
    # What the shards were run on is an input too (a --junit over a model or the project
    # file would replace it): the project file and every model, as the shards name them.
    named = [*(("shard result", p) for p in shards), ("project file", Path(result.project)),
             *(("model", Path(o.model_path)) for o in result.outcomes)]
    check_outputs([("--junit", args.junit), ("--markdown", args.markdown), ("--html", args.html),
                   ("--update-baseline", args.baseline if args.update_baseline else None)],
                  named)
    return _views(args, result, [p for _, p in named], [], args.baseline)


def _views(args: argparse.Namespace, result: CheckResult, inputs: list[Path],
           written: list[str], baseline_path: Path | None) -> int:
    from devicefit.sdk.check.views import html, json_text, junit_xml, markdown
    from devicefit.sdk.console import make_console

    if args.update_baseline:
        assert baseline_path is not None  # both callers refuse --update-baseline without it
        err = make_console(args.no_color, stderr=True)
        # First, so that the summaries below can say the run wrote it.
        if wrote := _update_baseline(result, baseline_path, err, inputs):
            result = dataclasses.replace(result, baseline_written=str(baseline_path))
        written += wrote
    for path, render in ((args.junit, junit_xml), (args.markdown, markdown), (args.html, html)):
        if path is not None:
            write_atomic(path, render(result), inputs=inputs)
            written.append(str(path))
    if args.json:
        sys.stdout.write(json_text(result))
    else:
        _print(make_console(args.no_color), result, written, notes=not args.update_baseline)
    return result.exit_code


def _update_baseline(result: CheckResult, path: Path, err: Console, inputs: list[Path]
                     ) -> list[str]:
    from devicefit.sdk.check import Baseline

    done = [(o.model, o.profile, o.report) for o in result.outcomes if o.report is not None]
    if len(done) < len(result.outcomes):
        # A baseline without the broken targets would silently drop their history.
        err.print(f"baseline not written: {len(result.outcomes) - len(done)} target(s) could "
                  f"not be simulated; fix them first", markup=False)
        return []
    write_atomic(path, jsonout.dumps(Baseline.of(done).to_dict(), indent=2, sort_keys=True) + "\n",
                 inputs=inputs)
    return [f"{path} (baseline)"]


class _Progress:
    """A transient progress bar on a TTY for many targets; a no-op callback otherwise."""

    def __init__(self, console: Console, total: int) -> None:
        self.bar = None
        if console.is_terminal and total >= PROGRESS_MIN_TARGETS:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.bar = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.description}"), console=console,
                                transient=True)
            self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> Callable[[Outcome], None] | None:
        if self.bar is None:
            return None
        self.bar.start()
        return self._advance

    def _advance(self, outcome: Outcome) -> None:
        assert self.bar is not None
        self.bar.update(self.task, advance=1, description=f"{outcome.model} @ {outcome.profile}")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _table(result: CheckResult) -> FirstFit:
    """The gate's table in three forms, the first that fits the terminal shown: every figure
    with its error band; without the bands (the problem lines under the table keep those of
    the figures at risk or over); each target on two lines, the budget under each figure.
    The compact two leave out the regression column of a project without regression rules
    (a column of "-"). A failing figure is red and one at risk yellow in every form."""
    from rich.markup import escape

    from devicefit.sdk.check.views import metric_parts, regression_parts, table_metrics
    from devicefit.sdk.console import first_fit, table
    from devicefit.simulator.types import Status

    def styled(lines: tuple[str, ...], status: Status | None) -> tuple[str, ...]:
        colour = {Status.FAIL: "red", Status.AT_RISK: "yellow"}.get(status) if status else None
        return tuple(escape(line) if colour is None else f"[{colour}]{escape(line)}[/]"
                     for line in lines)

    ruled = any(o.rules for o in result.outcomes)
    metrics = table_metrics(result)

    def rows(form: str) -> list[list[object]]:
        out: list[list[object]] = []
        for o in result.outcomes:
            cells = [metric_parts(o, m) for m in metrics]
            target: list[object]
            if form == "stacked":
                target = [(escape(o.model), escape(o.profile))]
                figures = [styled((c.value, f"/ {c.limit}") if c.limit else (c.value,),
                                  c.status) for c in cells]
            else:
                target = [escape(o.model), escape(o.profile)]
                risk = " AT RISK" if form == "full" else ""
                figures = [styled((c.text(band=form == "full")
                                   + (risk if c.status == Status.AT_RISK else ""),), c.status)
                           for c in cells]
            parts, held = regression_parts(o)
            regression = styled(tuple(parts) if form == "stacked" else (", ".join(parts),),
                                Status.FAIL if held is False else None)
            out.append([_STATUS[o.status], *target, *figures,
                        *([regression] if ruled or form == "full" else [])])
        return out

    heads = ["", "model", "profile", *metrics]
    stacked = ["", "model\nprofile", *(f"{m}\n/ budget" for m in metrics)]
    last = ["regression"] if ruled else []
    # Folded, "AT RISK" would read as two words and "/ 1.5 MiB" lose its budget's sense.
    return first_fit(table(None, [*heads, "regression"], rows("full"), whole=[0]),
                     table(None, heads + last, rows("compact"), whole=[0]),
                     table(None, stacked + last, rows("stacked"),
                           whole=[0, *range(2, 2 + len(metrics))], names=[1]))


def _print(console: Console, result: CheckResult, written: list[str], notes: bool) -> None:
    from devicefit.sdk.check import TargetStatus
    from devicefit.sdk.check.views import baseline_text, gpu_lines, problems
    from devicefit.sdk.check.views import notes as check_notes

    console.print(_table(result))
    for o in result.outcomes:
        for line in [*gpu_lines(o), *problems(o)]:
            console.print(f"{o.model} @ {o.profile}: {line}", markup=False, highlight=False)
    for note in check_notes(result) if notes else ():
        console.print(f"note: {note}", markup=False)
    if (compared := baseline_text(result)) is not None:
        console.print(f"regressions: {compared}", markup=False, highlight=False)
    if any(not r.ok for o in result.outcomes for r in o.regressions):
        console.print("next: a growth you intended is accepted with 'devicefit check "
                      "--update-baseline' (then commit the baseline); otherwise find the "
                      "change that grew it ('devicefit diff OLD.tflite NEW.tflite --profile P')",
                      markup=False, highlight=False)
    counts = result.counts()
    at_risk = counts[TargetStatus.AT_RISK]
    risk = f", {at_risk} at risk" if at_risk else ""
    summary = (f"{counts[TargetStatus.PASS]} passed{risk}, {counts[TargetStatus.FAIL]} failed, "
               f"{counts[TargetStatus.ERROR]} errors in {result.seconds:.1f} s")
    console.print(summary + (f"; wrote {', '.join(written)}" if written else ""), markup=False)
