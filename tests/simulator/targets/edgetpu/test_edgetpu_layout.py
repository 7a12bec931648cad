"""The Edge TPU parameter layout (simulator/targets/edgetpu/layout.py) on layers built in code,
each figure worked out by hand from the rule; the benchmark's comparison with the
compiled packages of google-coral/test_data, run on the numbers it recorded
(tests/fixtures/edgetpu/package_params.json: no model file is committed); the usable
cache the profile takes from the public compiler logs."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_edgetpu_partition as bench
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.targets.edgetpu.cost import edgetpu_cost
from devicefit.simulator.targets.edgetpu.layout import (
    Constant,
    LayoutOp,
    OpParams,
    layout_params,
)
from devicefit.simulator.targets.edgetpu.partition import edgetpu_partition
from tests import edgetpu_models


@pytest.fixture(scope="module")
def coral():
    return load_profile("coral-edgetpu")


def _params(data: bytes, profile) -> tuple[int, int, list[str]]:
    r = edgetpu_partition(parse_model(data), profile)
    assert r.cpu_ops == 0  # every layer here maps
    return r.onchip_param_bytes, r.offchip_param_bytes, [p.param_rule for p in r.ops]


@pytest.mark.parametrize("kind, o, i, k, per_channel, expected", [
    # 8 channels pad to 16 lanes; 3 inputs pad to 4 at each of 9 taps; 4 B bias each:
    # 16 × (4 + 9 × 4) = 640
    ("CONV_2D", 8, 3, 3, False, 640),
    # 100 channels: two 64-lane groups = 128; per-channel header 12 B: 128 × (12 + 20) = 4096
    ("CONV_2D", 100, 20, 1, True, 4096),
    # one channel keeps 4 lanes: 4 × (4 + 96) = 400, padded to 64 B → 448 (movenet's head)
    ("CONV_2D", 1, 96, 1, False, 448),
    # FC 10 × 560: 16 lanes × (4 + 560) = 9024 (keras_lstm_mnist's classifier)
    ("FULLY_CONNECTED", 10, 560, 1, False, 9024),
    # depthwise: 4-channel groups, per tap a 4×4 block: 24 × (12 + 4 × 9) = 1152
    ("DEPTHWISE_CONV_2D", 24, 24, 3, True, 1152),
    # 10 channels pad to 12: 12 × (4 + 4 × 9) = 480
    ("DEPTHWISE_CONV_2D", 10, 10, 3, False, 480),
])
def test_layer_parameters_follow_the_layout(coral, kind, o, i, k, per_channel, expected):
    data = edgetpu_models.layer_model(kind, o, i, k, per_channel=per_channel)
    cached, streamed, rules = _params(data, coral)
    assert (cached, streamed) == (expected, 0)
    assert rules == ["depthwise" if kind == "DEPTHWISE_CONV_2D" else "matrix"]


@pytest.mark.parametrize("kind, o, i, k, per_channel, expected", [
    # no bias, per-channel scales: 8 B header (float32 scale, int32 offset) per channel,
    # 4 groups × 64 × (8 + 256) = 67,584 (LibrEdgeTPU's dense_256: its package to the byte)
    ("FULLY_CONNECTED", 256, 256, 1, True, 67584),
    # no bias, one scale: no header at all; a rank-2 output of one channel fills 16 lanes:
    # 16 × 4096 = 65,536 (a tracker FC)
    ("FULLY_CONNECTED", 1, 4096, 1, False, 65536),
])
def test_a_bias_free_layer_has_no_bias_in_its_header(coral, kind, o, i, k, per_channel,
                                                       expected):
    data = edgetpu_models.layer_model(kind, o, i, k, per_channel=per_channel, bias=False)
    assert _params(data, coral) == (expected, 0, ["matrix"])


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_depthwise_conv_over_one_channel_is_laid_out_as_a_conv(coral, per_channel):
    """7×7 over 1 channel, multiplier 8 (LibrEdgeTPU's Gabor bank): a conv of 8 → 16 lanes,
    4 B header, 49 taps × 4 inputs: 16 × (4 + 196) = 3,200. Eight equal per-channel scales
    count as one scale (the header stays 4 B)."""
    data = edgetpu_models.layer_model("DEPTHWISE_CONV_2D", 8, 1, 7, per_channel=per_channel,
                                      equal_scales=True)
    assert _params(data, coral) == (3200, 0, ["depthwise_single_input"])
    w = Constant((1, 7, 7, 8), "int8", 392)
    op = LayoutOp("DEPTHWISE_CONV_2D", (w, Constant((8,), "int32", 32)), (1, 8, 8, 8),
                  input_shape=(1, 8, 8, 1))
    held_out = layout_params(op, frozenset({"depthwise_single_input"}))
    assert held_out.rule == "depthwise" and held_out.cached == 8 * (4 + 4 * 49)


@pytest.mark.parametrize("hw, channels, cached, streamed", [
    # FCs 2 × 16 × 4096; no SOFTMAX table (its classes are positions, not a conv/FC's
    # channels); no compaction (the image is the graph's input); CONCATENATION of two
    # [1, 1]: 16 lanes × (4 + 4 + 4) = 192 (LibrEdgeTPU's bright_64x64: 131,264 B)
    (64, 1, 2 * 65536 + 192, 0),
    # + the 1×1 conv 3 → 1 (4 lanes × (4 + 4), padded to 64 B) and the RESHAPE's 0/1
    # compaction after it, 16 lanes × (4 + 16 positions × 4) = 1,088 (color_*_64x64)
    (64, 3, 2 * 65536 + 192 + 64 + 1088, 0),
    # 16,384 inputs: both FCs stream (512 KiB), the rest is cached (bright_128x128)
    (128, 1, 192, 2 * 16 * 16384),
    # 3 × 3 positions: a compaction of 9 positions, 16 × (4 + 36) = 640 (looming's RESHAPE)
    (3, 3, 2 * 16 * 12 + 192 + 64 + 640, 0),
])
def test_tracker_graphs_follow_the_layout(coral, hw, channels, cached, streamed):
    r = edgetpu_partition(parse_model(edgetpu_models.tracker_model(hw, channels)), coral)
    assert r.cpu_ops == 0  # a 16,384-element SOFTMAX maps too (compiler 16)
    assert (r.onchip_param_bytes, r.offchip_param_bytes) == (cached, streamed)


def test_softmax_tables_need_a_conv_or_fc_before_it():
    """The tables are kept with the classes of a conv/FC's lanes: a SOFTMAX that reads the
    graph's input (or a flattened image) has none, and without the rule it would."""
    op = LayoutOp("SOFTMAX", shape=(1, 256), input_shape=(1, 256), source="RESHAPE")
    assert layout_params(op).cached == 0
    assert layout_params(op, frozenset({"softmax_from_matrix"})).cached == 48 * 256 + 64
    fed = LayoutOp("SOFTMAX", shape=(1, 256), input_shape=(1, 256), source="FULLY_CONNECTED")
    assert layout_params(fed).cached == 48 * 256 + 64


def test_shared_weights_are_stored_once(coral):
    one = _params(edgetpu_models.layer_model("CONV_2D", 16, 16), coral)[0]
    two = _params(edgetpu_models.layer_model("CONV_2D", 16, 16, shared=True), coral)[0]
    assert one == two == 16 * (4 + 16)


@pytest.mark.parametrize("shape, streamed", [
    ((48, 48, 1), 2304),   # a spatial constant: its bytes (movenet's MUL)
    ((1, 1, 1, 3), 64),    # varies along the channels only: 3 × int32, padded to 64 B
    ((), 0),               # one value: an immediate of the instructions
])
def test_element_wise_constants_are_streamed_even_when_the_cache_has_room(
        coral, shape, streamed):
    data = edgetpu_models.mul_const_model(shape, (1, 48, 48, 3 if len(shape) == 4 else 1))
    assert _params(data, coral)[:2] == (0, streamed)


def test_parameters_past_the_cache_are_streamed_whole(tmp_path):
    """Two 192 B convolutions (16 lanes × (4 + 8)): a 1,000 B cache holds both, a 200 B one
    the first, and the second streams whole (an op's parameters are never split)."""
    path = tmp_path / "small.yaml"
    path.write_text("extends: coral-edgetpu\ncost_model:\n  param_cache: 1000\n")
    two = parse_model(edgetpu_models.branch_model(c=8))  # two 8→8 1×1 convolutions
    r = edgetpu_partition(two, load_profile(path))
    assert (r.onchip_param_bytes, r.offchip_param_bytes) == (384, 0)
    path.write_text("extends: coral-edgetpu\ncost_model:\n  param_cache: 200\n")
    r = edgetpu_partition(two, load_profile(path))
    assert (r.onchip_param_bytes, r.offchip_param_bytes) == (192, 192)
    assert [p.params_in for p in r.ops if p.device == "tpu"] == ["on-chip", "off-chip"]


def _read(data: bytes, tmp_path):
    """The model as read from a file: the channel ops' axis is a constant's value, which
    the reader takes from the file."""
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    return read_model(path)


@pytest.mark.parametrize("classes, expected", [
    (10, 576),          # 3 tables × 64 B × 3 groups of 4 classes (keras_lstm_mnist: 576 B)
    (100, 4800 + 64),   # 48 B × 100 classes, and 64 B more past one 64-lane group
])
def test_softmax_tables_by_compiler(classes, expected):
    op = LayoutOp("SOFTMAX", shape=(1, classes), source="FULLY_CONNECTED")
    assert (layout_params(op).cached, layout_params(op).rule) == (expected, "softmax")
    assert layout_params(op, compiler=15).cached == 0  # compiler 15 stores no table
    assert layout_params(op, frozenset({"softmax_wide"})).cached == 48 * -(-classes // 4) * 4


def test_channels_taken_off_the_grid_cost_a_selection_matrix_per_tensor_read(coral, tmp_path):
    """split_concat's graph: a[1], a[2] and [b[0], c[1]] take channels off the 4-channel
    grid (64 B each, the ≤ 4-channel matrix layout: 4 × (4 + 4) padded to 64); a[0] and
    c[0] start on it and cost nothing; the first concatenation is read only by the SPLIT.
    192 B, the real package's figure."""
    r = edgetpu_partition(_read(edgetpu_models.split_concat_model(), tmp_path), coral)
    assert r.cpu_ops == 0
    assert [(p.op, p.param_bytes, p.param_rule) for p in r.ops] == [
        ("CONCATENATION", 0, ""), ("SPLIT", 128, "channel_selection"),
        ("CONCATENATION", 64, "channel_selection")]
    assert r.onchip_param_bytes == 192


@pytest.mark.parametrize("first, second, selection", [
    (4, 8, 0),              # both start on the grid: a copy
    (3, 8, 16 * (4 + 12)),  # y lands at channel 3: 11 channels → 16 lanes × (4 + 4 + 8)
])
def test_a_concatenation_read_by_an_op(coral, tmp_path, first, second, selection):
    r = edgetpu_partition(_read(edgetpu_models.concat_conv_model(first, second), tmp_path),
                          coral)
    assert r.ops[0].param_bytes == selection
    conv = 4 * (4 + -(-(first + second) // 4) * 4)  # the 4-channel CONV_2D, padded to 64
    assert r.onchip_param_bytes == selection + -(-conv // 64) * 64


def test_a_left_out_rule_falls_back():
    w = Constant((8, 1, 1, 8), "int8", 64, per_channel=True)
    op = LayoutOp("CONV_2D", (w, Constant((8,), "int32", 32, per_channel=True)))
    assert layout_params(op).cached == 16 * (12 + 8)
    assert layout_params(op, frozenset({"per_channel_header"})).cached == 16 * (4 + 8)
    assert layout_params(op, frozenset({"matrix"})).cached == 96  # the TFLite bytes
    assert layout_params(op).uses == ("matrix", "per_channel_header")


@pytest.mark.parametrize("steps, features, units, cached, streamed", [
    # keras_lstm_mnist's shape: its package's LSTM part, 34,368 B cached + 576 B streamed
    (28, 28, 20, 4 * 32 * (4 + 28 + 20) + 128 * 32 + 64 + 32 * 112 + 128 * 24 + 128 * 112
     + 32 * 80, 576),
    # another shape, from the rule: gates 4 × 64 × (4 + 40 + 64); 160 × 44 → 192 lanes × 44,
    # 40 × 160 → 48 × 160, 256 × 68, 160 × 160 → 192 × 160, 64 × 256; 49 × 64 zeros streamed
    (49, 40, 64, 4 * 64 * 108 + 192 * 44 + 64 + 48 * 160 + 256 * 68 + 192 * 160 + 64 * 256,
     49 * 64),
])
def test_integer_lstm_layout_and_its_one_pair_note(coral, steps, features, units, cached,
                                                    streamed):
    from tests.recurrent_models import lstm_model

    r = edgetpu_partition(parse_model(lstm_model("int8", steps, features, units)), coral)
    assert r.cpu_ops == 0 and [p.param_rule for p in r.ops] == ["lstm"]
    assert (r.onchip_param_bytes, r.offchip_param_bytes) == (cached, streamed)
    assert any("one public compiled model" in n and "UNIDIRECTIONAL_SEQUENCE_LSTM" in n
               for n in r.notes)


def test_an_lstm_the_rule_cannot_read_counts_its_tflite_bytes():
    """Compiler 15, or no time axis in the output: the TFLite bytes, marked unmodelled."""
    w = Constant((20, 28), "int8", 560)
    for op, compiler in ((LayoutOp("UNIDIRECTIONAL_SEQUENCE_LSTM", (w,), (1, 28, 20)), 15),
                         (LayoutOp("UNIDIRECTIONAL_SEQUENCE_LSTM", (w,), (1, 20)), 16)):
        assert layout_params(op, compiler=compiler) == layout_params(
            op, frozenset({"lstm"})) == OpParams(560, 0, "unmodelled")


def test_the_benchmark_comparison_passes_on_the_recorded_pairs():
    """Every public pair the benchmark recorded (google-coral/test_data, LibrEdgeTPU) agrees
    within 1 % leave-one-model-out, or in-sample where its rule rests on its model alone."""
    params = bench.read_fixture(bench.PACKAGE_FIXTURE)
    cache = edgetpu_cost(load_profile("coral-edgetpu")).param_cache_bytes
    rows = bench.param_rows(params, cache)
    assert len(rows) == 49 and sum(p.repo == "ricardodeazambuja/LibrEdgeTPU" for p in params) == 26
    assert not any(r.unmodelled for r in rows)
    assert sum(r.predicted == r.real for r in rows) == 48  # all but MoveNet (+0.02 %)
    # compiler 16's SOFTMAX tables: the mobilenet_v1 pairs are exact under both compilers
    mobilenet = [r for r in rows if r.model.startswith("mobilenet_v1_0.")]
    assert len(mobilenet) == 6 and all(r.loo == r.real for r in mobilenet)
    # the rule only movenet shows is left out of movenet's own figure
    movenet = next(r for r in rows if r.model.startswith("movenet"))
    assert movenet.left_out == ("streamed_operand",) and movenet.loo[1] == 0
    assert movenet.real[1] == movenet.predicted[1] == 2368
    # split_concat's selection matrices are held out now: the trackers' concatenation
    # shows the rule too
    split = next(r for r in rows if r.model.startswith("tools/split_concat"))
    assert split.predicted == split.real == split.loo == (192, 0) and split.agrees
    # keras_lstm_mnist alone shows the LSTM layout, the Gabor bank the depthwise conv over
    # one channel, the trackers SOFTMAX without tables: exact, but only in-sample
    lstm = next(r for r in rows if r.model.startswith("keras_lstm"))
    assert lstm.predicted == lstm.real == (43968, 576) and lstm.left_out == ("lstm",)
    alone = {r.model.split("/")[-1].split(" ")[0]: r.left_out for r in rows if not r.agrees}
    assert all(r.in_sample_only for r in rows if not r.agrees)
    assert alone["gabor_64x64_p4.tflite"] == ("depthwise_single_input",)
    assert alone["bright_128x128.tflite"] == ("softmax_from_matrix", "wide_fc_streamed")
    assert len(alone) == 22 and set(alone.values()) == {
        ("lstm",), ("depthwise_single_input",), ("softmax_from_matrix",),
        ("softmax_from_matrix", "wide_fc_streamed")}
    assert bench.main(["--fixture", str(bench.PACKAGE_FIXTURE)]) == 0


def test_the_profile_cache_is_the_median_of_the_public_logs():
    lines, same = bench.cache_lines(
        edgetpu_cost(load_profile("coral-edgetpu")).param_cache_bytes)
    assert same, lines[-1]
    sized, median = bench.usable_cache(
        json.loads(bench.CACHE_LOGS.read_text())["logs"])
    assert 1.0 * 2**20 < min(n for _, n in sized) and median < 8 * 2**20
