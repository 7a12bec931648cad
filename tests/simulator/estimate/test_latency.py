"""Device latency estimate: own cost tables, the core registry and kernel tables (directions
the published figures give), error bands, "at risk", and an estimate for every dtype."""

from __future__ import annotations

import json

import pytest
import yaml

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.estimate.cores import cores, find_core
from devicefit.simulator.estimate.kernels import (
    DATA_DIR,
    kernel_data,
    lane_padding,
    parse_version,
    parse_versions,
)
from devicefit.simulator.estimate.latency import cycles_per_mac, estimate_latency
from devicefit.simulator.profile_types import CostModel
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate, static_report
from tests import zoo


def _profile(tmp_path, cost: str, clock: str = "100MHz", threads: int = 1):
    (tmp_path / "p.yaml").write_text(
        f"name: p\ndevice: {{class: mcu, clock: {clock}}}\n"
        f"runtime: {{name: tflm, threads: {threads}}}\ncost_model:\n{cost}")
    return load_profile(tmp_path / "p.yaml")


def _estimate(model_name: str, profile):
    model = read_model(zoo.model_path(model_name))
    return estimate_latency(model, static_report(model, profile).compute.per_op, profile)


def _variant(tmp_path, base: str, body: str, name: str = "v"):
    """A user's profile that extends a built-in one and changes what a datasheet gives."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"extends: {base}\n{body}")
    return load_profile(path)


# --------------------------------------------------------------------------- own table
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
    assert est.basis == "profile" and est.band == (0.5, 2.0)  # nobody validated this table


def test_key_precedence_and_missing_entry_is_no_estimate(tmp_path):
    cost = CostModel(cycles_per_mac={"CONV_2D.int8": 1.5, "int8": 2.0, "default": 9.0})
    assert cycles_per_mac(cost, "CONV_2D", "int8") == 1.5
    assert cycles_per_mac(cost, "DEPTHWISE_CONV_2D", "int8") == 2.0
    assert cycles_per_mac(cost, "CONV_2D", "float32") == 9.0
    assert cycles_per_mac(CostModel(cycles_per_mac={"int8": 2.0}), "CONV_2D", "float32") is None
    est = _estimate("chain_float32", _profile(tmp_path, "  cycles_per_mac: {int8: 2.0}\n"))
    assert est.total_ms is None and "CONV_2D.float32" in est.no_estimate


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


# --------------------------------------------------------------------------- registry
def test_registry_has_the_cores_the_profiles_need():
    names = set(cores())
    assert {"cortex-m0plus", "cortex-m3", "cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55",
            "cortex-m85", "xtensa-lx6", "xtensa-lx7", "cortex-a78", "cortex-a72"} <= names
    assert any(c.family == "riscv" for c in cores().values())
    assert find_core("Cortex-M0+").name == "cortex-m0plus"  # aliases, any case
    assert find_core("cortex-m85").simd == "mve" and find_core("xtensa-lx7").simd == "pie"


def test_unknown_cpu_is_a_profile_error_with_did_you_mean(tmp_path):
    with pytest.raises(ProfileError, match=r"v\.yaml:\d+: unknown device.cpu 'cortex-m34'; "
                                           r"did you mean 'cortex-m\d+'\?"):
        _variant(tmp_path, "stm32l4r5-cortex-m4", "device: {cpu: cortex-m34}\n")
    # A profile with its own cost table may name any core.
    own = _variant(tmp_path, "stm32l4r5-cortex-m4", "device: {cpu: my-dsp}\n"
                   "cost_model: {cycles_per_mac: {default: 2.0}}\n", "own")
    assert own.device.cpu == "my-dsp"


def test_runtime_version_is_validated(tmp_path):
    with pytest.raises(ProfileError, match="runtime.version"):
        _variant(tmp_path, "stm32l4r5-cortex-m4", "runtime: {version: latest}\n")
    assert parse_version("2.3.1") == (2, 3, 1) and parse_version("2.16-nightly") == (2, 16)
    # A kernel library's own version, alone or after the runtime's.
    assert parse_versions("esp-nn 1.1.0") == {"esp-nn": (1, 1, 0)}
    assert parse_versions("2.3.1, ESP-NN 1.1") == {"": (2, 3, 1), "esp-nn": (1, 1)}
    assert parse_version("esp-nn 1.1.0") == ()  # names no runtime version
    ok = _variant(tmp_path, "esp32-s3", 'runtime: {version: "2.16, esp-nn 1.1.0"}\n', "ok")
    assert ok.runtime.version == "2.16, esp-nn 1.1.0"
    for bad in ("1.1.0 esp-nn", "esp-nn 1.1 extra", "2.3, 2.4", "esp-nn latest"):
        with pytest.raises(ProfileError, match="runtime.version"):
            _variant(tmp_path, "esp32-s3", f'runtime: {{version: "{bad}"}}\n', "bad")


@pytest.mark.parametrize("name", ["stm32l4r5-cortex-m4", "stm32h743-cortex-m7",
                                  "nrf52840-cortex-m4", "esp32-s3", "android-arm64-cpu"])
def test_builtin_profiles_estimate_int8_and_float_with_a_band(name):
    profile = load_profile(name)
    assert profile.cost_model.cycles_per_mac == {}  # every built-in uses the registry
    for model_name in ("chain_int8", "chain_float32"):
        est = _estimate(model_name, profile)
        assert est.total_ms > 0 and est.basis == "registry"
        low, high = est.band_ms
        assert low < est.total_ms < high


def _ratio(tmp_path, base: str, slow: str, fast: str, model: str = "mobilenet_v1_96_int8") -> float:
    a = _estimate(model, _variant(tmp_path, base, slow, "slow")).total_ms
    b = _estimate(model, _variant(tmp_path, base, fast, "fast")).total_ms
    return a / b


def test_kernels_reference_is_far_slower_than_the_optimized_library(tmp_path):
    """Espressif publishes person detection (this MobileNet layout) at 2300 ms with reference
    kernels and 54 ms with ESP-NN on the ESP32-S3 (42x); CMSIS-NN on a Cortex-M4 likewise."""
    esp = _ratio(tmp_path, "esp32-s3", "runtime: {kernels: reference}\n",
                 "runtime: {kernels: esp-nn}\n")
    assert 15 < esp < 100
    m4 = _ratio(tmp_path, "stm32l4r5-cortex-m4", "runtime: {kernels: reference}\n",
                "runtime: {kernels: cmsis-nn}\n")
    assert m4 > 5


def test_cpu_changes_the_estimate_as_published(tmp_path):
    """At one clock: M85 (Helium) < M7 (dual issue) < M33 < M4 (DSP) < M0+ (no DSP). MLPerf
    Tiny: EK-RA8D1 (M85 480 MHz) runs VWW 12x faster than EK-RA6M4 (M33 200 MHz). The M33 and
    M4 share the DSP path; only the per-op bookkeeping differs, by Arm's CoreMark/MHz (4.02
    against 3.42)."""
    def est(cpu: str):
        p = _variant(tmp_path, "stm32l4r5-cortex-m4", f"device: {{cpu: {cpu}}}\n", cpu)
        return _estimate("mobilenet_v1_96_int8", p)

    m0, m4, m33, m7, m85 = (est(c) for c in ("cortex-m0plus", "cortex-m4", "cortex-m33",
                                              "cortex-m7", "cortex-m85"))
    assert m85.total_ms < m7.total_ms < m33.total_ms < m4.total_ms < m0.total_ms
    assert 1 < m4.total_ms / m33.total_ms < 4.02 / 3.42
    assert m4.total_ms / m85.total_ms > 3
    # MicroNets (MLSys 2021, Table 4): person detection 0.254 s on the STM32F446RE (M4,
    # 180 MHz), 0.108 s on the STM32F746ZG (M7, 216 MHz): 1.96x per cycle.
    assert 1.5 < m4.total_ms / m7.total_ms < 2.6


def test_helium_runs_kxk_convolutions_through_the_1x1_kernel():
    """CMSIS-NN's Helium path builds the im2col in int8 and calls the 1x1 matrix kernel; its
    DSP path widens it to int16 first. So a 3x3 convolution costs per MAC what a 1x1 one does
    on a Cortex-M85, and more than a 1x1 one on a Cortex-M4."""
    from devicefit.simulator.estimate.kernels import OpShape, op_cycles

    data = kernel_data()

    def cycles(cpu: str, kind: str) -> float:
        op = OpShape("CONV_2D", "int8", macs=1_000_000, kind=kind, channels=64)
        return op_cycles(data, find_core(cpu), "cmsis-nn", "tflm", None, op)

    assert cycles("cortex-m85", "conv") == pytest.approx(cycles("cortex-m85", "conv1x1"))
    assert cycles("cortex-m4", "conv") > 1.5 * cycles("cortex-m4", "conv1x1")


def test_core_without_a_published_coremark_counts_as_the_reference():
    """Per-op bookkeeping scales by CoreMark/MHz only where the core's designer publishes one
    (Arm, for every Cortex-M core)."""
    from devicefit.simulator.estimate.kernels import scalar_speed

    data = kernel_data()
    assert scalar_speed(data, find_core("xtensa-lx7")) == 1.0
    assert scalar_speed(data, find_core("cortex-m85")) == pytest.approx(6.28 / 4.02)
    assert all(c.coremark_per_mhz for c in cores().values() if c.family == "cortex-m")


def test_old_tflm_version_is_slower_on_cmsis_nn(tmp_path):
    """MLPerf Tiny v0.5's NUCLEO-L4R5ZI (TFLM 2.3.1) is about 2x slower than a current TFLM."""
    ratio = _ratio(tmp_path, "stm32l4r5-cortex-m4", 'runtime: {version: "2.3.1"}\n',
                   'runtime: {version: "2.16"}\n')
    assert 1.3 < ratio < 4
    old = _estimate("mobilenet_v1_96_int8", _variant(tmp_path, "stm32l4r5-cortex-m4",
                                                     'runtime: {version: "2.3.1"}\n', "old"))
    new = _estimate("mobilenet_v1_96_int8", load_profile("stm32l4r5-cortex-m4"))
    assert _per_kind_ms(old)["DEPTHWISE_CONV_2D"] > 1.5 * _per_kind_ms(new)["DEPTHWISE_CONV_2D"]
    same = _ratio(tmp_path, "esp32-s3", 'runtime: {version: "2.3.1"}\n', "runtime: {}\n")
    assert same == pytest.approx(1.0)  # no published difference for ESP-NN: no rule


def _per_kind_ms(est) -> dict[str, float]:
    out: dict[str, float] = {}
    for o in est.per_op:
        out[o.op] = out.get(o.op, 0.0) + o.ms
    return out


def test_esp_nn_version_without_p4_kernels_runs_them_in_c(tmp_path):
    """ESP-NN 1.1.0 (the version of Espressif's 73 ms ESP32-P4 person-detection figure)
    vectorised only CONV_2D on the P4: its depthwise and fully connected ops ran C. So that
    version makes the P4 slower, its convolutions alone unchanged; on the S3 (PIE kernels for
    every op since ESP-NN's start) the same version changes nothing."""
    p4 = 'device: {cpu: esp32-p4, clock: 360MHz}\n'
    old = _estimate("mobilenet_v1_96_int8",
                    _variant(tmp_path, "esp32-s3", p4 + 'runtime: {version: "esp-nn 1.1.0"}\n', "old"))
    new = _estimate("mobilenet_v1_96_int8",
                    _variant(tmp_path, "esp32-s3", p4 + 'runtime: {version: "esp-nn 1.2.3"}\n', "new"))
    before, after = _per_kind_ms(old), _per_kind_ms(new)
    assert before["CONV_2D"] == pytest.approx(after["CONV_2D"])
    assert before["DEPTHWISE_CONV_2D"] > 3 * after["DEPTHWISE_CONV_2D"]
    assert 1.2 < old.total_ms / new.total_ms < 4
    # Published: that P4 (73 ms at 360 MHz) was slower than the S3 (54 ms at 240 MHz).
    assert old.total_ms > _estimate("mobilenet_v1_96_int8", load_profile("esp32-s3")).total_ms
    s3 = _ratio(tmp_path, "esp32-s3", 'runtime: {version: "esp-nn 1.1.0"}\n', "runtime: {}\n")
    assert s3 == pytest.approx(1.0)
    # The runtime's own version does not select the library rule, nor the reverse.
    tflm = _ratio(tmp_path, "esp32-s3", p4 + 'runtime: {version: "1.1.0"}\n', p4)
    assert tflm == pytest.approx(1.0)
    m4 = _ratio(tmp_path, "stm32l4r5-cortex-m4", 'runtime: {version: "tflm 2.3.1"}\n',
                'runtime: {version: "2.3.1"}\n')
    assert m4 == pytest.approx(1.0)  # "tflm 2.3.1" is the runtime's own version too


def test_shape_effects():
    """Channels that do not fill the SIMD lanes waste them; 1 channel on 16 lanes: 16x."""
    assert lane_padding(1, 16) == 16 and lane_padding(32, 16) == 1 and lane_padding(20, 16) == 1.6
    assert lane_padding(3, 1) == 1


def test_leave_one_board_out_never_fits_on_the_board_it_predicts(monkeypatch):
    """The validation's promise: each board is predicted by constants fitted without any
    of its figures (checked on the real published list, with the fit and the estimator
    replaced by recorders: the protocol is under test, not the numbers)."""
    from benchmarks import bench_latency as bench

    rows = bench.published()
    seen: list[set[str]] = []
    monkeypatch.setattr(bench, "fit", lambda fitted: seen.append({r.board for r in fitted})
                        or bench.X0)
    predicted: list[tuple[str, set[str]]] = []
    monkeypatch.setattr(bench, "estimate_ms",
                        lambda row, data=None: predicted.append((row.board, seen[-1])) or 1.0)
    loo = bench.leave_one_board_out(rows)
    assert set(loo) == set(rows) and len(predicted) == len(rows)
    # A validation-only board (published.yaml "fit: false") is predicted, never fitted on.
    boards = {r.board for r in rows if r.fit}
    assert boards != {r.board for r in rows}
    for board, fitted_on in predicted:
        assert board not in fitted_on and fitted_on == boards - {board}


def test_published_data_names_known_cores_and_libraries():
    data = yaml.safe_load((DATA_DIR / "published.yaml").read_text())
    tables = kernel_data()
    for board in data["boards"]:
        find_core(board["cpu"])
        assert board["kernels"] in tables.libraries and board["source"]
        parse_versions(board.get("version") or "0")
    for lib in ("reference", "cmsis-nn", "esp-nn"):
        low, high = tables.libraries[lib].band
        assert 0 < low <= 1 <= high and "int8" in tables.libraries[lib].calibrated


# --------------------------------------------------------------------------- band + at risk
def test_budget_inside_the_band_is_at_risk(tmp_path):
    model = zoo.model_path("mobilenet_v1_96_int8")
    base = simulate(str(model), load_profile("esp32-s3"))
    est, (low, high) = base.latency.estimated_device_ms, base.latency.band_ms
    inside = _variant(tmp_path, "esp32-s3", f"budgets: {{latency: {(est + high) / 2:.3f}ms}}\n")
    report = simulate(str(model), inside)
    check = next(b for b in report.budgets if b.name == "latency")
    assert check.ok and check.status == "at-risk" and report.verdict == "pass"
    assert report.at_risk == ["latency"] and list(check.band) == pytest.approx([low, high])
    clear = _variant(tmp_path, "esp32-s3", f"budgets: {{latency: {high * 1.01:.3f}ms}}\n", "clear")
    assert next(b for b in simulate(str(model), clear).budgets if b.name == "latency").status \
        == "pass"
    over = _variant(tmp_path, "esp32-s3", f"budgets: {{latency: {(low + est) / 2:.3f}ms}}\n",
                    "over")
    report = simulate(str(model), over)
    assert report.verdict == "fail" and report.budgets[-1].status == "fail"


def test_check_reports_at_risk_and_fails_on_it_when_told(tmp_path, capsys):
    from devicefit.sdk.cli import main

    model = zoo.model_path("mobilenet_v1_96_int8")
    est = simulate(str(model), load_profile("esp32-s3")).latency
    budget = (est.estimated_device_ms + est.band_ms[1]) / 2
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"models:\n  - path: {model}\n    profiles:\n"
                       f"      - {{name: esp32-s3, budgets: {{latency: {budget:.3f}ms}}}}\n")
    junit = tmp_path / "junit.xml"
    assert main(["check", str(project), "--json", "--junit", str(junit)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "at-risk" and out["results"][0]["status"] == "at-risk"
    assert "AT RISK" in junit.read_text() and "<failure" not in junit.read_text()
    assert main(["check", str(project), "--fail-on-risk", "--junit", str(junit)]) == 1
    text = capsys.readouterr().out
    assert "AT RISK" in text and "likely" in text
    assert 'type="BudgetAtRisk"' in junit.read_text()


def test_text_json_and_html_show_the_band(tmp_path, capsys):
    from devicefit.sdk.cli import main

    model = str(zoo.model_path("chain_int8"))
    assert main(["simulate", model, "--profile", "stm32l4r5-cortex-m4"]) == 0
    text = capsys.readouterr().out
    assert "likely" in text and "cortex-m4 + cmsis-nn kernels" in text
    assert main(["simulate", model, "--profile", "stm32l4r5-cortex-m4", "--json"]) == 0
    lat = json.loads(capsys.readouterr().out)["latency"]
    assert lat["band_ms"][0] < lat["estimated_device_ms"] < lat["band_ms"][1]
    html = tmp_path / "r.html"
    assert main(["simulate", model, "--profile", "stm32l4r5-cortex-m4", "--html", str(html)]) == 0
    assert "likely" in html.read_text()


# --------------------------------------------------------------------------- every dtype
@pytest.fixture(scope="module")
def scheme_models(tmp_path_factory):
    """The chain model converted as int16x8, int8 with uint8 I/O, and float16 (real converter)."""
    import numpy as np
    import tensorflow as tf

    keras = zoo._keras()
    folder = tmp_path_factory.mktemp("schemes")
    x = inp = keras.Input((16, 16, 3), batch_size=1)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    out = keras.layers.Dense(4)(keras.layers.Flatten()(x))
    model = keras.Model(inp, out)
    rng = np.random.default_rng(0)

    def representative():
        for _ in range(8):
            yield [rng.normal(size=(1, 16, 16, 3)).astype(np.float32)]

    paths = {}
    for scheme in ("int16x8", "uint8_io", "float16"):
        saved = folder / f"saved_{scheme}"
        model.export(str(saved), format="tf_saved_model", verbose=False,
                     input_signature=[tf.TensorSpec((1, 16, 16, 3), tf.float32)])
        conv = tf.lite.TFLiteConverter.from_saved_model(str(saved))
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        if scheme == "float16":
            conv.target_spec.supported_types = [tf.float16]
        else:
            conv.representative_dataset = representative
            if scheme == "int16x8":
                conv.target_spec.supported_ops = [
                    tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
            else:
                conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
                conv.inference_input_type = conv.inference_output_type = tf.uint8
        paths[scheme] = folder / f"{scheme}.tflite"
        paths[scheme].write_bytes(conv.convert())
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["coral-edgetpu", "stm32l4r5-cortex-m4", "esp32-s3",
                                     "android-arm64-cpu"])
@pytest.mark.parametrize("scheme", ["int16x8", "uint8_io", "float16"])
def test_every_dtype_gets_an_estimate(scheme_models, profile, scheme, capsys):
    """Issue 16: simulate --profile coral-edgetpu exited 2 on uint8 I/O, int16 or float16
    ("cost_model has no entry for 'QUANTIZE.uint8'"). Each now gets an estimate and a band."""
    from devicefit.sdk.cli import main

    path = scheme_models[scheme]
    dtypes = {o.dtype for o in _ops(path)}
    expected = {"int16x8": "int16", "uint8_io": "uint8", "float16": "float16"}[scheme]
    assert expected in dtypes or scheme == "float16"  # float16 weights feed a DEQUANTIZE
    assert main(["simulate", str(path), "--profile", profile, "--json"]) in (0, 1)
    lat = json.loads(capsys.readouterr().out)["latency"]
    assert lat["estimated_device_ms"] > 0 and lat["band_ms"][1] > lat["estimated_device_ms"]


def _ops(path):
    model = read_model(path)
    sg = model.main
    from devicefit.simulator.estimate.latency import op_shape

    return [op_shape(sg, op, 0) for op in sg.operators]


def test_int16_costs_more_than_int8_and_falls_back_where_a_library_has_none():
    """CMSIS-NN's s16 kernels: the same MACs, fewer per SIMD instruction. ESP-NN has no int16
    kernels: TFLM runs those ops on its reference kernels."""
    from devicefit.simulator.estimate.kernels import library_for

    data = kernel_data()
    lib = data.libraries["cmsis-nn"]
    assert lib.dtypes["int16"] > lib.dtypes["int8"]
    assert library_for(data, "esp-nn", "int16").name == "reference"
    assert library_for(data, "esp-nn", "int8").name == "esp-nn"


def test_no_estimate_is_said_not_an_error(tmp_path, capsys):
    """An own cost table without float entries: simulate still exits 0, says why there is no
    estimate, and leaves the latency budget unchecked instead of passing it."""
    from devicefit.sdk.cli import main

    (tmp_path / "own.yaml").write_text(
        "extends: stm32l4r5-cortex-m4\ndevice: {cpu: my-dsp}\n"
        "cost_model: {cycles_per_mac: {int8: 2.0}}\nbudgets: {latency: 1ms}\n")
    model = str(zoo.model_path("chain_float32"))
    assert main(["simulate", model, "--profile", str(tmp_path / "own.yaml")]) == 0
    text = capsys.readouterr().out
    assert "no latency estimate" in text and "latency budget not checked" in text
    assert main(["simulate", model, "--profile", str(tmp_path / "own.yaml"), "--json"]) == 0
    lat = json.loads(capsys.readouterr().out)["latency"]
    assert lat["estimated_device_ms"] is None and "CONV_2D.float32" in lat["no_estimate"]
