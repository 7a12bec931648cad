"""Issue 16's defects on the real public corpus (tests/corpus.py): each answer is judged on
files nobody here wrote, besides the small built models of the other tests."""

from __future__ import annotations

import json

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from tests.corpus import corpus

MCU, PHONE, CORAL = "stm32l4r5-cortex-m4", "android-arm64-cpu", "coral-edgetpu"


@pytest.fixture(scope="module")
def models():
    return {m.name: m.path for m in corpus()}


def _reasons(path, profile: str) -> list[str]:
    return [u.reason for u in check_ops(read_model(path), load_profile(profile)).unsupported_ops]


def test_wake_word_model_with_one_mapped_reshape_fails_on_the_edge_tpu(models):
    """microWakeWord's okay_nabu: the Edge TPU takes its first RESHAPE and nothing more."""
    [why] = _reasons(models["mww_okay_nabu"], CORAL)
    assert "100% of the model's MACs stay on the CPU (60 of 61 ops" in why


@pytest.mark.parametrize("profile", [MCU, PHONE, CORAL])
def test_vela_models_need_the_ethos_u(models, profile):
    for name in ("vela_mltk_image_classification", "vela_mww_okay_nabu"):
        assert any("compiled for the Arm Ethos-U NPU" in r for r in _reasons(models[name], profile))


def test_hybrid_float16_int16_and_mediapipe_ops(models):
    assert any("Hybrid models are not supported" in r
               for r in _reasons(models["hybrid_oww_hey_mycroft"], MCU)
               + _reasons(models["hybrid_oww_embedding_model"], MCU))
    assert any("float16/-/float32" in r for r in _reasons(models["mp_face_landmark"], MCU))
    assert _reasons(models["int16_oww_hey_mycroft"], MCU) == []
    # MediaPipe's selfie segmentation: Convolution2DTransposeBias, which XNNPACK runs.
    assert _reasons(models["mp_selfie_segmentation"], PHONE) == []
    assert any("XNNPACK" in r for r in _reasons(models["mp_selfie_segmentation"], CORAL))


def test_device_sram_bounds_a_real_model(models, tmp_path):
    path = models["mltk_image_classification"]
    arena = next(b for b in simulate(path, load_profile(MCU)).budgets if b.name == "arena")
    board = tmp_path / "small.yaml"
    board.write_text(f"name: small\nextends: {MCU}\ndevice:\n  sram: {int(arena.value) - 1}\n")
    report = simulate(path, load_profile(board))
    assert report.verdict == "fail"
    assert next(b for b in report.budgets if b.name == "arena").limit_from == "device.sram"


def test_int16_corpus_model_runs_without_traceback(models, capsys):
    code = main(["simulate", str(models["int16_oww_hey_mycroft"]), "--profile", MCU, "--run",
                 "--runs", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    assert json.loads(out)["measured"]["arena_head_bytes"] > 0
