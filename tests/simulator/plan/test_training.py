"""The training-memory plan of a train signature against what LiteRT allocates for it, and
the train_memory budget as simulate and check judge it (issue 49)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicefit.simulator.errors import InputError
from devicefit.simulator.plan.training import plan_training
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import TARGETS, read_report
from devicefit.simulator.types import BudgetName, Status
from tests.trainable_models import CHOICES, measure_train_step, trainable_path
from tests.zoo import model_path

pytestmark = pytest.mark.slow  # the models are converted with TensorFlow

def test_the_reader_lists_the_signatures() -> None:
    model = read_model(trainable_path("last", 8))
    assert [(s.key, s.subgraph) for s in model.signatures] == [("infer", 0), ("train", 1)]
    train = model.signature("train")
    assert train is not None and [n for n, _ in train.inputs] == ["x", "y"]
    assert model.subgraphs[1].tensors[dict(train.inputs)["x"]].shape == (8, 8, 8, 1)


@pytest.mark.parametrize("batch", [8, 32])
@pytest.mark.parametrize("choice", CHOICES)
def test_the_plan_is_within_10_percent_of_litert(choice: str, batch: int) -> None:
    """The planned arena against the span LiteRT placed the tensors over (measured in a
    child process); the variables are sized from the model's shapes in both."""
    path = trainable_path(choice, batch)
    plan = plan_training(read_model(path))
    measured = measure_train_step(path, batch)["arena"]
    assert abs(plan.arena_bytes - measured) <= 0.10 * measured, (plan.arena_bytes, measured)
    assert plan.batch == batch and sum(plan.parts.values()) == plan.total_bytes


def test_the_parts_follow_what_is_trained() -> None:
    """Momentum SGD keeps one slot per trained value: optimizer state = trainable weights;
    biases only train far fewer bytes than every layer."""
    plans = {c: plan_training(read_model(trainable_path(c, 8))) for c in CHOICES}
    for plan in plans.values():
        assert plan.parts["optimizer state"] == plan.parts["trainable weights"] > 0
    assert plans["biases"].parts["trainable weights"] == 4 * (64 + 32 + 10)
    assert plans["all"].parts["trainable weights"] == 4 * sum(r * c + c for r, c in
                                                              [(512, 64), (64, 32), (32, 10)])
    assert plans["all"].total_bytes > plans["last"].total_bytes > plans["biases"].total_bytes
    # The frozen 3x3 convolution's im2col (batch 8, 8x8 outputs, 9 taps, float) is live at
    # the arena's fullest step of the smallest plan: the step that convolves.
    assert plans["last"].parts["kernel temporaries"] == 4 * 8 * 8 * 8 * 9


def _budget(name: str, train_memory: int, tmp_path: Path) -> Path:
    profile = tmp_path / f"{name}-{train_memory}.yaml"
    profile.write_text(f"name: train-{train_memory}\nextends: {name}\n"
                       f"budgets:\n  train_memory: {train_memory}B\n")
    return profile


def test_the_budget_passes_and_fails_on_the_plan(tmp_path: Path) -> None:
    path = trainable_path("all", 8)
    total = plan_training(read_model(path)).total_bytes
    over = simulate(path, str(_budget("android-arm64-cpu", total - 1, tmp_path)), probe=False)
    fits = simulate(path, str(_budget("android-arm64-cpu", total, tmp_path)), probe=False)
    (check,) = [b for b in over.budgets if b.name == BudgetName.TRAIN_MEMORY]
    assert read_report(over.to_dict()) == over  # the plan reads back from the JSON report
    assert check.status == Status.FAIL and check.value == total and over.exit_code == 1
    assert over.training is not None and over.training.total_bytes == total
    assert [b.status for b in fits.budgets if b.name == BudgetName.TRAIN_MEMORY] == [Status.PASS]


def test_a_model_without_a_train_signature_is_not_judged_on_it() -> None:
    report = simulate(model_path("mlp_int8"), "android-arm64-cpu", probe=False)
    assert load_profile("android-arm64-cpu").budgets.train_memory_bytes is not None
    assert BudgetName.TRAIN_MEMORY not in [b.name for b in report.budgets]
    assert BudgetName.TRAIN_MEMORY not in report.unchecked_budgets and report.ok
    assert "train_memory budget not checked: the model has no train signature" in report.notes


def test_tflm_has_no_training(tmp_path: Path) -> None:
    """On an MCU the train signature cannot run: said in a note; with a training budget the
    verdict fails with that reason (no figure could meet it)."""
    path = trainable_path("last", 8)
    why = "TensorFlow Lite Micro has no training: the train signature cannot run on this target"
    plain = simulate(path, "stm32h743-cortex-m7", probe=False)
    assert plain.training is None and plain.no_training == why and why in plain.notes
    judged = simulate(path, str(_budget("stm32h743-cortex-m7", 10**6, tmp_path)), probe=False)
    assert judged.unchecked_budgets == {BudgetName.TRAIN_MEMORY: why}
    assert judged.verdict == Status.FAIL
    with pytest.raises(InputError, match="has no training"):
        plan_training(read_model(path), target=TARGETS["tflm"])
    with pytest.raises(InputError, match="no 'adapt' signature .*'infer', 'train'"):
        plan_training(read_model(path), "adapt")
    assert plain.model.signatures == {"infer": 0, "train": 1}


def test_check_gates_and_shows_the_training_budget(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """check fails the project on the training budget and shows its column, the figure
    against its budget, only because a model has a train signature."""
    from devicefit.sdk.cli import main

    path = trainable_path("all", 8)
    total = plan_training(read_model(path)).total_bytes
    (tmp_path / "all8.tflite").write_bytes(path.read_bytes())
    _budget("android-arm64-cpu", total - 1, tmp_path).rename(tmp_path / "tight.yaml")
    (tmp_path / "devicefit.yaml").write_text(
        "version: 1\nmodels:\n  - path: all8.tflite\n    profiles: [tight.yaml]\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--markdown", "summary.md"]) == 1
    summary = (tmp_path / "summary.md").read_text()
    assert "| train_memory |" in summary and "715.0 KiB / 715.0 KiB ❌" in summary
    assert "train_memory 715.0 KiB exceeds its 715.0 KiB budget by 1 B (estimated)" in summary


@pytest.mark.parametrize(("edit", "message"), [
    (lambda sig: setattr(sig, "subgraphIndex", 99), "signature 'train' runs subgraph 99"),
    (lambda sig: setattr(sig.inputs[0], "tensorIndex", 9999),
     "signature 'train' input 'x' is tensor 9999"),
])
def test_a_signature_pointing_outside_the_model_is_one_clear_error(edit, message: str) -> None:
    from devicefit.simulator.errors import ModelFormatError
    from devicefit.simulator.read.reader import parse_model
    from devicefit.simulator.read.writer import pack, unpack

    model = unpack(trainable_path("last", 8).read_bytes())
    (train,) = [s for s in model.signatureDefs if s.signatureKey == b"train"]
    edit(train)
    with pytest.raises(ModelFormatError, match=message):
        parse_model(pack(model), "bad-signature.tflite")
