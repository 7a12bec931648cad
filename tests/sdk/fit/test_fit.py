"""``devicefit fit`` end to end on the digits CNN (real converter, real TFLM run) and QAT.

The CNN is trained once and cached (examples/digits.py). Profiles are tight custom YAML
files that extend the STM32L4R5 profile; trials and epochs are kept small.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.simulate import simulate
from devicefit.simulator.types import MeasureOptions
from examples.digits import cached_cnn, load_digits
from tests.paths import TESTS

pytestmark = pytest.mark.slow

ARTIFACTS = TESTS / "artifacts" / "convert"
BASE = "stm32l4r5-cortex-m4"
# Plain int8 of the CNN needs ~173 KiB of flash (100 KiB of it TFLM code) and ~6.7 KB of
# arena; removing about half the channels or more brings it under these.
TIGHT = {"flash": "132KiB", "arena": "4500B"}
# Less than the runtime's code alone: nothing can fit.
IMPOSSIBLE = {"flash": "101KiB", "arena": "200B"}


def _profile(folder: Path, name: str, budgets: dict[str, str]) -> Path:
    path = folder / f"{name}.yaml"
    lines = [f"name: {name}", f"extends: {BASE}", "budgets:"]
    lines += [f"  {k}: {v}" for k, v in budgets.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fit-digits")
    paths = load_digits().save_npz(folder)
    return {"model": cached_cnn(ARTIFACTS), "folder": folder, **paths}


def _fit(digits, profile: Path, out: Path, *extra: str) -> int:
    return main(["fit", str(digits["model"]), "--profile", str(profile), "--train",
                 str(digits["train"]), "--eval", str(digits["test"]), "-o", str(out), *extra])


def run_fit(digits, name: str, budgets: dict[str, str], *extra: str) -> dict:
    """fit on a profile extending BASE with ``budgets``: exit code, profile, written file,
    JSON report and HTML page."""
    folder = digits["folder"]
    profile = _profile(folder, name, budgets)
    out, report, page = (folder / f"{name}.{ext}" for ext in ("tflite", "json", "html"))
    code = _fit(digits, profile, out, *extra, "--report", str(report), "--html", str(page))
    return {"code": code, "profile": profile, "out": out,
            "report": json.loads(report.read_text()), "html": page.read_text()}


@pytest.fixture(scope="module")
def tight_fit(digits):
    # One epoch: the trials' order is decided by the static check (flash, arena), which
    # training does not change; one epoch after the cut keeps the digits CNN well above the
    # accuracy asserted below, and every trained trial (PTQ twin and QAT) still trains.
    return run_fit(digits, "tight-l4", TIGHT, "--max-trials", "5", "--epochs", "1",
                   "--cluster", "16")


def test_fit_finds_a_candidate_for_a_profile_plain_int8_misses(tight_fit):
    report = tight_fit["report"]
    assert tight_fit["code"] == 0
    plain = report["trials"][0]
    assert plain["label"] == "int8 PTQ" and plain["verdict"] == "fail"
    assert {b["name"] for b in plain["budgets"] if not b["ok"]} >= {"flash"}
    chosen = next(t for t in report["trials"] if t["number"] == report["chosen"])
    assert chosen["verdict"] == "pass" and chosen["candidate"]["prune"] > 0
    assert all(b["ok"] for b in chosen["budgets"])
    # The accuracy cost is reported against the float model.
    assert report["accuracy_loss_pp"] == pytest.approx(
        100 * (report["float_accuracy"] - chosen["accuracy"]))
    assert chosen["accuracy"] > 0.5, "fine-tuning after pruning must keep a working model"
    assert chosen["fine_tune"], "a pruned candidate is fine-tuned"
    assert chosen["fine_tune"][0]["batch_size"] >= 1  # planned by sdk.train


def test_the_written_model_passes_every_budget_in_the_real_tflm_run(tight_fit):
    verified = simulate(tight_fit["out"], tight_fit["profile"], run=MeasureOptions())
    assert verified.verdict == "pass"
    assert verified.measured.runtime == "tflm"
    arena = next(b for b in verified.budgets if b.name == "arena")
    assert arena.ok and verified.measured.head_difference_bytes == 0  # TFLM agrees
    assert verified.model.conversion["tool"] == "devicefit fit"
    assert tight_fit["report"]["verification"]["measured"]["runtime"] == "tflm"


def test_the_search_bisects_the_pruning_ratio_then_tries_qat(tight_fit):
    labels = [t["label"] for t in tight_fit["report"]["trials"]]
    assert labels[:5] == ["int8 PTQ", "int8 PTQ prune 0.5", "int8 PTQ prune 0.25",
                          "int8 PTQ prune 0.375", "int8 QAT prune 0.5"]


def test_qat_and_its_ptq_twin_train_the_same_epochs(tight_fit):
    trials = {t["label"]: t for t in tight_fit["report"]["trials"]}
    ptq, qat = trials["int8 PTQ prune 0.5"], trials["int8 QAT prune 0.5"]
    epochs = [sum(run["epochs"] for run in t["fine_tune"]) for t in (ptq, qat)]
    assert epochs[0] == epochs[1] > 0


def test_cheap_static_checks_reject_candidates_before_training(tight_fit):
    trials = tight_fit["report"]["trials"]
    rejected = [t for t in trials if t["stage"] in ("static", "skipped")]
    assert rejected, "the search must have met candidates that do not fit"
    assert all(not t["fine_tune"] for t in rejected)
    assert all(t["seconds"] < min(c["seconds"] for c in trials if c["stage"] == "trained")
               for t in rejected if t["stage"] == "static")


def test_clustering_shrinks_the_download_not_the_flash(tight_fit):
    c = tight_fit["report"]["clustering"]
    assert c["clusters"] == 16
    assert c["gzip_after"] < c["gzip_before"]
    assert max(c["distinct_values"].values()) <= 16
    assert "flash and arena do not change" in c["note"]


def test_html_report_has_trials_and_the_pareto_plot(tight_fit):
    page = tight_fit["html"]
    assert 'data-metric="flash"' in page and 'data-metric="arena"' in page
    evaluated = sum(1 for t in tight_fit["report"]["trials"] if t["accuracy"] is not None)
    assert page.count('class="trial"') == 2 * evaluated  # accuracy vs flash and vs arena
    assert page.count('class="budget"') == 2
    assert "Chosen candidate" in page
    # Each trial's latency estimate shows with its error band, as everywhere else.
    banded = [t for t in tight_fit["report"]["trials"] if t["latency_ms"] is not None]
    assert banded and all(t["latency_band_ms"][0] < t["latency_ms"] < t["latency_band_ms"][1]
                          for t in banded)
    assert page.count("(likely ") >= len(banded)


def test_every_trial_number_is_shown_or_said_why_not(tight_fit):
    report = tight_fit["report"]
    shown = {t["number"] for t in report["trials"]}
    said = {u["number"] for u in report["unshown"]}
    assert not shown & said and shown | said == set(range(max(shown | said) + 1))


def test_the_summary_gives_each_flash_figure_once_naming_its_file(tight_fit, capsys):
    """The trials table has the chosen trial's file as judged; the written file carries
    devicefit's metadata too: the verified line names that file and the bytes it adds, and
    no other line gives the chosen model's flash (it said 123.0 KiB, then 123.5 KiB)."""
    import html

    from devicefit.sdk.commands.fit import _print_summary
    from devicefit.sdk.console import make_console
    from devicefit.sdk.fit.report import FitReport
    from devicefit.simulator.infra.units import format_size

    report = FitReport.from_dict(tight_fit["report"])
    chosen = report.trial(report.chosen)
    written = report.verification.memory.flash_bytes
    assert written > chosen.flash_bytes  # the metadata
    _print_summary(make_console(True), report)
    lines = capsys.readouterr().out.splitlines()
    verified = next(line for line in lines if line.startswith("verified in tflm"))
    assert verified.startswith(
        f"verified in tflm, the file as written: trial {chosen.number}'s model + "
        f"{format_size(written - chosen.flash_bytes)} (devicefit's metadata): "
        f"flash {format_size(written)} ≤")
    summary = [line for line in lines if not line.startswith(("#", "━")) and "│" not in line]
    assert sum(format_size(written) in line for line in summary) == 1
    assert not any(format_size(chosen.flash_bytes) in line for line in summary)
    assert sum(line.startswith("fine-tuned") for line in lines) == 1
    # The page names the written file the same way.
    assert html.escape(f"the file as written: trial {chosen.number}'s model + "
                       f"{format_size(written - chosen.flash_bytes)} (devicefit's metadata)"
                       ) in tight_fit["html"]


def test_nothing_fits_exits_1_with_the_closest_miss(digits, tmp_path, capsys):
    profile = _profile(tmp_path, "impossible", IMPOSSIBLE)
    out = tmp_path / "never.tflite"
    code = _fit(digits, profile, out, "--max-trials", "3", "--json")
    assert code == 1
    assert not out.exists()
    report = json.loads(capsys.readouterr().out)
    assert report["found"] is False and report["closest"] is not None
    misses = {m["budget"]: m for m in report["closest_misses"]}
    assert misses["flash"]["over"] > 0 and misses["flash"]["value"] > misses["flash"]["limit"]


def test_storage_resumes_a_search(digits, tmp_path, capsys):
    profile = _profile(tmp_path, "impossible", IMPOSSIBLE)
    storage = f"sqlite:///{tmp_path / 'fit.db'}"
    out = tmp_path / "never.tflite"
    assert _fit(digits, profile, out, "--max-trials", "2", "--storage", storage, "--json") == 1
    first = json.loads(capsys.readouterr().out)
    assert _fit(digits, profile, out, "--max-trials", "3", "--storage", storage, "--json") == 1
    second = json.loads(capsys.readouterr().out)
    assert len(first["trials"]) == 2 and len(second["trials"]) == 3
    assert [t["label"] for t in second["trials"][:2]] == [t["label"] for t in first["trials"]]


def test_ctrl_c_keeps_the_best_fitting_candidate_so_far(digits, tmp_path):
    from devicefit.sdk.convert.spec import FineTuning
    from devicefit.sdk.fit import FitSpec, SearchSettings, fit

    def interrupt(record):
        raise KeyboardInterrupt

    out = tmp_path / "kept.tflite"
    # Trial 0 (plain int8) fits BASE and trains as the PTQ twin of a QAT candidate, one run
    # per epoch: one epoch (not the default 3) is enough for what is asserted.
    spec = FitSpec(FineTuning(str(digits["train"]), epochs=1), str(digits["test"]),
                   search=SearchSettings(max_trials=5))
    report = fit(str(digits["model"]), BASE, out, spec, on_trial=interrupt)
    assert report.interrupted and report.found
    assert [t.number for t in report.trials] == [0] and report.chosen == 0
    assert out.is_file()


@pytest.mark.parametrize("args, message", [
    (["--max-trials", "0"], "--max-trials 0"),
    (["--time-budget", "soon"], "--time-budget"),
    (["--cluster", "1"], "--cluster 1"),
    (["--storage", "not-a-url"], "--storage not-a-url: cannot open the study"),
], ids=["no-trials", "bad-duration", "one-cluster", "bad-storage"])
def test_bad_input_exits_2(digits, tmp_path, capsys, args, message):
    code = _fit(digits, BASE, tmp_path / "x.tflite", *args)
    assert code == 2
    assert message in capsys.readouterr().err


def test_missing_model_exits_2(digits, tmp_path, capsys):
    code = main(["fit", str(tmp_path / "missing.keras"), "--profile", BASE, "--train",
                 str(digits["train"]), "--eval", str(digits["test"]), "-o",
                 str(tmp_path / "x.tflite")])
    assert code == 2 and "not found" in capsys.readouterr().err


def test_convert_distills_from_the_unpruned_model(digits, tmp_path):
    from devicefit.sdk.convert import convert

    report = convert(str(digits["model"]), BASE, tmp_path / "distilled.tflite",
                     calibration=str(digits["train"]), eval_data=str(digits["test"]),
                     prune_channels=0.5, train=str(digits["train"]), epochs=2, distill=True,
                     float_baseline=False)
    assert report.settings.distill is True
    assert report.fine_tune and all(np.isfinite(ft.loss).all() for ft in report.fine_tune)
    assert report.accuracy.converted_accuracy > 0.8


# --------------------------------------------------------------------------- QAT
def _outlier_mlp(digits_data, factor: float = 150.0):
    """An MLP whose first kernel has one huge weight per unit on pixel 0, which is zero in
    every digits image: the float function is unchanged, but each unit's per-channel int8
    scale is set by the outlier, so the useful weights get only a few levels."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inp)
    x = keras.layers.Dense(32, activation="relu", name="hidden")(x)
    out = keras.layers.Dense(10, activation="softmax", name="out")(x)
    model = keras.Model(inp, out)
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(digits_data.x_train, digits_data.y_train, epochs=15, batch_size=32, verbose=0)
    assert np.all(digits_data.x_train[:, 0, 0, 0] == 0) and np.all(digits_data.x_test[:, 0, 0, 0] == 0)
    w, b = model.get_layer("hidden").get_weights()
    w[0, :] = np.abs(w).max(axis=0) * factor
    model.get_layer("hidden").set_weights([w, b])
    return model


def _int8_accuracy(model, data, path: Path) -> float:
    from devicefit.sdk.convert import accuracy, loading, quantize

    tflite = quantize.to_tflite(loading.load(model), quantize.QuantSettings("int8", "int8", True),
                                data.x_train[:300])
    path.write_bytes(tflite)
    out = accuracy.run_tflite(path, data.x_test)
    return float(np.mean(out.argmax(1) == data.y_test))


def test_qat_recovers_at_least_half_of_what_ptq_loses(tmp_path):
    import keras

    from devicefit.sdk.convert import qat
    from devicefit.sdk.convert.data import Dataset

    data = load_digits()
    model = _outlier_mlp(data)
    float_acc = float(np.mean(model.predict(data.x_test, verbose=0).argmax(1) == data.y_test))
    ptq = _int8_accuracy(model, data, tmp_path / "ptq.tflite")
    assert float_acc - ptq >= 0.02, f"the constructed case must lose >= 2 pp ({float_acc}, {ptq})"

    student = keras.models.clone_model(model)
    student.set_weights(model.get_weights())
    result = qat.quantization_aware_fit(student, Dataset(data.x_train, data.y_train, "digits"),
                                        3, data.x_train[:300])
    assert result.weight_layers == ["hidden", "out"]
    qat_acc = _int8_accuracy(student, data, tmp_path / "qat.tflite")
    assert qat_acc - ptq >= 0.5 * (float_acc - ptq), (float_acc, ptq, qat_acc)
    # The kernels end on the int8 grid, so the float QAT model and its conversion agree.
    kernel = np.asarray(student.get_layer("hidden").kernel)
    np.testing.assert_allclose(kernel, qat.quantize_weights(kernel), rtol=0, atol=1e-6)
