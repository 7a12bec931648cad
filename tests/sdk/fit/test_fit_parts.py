"""The parts of ``fit`` that need no search: space, skipping rules, report, clustering,
distillation loss, weight quantization. Cheap: no conversion, tiny Keras models at most."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from devicefit.sdk.convert.distill import DistillSettings
from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.fit.cluster import gzip_size, kmeans_1d
from devicefit.sdk.fit.export import StudyInfo
from devicefit.sdk.fit.record import FitPayload, FitTrial, read_trial
from devicefit.sdk.fit.report import (
    Clustering,
    FitBudgets,
    FitReport,
    FitSettings,
    StudyRecord,
    choose,
    closest_miss,
    pareto_front,
    pareto_svg,
)
from devicefit.sdk.fit.space import Candidate, space_for
from devicefit.sdk.fit.trials import blocking
from devicefit.sdk.options import parse_duration
from devicefit.sdk.study import TrialStage
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report.report import BudgetCheck, build
from devicefit.simulator.types import Basis, BudgetName, Status, Unit


def _budget(name: str, value: float, limit: float) -> BudgetCheck:
    return BudgetCheck(BudgetName(name), limit, value, value <= limit, Unit.BYTES,
                       limit - value, Basis.PREDICTED)


def _record(number: int, candidate: Candidate, *, flash: int, arena: int = 1000,
            accuracy: float | None = None, stage: TrialStage = TrialStage.TRAINED,
            flash_limit: int = 100, note: str = "") -> FitTrial:
    budgets = (_budget("flash", flash, flash_limit), _budget("arena", arena, 2000))
    verdict = Status.PASS if all(b.ok for b in budgets) else Status.FAIL
    return FitTrial(number, candidate, stage, verdict, budgets, flash_bytes=flash,
                    arena_bytes=arena, accuracy=accuracy, note=note, payload=FitPayload())


def test_the_space_follows_the_profile():
    mcu = space_for(load_profile("stm32l4r5-cortex-m4"), can_train=True, can_prune=True)
    assert mcu.schemes == ("int8", "int16x8") and mcu.nm_patterns == (None,)
    assert mcu.qat and 0.5 in mcu.prune_ratios
    phone = space_for(load_profile("android-arm64-cpu"), can_train=True, can_prune=True)
    assert phone.nm_patterns == (None, "2:4")
    assert "float16" in phone.schemes
    tpu = space_for(load_profile("coral-edgetpu"), can_train=True, can_prune=True)
    assert tpu.schemes == ("int8",)
    frozen = space_for(load_profile("stm32l4r5-cortex-m4"), can_train=False, can_prune=True)
    assert frozen.prune_ratios == (0.0,) and not frozen.qat
    # QAT is only offered with int8 and no N:M (one candidate per combination).
    labels = [c.label() for c in phone.candidates()]
    assert len(labels) == len(set(labels))
    assert not any("QAT" in lab and ("2:4" in lab or "float16" in lab) for lab in labels)


def test_a_static_miss_skips_less_pruned_variants_of_the_same_structure():
    missed = _record(0, Candidate("int8", 0.5), flash=150, stage=TrialStage.STATIC,
                     note="misses flash")
    assert blocking(Candidate("int8", 0.25), [missed]) is missed
    assert blocking(Candidate("int8", 0.5, qat=True), [missed]) is missed
    assert blocking(Candidate("int8", 0.75), [missed]) is None  # more pruning may fit
    assert blocking(Candidate("int16x8", 0.25), [missed]) is None  # another structure
    trained = _record(1, Candidate("int8", 0.75), flash=150, note="misses flash")
    assert blocking(Candidate("int8", 0.5), [trained]) is None  # only static misses block
    error = FitTrial(2, Candidate("int16x8", 0.5), TrialStage.ERROR, Status.FAIL,
                     note="error: x", payload=FitPayload())
    assert blocking(Candidate("int16x8", 0.875), [error]) is error


def test_choice_is_the_most_accurate_fitting_candidate_then_the_smallest():
    trials = [_record(0, Candidate("int8"), flash=150, accuracy=0.99),
              _record(1, Candidate("int8", 0.5), flash=90, accuracy=0.95),
              _record(2, Candidate("int8", 0.25), flash=80, accuracy=0.95),
              _record(3, Candidate("int8", 0.75), flash=60, accuracy=0.90)]
    assert [t.number for t in choose(trials)] == [2, 1, 3]
    assert pareto_front(trials) == [0, 2, 3]


def test_closest_miss_has_the_smallest_worst_overshoot():
    trials = [_record(0, Candidate("int8"), flash=300),
              _record(1, Candidate("int8", 0.5), flash=120, arena=2100),
              _record(2, Candidate("int8", 0.75), flash=110, stage=TrialStage.SKIPPED)]
    closest, misses = closest_miss(trials)
    assert closest.number == 1
    assert {m.budget: m.over for m in misses} == {"flash": 20, "arena": 100}
    assert misses[0].over_fraction == pytest.approx(0.2)


def test_pareto_svg_is_deterministic_and_marks_the_budget():
    trials = [_record(0, Candidate("int8"), flash=150, accuracy=0.99),
              _record(1, Candidate("int8", 0.5), flash=90, accuracy=0.95)]
    svg = pareto_svg(trials, 100, chosen=1)
    assert svg == pareto_svg(trials, 100, chosen=1)
    assert svg.count('class="trial"') == 2 and 'class="budget"' in svg
    assert 'class="pareto-front"' in svg
    rejected = _record(2, Candidate("int8"), flash=300, stage=TrialStage.STATIC,
                       note="misses flash")
    assert 'class="rejected"' in pareto_svg([*trials, rejected], 100, 1, "arena")


def test_report_json_round_trips_trials():
    trial = _record(0, Candidate("int8", 0.5, qat=True), flash=90, accuracy=0.9)
    trial = dataclasses.replace(trial, latency_band_ms=(1.0, 2.0), payload=FitPayload(fine_tune=(
        FineTuneResult(2, 32, 1, [0.5, 0.25], 1.5, 1 << 20, 1 << 19),)))
    space = space_for(load_profile("stm32l4r5-cortex-m4"), can_train=True, can_prune=True)
    report = FitReport("m.keras", "p", "tflm", FitBudgets(100, None, 5.0), space,
                       FitSettings(20, None, 1, None, 3, DistillSettings(), None, 0, None, 4096),
                       0.95, 10, [trial], chosen=0,
                       clustering=Clustering(16, 900, 800, 1000, 1000, 0.9, 0.89, {"w": 16}),
                       study=StudyRecord("study", None, worker="host:1", writer=True))
    data = report.to_dict()
    assert data["accuracy_loss_pp"] == pytest.approx(5.0)
    assert read_trial(data["trials"][0]) == trial
    assert data["trials"][0]["label"] == "int8 QAT prune 0.5"
    # Through JSON text and back: the same report, typed, and the same JSON.
    again = FitReport.from_dict(json.loads(json.dumps(data)))
    assert again == report and again.to_dict() == data
    assert data["study"] == {"name": "study", "artifacts": None, "worker": "host:1",
                             "writer": True}
    assert data["budgets"] == {"flash": 100, "arena": None, "latency_ms": 5.0}
    # What fit --export reads from the study (JSON in its storage) comes back the same.
    info = StudyInfo("m.keras", "p", None, "tflm", report.budgets, space, report.settings,
                     0.95, 10, "/shared", {"tool": "devicefit fit"})
    assert build(StudyInfo, json.loads(json.dumps(info.to_dict()))) == info


@pytest.mark.parametrize("text, seconds", [("30m", 1800), ("90s", 90), ("2h", 7200),
                                           ("45", 45)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-5m", "0"])
def test_parse_duration_refuses_nonsense(text):
    with pytest.raises(UsageError):
        parse_duration(text)


def test_kmeans_puts_every_value_on_k_centroids():
    rng = np.random.default_rng(0)
    values = rng.standard_normal((64, 16)).astype(np.float32)
    centroids, assign = kmeans_1d(values, 8)
    assert centroids.shape == (8,) and assign.shape == values.shape
    clustered = centroids[assign]
    assert len(np.unique(clustered)) <= 8
    # Each value sits on its nearest centroid.
    nearest = np.abs(values[..., None] - centroids).argmin(-1)
    np.testing.assert_array_equal(nearest, assign)
    assert gzip_size(clustered.astype(np.int8).tobytes()) < gzip_size(values.tobytes())


def test_weight_quantization_is_per_channel_symmetric_int8():
    from devicefit.sdk.convert.qat import quantize_weights

    rng = np.random.default_rng(1)
    kernel = rng.standard_normal((3, 3, 4, 5)).astype(np.float32) * np.arange(1, 6)
    q = quantize_weights(kernel)
    scale = np.abs(kernel).reshape(-1, 5).max(0) / 127
    steps = q.reshape(-1, 5) / scale
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-4)
    assert np.abs(steps).max() <= 127 + 1e-4
    np.testing.assert_allclose(quantize_weights(q), q, atol=1e-6)  # idempotent


def test_distillation_loss_is_cross_entropy_plus_scaled_kl():
    import keras

    from devicefit.sdk.convert.data import Dataset
    from devicefit.sdk.convert.distill import DistillSettings, distillation

    keras.utils.set_random_seed(0)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(inp))
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    y = np.arange(8) % 3
    settings = DistillSettings(temperature=2.0, alpha=0.25)
    packed, loss = distillation(model, model, Dataset(x, y, "t"), settings)
    assert packed.y.shape == (8, 6)
    np.testing.assert_allclose(packed.y[:, :3].argmax(1), y)
    probs = model.predict(x, verbose=0)
    value = float(loss(packed.y, probs))
    ce = -np.mean(np.log(probs[np.arange(8), y]))
    # The student is the teacher: KL is 0, only the hard-label share remains.
    assert value == pytest.approx(0.25 * ce, rel=1e-4)
    other = float(loss(packed.y, np.full_like(probs, 1 / 3)))
    assert other > 0.25 * np.log(3) - 1e-6


def test_per_layer_candidates_come_from_the_trial_and_collapse_when_uniform():
    import optuna

    space = space_for(load_profile("stm32l4r5-cortex-m4"), can_train=True, can_prune=True,
                      groups=("conv1", "conv2+conv3", "fc1"))
    base = {"scheme": "int8", "prune": 0.5, "nm": None, "qat": False, "per_layer": True}
    mixed = space.suggest(optuna.trial.FixedTrial(
        {**base, "prune[conv1]": 0.0, "prune[conv2+conv3]": 0.25, "prune[fc1]": 0.75}))
    assert mixed.layers == (("conv1", 0.0), ("conv2+conv3", 0.25), ("fc1", 0.75))
    assert mixed.layer_ratios() == {"conv1": 0.0, "conv2": 0.25, "conv3": 0.25, "fc1": 0.75}
    assert mixed.pruned and mixed.label() == "int8 PTQ prune conv1 0, conv2+conv3 0.25, fc1 0.75"
    assert Candidate.from_dict(mixed.to_dict()) == mixed
    same = space.suggest(optuna.trial.FixedTrial(
        {**base, "prune[conv1]": 0.25, "prune[conv2+conv3]": 0.25, "prune[fc1]": 0.25}))
    assert same == Candidate("int8", 0.25)
    assert space.size > len(space.candidates())


def test_a_static_miss_skips_per_layer_variants_it_covers():
    groups = ("conv1", "fc1")
    missed = _record(0, Candidate("int8", 0.5), flash=150, stage="static", note="misses flash")
    less = Candidate("int8", 0.0, layers=(("conv1", 0.25), ("fc1", 0.5)))
    more = Candidate("int8", 0.0, layers=(("conv1", 0.25), ("fc1", 0.75)))
    assert blocking(less, [missed], groups) is missed
    assert blocking(more, [missed], groups) is None


def test_channel_pruning_takes_a_ratio_per_layer_group():
    from devicefit.sdk.convert import sparsity
    from examples.digits import build_cnn

    model = build_cnn()
    assert sparsity.prunable_groups(model) == [["conv1"], ["conv2", "conv3"], ["fc1"]]
    pruned = sparsity.prune_channels(model, 0.0, layer_ratios={"conv1": 0.5, "fc1": 0.75})
    after = {p.name: (p.before, p.after) for p in pruned.layers}
    assert after == {"conv1": (16, 8), "fc1": (96, 24)}  # conv2/conv3 keep all 32
    assert pruned.model.get_layer("conv3").filters == 32
    with pytest.raises(UsageError):
        sparsity.prune_channels(model, 0.0)


def test_qat_is_compared_with_its_ptq_twin_only_at_equal_epochs():
    from devicefit.sdk.fit.report import qat_twin, reason_for

    def trained(record: FitTrial, *epochs: int) -> FitTrial:
        return dataclasses.replace(record, payload=FitPayload(
            fine_tune=tuple(FineTuneResult(e, 32, 1) for e in epochs)))

    qat = trained(_record(0, Candidate("int8", 0.5, qat=True), flash=90, accuracy=0.95), 2, 1, 1)
    ptq = trained(_record(1, Candidate("int8", 0.5), flash=90, accuracy=0.94), 2, 1, 1)
    longer = trained(_record(2, Candidate("int8", 0.5), flash=90, accuracy=0.96), 2)
    other = trained(_record(3, Candidate("int8", 0.25), flash=90, accuracy=0.93), 2, 1, 1)
    assert qat_twin(qat, [qat, longer, other, ptq]) is ptq
    assert qat_twin(qat, [qat, longer, other]) is None  # 2 epochs vs 4 is no twin
    reason = reason_for(qat, [qat, ptq], 0.97, [qat, ptq])
    assert "PTQ twin (trial 1, same 4 training epochs) reached 94.00%" in reason


def test_a_ptq_candidate_with_a_qat_twin_trains_too():
    from devicefit.sdk.fit.candidate import Context, has_qat_twin

    ctx = Context(loaded=None, profile=None, train=None, evaluation=None, calibration=None,
                  epochs=2, workdir=None, float_accuracy=None, qat_twins=True)
    assert has_qat_twin(ctx, Candidate("int8"))
    assert not has_qat_twin(ctx, Candidate("int16x8"))
    assert not has_qat_twin(ctx, Candidate("int8", qat=True))
    ctx.qat_twins = False
    assert not has_qat_twin(ctx, Candidate("int8"))


def test_distinct_values_are_counted_per_channel_in_the_file():
    from devicefit.sdk.fit.cluster import file_distinct_values
    from tests.zoo import model_path

    counts = file_distinct_values(model_path("chain_int8").read_bytes())
    assert counts and all(1 <= n <= 255 for n in counts.values())


def test_the_verified_line_shows_an_estimate_with_its_band_and_risk(tmp_path):
    """fit's "verified in ..." line, from a real report's JSON: the latency estimate shows
    its error band and says "at risk" when the budget lies inside it; sizes show neither."""
    from devicefit.sdk.commands.fit import budget_text
    from devicefit.simulator.infra.units import format_band, format_time_ms
    from devicefit.simulator.report.views.json import render
    from devicefit.simulator.simulate import simulate
    from devicefit.simulator.target import read_report
    from tests import zoo

    model = zoo.model_path("mobilenet_v1_96_int8")
    estimate = simulate(model, load_profile("esp32-s3")).latency
    limit = (estimate.estimated_device_ms + estimate.band_ms[1]) / 2
    (tmp_path / "p.yaml").write_text(f"extends: esp32-s3\nbudgets: {{latency: {limit:.3f}ms}}\n")
    budgets = {b.name: b for b in read_report(json.loads(render(simulate(model, load_profile(
        tmp_path / "p.yaml"))))).budgets}
    latency = budget_text(budgets["latency"])
    assert f"(likely {format_band(estimate.band_ms)})" in latency
    assert latency.startswith(f"latency {format_time_ms(estimate.estimated_device_ms)} (likely")
    assert latency.endswith("(estimated, at risk)")
    assert "likely" not in budget_text(budgets["flash"])


def test_the_chosen_candidates_training_is_one_line_of_what_happened(capsys):
    """``--epochs 4`` on a pruned PTQ candidate with a QAT twin, as a real fit trained it:
    pruning in 2 steps of 2 epochs, then 4 single epochs like its twin. One line says so,
    with the sum, not a line per run that reads as if 2 epochs were all it had."""
    from devicefit.sdk.commands.fit import _print_summary
    from devicefit.sdk.console import make_console
    from devicefit.sdk.convert.finetune import PRUNING, QAT_TWIN

    limit = 17 << 30
    runs = (FineTuneResult(2, 32, 1, [0.041, 0.016], memory_limit_bytes=limit, purpose=PRUNING),
            FineTuneResult(2, 32, 1, [0.190, 0.074], memory_limit_bytes=limit, purpose=PRUNING),
            *(FineTuneResult(1, 32, 1, [loss], memory_limit_bytes=limit, purpose=QAT_TWIN)
              for loss in (0.052, 0.035, 0.024, 0.016)))
    chosen = dataclasses.replace(_record(1, Candidate("int8", 0.5), flash=90, accuracy=0.98),
                                 payload=FitPayload(fine_tune=runs))
    space = space_for(load_profile("stm32l4r5-cortex-m4"), can_train=True, can_prune=True)
    report = FitReport("m.keras", "p", "tflm", FitBudgets(100, None, None), space,
                       FitSettings(8, None, 1, None, 4, None, None, 0, None, 4096),
                       0.97, 10, [chosen], chosen=1, output="out.tflite")
    _print_summary(make_console(True), report)
    trained = [line for line in capsys.readouterr().out.splitlines() if "epoch" in line
               and not line.startswith("why")]
    assert trained == [
        "fine-tuned 8 epoch(s): channel pruning in 2 steps of 2 epoch(s), then 4 epoch(s) "
        "int8 like its QAT twin (no fake quantization); batch 32; final loss 0.016"]
    assert "sdk.train" not in trained[0]


def test_a_batch_split_by_memory_says_what_it_was_split_for():
    from devicefit.sdk.convert.finetune import training_summary

    split = FineTuneResult(3, 8, 4, [0.5, 0.4, 0.3], memory_limit_bytes=64 << 20)
    assert training_summary([split]) == (
        "fine-tuned 3 epoch(s); batch 32 as 4 micro-batches of 8, the most that fits "
        "64.0 MiB; final loss 0.300")
    assert training_summary([]) is None
