"""The static arena predictor on 32-bit TFLM builds (issue 29, part 3).

Three layers: CMSIS-NN's ``arm_*_get_buffer_size`` functions as transcribed in
:mod:`simulator.targets.tflm.cmsis_nn` (hand-worked values from the C sources, and the C functions
themselves compiled on the host when a CMSIS-NN checkout is at hand), what the CMSIS-NN
kernels request and keep on real models built here, and devicefit's prediction against the
recorded 32-bit builds (``tests/data/tflm_builds/``, measured under QEMU by
``benchmarks/bench_target_builds.py``).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from devicefit.simulator.profiles import load_profile, with_runtime
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.targets.tflm import cmsis_nn, tail
from devicefit.simulator.targets.tflm.cmsis_nn import ConvParams, Dims
from devicefit.simulator.targets.tflm.planner import kernel_flavour, options_layout, plan_tflm
from devicefit.simulator.targets.tflm.scratch import (
    BUILD_MEASURED,
    ESTIMATED,
    HOST_MEASURED,
    tflm_buffers,
    verified_against,
)
from devicefit.simulator.targets.tflm.tail import (
    builtin_options_bytes,
    estimate_tail,
    prepare_allocations,
    rfft_state_bytes,
)
from tests.paths import ROOT
from tests.recurrent_models import UNITS, lstm_model
from tests.tflite_builder import dense_chain_model
from tests.zoo import model_path

TRUTH = ROOT / "tests" / "data" / "tflm_builds"
#: The acceptance bound of issue 29: median (start arena − smallest working arena).
MEDIAN_OVER_BYTES = 256
#: ... and the most any model's start arena may be over.
MAX_OVER_BYTES = 256


# --------------------------------------------------------------------------- formulas
@pytest.mark.parametrize(("feature", "expected"), [("none", 112), ("dsp", 112), ("mve", 128)])
def test_convolve_s8_im2col(feature: str, expected: int) -> None:
    # 3x3 filter over 3 channels: 27 columns. Non-MVE: rounded up to 28, two int16 columns
    # (2 × 28 × 2 B); MVE: 4 buffers of ceil(27 / 16) × 16 int8 lanes.
    assert cmsis_nn.convolve_s8(Dims(1, 8, 8, 3), Dims(1, 3, 3, 3), feature) == expected


@pytest.mark.parametrize("feature", cmsis_nn.FEATURES)
def test_1x1_convolutions_need_no_buffer_with_gcc(feature: str) -> None:
    p = ConvParams()
    assert cmsis_nn.convolve_wrapper_s8(p, Dims(1, 8, 8, 16), Dims(1, 1, 1, 16),
                                        Dims(1, 8, 8, 32), feature) == 0
    # Strided 1x1: the non-fast 1x1 path, no buffer either.
    assert cmsis_nn.convolve_wrapper_s8(ConvParams(stride_h=2, stride_w=2), Dims(1, 8, 8, 16),
                                        Dims(1, 1, 1, 16), Dims(1, 4, 4, 32), feature) == 0


def test_1xn_convolution_takes_its_own_size_on_mve_only() -> None:
    # A 1x5 filter over a 1x32x8 input, SAME padding 2: arm_convolve_1_x_n_s8_get_buffer_size_mve
    # gives max(5×8 + 2×8, 4×8 + 2×8) = 56; DSP cores use the generic im2col (40 columns).
    p, i, f, o = ConvParams(pad_w=2), Dims(1, 1, 32, 8), Dims(1, 1, 5, 8), Dims(1, 1, 32, 16)
    assert cmsis_nn.is_convolve_1_x_n(p, i, f)
    assert cmsis_nn.convolve_wrapper_s8(p, i, f, o, "mve") == 56
    assert cmsis_nn.convolve_wrapper_s8(p, i, f, o, "dsp") == 2 * 40 * 2


def test_depthwise_3x3_fast_path_and_mve_blocks() -> None:
    i, o = Dims(1, 16, 16, 32), Dims(1, 16, 16, 32)
    f3, f5 = Dims(1, 3, 3, 32), Dims(1, 5, 5, 32)
    same1, same2 = ConvParams(pad_h=1, pad_w=1), ConvParams(pad_h=2, pad_w=2)
    assert cmsis_nn.depthwise_conv_wrapper_s8(same1, i, f3, o, "dsp") == 0  # 3x3 kernel
    assert cmsis_nn.depthwise_conv_wrapper_s8(same1, i, f3, o, "mve") == 4 * 124 * 9
    assert cmsis_nn.depthwise_conv_wrapper_s8(same2, i, f5, o, "dsp") == 32 * 25 * 2
    assert cmsis_nn.depthwise_conv_wrapper_s8(same2, i, f5, o, "none") == 0
    # Channel multiplier > 1: no optimized kernel, no buffer.
    assert cmsis_nn.depthwise_conv_wrapper_s8(same2, Dims(1, 16, 16, 8), f5, o, "dsp") == 0


@pytest.mark.parametrize(("feature", "fc", "pool", "svdf"),
                         [("none", 0, 0, 0), ("dsp", 0, 40, 0), ("mve", 48, 0, 28)])
def test_fc_pool_svdf_by_feature(feature: str, fc: int, pool: int, svdf: int) -> None:
    assert cmsis_nn.fully_connected_s8(12, feature) == fc
    assert cmsis_nn.avgpool(10, feature) == pool
    assert cmsis_nn.svdf_s8(7, feature) == svdf


def test_transpose_conv_picks_reverse_conv_above_16_channels() -> None:
    f = Dims(8, 3, 3, 32)
    wide, narrow = Dims(1, 4, 4, 32), Dims(1, 4, 4, 8)
    # Reverse conv: im2col of the 8x8 up-sampled input (3×3×32 = 288 columns).
    assert cmsis_nn.transpose_conv_s8(2, 2, wide, f, Dims(1, 8, 8, 8), "dsp") == 2 * 288 * 2
    assert cmsis_nn.transpose_conv_s8_reverse(2, 2, wide, f) == 32 * 3 * 3 * 8
    # Column buffer: ((4 − 1) × 2 + max(3, 2)) × 8 × max(3, 2) int32.
    assert cmsis_nn.transpose_conv_s8(2, 2, narrow, Dims(8, 3, 3, 8), Dims(1, 8, 8, 8),
                                      "dsp") == 9 * 8 * 3 * 4
    assert cmsis_nn.transpose_conv_s8_reverse(2, 2, narrow, Dims(8, 3, 3, 8)) == 0


# --------------------------------------------------- the C functions, when a checkout is here
def _cmsis_nn_checkout() -> Path | None:
    for candidate in (os.environ.get("DEVICEFIT_CMSIS_NN"),):
        if candidate and (Path(candidate) / "Include" / "arm_nnfunctions.h").is_file():
            return Path(candidate)
    return None


_C_SHAPES = [  # (in h, w, c), (filter h, w), (stride, pad h, pad w), out (h, w, c)
    ((8, 8, 3), (3, 3), (1, 1, 1), (8, 8, 16)), ((8, 8, 16), (1, 1), (1, 0, 0), (8, 8, 8)),
    ((1, 32, 8), (1, 5), (1, 0, 2), (1, 32, 16)), ((1, 49, 12), (1, 3), (2, 0, 0), (1, 24, 4)),
    ((16, 16, 32), (3, 3), (1, 1, 1), (16, 16, 32)), ((16, 16, 32), (5, 5), (2, 2, 2), (8, 8, 32)),
    ((10, 10, 1), (3, 3), (1, 1, 1), (10, 10, 8)), ((5, 5, 7), (2, 2), (1, 0, 0), (4, 4, 7)),
]


@pytest.mark.skipif(_cmsis_nn_checkout() is None or shutil.which("cc") is None,
                    reason="needs a CMSIS-NN checkout (DEVICEFIT_CMSIS_NN=path) and a C compiler")
@pytest.mark.parametrize("feature", cmsis_nn.FEATURES)
def test_transcription_matches_cmsis_nn_c_functions(feature: str, tmp_path: Path) -> None:
    """Compile CMSIS-NN's get_buffer_size sources on the host with the feature's macros and
    compare them with the Python transcription on a grid of shapes."""
    src = _cmsis_nn_checkout()
    assert src is not None
    calls = []
    for (ih, iw, ic), (fh, fw), (s, ph, pw), (oh, ow, oc) in _C_SHAPES:
        calls.append(
            f"{{cmsis_nn_dims i={{1,{ih},{iw},{ic}}}, f={{1,{fh},{fw},{ic}}}, o={{1,{oh},{ow},{oc}}};"
            f" cmsis_nn_dims fd={{1,{fh},{fw},{oc}}};"
            f" cmsis_nn_conv_params p={{0}}; p.stride.h=p.stride.w={s}; p.padding.h={ph};"
            f" p.padding.w={pw}; p.dilation.h=p.dilation.w=1;"
            f" cmsis_nn_dw_conv_params d={{0}}; d.stride=p.stride; d.padding=p.padding;"
            f" d.dilation=p.dilation;"
            f" printf(\"%d %d %d %d %d\\n\", arm_convolve_wrapper_s8_get_buffer_size(&p,&i,&f,&o),"
            f" arm_depthwise_conv_wrapper_s8_get_buffer_size(&d,&i,&fd,&o),"
            f" arm_fully_connected_s8_get_buffer_size(&o), arm_avgpool_s8_get_buffer_size({ow},{ic}),"
            f" arm_convolve_wrapper_s16_get_buffer_size(&p,&i,&f,&o));}}")
    main = tmp_path / "main.c"
    main.write_text('#include <stdio.h>\n#include "arm_nnfunctions.h"\nint main(void){'
                    + "\n".join(calls) + "return 0;}\n")
    sources = [src / "Source" / d / f"{name}.c" for d, name in (
        ("ConvolutionFunctions", "arm_convolve_get_buffer_sizes_s8"),
        ("ConvolutionFunctions", "arm_convolve_get_buffer_sizes_s16"),
        ("ConvolutionFunctions", "arm_depthwise_conv_get_buffer_sizes_s8"),
        ("FullyConnectedFunctions", "arm_fully_connected_get_buffer_sizes_s8"),
        ("PoolingFunctions", "arm_avgpool_get_buffer_sizes_s8"))]
    macros = {"none": [], "dsp": ["-DARM_MATH_DSP"], "mve": ["-DARM_MATH_DSP", "-DARM_MATH_MVEI"]}
    exe = tmp_path / "sizes"
    done = subprocess.run(["cc", "-O0", *macros[feature], f"-I{src / 'Include'}", str(main),
                           *map(str, sources), "-o", str(exe)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"CMSIS-NN's sources do not compile on this host: {done.stderr[-300:]}")
    rows = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    for row, ((ih, iw, ic), (fh, fw), (s, ph, pw), (oh, ow, oc)) in zip(rows, _C_SHAPES,
                                                                        strict=False):
        p = ConvParams(s, s, ph, pw)
        i, f, o = Dims(1, ih, iw, ic), Dims(1, fh, fw, ic), Dims(1, oh, ow, oc)
        ours = [cmsis_nn.convolve_wrapper_s8(p, i, f, o, feature),
                cmsis_nn.depthwise_conv_wrapper_s8(p, i, Dims(1, fh, fw, oc), o, feature),
                cmsis_nn.fully_connected_s8(oc, feature), cmsis_nn.avgpool(ic, feature),
                cmsis_nn.convolve_wrapper_s16(i, f, feature)]
        assert [int(v) for v in row.split()] == ours, (i, f, o, p)


# --------------------------------------------------------------------------- on models
def _profile(kernels: str, cpu: str):
    import dataclasses

    profile = with_runtime(load_profile("stm32l4r5-cortex-m4"), kernels=kernels)
    return dataclasses.replace(profile, device=dataclasses.replace(profile.device, cpu=cpu))


def test_the_core_picks_cmsis_nn_feature() -> None:
    assert kernel_flavour(_profile("cmsis-nn", "cortex-m4")) == "cmsis-nn:dsp"
    assert kernel_flavour(_profile("cmsis-nn", "cortex-m0plus")) == "cmsis-nn:none"
    assert kernel_flavour(_profile("cmsis-nn", "cortex-m55")) == "cmsis-nn:mve"
    assert kernel_flavour(_profile("reference", "cortex-m55")) == "reference"


@pytest.mark.parametrize(("profile", "cpu", "layout"), [
    ("stm32l4r5-cortex-m4", "cortex-m4", "arm-eabi"),
    ("stm32l4r5-cortex-m4", "cortex-m0plus", "arm-eabi"),
    ("stm32l4r5-cortex-m4", "cortex-m55", "arm-eabi"),
    ("esp32-s3", "xtensa-lx7", "ilp32"),
    ("esp32-s3", "andes-d25f", "ilp32"),
    ("esp32-s3", None, "ilp32"),  # a core devicefit does not know: the larger options
], ids=lambda v: str(v))
def test_the_core_picks_the_builtin_options_layout(profile: str, cpu: str | None,
                                                   layout: str) -> None:
    import dataclasses

    p = load_profile(profile)
    p = dataclasses.replace(p, device=dataclasses.replace(p.device, cpu=cpu))
    assert options_layout(p) == layout
    assert options_layout(with_runtime(p, pointer_bytes=8)) == "lp64"


def _read(tmp_path: Path, data: bytes, name: str = "model"):
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(data)
    return read_model(path)


def test_builtin_options_are_packed_at_their_alignment(tmp_path: Path) -> None:
    """TfLiteFullyConnectedParams is 5 B at alignment 1 with arm-none-eabi-gcc's short
    enums (three 1-byte enums, two bools), 16 B with int-sized enums, 32 B at 8 in the
    64-bit wheel's TFLM. Between them, TfLiteReshapeParams (36 B at 4) starts 4-aligned."""
    chain = _read(tmp_path, dense_chain_model(10))
    assert builtin_options_bytes(chain, 4, "arm-eabi") == 10 * 5
    assert builtin_options_bytes(chain, 4, "ilp32") == 10 * 16
    assert builtin_options_bytes(chain, 4) == 10 * 16  # no layout given: the larger
    assert builtin_options_bytes(chain, 8) == 10 * 32
    mixed = _read(tmp_path, dense_chain_model(2, reshape=True), "mixed")  # FC, RESHAPE × 2
    assert builtin_options_bytes(mixed, 4, "arm-eabi") == 5 + 3 + 36 + 5 + 3 + 36
    assert builtin_options_bytes(mixed, 4, "ilp32") == 2 * (16 + 36)
    assert builtin_options_bytes(mixed, 8) == 32 + 36 + 4 + 32 + 36  # the FC after, 8-aligned


def test_an_xtensa_build_keeps_int_sized_enums(tmp_path: Path) -> None:
    """The same model and kernels on a Cortex-M4 and on the ESP32-S3's Xtensa LX7: the tail
    differs by the FC options alone, 16 B instead of 5 per operator."""
    chain = _read(tmp_path, dense_chain_model(10))
    arm = plan_tflm(chain, _profile("reference", "cortex-m4"))
    xtensa = plan_tflm(chain, with_runtime(load_profile("esp32-s3"), kernels="reference"))
    assert (xtensa.tail_breakdown["kernel_data"] - arm.tail_breakdown["kernel_data"]
            == 10 * (16 - 5))
    assert any("'arm-eabi' builtin options" in n for n in arm.notes)
    assert any("'ilp32' builtin options" in n for n in xtensa.notes)


def _tflm_checkout() -> Path | None:
    where = os.environ.get("DEVICEFIT_TFLM_DIR")
    return Path(where) if where and (Path(where) / "tensorflow" / "lite").is_dir() else None


@pytest.mark.skipif(_tflm_checkout() is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs a TFLM checkout (DEVICEFIT_TFLM_DIR=path) and arm-none-eabi-gcc")
def test_builtin_options_tables_are_the_compilers_answers() -> None:
    """tail.py's tables are what benchmarks/probe_tflm_sizes.py --params reads from the
    checkout and the compilers installed here (Xtensa and RISC-V ones checked when present)."""
    from benchmarks.probe_tflm_sizes import params_tables

    root = _tflm_checkout()
    assert root is not None
    ops, tables, _log = params_tables(root)
    assert {op for op, s in ops.items() if s is None} == tail._NOT_PARSED
    assert {op: s.removeprefix("TfLite").removesuffix("Params") for op, s in ops.items()
            if s is not None} == tail._PARSED_INTO
    for layout in ("arm-eabi", "ilp32", "lp64"):
        probed = {s.removeprefix("TfLite").removesuffix("Params"): v
                  for s, v in tables[layout].items()}
        # the host's table is the pinned wheel's: its later TFLM, where it differs
        wheel = tail._WHEEL_PARAMS if layout == "lp64" else {}
        assert {**probed, **wheel} == tail._PARAMS[layout], layout


def test_verified_against_names_what_each_figure_rests_on() -> None:
    assert verified_against("reference", 8) == HOST_MEASURED
    assert verified_against("cmsis-nn:dsp", 4) == BUILD_MEASURED
    assert verified_against("cmsis-nn", 4) == BUILD_MEASURED  # plain cmsis-nn: a DSP core
    assert verified_against("cmsis-nn:mve", 4) == ESTIMATED
    assert verified_against("esp-nn", 4) == ESTIMATED
    plan = plan_tflm(read_model(model_path("chain_int8")), _profile("cmsis-nn", "cortex-m55"))
    assert "arena_head" in plan.estimated
    assert any("verified against: estimated" in n for n in plan.notes)


def _lstm(tmp_path: Path, dtype: str):
    path = tmp_path / f"lstm_{dtype}.tflite"
    path.write_bytes(lstm_model(dtype))
    model = read_model(path)
    return model, model.main.operators[0]


def test_cmsis_nn_lstm_keeps_eight_kernel_sums_and_three_gate_buffers(tmp_path: Path) -> None:
    """cmsis_nn/unidirectional_sequence_lstm.cc: an int8 LSTM precomputes 8 int32 kernel
    sums of the state size (persistent) and asks for 3 scratch buffers, not 4."""
    model, op = _lstm(tmp_path, "int8")
    sums = prepare_allocations(model.main, op, 4, "cmsis-nn:dsp")
    assert sums == [UNITS * 4] * 8
    assert prepare_allocations(model.main, op, 4, "reference") == []
    scratch = [b for b in tflm_buffers(model, pointer_bytes=4, kernels="cmsis-nn:dsp")
               if b.kind == "scratch"]
    assert len(scratch) == 3
    ref = estimate_tail(model, pointer_bytes=4, kernels="reference").total
    assert estimate_tail(model, pointer_bytes=4, kernels="cmsis-nn:dsp").total >= ref + 8 * UNITS * 4


def test_float_lstm_falls_back_to_the_reference_buffers(tmp_path: Path) -> None:
    model, op = _lstm(tmp_path, "float32")
    assert prepare_allocations(model.main, op, 4, "cmsis-nn:dsp") == []
    scratch = [b for b in tflm_buffers(model, pointer_bytes=4, kernels="cmsis-nn:dsp")
               if b.kind == "scratch"]
    assert len(scratch) == 4


def test_float_convolutions_keep_no_per_channel_arrays_under_cmsis_nn() -> None:
    """cmsis_nn/conv.cc allocates the per-channel multipliers only for int8/int16 inputs;
    the reference kernel (conv_common.cc) always does."""
    model = read_model(model_path("chain_float32"))
    conv = next(op for op in model.main.operators if op.op_name == "CONV_2D")
    assert prepare_allocations(model.main, conv, 4, "cmsis-nn:dsp") == []
    assert len(prepare_allocations(model.main, conv, 4, "reference")) == 2


def test_scratch_follows_the_core_feature() -> None:
    """inception_int8's 3x3 and 5x5 convolutions (its 1x1 ones need none): int16 im2col of two
    columns on DSP and plain cores (3×3×6 → 2 × 56 × 2 = 224 B), MVE's four 16-lane columns
    (4 × 4 × 16 = 256 B)."""
    model = read_model(model_path("inception_int8"))
    sizes = {f: [b.size for b in tflm_buffers(model, pointer_bytes=4, kernels=f"cmsis-nn:{f}")
                 if b.kind == "scratch" and "CMSIS-NN" in b.name] for f in cmsis_nn.FEATURES}
    convs = [op for op in model.main.operators if op.op_name == "CONV_2D"
             and model.main.tensors[op.inputs[1]].shape[1] > 1]
    assert len(sizes["none"]) == len(sizes["dsp"]) == len(sizes["mve"]) == len(convs) == 2
    assert sizes["dsp"] == sizes["none"] == [224, 400]
    assert sizes["mve"] == [256, 448]


def test_rfft_state_is_kissfft_memory() -> None:
    """kiss_fftr_alloc(512) for int16: kiss_fftr_state (3 pointers) + kiss_fft_state of the
    256-point complex FFT (2 ints, 64 factors, 256 twiddles of 4 B) + 384 complex values."""
    sub = 4 + 4 + 4 * 64 + 4 * 256
    assert rfft_state_bytes(512, "int16", 4) == 3 * 4 + sub + 4 * 384
    assert rfft_state_bytes(512, "int16", 8) == 3 * 8 + sub + 4 * 384
    assert rfft_state_bytes(512, "float32", 4) == 12 + 8 + 256 + 8 * 256 + 8 * 384


#: TFLM's micro_speech audio front end, built of its Signal ops (read from a git mirror of
#: tflite-micro when one is here; never downloaded).
_AUDIO = ("tensorflow/lite/micro/examples/micro_speech/models/audio_preprocessor_int8.tflite")
_TFLM_GIT = Path(os.environ.get("DEVICEFIT_MIRRORS", "/work/.mirror")) / "tensorflow+tflite-micro" / "repo"


def _audio_front_end(tmp_path: Path) -> Path | None:
    if not _TFLM_GIT.is_dir():
        return None
    done = subprocess.run(["git", "--git-dir", str(_TFLM_GIT), "show",
                           f"90b983c2b3f1480642e040bbd2ddb37b998f3424:{_AUDIO}"],
                          capture_output=True)
    if done.returncode != 0:
        return None
    path = tmp_path / "audio_preprocessor_int8.tflite"
    path.write_bytes(done.stdout)
    return path


def test_signal_ops_state_on_the_host_wheel(tmp_path: Path) -> None:
    """The Signal ops' params, FilterBank work area, SpectralSubtraction noise estimate and
    Rfft state are in the tail, its work area in the head: against the tflite-micro wheel."""
    path = _audio_front_end(tmp_path)
    if path is None:
        pytest.skip("needs a git mirror of tflite-micro at $DEVICEFIT_MIRRORS")
    from devicefit.simulator.run.runtimes import run_model

    plan = plan_tflm(read_model(path), with_runtime(load_profile("stm32l4r5-cortex-m4"),
                                                    kernels="reference", pointer_bytes=8))
    real = run_model(path, "tflm")
    assert plan.head_bytes == real.arena_head_bytes
    assert real.arena_tail_bytes is not None
    assert 0 <= plan.tail_bytes - real.arena_tail_bytes <= 64


# --------------------------------------------------------------------------- recorded builds
def _records():
    try:
        from benchmarks.target_truth import load_records, loader
    except ImportError:
        return None
    if not TRUTH.is_dir() or not any(TRUTH.glob("*.json")):
        return None
    return load_records(TRUTH), loader


@pytest.mark.skipif(_records() is None,
                    reason="no recorded TFLM builds (tests/data/tflm_builds/ and "
                           "benchmarks/target_truth.py come with the target-build work)")
def test_prediction_on_every_recorded_build() -> None:
    """For every recorded build and every model available here (built in code or in the
    corpus, same sha256): head exact, the tail never under the recorded one (less the
    recording allocator's bytes), the start arena never under the smallest working arena,
    over by at most 256 B in the median and on every model."""
    from benchmarks.target_truth import compare

    records, loader = _records()  # type: ignore[misc]
    failures = []
    for build, record in records.items():
        rows, _skipped = compare(record, loader())
        if not rows:
            continue
        inexact = [f"{r.model} ({r.predicted_head} vs {r.measured_head})"
                   for r in rows if not r.head_exact]
        under = [f"{r.model} ({r.over:+,} B)" for r in rows if r.over < 0]
        under += [f"{r.model} tail ({r.tail_over:+,} B)" for r in rows
                  if r.tail_over is not None and r.tail_over < 0]
        median = statistics.median(r.over for r in rows)
        wide = [f"{r.model} ({r.over:+,} B)" for r in rows if r.over > MAX_OVER_BYTES]
        if inexact or under or wide or median > MEDIAN_OVER_BYTES:
            failures.append(f"{build}: head off on {inexact}, under on {under}, over "
                            f"{MAX_OVER_BYTES} B on {wide}, median over {median:+} B")
    assert not failures, "\n".join(failures)
