"""The phone GPU's latency estimate and GPU memory budget: the cost model's sum on zoo models
under constants set by hand (recomputed here from the tensors), fallbacks' crossings and
their XNNPACK time, the budgets judged (AT RISK with the band), the profiles validated.
The fit to published figures is ``benchmarks/bench_gpu_latency.py``'s (docs/benchmarks.md,
"Phone GPU latency"); here its solver on figures made with known constants, and the published
data: every figure's model one the benchmark builds, with its source."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from devicefit.simulator.estimate.compute import op_work
from devicefit.simulator.estimate.latency import estimate_latency
from devicefit.simulator.judge.verdict import judge
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.report import OpCompute
from devicefit.simulator.simulate import simulate
from devicefit.simulator.targets.gpu.latency import load_published
from devicefit.simulator.targets.gpu.partition import section
from devicefit.simulator.types import Basis, BudgetName, Status
from tests.paths import ROOT

ADRENO = ROOT / "device_profiles" / "android-gpu-adreno.yaml"
#: Round constants, so the expected sums are plain arithmetic.
CONSTANTS = """gpu:
  sync: 1ms
  op_dispatch: 100us
  macs_per_second: 1.0e+9
  memory_bandwidth: 1000MB/s
  transfer_bandwidth: 500MB/s
"""


def _profile(tmp_path: Path, body: str, name: str = "p"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"extends: {ADRENO}\nname: {name}\n{body}")
    return load_profile(path)


def test_the_estimate_is_the_cost_model_summed_over_the_partition(model_zoo, tmp_path):
    model = read_model(model_zoo("chain_float32"))
    sg = model.main
    work = {w.op_index: w for w in op_work(model)}
    for precision, element in (("fp16", 2), ("fp32", 4)):
        profile = _profile(tmp_path, CONSTANTS + f"  precision: {precision}\n", precision)
        report = section(model, profile)
        lat = report.latency
        assert lat is not None and report.cpu_ops == 0 and len(report.partitions) == 1
        gpu = 0.0
        for op in sg.operators:
            elements = sum(sg.tensors[t].num_elements
                           for t in {t for t in (*op.inputs, *op.outputs) if t >= 0})
            gpu += 0.1 + 1e3 * work[op.index].macs / 1e9 + 1e3 * elements * element / 1e9
        assert lat.gpu_ms == pytest.approx(gpu, rel=1e-9)
        # One partition: the input crosses in, the output back: two syncs and the copy.
        (part,) = report.partitions
        assert lat.crossings == 2
        assert lat.transfer_ms == pytest.approx(
            2 * 1.0 + 1e3 * (part.in_bytes + part.out_bytes) / 5e8, rel=1e-9)
        assert (lat.cpu_ms, lat.total_ms) == (0.0, pytest.approx(gpu + lat.transfer_ms))
        assert sum(r.estimated_ms for r in lat.per_op) == pytest.approx(lat.gpu_ms)
        # The constants are fp16 runs': an fp32 estimate says it is likely low.
        assert ("likely low" in lat.band_basis) == (precision == "fp32")


def test_fallbacks_add_crossings_and_their_xnnpack_time(model_zoo, tmp_path):
    model = read_model(model_zoo("unet_int8"))
    one = _profile(tmp_path, CONSTANTS, "one")
    kept = section(model, one)
    cpu_ops = [o.index for o in kept.ops if o.device == "cpu"]
    assert cpu_ops and kept.latency is not None
    # The CPU ops cost what XNNPACK's tables give them on the profile's CPU, alone.
    work = [OpCompute(w.op_index, w.op, w.macs, w.bytes_moved)
            for w in op_work(model) if w.op_index in cpu_ops]
    assert kept.latency.cpu_ms == pytest.approx(estimate_latency(model, work, one).total_ms)
    assert {r.device for r in kept.latency.per_op if r.op_index in cpu_ops} == {"cpu"}
    # All three supported subsets on the GPU: six crossings, each with its sync.
    three = _profile(tmp_path, CONSTANTS + "  max_partitions: 8\n", "three")
    wide = section(model, three)
    assert wide.latency is not None and len(wide.partitions) == 3
    assert wide.latency.crossings == 6
    assert wide.latency.transfer_ms == pytest.approx(
        6 * 1.0 + 1e3 * wide.boundary_bytes / 5e8, rel=1e-9)


def test_budgets_are_judged_on_the_gpu_figures_with_the_band(model_zoo, tmp_path):
    path = model_zoo("chain_float32")
    report = simulate(path, str(ADRENO))
    gpu = report.compatibility.section
    est = report.latency.estimated_device_ms
    assert est == pytest.approx(gpu.latency.total_ms)
    low, high = report.latency.band_ms
    # Below the estimate: fail; above it but under the band's top: AT RISK; above: pass.
    for latency, status in ((est * 0.99, Status.FAIL), ((est + high) / 2, Status.AT_RISK),
                            (high * 1.01, Status.PASS)):
        profile = _profile(tmp_path, f"budgets:\n  latency: {latency}ms\n  gpu_memory: "
                           f"{gpu.gpu_memory_bytes}\n", "lat")
        judged = judge(dataclasses.replace(report, budgets=[], unchecked_budgets={}),
                       profile)
        checks = {b.name: b for b in judged.budgets}
        assert checks[BudgetName.LATENCY].status == status
        memory = checks[BudgetName.GPU_MEMORY]
        assert (memory.value, memory.ok, memory.basis) == (gpu.gpu_memory_bytes, True,
                                                           Basis.ESTIMATED)
    tight = _profile(tmp_path, f"budgets:\n  gpu_memory: {gpu.gpu_memory_bytes - 1}\n", "t")
    judged = judge(dataclasses.replace(report, budgets=[], unchecked_budgets={}), tight)
    assert judged.verdict == Status.FAIL
    assert [b.name for b in judged.budgets if not b.ok] == [BudgetName.GPU_MEMORY]


def test_the_mali_profile_checks_gpu_memory_and_says_why_latency_is_not(model_zoo):
    mali = load_profile("android-gpu-mali")
    assert (mali.runtime.name, mali.device.kind, mali.target_settings.precision) == (
        "gpu", "mobile-gpu", "fp16")
    report = simulate(model_zoo("chain_float32"), "android-gpu-mali")
    assert report.latency.estimated_device_ms is None
    assert "sets no fitted GPU constants" in report.latency.no_estimate
    assert BudgetName.LATENCY in report.unchecked_budgets
    assert [b.name for b in report.budgets if b.name == BudgetName.GPU_MEMORY] == [
        BudgetName.GPU_MEMORY]
    assert report.verdict == Status.PASS


def test_the_published_figures_cover_three_phones_and_the_benchmarks_models():
    from benchmarks.bench_gpu_latency import (
        BUILDERS,
        MIN_FIGURES,
        MIN_OWN_SPEED_FIGURES,
        classes,
        fitted,
    )

    phones = load_published()
    fitted_classes = {name: figures for name, figures in classes(phones).items()
                      if len(fitted(figures)) >= MIN_FIGURES}
    assert sum(len(f) for f in fitted_classes.values()) >= 10
    assert len({f.phone.phone for figures in fitted_classes.values() for f in figures}) >= 3
    # The bar holds on Android phones alone (the iPhone is Metal's, no profile's).
    android = {f.phone.phone for figures in fitted_classes.values() for f in figures
               if f.phone.os.startswith("Android")}
    assert len(android) >= 3
    # A phone with a speed factor of its own has a figure to set it besides the one left
    # out, and no built-in profile is fitted to it.
    for p in phones:
        if p.own_speed:
            assert len(p.ms) >= MIN_OWN_SPEED_FIGURES and p.profile is None
    # Every figure's model is one the benchmark builds, and says which table it comes from.
    assert {m for p in phones for m in p.ms} <= {*BUILDERS, "mobilenet_v1"}
    assert all(p.sources.keys() == p.ms.keys() and all(p.sources.values()) for p in phones)
    # A built-in profile is fitted to an Android class with enough figures; a class too thin
    # to fit (Mali) leaves its profile without constants.
    for p in phones:
        if p.profile is not None:
            assert p.os.startswith("Android") and p.gpu_class in fitted_classes
            assert load_profile(p.profile).target_settings.cost.macs_per_second is not None
    assert "mali" in classes(phones) and "mali" not in fitted_classes
    assert load_profile("android-gpu-mali").target_settings.cost.macs_per_second is None


def test_the_fit_recovers_the_constants_the_figures_were_made_with():
    from benchmarks.bench_gpu_latency import PROFILE, fit
    from devicefit.simulator.targets.gpu.latency import GpuCost, GpuFeatures, predict_ms

    # Figures made with known constants (the boundary copy at the profile's rate, as the fit
    # takes it): non-negative least squares on them gives those constants back.
    transfer = load_profile(PROFILE).target_settings.cost.transfer_bytes_per_second
    truth = GpuCost(sync_ms=1.5, op_ms=0.02, macs_per_second=2e11,
                    memory_bytes_per_second=3e10, transfer_bytes_per_second=transfer)
    rows = [GpuFeatures(gpu_ops=ops, gpu_macs=macs, gpu_bytes=moved, crossings=2,
                        boundary_bytes=600_000, cpu_ms=cpu)
            for ops, macs, moved, cpu in ((31, 5.7e8, 2.9e7, 0.0), (335, 1.3e10, 3.4e8, 0.0),
                                          (61, 3.9e8, 9.8e7, 0.4), (189, 1.2e10, 2.3e8, 0.0),
                                          (117, 2.6e9, 1.5e8, 1.1))]
    got = fit([(f, predict_ms(f, truth)) for f in rows])
    assert got.sync_ms == pytest.approx(truth.sync_ms, rel=1e-6)
    assert got.op_ms == pytest.approx(truth.op_ms, rel=1e-6)
    assert got.macs_per_second == pytest.approx(truth.macs_per_second, rel=1e-6)
    assert got.memory_bytes_per_second == pytest.approx(truth.memory_bytes_per_second, rel=1e-6)


def test_a_speed_factor_never_uses_the_figure_it_predicts():
    from benchmarks.bench_gpu_latency import own_speed_estimates, speed_factor

    base = [10.0, 20.0, 40.0]
    # A phone exactly 2.5x the class's estimate on every model is predicted exactly.
    assert own_speed_estimates([25.0, 50.0, 100.0], base) == pytest.approx([25.0, 50.0, 100.0])
    assert speed_factor([25.0, 50.0, 100.0], base) == pytest.approx(2.5)
    # The first figure's estimate rests on the others only: changing it changes nothing.
    first = own_speed_estimates([25.0, 50.0, 100.0], base)[0]
    assert own_speed_estimates([999.0, 50.0, 100.0], base)[0] == pytest.approx(first)
    # Two figures: each predicted from the other's factor (geometric, not arithmetic).
    assert own_speed_estimates([20.0, 80.0], [10.0, 20.0]) == pytest.approx([40.0, 40.0])
