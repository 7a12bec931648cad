"""The architecture search end to end: screen, train the survivors, choose, verify, write.

One search (a real screen in one TensorFlow child, real training, real int8 conversion
calibrated on scikit-learn's digits, LiteRT accuracy, TFLM verification) serves every test,
in two runs on one study in a real PostgreSQL server (tests/postgres.py; the storage other
machines join, fit's, whose SQLite and multi-worker paths tests/sdk/test_fit*.py hold): the
first is interrupted (Ctrl-C, as fit's test raises it) after its first trained trial, the
second resumes the study and trains only the rest. A
tight custom profile (extending the STM32L4R5 one) rejects one of four candidates by flash
and arena. Tiny candidates, 1 epoch, a few hundred samples.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.search.architectures import SearchSpec, search_architectures
from devicefit.sdk.search.objective import Objective
from devicefit.sdk.search.report import render_search_html, to_dict
from devicefit.sdk.study import BUILD, DECISION, RECORD, SearchSettings
from devicefit.simulator.infra import jsonout
from devicefit.simulator.simulate import simulate
from devicefit.simulator.types import MeasureOptions
from examples.digits import load_digits
from tests.postgres import postgres_server

BASE = "stm32l4r5-cortex-m4"
# mbv2 on 8x8 digits: w2 with stages 1-2-2 needs ~188 KiB of flash and ~15.5 KiB of arena;
# the other three need at most ~125 KiB and ~8 KiB.
BUDGETS = {"flash": "160KiB", "arena": "12KiB", "latency": "20ms"}
AXES = {"width": [0.25, 2.0], "depth": [(1, 1), (1, 2, 2)], "expansion": [2]}
REJECTED = "mbv2 8x8x1 w2 d1-2-2 k3 e2"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search-train")
    profile = folder / "tight-digits.yaml"
    profile.write_text("\n".join(["name: tight-digits", f"extends: {BASE}", "budgets:",
                                  *(f"  {k}: {v}" for k, v in BUDGETS.items())]) + "\n")
    d = load_digits()
    np.savez(folder / "train.npz", x=d.x_train[:300], y=d.y_train[:300])
    np.savez(folder / "eval.npz", x=d.x_test[:120], y=d.y_test[:120])
    return folder, profile


def _spec(folder: Path, storage: str) -> SearchSpec:
    return SearchSpec(str(folder / "train.npz"), str(folder / "eval.npz"), epochs=1,
                      objective=Objective.ARENA,
                      search=SearchSettings(max_trials=3, storage=storage))


@pytest.fixture(scope="module")
def server():
    with postgres_server() as s:
        yield s


@pytest.fixture(scope="module")
def runs(setup, server):
    folder, profile = setup
    storage = server.url

    def interrupt(record):
        raise KeyboardInterrupt

    first = search_architectures("mbv2", AXES, str(profile), folder / "first.tflite",
                                 _spec(folder, storage), on_trial=interrupt)
    trained_again = []
    second = search_architectures("mbv2", AXES, str(profile), folder / "best.tflite",
                                  _spec(folder, storage), on_trial=trained_again.append)
    return first, second, trained_again


@pytest.mark.slow
def test_ctrl_c_keeps_the_best_fitting_candidate_so_far(runs, setup):
    first, _, _ = runs
    assert first.interrupted and first.found
    assert [t.number for t in first.trials] == [first.chosen]
    assert Path(first.output or "").is_file()


@pytest.mark.slow
def test_only_survivors_are_trained_and_a_rerun_resumes(runs):
    first, second, trained_again = runs
    survivors = {s.candidate.key for s in second.screen.fitting}
    rejected = [s for s in second.screen.results if not s.fits]
    assert [s.candidate.label() for s in rejected] == [REJECTED]
    assert {"flash", "arena"} <= set(rejected[0].rejected_by)
    assert len(survivors) == 3 and {t.candidate.key for t in second.trials} == survivors
    # The resumed study kept the interrupted run's trial and trained only the other two.
    assert second.trials[0].to_dict() == first.trials[0].to_dict()
    assert len(trained_again) == 2 and not second.interrupted
    assert {t.candidate.key for t in trained_again} == survivors - {first.trials[0].candidate.key}


@pytest.mark.slow
def test_the_study_lives_in_the_database(runs, server):
    import optuna

    _, second, _ = runs
    assert second.settings.distributed
    study = optuna.load_study(study_name=second.study_name,
                              storage=optuna.storages.RDBStorage(server.url))
    built = [t for t in study.get_trials(deepcopy=False)
             if t.user_attrs.get(DECISION, {}).get("as") == BUILD]
    # Each survivor decided and trained once, in the study every machine reads.
    assert all(RECORD in t.user_attrs for t in built)
    assert sorted(t.user_attrs[DECISION]["candidate"]["key"] for t in built) == \
        sorted(s.candidate.key for s in second.screen.fitting)


@pytest.mark.slow
def test_the_written_file_passes_every_budget_in_the_runtime(runs, setup):
    _, second, _ = runs
    _, profile = setup
    chosen = next(t for t in second.trials if t.number == second.chosen)
    assert chosen.accuracy == max(t.accuracy for t in second.trials if t.fits)
    report = simulate(second.output, str(profile), run=MeasureOptions())
    assert report.ok and report.measured is not None
    assert {b.name for b in report.budgets} == {"flash", "arena", "latency"}
    assert second.verification is not None and second.verification.ok


@pytest.mark.slow
def test_the_screen_figures_are_the_trained_files(runs):
    """Shape-only calibration sizes the file the training makes (same structure)."""
    _, second, _ = runs
    screened = {s.candidate.key: s for s in second.screen.results}
    for t in second.trials:
        s = screened[t.candidate.key]
        assert (t.flash_bytes, t.arena_bytes) == (s.flash_bytes, s.arena_bytes), t.candidate


@pytest.mark.slow
def test_multi_objective_front_is_non_dominated(runs):
    _, second, _ = runs
    found = to_dict(second)
    fitting = {t.number: (t.accuracy, t.arena_bytes) for t in second.trials if t.fits}
    front = found["pareto_front"]

    def dominates(a, b):
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    assert front and second.chosen in front
    for n in front:
        assert not any(dominates(o, fitting[n]) for o in fitting.values())
    for n in set(fitting) - set(front):
        assert any(dominates(fitting[f], fitting[n]) for f in front)


@pytest.mark.slow
def test_reports_name_rejections_by_budget(runs):
    _, second, _ = runs
    data = json.loads(jsonout.dumps(to_dict(second)))
    assert data["screen"]["rejected_by"] == {"flash": 1, "arena": 1}
    assert data["chosen"] == second.chosen and data["found"]
    assert "3 of the 3 that fit trained" in data["reason"]
    page = render_search_html(second)
    assert REJECTED in page and "<svg" in page and "Pareto front" in page


@pytest.mark.slow
def test_the_page_and_tables_speak_one_unit_per_figure(runs):
    """Accuracy on the Pareto plot's axis as the tables give it (97.50%), a latency band
    as every view writes one (``likely low–high``)."""
    import re

    from devicefit.sdk.search.report import pareto_svg, screen_rows, trial_rows

    _, second, _ = runs
    ticks = re.findall(r"<text[^>]*>([^<]*)</text>", pareto_svg(second))
    assert any(re.fullmatch(r"\d+\.\d\d%", t) for t in ticks), ticks
    assert not any(re.fullmatch(r"0\.\d+", t) for t in ticks), ticks
    latencies = [row[6] for row in trial_rows(second)] + \
        [row[4] for row in screen_rows(second.screen.results)]
    figure = r"[\d.]+ (?:us|ms|s)"
    assert latencies and all(re.fullmatch(rf"{figure} \(likely {figure}–{figure}\)", t)
                             for t in latencies if t), latencies


@pytest.mark.slow
def test_every_trial_number_is_shown_or_said_why_not(runs):
    """optuna numbers the sampler's repeats too (pruned, no record): the numbers the table
    skips are each named with a reason, in the JSON and under the table."""
    _, second, _ = runs
    shown = {t.number for t in second.trials}
    said = {u.number for u in second.unshown}
    assert not shown & said and shown | said == set(range(max(shown | said) + 1))
    assert to_dict(second)["unshown"] == [{"number": u.number, "why": u.why}
                                          for u in second.unshown]


@pytest.mark.slow
def test_the_summary_says_what_was_chosen_and_verified(runs, capsys):
    from devicefit.sdk.commands.search import _print_summary
    from devicefit.sdk.console import make_console

    _, second, _ = runs
    _print_summary(make_console(True), second)
    out = capsys.readouterr().out
    assert "Screened for tight-digits: 3 of 4 fit" in out and "flash, arena" in out
    assert f"fits: trial {second.chosen}" in out
    # The flash of the file as written, named against the trial it came from (whose own
    # figure is the table's), on the page as in the terminal.
    named = f"verified in tflm, the file as written: trial {second.chosen}'s model + "
    assert named in out and "(devicefit's metadata): flash " in out
    assert "the file as written: trial " in render_search_html(second).replace("&#x27;", "'")
    assert "Pareto front: accuracy vs arena" in out and f"wrote {second.output}" in out


@pytest.mark.slow
def test_nothing_fits_names_the_closest_miss_by_budget(runs, capsys):
    """The screen's rejected candidate alone: what the command says when none survives."""
    import dataclasses

    from devicefit.sdk.commands.search import _print_summary
    from devicefit.sdk.console import make_console
    from devicefit.sdk.search.report import closest_miss

    _, second, _ = runs
    rejected = tuple(s for s in second.screen.results if not s.fits)
    none = dataclasses.replace(second, screen=dataclasses.replace(second.screen,
                                                                   results=rejected),
                               trials=[], chosen=None)
    closest, misses = closest_miss(none)
    assert closest is not None and closest.candidate.label() == REJECTED
    assert {m.budget for m in misses} == {"flash", "arena"} and all(m.over > 0 for m in misses)
    assert to_dict(none)["closest_misses"] and not to_dict(none)["found"]
    _print_summary(make_console(True), none)
    out = capsys.readouterr().out
    assert "nothing fits" in out and f"closest: {REJECTED}: flash" in out


def _search(folder: Path, profile: Path, *extra: str) -> int:
    return main(["search", "--family", "mbv2", "--profile", str(profile), "--train",
                 str(folder / "train.npz"), "--eval", str(folder / "eval.npz"), "-o",
                 str(folder / "never.tflite"), *extra])


@pytest.mark.parametrize("extra, says", [
    (["--param", "input_shape=16x16x1"], "the training samples are 8x8x1"),
    (["--param", "classes=4"], "the training labels have 10 classes"),
    (["--max-trials", "0"], "--max-trials 0"),
    (["--epochs", "0"], "--epochs 0"),
    (["--train", "missing.npz"], "not found"),
], ids=["shape", "classes", "no-trials", "no-epochs", "missing-data"])
def test_bad_input_is_one_line_exit_2(setup, capsys, extra, says):
    folder, profile = setup
    assert _search(folder, profile, *extra) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not (folder / "never.tflite").exists()


def test_training_needs_data_and_output(setup, capsys):
    _, profile = setup
    assert main(["search", "--family", "mbv2", "--profile", str(profile)]) == 2
    assert "needs --train, --eval, -o" in capsys.readouterr().err
