"""Targets as plug-ins (:mod:`simulator.targets`): the built-in targets are discovered, every
shipped profile resolves to one, and a new target is one record — here a dummy NPU defined
in this file, registered for the test only, with no line added anywhere else — that the
profile schema, ``simulate``, ``check``, ``--run`` and ``optimize`` all follow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator import profiles
from devicefit.simulator.compat import CHECKERS, UnsupportedOp, section_type
from devicefit.simulator.errors import ProfileError
from devicefit.simulator.model import Model
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import ProfileStore, load_profile
from devicefit.simulator.reader import read_model
from devicefit.simulator.runtimes import RUNNERS, runner_name
from devicefit.simulator.schema import number
from devicefit.simulator.simulate import simulate
from devicefit.simulator.targets import (
    TARGETS,
    Target,
    edgetpu,
    litert,
    register,
    target_for,
    tflm,
    unregister,
)
from tests.paths import ROOT
from tests.zoo import model_path

#: The dummy NPU's whole op table: builtin op names it runs.
DUMMY_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "AVERAGE_POOL_2D",
                       "RESHAPE", "SOFTMAX"})


def _dummy_ops(model: Model, profile: Profile) -> list[UnsupportedOp]:
    return [UnsupportedOp(op.index, op.op_name, "not in the dummy NPU's op table", sg.index)
            for sg in model.subgraphs for op in sg.operators if op.op_name not in DUMMY_OPS]


DUMMY = Target(
    name="dummy", title="Dummy NPU", device_kinds=("dummy-board",), kernels=("dummy-nn",),
    delegates=(), planner=TARGETS["litert"].planner, check_ops=_dummy_ops, runner=None,
    host_runtime=None, quant_schemes=("int8",), int16_io=False,
    sparse_weights="the dummy NPU reads every weight", offline_plan=False, section=None,
    profile_keys={"npu": {"macs_per_cycle": number()}},
    settings=lambda values: dict(values["npu"]))

CLOCK_HZ = 100e6
CYCLES_PER_MAC = 2.0
DUMMY_PROFILE = f"""\
name: dummy-board
description: a board with the dummy NPU
device: {{class: dummy-board, clock: 100MHz, ram: 8MiB}}
runtime: {{name: dummy, kernels: dummy-nn}}
budgets: {{flash: 1MiB, arena: 1MiB, latency: 1s}}
cost_model:
  cycles_per_mac: {{default: {CYCLES_PER_MAC}}}
npu:
  macs_per_cycle: 64
"""


@pytest.fixture
def dummy(tmp_path: Path) -> Iterator[Path]:
    """The dummy target registered, and the path of a profile for it."""
    path = tmp_path / "dummy-board.yaml"
    path.write_text(DUMMY_PROFILE)
    register(DUMMY)
    try:
        yield path
    finally:
        unregister(DUMMY.name)


def test_builtin_targets_are_discovered_from_their_modules():
    for module in (tflm, litert, edgetpu):
        assert TARGETS[module.TARGET.name] is module.TARGET
    assert {"tflm", "litert", "edgetpu"} <= set(TARGETS)
    # the registries that used to list targets by name are views of this one
    assert set(CHECKERS) == set(TARGETS) == set(profiles.RUNTIMES)
    assert set(RUNNERS) == {n for n, t in TARGETS.items() if t.host_runtime is not None}
    # a section's class, to read reports back from JSON, is named without importing it
    from devicefit.simulator.targets.edgetpu.partition import EdgeTpuReport, edgetpu_report

    assert section_type("edgetpu") is EdgeTpuReport and section_type("tflm") is None
    assert isinstance(edgetpu_report(read_model(model_path("chain_int8")),
                                     load_profile("coral-edgetpu"), use_compiler=False),
                      section_type("edgetpu"))


def test_every_builtin_profile_resolves_to_a_registered_target():
    store = ProfileStore()
    names = store.names(include_abstract=True)
    assert len(names) >= 7
    for name in names:
        profile = store.load(name)
        target = target_for(profile)
        assert target is TARGETS[profile.runtime.name]
        assert profile.device.kind in target.device_kinds, name
        assert profile.runtime.kernels in target.kernels, name
        assert set(profile.quantization.schemes) <= set(target.quant_schemes), name
        if target.runner is not None:
            assert runner_name(target.name) in RUNNERS, name


def test_a_target_is_registered_once():
    with pytest.raises(ValueError, match="registered twice"):
        register(tflm.TARGET)


def test_the_profile_schema_follows_the_registry(dummy):
    profile = load_profile(dummy)
    assert target_for(profile) is DUMMY
    assert profile.target_settings == {"macs_per_cycle": 64}
    # read when asked: the schema's values are the registered targets' at that moment
    assert "dummy" in profiles.RUNTIMES and "dummy-nn" in profiles.KERNELS
    assert "dummy" in CHECKERS and "dummy" not in RUNNERS
    unregister(DUMMY.name)
    try:
        with pytest.raises(ProfileError, match=r"bad value for 'device.class': 'dummy-board'"):
            load_profile(dummy)
    finally:
        register(DUMMY)


def test_a_profile_is_checked_against_its_own_target(dummy, tmp_path):
    """Each file is checked against every target's values; the merged profile against its
    own target's: kernels, schemes and declared keys of another target are refused."""
    cases = {
        "runtime: {kernels: cmsis-nn}": "runtime.kernels 'cmsis-nn' is not for runtime 'dummy'",
        "quantization: {schemes: [float16]}": "quantization.schemes 'float16' is not for",
        "sparsity: {kinds: [none, n:m], n_m: '2:4'}": "the dummy NPU reads every weight",
        "cost_model: {param_cache: 8MiB}": "cost_model.param_cache is a setting of the edgetpu",
    }
    for i, (line, error) in enumerate(cases.items()):
        child = tmp_path / f"child{i}.yaml"
        child.write_text(f"extends: {dummy.name}\n{line}\n")
        with pytest.raises(ProfileError, match=error):
            load_profile(child)
    mcu = tmp_path / "mcu.yaml"
    mcu.write_text("extends: esp32-s3\nnpu: {macs_per_cycle: 8}\n")
    with pytest.raises(ProfileError, match="npu.macs_per_cycle is a setting of the dummy target"):
        load_profile(mcu)


def test_simulate_uses_the_targets_planner_op_table_and_the_cost_model(dummy):
    chain = model_path("chain_int8")
    report = simulate(chain, load_profile(dummy))
    data = report.to_dict()
    # planned by LiteRT's planner, which the dummy reuses: the same arena as a LiteRT profile
    assert data["memory"]["arena_bytes"] == \
        simulate(chain, "android-arm64-cpu").to_dict()["memory"]["arena_bytes"]
    assert data["compatibility"]["table"] == "dummy" and data["compatibility"]["supported"]
    macs = data["compute"]["macs"]
    assert macs > 0
    assert data["latency"]["estimated_device_ms"] == pytest.approx(
        macs * CYCLES_PER_MAC / CLOCK_HZ * 1e3)
    assert data["verdict"] == "pass"
    leaky = simulate(model_path("leaky_mid_int8"), load_profile(dummy)).to_dict()
    refused = {u["op"] for u in leaky["compatibility"]["unsupported_ops"]}
    assert refused == {"LEAKY_RELU", "MEAN"} and leaky["verdict"] == "fail"


def test_cli_simulate_and_check_on_the_dummy_target(dummy, tmp_path, capsys):
    chain = tmp_path / "chain_int8.tflite"
    shutil.copy(model_path("chain_int8"), chain)
    shutil.copy(model_path("leaky_mid_int8"), tmp_path / "leaky_mid_int8.tflite")
    assert main(["simulate", str(chain), "--profile", str(dummy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"]["runtime"] == "dummy"
    project = tmp_path / "devicefit.yaml"
    project.write_text("models:\n"
                       f"  - {{path: chain_int8.tflite, profiles: [{dummy.name}]}}\n"
                       f"  - {{path: leaky_mid_int8.tflite, profiles: [{dummy.name}]}}\n")
    assert main(["check", str(project)]) == 1
    text = capsys.readouterr().out
    assert "1 passed, 1 failed" in text and "LEAKY_RELU" in text


def test_capabilities_refuse_what_the_target_cannot_do(dummy, tmp_path, capsys):
    chain = model_path("chain_int8")
    # no runner: --run says so and exits 2
    assert main(["simulate", str(chain), "--profile", str(dummy), "--run"]) == 2
    assert "the dummy target (Dummy NPU) has no runner here" in capsys.readouterr().err
    # no offline plan: optimize refuses it and names the targets that take one
    out = tmp_path / "optimized.tflite"
    assert main(["optimize", str(chain), "--profile", str(dummy), "-o", str(out)]) == 2
    assert "'dummy' (Dummy NPU), which takes no offline plan: pick a tflm profile" in \
        capsys.readouterr().err
    assert not out.exists()


def _loaded_of(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a child Python (an empty module table) has after ``code``."""
    probe = f"{code}\nimport sys; print([m for m in {modules!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().replace("'", '"'))


def test_reading_the_registry_imports_no_planner_runtime_or_numpy():
    """Validating a profile reads every target's record; the records bind their planners,
    op tables and runners lazily, so that costs no heavy import."""
    code = ("from devicefit.simulator.profiles import ProfileStore\n"
            "store = ProfileStore(); [store.load(n) for n in store.names()]\n"
            "from devicefit.simulator.targets import TARGETS; assert len(TARGETS) >= 3")
    assert _loaded_of(code, ("numpy", "devicefit.simulator.planners",
                             "devicefit.simulator.targets.tflm.ops", "devicefit.simulator.runtimes",
                             "tflite_micro", "ai_edge_litert")) == []


def test_the_registry_alone_imports_no_profiles_report_or_op_tables():
    """The registry and its records import only what describes a target (schema leaves,
    units, errors): not the profiles that read it, the report, the model or the op checks
    (the Edge TPU's cost keys live in its own package, not in simulator.compat)."""
    code = "from devicefit.simulator.targets import TARGETS; assert len(TARGETS) >= 4"
    assert _loaded_of(code, ("devicefit.simulator.profiles", "devicefit.simulator.report",
                             "devicefit.simulator.model", "devicefit.simulator.compat",
                             "numpy")) == []
