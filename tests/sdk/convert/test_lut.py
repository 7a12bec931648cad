"""``--weights lut4``: int8 filters clustered to 16 values per channel and written as TFLM's
look-up-table compression by TFLM's own tool, where the profile's TFLM build decodes it.

The end-to-end test converts the digits CNN (examples/digits.py) and measures its accuracy in
the TFLM wheel; the refusals come before any conversion work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.convert import convert
from devicefit.sdk.convert.lut import kmeans_1d, lut_weights
from devicefit.sdk.convert.spec import ConversionSpec
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model
from examples.digits import cached_cnn, load_digits
from tests.paths import TESTS

BASE = "stm32l4r5-cortex-m4"


@pytest.fixture
def lut_profile(tmp_path) -> Path:
    path = tmp_path / "m4-lut.yaml"
    path.write_text(f"name: m4-lut\nextends: {BASE}\nruntime:\n  compression: true\n")
    return path


def test_kmeans_keeps_at_most_k_values_and_leaves_fewer_alone():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, size=500).astype(np.int8)
    out = kmeans_1d(w, 16)
    assert out.dtype == np.int8 and out.shape == w.shape
    assert len(np.unique(out)) <= 16 < len(np.unique(w))
    # Each weight moves to its nearest centre: never further than the spread allows.
    assert np.abs(out.astype(int) - w).max() < 32
    few = np.array([-3, 0, 5, 5, 0], dtype=np.int8)
    assert kmeans_1d(few, 16) is few


def test_lut4_is_a_weights_choice_in_flags_and_yaml():
    assert ConversionSpec.from_options(weights="lut4").weights == "lut4"
    assert ConversionSpec.from_mapping({"weights": "lut4"}).to_mapping() == {"weights": "lut4"}


@pytest.mark.parametrize(("profile", "options", "message"), [
    (BASE, {}, "runtime.compression: true"),
    ("android-arm64-cpu", {}, "only TFLite Micro decodes"),
    (None, {"scheme": "int16x8"}, "needs --scheme int8"),
    (None, {"prune_channels": 0.5}, "pruning saves no byte more"),
])
def test_lut4_is_refused_with_the_reason(profile, options, message, lut_profile, tmp_path):
    with pytest.raises(UsageError, match=message):
        convert(str(tmp_path / "absent.keras"), profile or lut_profile, tmp_path / "out.tflite",
                weights="lut4", calibration="random", **options)
    assert not (tmp_path / "out.tflite").exists()


def test_the_command_refuses_it_in_one_line_with_exit_2(tmp_path, capsys):
    model = tmp_path / "m.keras"
    model.write_bytes(b"not read: the profile is refused first")
    code = main(["convert", str(model), "--profile", BASE, "-o", str(tmp_path / "o.tflite"),
                 "--calibration", "random", "--weights", "lut4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "registers the DECODE kernel" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "o.tflite").exists()


@pytest.mark.slow
def test_the_digits_cnn_as_lut4_runs_in_tflm_and_fits(lut_profile, tmp_path):
    paths = load_digits().save_npz(tmp_path)
    out = tmp_path / "lut.tflite"
    report = convert(str(cached_cnn(TESTS / "artifacts" / "convert")), lut_profile, out,
                     calibration=paths["train"], eval_data=paths["test"], weights="lut4")
    model = parse_model(out.read_bytes())
    decodes = [op for op in model.main.operators if op.op_name == "CUSTOM:TFLM_DECODE"]
    assert decodes and report.settings.weights == "lut4"
    acc = report.accuracy
    assert acc is not None and acc.runtime.startswith("tflm")
    # 16 values per channel cost the digits CNN little (97.8 % → 97.5 % measured here).
    assert acc.accuracy_drop_pp is not None and acc.accuracy_drop_pp < 2.0
    sim = report.simulation
    assert sim is not None and sim.compatibility.supported
    assert sim.memory.flash_model_bytes == out.stat().st_size
    # The same conversion without the tables: the look-up tables save flash.
    int8 = convert(str(cached_cnn(TESTS / "artifacts" / "convert")), lut_profile,
                   tmp_path / "int8.tflite", calibration=paths["train"], simulate=False)
    assert report.output_bytes < 0.7 * int8.output_bytes
    assert lut_weights((tmp_path / "int8.tflite").read_bytes()) != (
        tmp_path / "int8.tflite").read_bytes()
    assert load_profile(lut_profile).target_settings.compression
