"""Device latency estimate: the cost-model formula, key precedence, threads, errors."""

from __future__ import annotations

import pytest

from simulator.errors import ProfileError
from simulator.latency import cycles_per_mac, estimate_latency
from simulator.profiles import CostModel, load_profile
from simulator.reader import read_model
from simulator.simulate import static_report
from tests import zoo


def _profile(tmp_path, cost: str, clock: str = "100MHz", threads: int = 1):
    (tmp_path / "p.yaml").write_text(
        f"name: p\ndevice: {{class: mcu, clock: {clock}}}\n"
        f"runtime: {{name: tflm, threads: {threads}}}\ncost_model:\n{cost}")
    return load_profile(tmp_path / "p.yaml")


def test_formula_per_op_and_total(tmp_path):
    profile = _profile(tmp_path, "  cycles_per_mac: {int8: 2.0, FULLY_CONNECTED.int8: 1.0}\n"
                                 "  cycles_per_byte: 0.5\n  op_overhead: 10us\n")
    model = read_model(zoo.model_path("mlp_int8"))
    per_op = static_report(model, profile).compute.per_op
    est = estimate_latency(model, per_op, profile)
    for c, o in zip(per_op, est.per_op, strict=True):
        assert o.dtype == "int8"
        expected_cycles = c.macs * 1.0 + c.bytes_moved * 0.5  # the FULLY_CONNECTED.int8 key
        assert o.cycles == pytest.approx(expected_cycles)
        assert o.ms == pytest.approx(expected_cycles / 100e6 * 1e3 + 0.01)
    assert est.total_ms == pytest.approx(sum(o.ms for o in est.per_op))


def test_key_precedence():
    cost = CostModel(cycles_per_mac={"CONV_2D.int8": 1.5, "int8": 2.0, "default": 9.0})
    assert cycles_per_mac(cost, "CONV_2D", "int8") == 1.5
    assert cycles_per_mac(cost, "DEPTHWISE_CONV_2D", "int8") == 2.0
    assert cycles_per_mac(cost, "CONV_2D", "float32") == 9.0
    with pytest.raises(ProfileError, match="no entry for 'CONV_2D.float32'"):
        cycles_per_mac(CostModel(cycles_per_mac={"int8": 2.0}), "CONV_2D", "float32")


def test_threads_divide_compute_not_overhead(tmp_path):
    cost = "  cycles_per_mac: {default: 1.0}\n  parallel_efficiency: 0.5\n  op_overhead: 1ms\n"
    model = read_model(zoo.model_path("chain_int8"))
    one = _profile(tmp_path, cost, threads=1)
    per_op = static_report(model, one).compute.per_op
    single = estimate_latency(model, per_op, one)
    five = estimate_latency(model, per_op, _profile(tmp_path, cost, threads=5))
    n = len(per_op)
    assert five.total_ms - n * 1.0 == pytest.approx((single.total_ms - n * 1.0) / 3.0)


def test_profile_without_clock_is_an_error(tmp_path):
    (tmp_path / "q.yaml").write_text("name: q\ndevice: {class: mcu}\nruntime: {name: tflm}\n"
                                     "cost_model: {cycles_per_mac: {int8: 1}}\n")
    profile = load_profile(tmp_path / "q.yaml")
    model = read_model(zoo.model_path("mlp_int8"))
    with pytest.raises(ProfileError, match="no device.clock"):
        estimate_latency(model, static_report(model, profile).compute.per_op, profile)


@pytest.mark.parametrize("name", ["stm32l4r5-cortex-m4", "stm32h743-cortex-m7",
                                  "nrf52840-cortex-m4", "esp32-s3", "android-arm64-cpu"])
def test_builtin_profiles_estimate_int8_and_float(name):
    profile = load_profile(name)
    for model_name in ("chain_int8", "chain_float32"):
        model = read_model(zoo.model_path(model_name))
        est = estimate_latency(model, static_report(model, profile).compute.per_op, profile)
        assert est.total_ms > 0
