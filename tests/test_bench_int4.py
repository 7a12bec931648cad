"""benchmarks/bench_int4.py's own arithmetic: the weight bytes it reports for a model whose
filters TFLM's DECODE writes (counted from what the file stores, not dropped), the derived
profiles its ``--mcu`` study judges with, and its one line when the vowels data is missing."""

from __future__ import annotations

import sys

from benchmarks import bench_int4
from devicefit.sdk.convert.lut import lut_weights
from devicefit.simulator.profiles import load_profile
from examples import vowels

#: The header of the ancillary tensor TFLM's compression tool writes before the value tables
#: (its "decode common metadata").
DCM_BYTES = 16


def test_a_compressed_filter_counts_its_indices_and_tables(model_zoo, tmp_path):
    dense = model_zoo("mlp_int8")  # Dense 64→32, 32→16, 16→4: int8 filters of 2048/512/64
    assert bench_int4.weight_bytes(dense) == 2048 + 512 + 64
    lut = tmp_path / "mlp_lut4.tflite"
    lut.write_bytes(lut_weights(dense.read_bytes()))
    # Only the 32x64 filter is worth compressing (the tables of the others outweigh what
    # they would save): 4-bit indices, and 16 int8 values for each of its 32 channels.
    assert bench_int4.weight_bytes(lut) == 512 + 64 + 2048 // 2 + DCM_BYTES + 32 * 16


def test_the_mcu_studys_profiles_extend_the_m4_with_one_change(tmp_path):
    tight = load_profile(bench_int4.profile_file(tmp_path, "t-l4", "budgets:\n  flash: 157825B\n"))
    base = load_profile(bench_int4.MCU)
    assert tight.name == "t-l4" and tight.budgets.flash_bytes == 157825
    assert tight.budgets.flash_bytes != base.budgets.flash_bytes
    assert tight.runtime == base.runtime and tight.device == base.device
    lut = load_profile(bench_int4.profile_file(tmp_path, "t-lut", "runtime:\n  compression: "
                                                                  "true\n"))
    assert getattr(lut.target_settings, "compression", None) is True
    assert getattr(base.target_settings, "compression", None) is not True


def test_vowels_without_the_package_that_ships_them_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(vowels, "PACKAGE", "devicefit-no-such-package")
    monkeypatch.setattr(sys, "argv", ["bench_int4", "--model", "vowels", "--profiles", ""])
    assert bench_int4.main() == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_int4: Japanese Vowels ships inside devicefit-no-such-package")
    assert err.count("\n") == 1
