"""int4 weights and TFLM's DECODE in the latency model (issue 47): what each kernel library
does with them, what the figure rests on, and a band that widens where it rests on less.

The int4 model is the zoo's chain_int8 with its conv and fully-connected filters stored as
int4 (two per byte, values clipped to the int4 range): the estimate reads dtypes and shapes;
what the runtimes do with such files is tested with AI Edge Quantizer's models in
tests/sdk/convert/test_int4.py and on the target build in
tests/simulator/targets/tflm/test_target_build.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.estimate.kernels import (
    kernel_data,
    kernel_tables,
    load_kernels,
    op_cycles,
    scalar_speed,
)
from devicefit.simulator.estimate.latency import estimate_latency, op_shape, profile_core
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import static_report
from tests.int4_models import int4_twin, lut_twin

M4 = "stm32l4r5-cortex-m4"


@pytest.fixture(scope="module")
def twins(model_zoo, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("int4")
    int8 = model_zoo("chain_int8")
    int4 = folder / "chain_int4.tflite"
    int4.write_bytes(int4_twin(int8.read_bytes()))
    return int8, int4


def _profile(tmp_path: Path, body: str, name: str = "p") -> object:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"extends: {M4}\n{body}")
    return load_profile(path)


def _per_op(path: Path, profile) -> tuple:
    model = read_model(path)
    return model, estimate_latency(model, static_report(model, profile).compute.per_op, profile)


def test_the_twin_is_int4_where_meant(twins):
    sg = read_model(twins[1]).main
    kinds = {op.op_name: sg.tensors[op.inputs[1]].dtype for op in sg.operators
             if op.op_name in ("CONV_2D", "FULLY_CONNECTED", "DEPTHWISE_CONV_2D")}
    assert kinds == {"CONV_2D": "int4", "FULLY_CONNECTED": "int4", "DEPTHWISE_CONV_2D": "int8"}


def test_cmsis_nn_int4_kernels_cost_their_measured_factor_per_mac(twins):
    """On the DSP path the s4 kernels run more instructions per MAC than the s8 ones: each
    int4 layer costs its int8 twin's MAC term times the table's factor, the rest as int8's
    (its flash reads of the packed bytes apart)."""
    profile = load_profile(M4)
    path = load_kernels(kernel_tables()).libraries["cmsis-nn"].int4["dsp"]
    (m8, e8), (m4, e4) = (_per_op(p, profile) for p in twins)
    for o8, o4 in zip(e8.per_op, e4.per_op, strict=True):
        shape = op_shape(m4.main, m4.main.operators[o4.op_index], o4.macs)
        factor = path.per_mac.get(shape.kind, 1.0) if shape.weight_dtype == "int4" else 1.0
        mac8 = o8.cycles - _non_mac(m8, o8, profile)
        assert o4.cycles - _non_mac(m4, o4, profile) == pytest.approx(mac8 * factor)
        assert factor == 1.0 or (factor > 1 and mac8 > 0)
    assert e4.total_ms > e8.total_ms


def _non_mac(model, o, profile) -> float:
    """An op's cycles apart from its MAC term: bookkeeping, flash reads, memory traffic."""
    shape = op_shape(model.main, model.main.operators[o.op_index], o.macs)
    core = profile_core(profile)
    assert core is not None
    cycles = op_cycles(kernel_data(), core, "cmsis-nn", "tflm", None,
                       dataclasses.replace(shape, macs=0, weight_dtype=""))
    assert cycles is not None
    return cycles + o.bytes_moved * (profile.cost_model.cycles_per_byte or 0.0)


def test_reference_kernels_add_an_unpack_pass_over_each_filter(twins, tmp_path):
    """TFLM's reference kernels unpack each int4 filter into scratch on every Invoke, then
    run the int8 code: the twin costs int8's cycles plus the pass, per filter element."""
    profile = _profile(tmp_path, "runtime: {kernels: reference}\n")
    data = load_kernels(kernel_tables())
    unpack = data.libraries["reference"].int4["default"].unpack_cycles_per_weight
    core = profile_core(profile)
    assert core is not None and unpack > 0
    (m8, e8), (m4, e4) = (_per_op(p, profile) for p in twins)
    for o8, o4 in zip(e8.per_op, e4.per_op, strict=True):
        shape = op_shape(m4.main, m4.main.operators[o4.op_index], o4.macs)
        flash = (shape.weight_bytes - op_shape(m8.main, m8.main.operators[o8.op_index],
                                               o8.macs).weight_bytes) * core.flash_cycles_per_byte
        extra = shape.weight_elements * unpack / scalar_speed(data, core) \
            if shape.weight_dtype == "int4" else 0.0
        assert o4.cycles == pytest.approx(o8.cycles + extra + flash)


def test_the_basis_names_what_int4_rests_on_and_the_band_widens(twins):
    profile = load_profile(M4)
    (_, e8), (_, e4) = (_per_op(p, profile) for p in twins)
    assert "int4" not in e8.band_basis
    assert "int4 weights:" in e4.band_basis and "instruction counts under QEMU" in e4.band_basis
    assert "rests on" in e4.band_basis
    assert e4.band[0] < e8.band[0] and e4.band[1] > e8.band[1]


def test_a_library_without_int4_figures_says_so_with_the_widest_band(twins, tmp_path):
    """A table with no int4 entry for the library: int8's cost, an uncertainty of 2x on the
    int4 layers' share, and the basis saying nothing was measured."""
    tables = kernel_tables()
    for lib in tables["libraries"].values():
        lib.pop("int4", None)
    data = load_kernels(tables)
    profile = load_profile(M4)
    model = read_model(twins[1])
    per_op = static_report(model, profile).compute.per_op
    bare = estimate_latency(model, per_op, profile, data)
    full = estimate_latency(model, per_op, profile)
    assert "no int4 figure" in bare.band_basis
    assert bare.band[1] > full.band[1]


def test_a_spread_under_one_is_refused():
    tables = kernel_tables()
    tables["libraries"]["reference"]["int4"]["default"]["spread"] = 0.5
    with pytest.raises(ProfileError, match="spread"):
        load_kernels(tables)


@pytest.fixture(scope="module")
def lut(model_zoo, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("lut")
    paths = folder / "clustered.tflite", folder / "lut.tflite"
    for path, data in zip(paths, lut_twin(model_zoo("chain_int8").read_bytes()), strict=True):
        path.write_bytes(data)
    return paths


def test_decode_costs_a_pass_over_every_value_it_writes(lut, tmp_path):
    """TFLM's DECODE rewrites each compressed filter on every Invoke: its cycles are the
    values it writes times the table's figure, at the core's scalar speed; the model's other
    operators cost what the uncompressed model's do."""
    profile = _profile(tmp_path, "runtime: {compression: true}\n")
    data = load_kernels(kernel_tables())
    assert data.decode is not None
    core = profile_core(profile)
    assert core is not None
    (mc, ec), (ml, el) = (_per_op(p, profile) for p in lut)
    decodes = [o for o in el.per_op if o.op == "CUSTOM:TFLM_DECODE"]
    assert decodes
    lib = data.libraries["cmsis-nn"]
    for o in decodes:
        op = ml.main.operators[o.op_index]
        values = sum(ml.main.tensors[t].num_elements for t in op.outputs)
        assert o.cycles == pytest.approx(
            (values * data.decode.cycles_per_value + lib.op_overhead_cycles)
            / scalar_speed(data, core) + o.bytes_moved * (profile.cost_model.cycles_per_byte
                                                          or 0.0))
    rest = sum(o.ms for o in el.per_op if o.op != "CUSTOM:TFLM_DECODE")
    assert rest == pytest.approx(ec.total_ms, rel=0.02)
    assert "DECODE:" in el.band_basis and el.band[1] > ec.band[1]


def test_esp_nn_hands_int4_layers_to_the_reference_kernels(twins, tmp_path):
    """ESP-NN's TFLM wrappers run an int4 layer on TFLM's reference kernels after the
    unpack: on an ESP32-S3 such a layer costs what it costs with ``kernels: reference``,
    many times its int8 twin on ESP-NN; the int8 layers keep ESP-NN's cost."""
    esp = load_profile("esp32-s3")
    path = tmp_path / "ref.yaml"
    path.write_text("extends: esp32-s3\nruntime: {kernels: reference}\n")
    reference = load_profile(path)
    (m8, e8), (m4, e4) = (_per_op(p, esp) for p in twins)
    _, r4 = _per_op(twins[1], reference)
    for o8, o4, oref in zip(e8.per_op, e4.per_op, r4.per_op, strict=True):
        shape = op_shape(m4.main, m4.main.operators[o4.op_index], o4.macs)
        if shape.weight_dtype == "int4":
            assert o4.cycles == pytest.approx(oref.cycles) and o4.cycles > 3 * o8.cycles
        else:
            assert o4.cycles == pytest.approx(o8.cycles)
    assert "reference kernels after the unpack" in e4.band_basis


def test_runs_on_must_name_another_library_that_runs_int4_itself():
    tables = kernel_tables()
    tables["libraries"]["reference"]["int4"]["default"]["runs_on"] = "reference"
    with pytest.raises(ProfileError, match="runs_on"):
        load_kernels(tables)
