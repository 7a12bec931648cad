"""Training-memory estimator, batch planner and the accumulating training loop."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from devicefit.sdk.train import BatchPlan, TrainingMemoryModel, fit, plan_batch  # noqa: E402
from devicefit.sdk.train.backend import cores  # noqa: E402
from devicefit.sdk.train.calibrate import MIN_MARGIN, calibration_batches, fit_line  # noqa: E402
from devicefit.sdk.train.plan import free_memory  # noqa: E402
from devicefit.simulator.errors import InputError, UsageError  # noqa: E402

L = keras.layers


def small_cnn(batchnorm: bool = True) -> keras.Model:
    keras.utils.set_random_seed(1)
    norm = [L.BatchNormalization()] if batchnorm else []
    return keras.Sequential([
        keras.Input((12, 12, 3)), L.Conv2D(8, 3, padding="same", activation="relu"), *norm,
        L.MaxPooling2D(), L.Flatten(), L.Dropout(0.0), L.Dense(16, activation="relu"),
        L.Dense(4)])


def conv_bn_block() -> keras.Model:
    # Activations dominate: 64x64x32 float maps, ~10 k parameters.
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((64, 64, 3)), L.Conv2D(32, 3, padding="same"), L.BatchNormalization(),
        L.ReLU(), L.Conv2D(32, 3, padding="same"), L.GlobalAveragePooling2D(), L.Dense(10)])


def residual_block() -> keras.Model:
    # conv_bn_block's layers as the branch of a residual block: the skip keeps the block's
    # input alive across the branch (one child measures both kinds of memory).
    keras.utils.set_random_seed(0)
    x = inp = keras.Input((48, 48, 16))
    y = L.ReLU()(L.BatchNormalization()(L.Conv2D(16, 3, padding="same")(x)))
    y = L.Conv2D(16, 3, padding="same")(y)
    x = L.ReLU()(L.Add()([x, y]))
    x = L.MaxPooling2D()(x)
    out = L.Dense(5)(L.GlobalAveragePooling2D()(x))
    return keras.Model(inp, out)


# -- estimator ---------------------------------------------------------------------------

@pytest.mark.parametrize(("optimizer", "slots"), [("sgd", 0), ("momentum", 1), ("rmsprop", 1),
                                                  ("adagrad", 1), ("adam", 2), ("adamw", 2)])
def test_parameter_gradient_and_slot_bytes_are_exact(optimizer: str, slots: int) -> None:
    model = small_cnn()
    trainable = sum(math.prod(w.shape) for w in model.trainable_weights)
    total = sum(math.prod(w.shape) for w in model.weights)
    est = TrainingMemoryModel(model, optimizer=optimizer).estimate(4, accumulation_steps=2)
    assert est.parameter_bytes == 4 * total
    assert est.optimizer_slot_bytes == 4 * trainable * slots
    assert est.accumulator_bytes == 4 * trainable
    assert TrainingMemoryModel(model).estimate(4).accumulator_bytes == 0


def test_activations_scale_with_batch_and_layers_are_reported() -> None:
    tm = TrainingMemoryModel(conv_bn_block())
    small, large = tm.estimate(8), tm.estimate(64)
    assert large.activation_bytes == 8 * small.activation_bytes
    assert large.peak_bytes > small.peak_bytes
    layers = {row.name: row for row in tm.layers()}
    conv = next(r for r in layers.values() if r.kind == "Conv2D")
    assert conv.output_elements_per_sample == 64 * 64 * 32
    assert conv.trainable_params == 3 * 3 * 3 * 32 + 32
    bn = next(r for r in layers.values() if r.kind == "BatchNormalization")
    assert bn.saved_bytes_per_sample > 0 and bn.non_trainable_params == 64


def test_mixed_float16_halves_activations() -> None:
    model = conv_bn_block()
    f32 = TrainingMemoryModel(model).estimate(32)
    f16 = TrainingMemoryModel(model, dtype="mixed_float16").estimate(32)
    assert f16.parameter_bytes == f32.parameter_bytes
    assert f16.activation_bytes < 0.6 * f32.activation_bytes


def test_unknown_optimizer_dtype_and_subclassed_model_are_refused() -> None:
    with pytest.raises(UsageError, match="unknown optimizer 'adamx'"):
        TrainingMemoryModel(small_cnn(), optimizer="adamx")
    with pytest.raises(UsageError, match="unknown dtype"):
        TrainingMemoryModel(small_cnn(), dtype="int8")

    class Sub(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(InputError, match="no layer graph"):
        TrainingMemoryModel(Sub())
    dynamic = keras.Sequential([keras.Input((None, 8)), L.Dense(4)])
    with pytest.raises(InputError, match="unknown dimension"):
        TrainingMemoryModel(dynamic)


def test_nested_model_is_expanded_and_shared_layers_counted_once() -> None:
    inner = small_cnn(batchnorm=False)
    shared = L.Dense(4)
    inp = keras.Input((12, 12, 3))
    logits = inner(inp)
    out = shared(shared(logits))  # the same weights twice
    tm = TrainingMemoryModel(keras.Model(inp, out))
    kinds = [op.kind for op in tm.graph.ops]
    assert kinds.count("Conv2D") == 1 and kinds.count("Dense") == 4
    expected = sum(math.prod(w.shape) for w in inner.weights) + 4 * 4 + 4
    assert tm.estimate(2).parameter_bytes == 4 * expected


# -- planner -----------------------------------------------------------------------------

def test_plan_picks_the_largest_batch_that_fits_and_accumulates_to_the_target() -> None:
    model = conv_bn_block()
    tm = TrainingMemoryModel(model)
    limit = tm.estimate(20, accumulation_steps=13).peak_bytes + 1000
    plan = plan_batch(model, memory_bytes=limit, target_batch=256)
    largest = max(b for b in range(1, 257)
                  if tm.estimate(b, accumulation_steps=math.ceil(256 / b)).peak_bytes <= limit)
    assert largest == 20
    assert plan.accumulation_steps == math.ceil(256 / 20)
    assert plan.batch_size <= 20 and plan.batch_size * plan.accumulation_steps >= 256
    assert plan.effective_batch == 256 and plan.estimated_peak_bytes <= limit
    assert [t.batch_size for t in plan.table][:3] == [1, 2, 4]
    assert plan.to_dict()["table"][-1] == plan.to_dict()["table"][-1] | {"fits": False}


def test_plan_without_accumulation_when_the_target_fits() -> None:
    plan = plan_batch(small_cnn(), memory_bytes=1 << 30, target_batch=48)
    assert (plan.batch_size, plan.accumulation_steps) == (48, 1)
    assert plan.estimate.accumulator_bytes == 0


def test_plan_refuses_memory_below_the_parameters() -> None:
    model = small_cnn()
    params = TrainingMemoryModel(model).estimate(1).parameter_bytes
    with pytest.raises(UsageError, match="smaller than the model's parameters alone"):
        plan_batch(model, memory_bytes=params // 2)
    with pytest.raises(UsageError, match="parameters and adam optimizer state"):
        plan_batch(model, memory_bytes=params + 10)


def test_auto_memory_reads_meminfo_and_a_lower_cgroup_limit(tmp_path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    proc.mkdir()
    cg.mkdir()
    (proc / "meminfo").write_text("MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
    assert free_memory(proc, cg) == (4000000 * 1024, "MemAvailable")
    (cg / "memory.max").write_text("1000000000\n")
    (cg / "memory.current").write_text("400000000\n")
    assert free_memory(proc, cg) == (600000000, "cgroup v2 limit")
    (cg / "memory.max").write_text("max\n")
    assert free_memory(proc, cg)[1] == "MemAvailable"
    plan = plan_batch(small_cnn(), target_batch=8)
    assert plan.memory_source.startswith("auto") and plan.memory_limit_bytes > 0


# -- training loop -----------------------------------------------------------------------

def _plan(model: keras.Model, batch: int, target: int) -> BatchPlan:
    """A plan whose micro-batch is ``batch``: the limit sits just above its estimate."""
    tm = TrainingMemoryModel(model, optimizer="sgd")
    steps = math.ceil(target / batch)
    limit = tm.estimate(batch, accumulation_steps=steps).peak_bytes
    plan = plan_batch(model, memory_bytes=limit, optimizer="sgd", target_batch=target)
    assert plan.accumulation_steps == steps
    return plan


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.normal(size=(n, 12, 12, 3)).astype("float32"), rng.integers(0, 4, n)


@pytest.mark.parametrize(("optimizer", "micro", "target"), [
    ("sgd", 8, 32),  # 4 equal micro-batches
    ("adam", 8, 30),  # 8 + 8 + 8 + 6: the short one is weighted by its size
])
def test_accumulation_matches_one_large_batch(optimizer: str, micro: int, target: int) -> None:
    x, y = _data(60)  # the last update of each epoch is short too (60 = 30 + 30, 32 + 28)
    # No batch norm here: its statistics are per micro-batch by nature (see sdk/train/loop.py).
    big_model, acc_model = small_cnn(batchnorm=False), small_cnn(batchnorm=False)
    big = plan_batch(big_model, memory_bytes=1 << 30, optimizer="sgd", target_batch=target)
    assert big.accumulation_steps == 1
    acc = _plan(acc_model, micro, target)
    assert acc.batch_size == micro
    kw = dict(epochs=2, optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True), learning_rate=0.05, seed=7)
    r_big = fit(big_model, x, y, plan=big, **kw)
    r_acc = fit(acc_model, x, y, plan=acc, **kw)
    assert r_big["updates"] == r_acc["updates"] == 4
    np.testing.assert_allclose(r_acc["loss"], r_big["loss"], rtol=1e-4)
    moved = 0.0
    for w_big, w_acc, w0 in zip(big_model.get_weights(), acc_model.get_weights(),
                                small_cnn(batchnorm=False).get_weights(), strict=True):
        # Adam divides by sqrt(v): where a gradient is ~0, summation-order noise becomes a
        # visible step, hence atol; a real mistake (unweighted mean, k-fold lr) moves weights
        # by ~1e-2 here.
        np.testing.assert_allclose(w_acc, w_big, rtol=1e-4, atol=1e-4)
        moved = max(moved, float(np.abs(w_big - w0).max()))
    assert moved > 1e-3  # training really changed the weights


def test_fit_calls_step_and_progress_callbacks_after_each_update() -> None:
    model = small_cnn()
    x, y = _data(40)
    mask = np.ones(model.layers[-1].kernel.shape, "float32")
    mask[::2] = 0.0
    seen: list[tuple[int, int]] = []

    def reapply_mask(m: keras.Model) -> None:
        m.layers[-1].kernel.assign(m.layers[-1].kernel.numpy() * mask)

    result = fit(model, x, y, epochs=1, plan=_plan(model, 5, 20),
                 loss="sparse_categorical_crossentropy", on_step_end=reapply_mask,
                 progress=lambda done, total, loss: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]
    assert result["accumulation_steps"] == 4 and result["batch_size"] == 5
    assert np.all(model.layers[-1].kernel.numpy()[::2] == 0.0)


def test_fit_rejects_bad_input() -> None:
    model = small_cnn()
    x, y = _data(10)
    plan = plan_batch(model, memory_bytes=1 << 30, target_batch=4)
    with pytest.raises(UsageError, match="same number of samples"):
        fit(model, x, y[:5], epochs=1, plan=plan, loss="mse")
    with pytest.raises(UsageError, match="not compiled"):
        fit(model, x, y, epochs=1, plan=plan)


# -- calibrated plan vs a real training run (child processes) ------------------------------
# The static estimate against a measured peak is machine-dependent (oneDNN, threads, the
# allocator): that comparison is benchmarks/bench_train_memory.py. Here both sides are
# measured on this machine, under the same environment, so the tests hold on any backend.

def _run_fit(path, plan: BatchPlan, samples: int) -> dict:
    request = json.dumps({"model": str(path), "batch_size": plan.batch_size,
                          "accumulation_steps": plan.accumulation_steps,
                          "effective_batch": plan.effective_batch, "samples": samples,
                          "epochs": 1})
    done = subprocess.run([sys.executable, "-m", "tests.train_child", request],
                          capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_backend_is_the_environments(backend) -> None:
    forced = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if forced in ("0", "1"):
        assert backend.onednn is (forced == "1")
    threads = os.environ.get("TF_NUM_INTRAOP_THREADS")
    assert backend.intra_op_threads == (int(threads) if threads else cores())
    if shutil.which("nvidia-smi") is None:
        assert backend.device == "CPU"
    assert f"{backend.intra_op_threads} thread" in backend.describe()


@pytest.mark.slow
def test_calibrated_plan_holds_when_fit_runs_it(tmp_path, measure_once) -> None:
    model = residual_block()
    path = tmp_path / "m.keras"
    model.save(path)
    target = 64
    # A limit that makes the plan accumulate on any backend: a quarter of the way from the
    # process's peak at the target batch down to its peak at batch 1, on the line through
    # two measured batches; the target's planned peak (the line plus at least MIN_MARGIN)
    # is above it. They are the batches the calibration measures first when the static plan
    # takes the target (on a CPU TensorFlow's runtime alone is above the static peak), so
    # that child runs once and the calibration's line is this one.
    first = measure_once(path, [[b] for b in calibration_batches(target, target)])
    fixed, slope = fit_line([(s.batch_size, s.peak_bytes) for s in first.steps], 0)
    one, full = fixed + slope, fixed + slope * target
    limit = full - (full - one) // 4 + MIN_MARGIN
    plan = plan_batch(model, memory_bytes=limit, target_batch=target, calibrate_with=path)
    cal = plan.calibration
    assert plan.basis == "calibrated" and cal is not None
    if plan_batch(model, memory_bytes=limit, target_batch=target).batch_size == target:
        assert cal.points[:len(first.steps)] == first.steps  # measured once, not twice
    assert 1 <= plan.batch_size < target and plan.accumulation_steps > 1
    assert plan.planned_peak_bytes <= limit
    assert (cal.verified.batch_size, cal.verified.accumulation_steps) == \
        (plan.batch_size, plan.accumulation_steps)
    _assert_backend_is_the_environments(cal.backend)
    shown = plan.to_dict()
    assert shown["basis"] == "calibrated" and shown["backend"] == cal.backend.to_dict()
    assert shown["calibration"]["verified"]["batch_size"] == plan.batch_size
    assert shown["planned_peak_bytes"] > cal.verified.peak_bytes
    ran = _run_fit(path, plan, samples=2 * target + 10)  # 3 updates, the last one short
    assert ran["updates"] == 3 and ran["batch_size"] == plan.batch_size
    # The cap the plan promised: the training process's own peak, its data set aside.
    assert ran["peak_bytes"] - ran["data_bytes"] <= plan.planned_peak_bytes, \
        (ran, plan.planned_peak_bytes)


def test_calibration_fits_a_line_and_never_a_negative_slope() -> None:
    assert fit_line([(4, 1000), (16, 2200), (16, 2300)], 50) == (1000 - 4 * 108, 108)
    assert fit_line([(8, 500), (32, 400)], 7) == (500, 0)
    assert fit_line([(2, 300)], 7) == (286, 7)  # one point borrows the static slope
    assert calibration_batches(64, 256) == [8, 32]
    assert calibration_batches(300, 32) == [4, 16]
    assert calibration_batches(1, 1) == [1]


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no GPU on this machine")
def test_gpu_plan_is_against_device_memory(tmp_path) -> None:
    model = conv_bn_block()
    path = tmp_path / "m.keras"
    model.save(path)
    plan = plan_batch(model, target_batch=32, calibrate_with=path)
    assert plan.calibration.backend.device.startswith("GPU")
    assert "nvidia-smi" in plan.memory_source
    assert plan.planned_peak_bytes <= plan.memory_limit_bytes


@pytest.mark.parametrize(("layer", "expected"), [
    (L.Dense(4, activation="relu"), dict(saves_inputs=True, saves_output=True)),
    (L.Dense(4, activation="gelu"), dict(saves_inputs=True, saves_output=False,
                                         extra_saved=2.0)),
    (L.Conv2D(4, 3), dict(saves_inputs=True, saves_output=False, im2col=True)),
    (L.ReLU(6.0), dict(saves_inputs=False, saves_output=True, inplace_grad=True)),
    (L.ReLU(negative_slope=0.1), dict(saves_inputs=True, saves_output=True)),
    (L.MaxPooling2D(), dict(saves_inputs=True, saves_output=True)),
    (L.GlobalAveragePooling2D(), dict(saves_inputs=False, saves_output=False)),
    (L.Flatten(), dict(alias=True)),
], ids=["dense-relu", "dense-gelu", "conv", "relu6", "leaky-relu-layer", "maxpool", "gap",
        "flatten"])
def test_rules_follow_what_tf_gradients_read(layer, expected) -> None:
    from devicefit.sdk.train.rules import rule_for

    rule = rule_for(layer, type(layer).__name__)
    assert {k: getattr(rule, k) for k in expected} == expected
