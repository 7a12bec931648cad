"""The ``devicefit check`` project file: merging, every problem at once, the shipped example."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from devicefit.sdk.check.project import ProjectError, load_project
from tests.paths import ROOT
from tests.zoo import model_path

EXAMPLE = ROOT / "examples" / "ci" / "devicefit.yaml"


@pytest.fixture(scope="module")
def chain() -> Path:
    return model_path("chain_int8")


def _project(tmp_path: Path, text: str, models: dict[str, Path]) -> Path:
    for name, src in models.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, tmp_path / name)
    f = tmp_path / "devicefit.yaml"
    f.write_text(text)
    return f


def test_example_project_loads(tmp_path, chain):
    """The example in examples/ci is documentation: it must stay a valid project."""
    models = {m["path"]: chain for m in yaml.safe_load(EXAMPLE.read_text())["models"]}
    shutil.copy(EXAMPLE, tmp_path / "devicefit.yaml")
    project = load_project(_project(tmp_path, EXAMPLE.read_text(), models))
    got = {(t.model, t.profile.name): t for t in project.targets}
    assert len(got) == 6
    assert got["kws", "nrf52840-cortex-m4"].profile.budgets.latency_ms == 100.0
    assert got["person-detect", "stm32h743-cortex-m7"].profile.budgets.arena_bytes == 300 * 1024
    assert got["person-detect", "android-arm64-cpu"].overridden == ("latency",)
    assert {r.metric: r.text for r in got["anomaly", "esp32-s3"].rules}["arena"] == "15%"
    assert project.baseline == tmp_path / "devicefit-baseline.json"


def test_budgets_merge_defaults_then_model_then_profile_entry(tmp_path, chain):
    f = _project(tmp_path, """
defaults:
  profiles: [stm32l4r5-cortex-m4]
  budgets: {arena: 100KiB, flash: 1MB}
  regression: {arena: 5%, flash: 2KiB}
models:
  - path: m/a.tflite
    budgets: {arena: 200KiB, latency: null}
    regression: {arena: 1%}
    profiles:
      - stm32l4r5-cortex-m4
      - {name: nrf52840-cortex-m4, budgets: {arena: 64KiB}}
  - path: b.tflite
""", {"m/a.tflite": chain, "b.tflite": chain})
    t = {(t.model, t.profile.name): t for t in load_project(f).targets}
    a_stm, a_nrf, b = (t["a", "stm32l4r5-cortex-m4"], t["a", "nrf52840-cortex-m4"],
                       t["b", "stm32l4r5-cortex-m4"])
    assert a_stm.profile.budgets.arena_bytes == 200 * 1024
    assert a_stm.profile.budgets.flash_bytes == 1_000_000
    assert a_stm.profile.budgets.latency_ms is None  # null drops the profile's budget
    assert a_nrf.profile.budgets.arena_bytes == 64 * 1024
    assert b.profile.budgets.arena_bytes == 100 * 1024
    assert b.profile.budgets.latency_ms == 1000.0  # the profile's own
    rules = {r.metric: r for r in a_stm.rules}
    assert rules["arena"].relative == pytest.approx(0.01)
    assert rules["flash"].absolute == 2048 and rules["flash"].limit(1000) == 3048
    assert {r.metric: r.relative for r in b.rules}["arena"] == pytest.approx(0.05)
    assert a_stm.model_path == tmp_path / "m" / "a.tflite"


def test_profile_file_relative_to_project(tmp_path, chain):
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "my-board.yaml").write_text(
        "name: my-board\nextends: stm32l4r5-cortex-m4\nbudgets: {arena: 32KiB}\n")
    f = _project(tmp_path, "profiles_dir: boards\nmodels:\n"
                           "  - {path: a.tflite, profiles: [boards/my-board.yaml, my-board]}\n",
                 {"a.tflite": chain})
    targets = load_project(f).targets
    assert [t.profile.budgets.arena_bytes for t in targets] == [32 * 1024, 32 * 1024]


def test_every_problem_is_reported_at_once(tmp_path, chain):
    (tmp_path / "notes.txt").write_text("not a model at all")
    f = _project(tmp_path, """version: 1
verison: 2
defaults:
  regression: {arena: lots}
models:
  - path: a.tflite
    profiles: [stm32l4r5-cortex-m5]
    budgets: {arena: big, flsh: 1KiB}
  - path: missing.tflite
    profiles: [tflm-mcu-base]
  - path: notes.txt
    profiles: [esp32-s3, esp32-s3]
  - name: a
    path: a.tflite
""", {"a.tflite": chain})
    with pytest.raises(ProjectError) as info:
        load_project(f)
    message = str(info.value)
    expected = [
        (2, "verison", "did you mean 'version'"),
        (4, "defaults.regression.arena", "bad value 'lots'"),
        (7, "models[0].profiles[0]", "did you mean 'stm32l4r5-cortex-m4'"),
        (8, "models[0].budgets.arena", "got 'big'"),
        (8, "models[0].budgets.flsh", "did you mean 'flash'"),
        (9, "models[1].path", "model file not found"),
        (10, "models[1].profiles[0]", "abstract"),
        (11, "models[2].path", "not a .tflite model"),
        (12, "models[2].profiles[1]", "listed twice"),
        (13, "models[3].name", "used twice"),
        (13, "models[3].profiles", "missing"),  # points at its model
    ]
    assert message.startswith(f"{f}: {len(expected)} problems:")
    lines = message.splitlines()[1:]
    assert len(lines) == len(expected)
    for line_no, key, words in expected:
        pattern = re.escape(f"{f}:{line_no}: {key}: ")
        assert any(re.match(r"\s*" + pattern, ln) and words in ln for ln in lines), (key, message)


@pytest.mark.parametrize("text, words", [
    ("models: [\n", "YAML syntax error"),
    ("", "empty"),
    ("- a\n- b\n", "must be a mapping"),
    ("models: []\n", "non-empty list of models"),
    ("models:\n  - profiles: [esp32-s3]\n", "models[0].path: missing"),
    ("models:\n  - {path: a.tflite, profiles: [esp32-s3], regression: {arena: -5%}}\n",
     "bad value '-5%'"),
], ids=["syntax", "empty", "list", "no-models", "no-path", "negative-rule"])
def test_bad_files(tmp_path, chain, text, words):
    with pytest.raises(ProjectError, match=re.escape(words)) as info:
        load_project(_project(tmp_path, text, {"a.tflite": chain}))
    assert info.value.exit_code == 2


def test_missing_project_file_names_the_example(tmp_path):
    with pytest.raises(ProjectError, match="examples/ci/devicefit.yaml"):
        load_project(tmp_path / "devicefit.yaml")
