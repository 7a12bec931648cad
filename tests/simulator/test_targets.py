"""Targets as plug-ins (:mod:`simulator.target`): the built-in targets are
discovered, every shipped profile resolves to one, and a new target is one package — here a
dummy NPU that the tests write into a folder with the metadata of an installed distribution
naming it in the ``devicefit.targets`` entry-point group, with no line added anywhere else
— that the profile schema, ``simulate`` with every view, ``check``, ``--run`` and
``optimize`` all follow."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator import profiles
from devicefit.simulator import target as target_module
from devicefit.simulator.errors import ProfileError
from devicefit.simulator.plan.compat import CHECKERS
from devicefit.simulator.profiles import ProfileStore, load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.report import TargetSection
from devicefit.simulator.run.runtimes import RUNNERS, runner_name
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import (
    TARGETS,
    Lazy,
    LazyClass,
    Target,
    read_report,
    section_type,
    target_for,
)
from devicefit.simulator.targets import edgetpu, litert, tflm
from tests.dummy_target import (
    CLOCK_HZ,
    CYCLES_PER_MAC,
    DUMMY_PROFILE,
    distribution,
    installed,
    write_dummy,
)
from tests.paths import ROOT
from tests.zoo import model_path


@pytest.fixture
def dummy(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The dummy target installed (its runner: ``litert``, or the fixture's parameter),
    and the path of a profile for it."""
    site = tmp_path / "site"
    write_dummy(site, getattr(request, "param", "litert"))
    path = tmp_path / "dummy-board.yaml"
    path.write_text(DUMMY_PROFILE)
    with installed(site):
        yield path


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


def _annotation(value: object) -> str:
    """An annotation as written (``from __future__ import annotations`` keeps them text)."""
    text = value if isinstance(value, str) else getattr(value, "__name__", str(value))
    return "".join(text.split())


def _mismatches(plugin: Callable[..., object], protocol: type, where: str) -> list[str]:
    """How ``plugin``'s signature differs from ``protocol``'s ``__call__``: it must take the
    protocol's arguments by position (what else it takes has a default), and where it
    annotates a parameter, with the protocol's type. (Its result may be narrower than the
    protocol's, e.g. its own section class: a type checker's question, not one text
    answers.)"""
    params = list(inspect.signature(protocol.__call__).parameters.values())[1:]  # no self
    have = inspect.signature(plugin)
    try:
        have.bind(*(p.name for p in params))
    except TypeError as exc:
        return [f"{where}: {plugin} takes {have}; {protocol.__name__} passes "
                f"({', '.join(p.name for p in params)}): {exc}"]
    return [f"{where}: {mine.name} is {_annotation(mine.annotation)}, {protocol.__name__} "
            f"passes {_annotation(theirs.annotation)}"
            for mine, theirs in zip(have.parameters.values(), params)
            if mine.annotation is not inspect.Parameter.empty
            and _annotation(mine.annotation) not in (_annotation(theirs.annotation), "Any")]


def _section_mismatches(cls: type, where: str) -> list[str]:
    """A section class against :class:`~simulator.report.report.TargetSection`, method by method."""
    methods = [n for n, v in vars(TargetSection).items()
               if callable(v) and not n.startswith("_")]
    return [m for name in methods for m in (
        _mismatches(getattr(cls, name).__get__(object.__new__(cls)),
                    type(name, (), {"__call__": vars(TargetSection)[name]}), f"{where}.{name}")
        if hasattr(cls, name) else [f"{where}: no {name}()"])]


def _binding_mismatches() -> list[str]:
    """Every plug-in every registered target binds, against the protocol its record's
    field is typed with (``planner: Planner``): bound lazily, it must also be bound as that
    kind (``lazy(Planner, ...)``)."""
    found = []
    for target in TARGETS.values():
        for f in dataclasses.fields(Target):
            protocol = getattr(target_module, str(f.type).split(" | ")[0], None)
            value = getattr(target, f.name)
            if value is None or not getattr(protocol, "_is_protocol", False):
                continue
            where = f"{target.name}.{f.name}"
            if isinstance(value, Lazy):
                if value.kind is not protocol:
                    found.append(f"{where}: bound as {value.kind.__name__}, typed "
                                 f"{protocol.__name__}")
                if isinstance(value, LazyClass):
                    found += _section_mismatches(value.resolve(), where)
                    continue
                value = value.resolve()
            found += _mismatches(value, protocol, where)
    return found


def test_every_binding_has_its_protocols_signature(dummy):
    """The plug-ins of the built-in targets and of a third party's (the dummy NPU), each
    against the protocol of :mod:`simulator.target` that types its field: what a type
    checker cannot see through a ``lazy(Planner, "module:attr")`` string."""
    assert "dummy" in TARGETS
    assert _binding_mismatches() == []


def test_a_binding_of_the_wrong_kind_is_found(monkeypatch):
    """The check itself: a planner bound as an op table, and one taking too few arguments."""
    from devicefit.simulator.target import OpTable, Planner, lazy

    tflm_record = TARGETS["tflm"]
    wrong = dataclasses.replace(tflm_record, planner=lazy(
        OpTable, "devicefit.simulator.targets.tflm.planner:plan_tflm"))
    short = dataclasses.replace(tflm_record, planner=lazy(
        Planner, "devicefit.simulator.targets.tflm.ops:check"))
    for record, error in ((wrong, "tflm.planner: bound as OpTable, typed Planner"),
                          (short, "tflm.planner: <function check")):
        monkeypatch.setattr(TARGETS, "_targets", {"tflm": record})
        assert any(m.startswith(error) for m in _binding_mismatches()), error


@pytest.mark.parametrize(("entry_point", "error"), [
    ("tflm = devicefit.simulator.targets.tflm:TARGET", "target 'tflm' is registered twice"),
    ("npu = devicefit.simulator.targets.tflm:TARGET", "names target 'tflm': name the entry"),
    ("npu = devicefit.simulator.targets.tflm", "names a module, not a Target record"),
])
def test_an_entry_point_names_one_new_target(tmp_path, entry_point, error):
    """A distribution that names a built-in target again, a record under another name or
    something else than a record is refused, and the registry stays as it was."""
    before = dict(TARGETS)
    distribution(tmp_path, "bad_npu", entry_point)
    with pytest.raises(ValueError, match=error), installed(tmp_path):
        pass
    assert dict(TARGETS) == before


def test_the_profile_schema_follows_the_registry(dummy):
    import dummy_npu  # the package the entry point names, on the path now

    profile = load_profile(dummy)
    assert target_for(profile) is dummy_npu.TARGET is TARGETS["dummy"]
    assert profile.target_settings == {"macs_per_cycle": 64}
    # read when asked: the schema's values are the registered targets' at that moment
    assert "dummy" in profiles.RUNTIMES and "dummy-nn" in profiles.KERNELS
    assert "dummy" in CHECKERS and "dummy" not in RUNNERS
    sys.path.remove(str(dummy.parent / "site"))
    try:
        TARGETS.reload()
        assert "dummy" not in TARGETS
        with pytest.raises(ProfileError, match=r"bad value for 'device.class': 'dummy-board'"):
            load_profile(dummy)
    finally:
        sys.path.insert(0, str(dummy.parent / "site"))
        TARGETS.reload()


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


def _simulate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["simulate", *args])
    return code, capsys.readouterr().out


def test_every_view_shows_the_dummy_targets_section(dummy, capsys):
    """The CLI in this process, the target installed as a package: its section in the
    text, JSON (read back as its own class), HTML, JUnit and Markdown views."""
    chain = model_path("chain_int8")
    ops = len(read_model(chain).main.operators)
    args = (str(chain), "--profile", str(dummy), "--format")
    code, text = _simulate(capsys, *args, "text")
    assert code == 0
    assert f"Dummy NPU: {ops} ops on the NPU, 0 it cannot run" in text
    assert "64 MACs per cycle" in text
    assert f"every operator runs on the dummy NPU ({ops})" in text
    data = json.loads(_simulate(capsys, *args, "json")[1])
    assert data["profile"]["runtime"] == "dummy"
    assert data["compatibility"]["dummy"] == {"npu_ops": ops, "other_ops": 0,
                                              "macs_per_cycle": 64}
    section = read_report(data).compatibility.section
    assert type(section).__name__ == "DummySection" and section.npu_ops == ops
    page = _simulate(capsys, *args, "html")[1]
    assert (f'<section class="dummy-npu"><h3>Dummy NPU</h3><ul><li>Dummy NPU: {ops} ops on '
            f"the NPU, 0 it cannot run</li><li>64 MACs per cycle</li></ul></section>") in page
    junit = ElementTree.fromstring(_simulate(capsys, *args, "junit")[1])
    assert list(junit.iter("testcase")) and not list(junit.iter("failure"))
    assert "dummy-board" in ElementTree.tostring(junit, encoding="unicode")
    assert "dummy-board" in _simulate(capsys, *args, "markdown")[1]


def test_run_and_check_on_the_dummy_target(dummy, tmp_path, capsys):
    """``--run`` runs the model in the runtime the record names (LiteRT, as the Edge TPU
    runs its CPU reference); ``check`` judges a project on the dummy's profile."""
    chain = tmp_path / "chain_int8.tflite"
    shutil.copy(model_path("chain_int8"), chain)
    shutil.copy(model_path("leaky_mid_int8"), tmp_path / "leaky_mid_int8.tflite")
    code, out = _simulate(capsys, str(chain), "--profile", str(dummy), "--run", "--runs", "1",
                          "--json")
    assert code == 0
    assert json.loads(out)["measured"]["runtime"] == "litert"
    project = tmp_path / "devicefit.yaml"
    project.write_text("models:\n"
                       f"  - {{path: chain_int8.tflite, profiles: [{dummy.name}]}}\n"
                       f"  - {{path: leaky_mid_int8.tflite, profiles: [{dummy.name}]}}\n")
    assert main(["check", str(project)]) == 1
    text = capsys.readouterr().out
    assert "1 passed, 1 failed" in text and "LEAKY_RELU" in text


@pytest.mark.parametrize("dummy", [None], indirect=True)
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


def _modules_after(code: str) -> set[str]:
    """The modules a child Python (an empty module table) has after running ``code``."""
    probe = f"{code}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_reading_the_registry_imports_no_planner_runtime_or_numpy():
    """Validating a profile reads every target's record; the records bind their planners,
    op tables and runners lazily, so that costs no heavy import."""
    code = ("from devicefit.simulator.profiles import ProfileStore\n"
            "store = ProfileStore(); [store.load(n) for n in store.names()]\n"
            "from devicefit.simulator.target import TARGETS; assert len(TARGETS) >= 3")
    assert not _modules_after(code) & {
        "numpy", "devicefit.simulator.plan.planners", "devicefit.simulator.targets.tflm.ops",
        "devicefit.simulator.run.runtimes", "tflite_micro", "ai_edge_litert"}


#: Every module of devicefit that reading the registry imports: the registry, the errors it
#: raises, the look for entry points, the built-in records and what they declare (their
#: profile keys are schema leaves: the Edge TPU's in its cost.py, the Ethos-U's in its
#: config.py, the phone GPU's in its settings.py).
REGISTRY_IMPORTS = {
    "devicefit", "devicefit.simulator", "devicefit.simulator.errors",
    "devicefit.simulator.infra", "devicefit.simulator.infra.distributions",
    "devicefit.simulator.infra.schema",
    "devicefit.simulator.infra.units",
    "devicefit.simulator.target", "devicefit.simulator.targets",
    "devicefit.simulator.targets.edgetpu", "devicefit.simulator.targets.edgetpu.cost",
    "devicefit.simulator.targets.ethos_u", "devicefit.simulator.targets.ethos_u.config",
    "devicefit.simulator.targets.gpu", "devicefit.simulator.targets.gpu.settings",
    "devicefit.simulator.targets.litert", "devicefit.simulator.targets.tflm",
    "devicefit.simulator.targets.tflm.settings"}


def test_the_registry_alone_imports_its_records_and_what_they_declare():
    """Not the profiles that read it, the types, the report, the model or the op checks:
    exactly :data:`REGISTRY_IMPORTS`, so a record that starts importing more shows here."""
    code = "from devicefit.simulator.target import TARGETS; assert len(TARGETS) >= 4"
    loaded = _modules_after(code)
    assert {m for m in loaded if m.split(".")[0] == "devicefit"} == REGISTRY_IMPORTS
    assert "numpy" not in loaded


def test_reading_the_registry_leaves_importlib_metadata_alone():
    """importlib.metadata (~0.03 CPU-s, a tenth of a static ``simulate``) is imported only
    where a distribution may declare a target (``tests/simulator/infra/test_distributions.py``);
    none here does."""
    assert "importlib.metadata" not in _modules_after(
        "from devicefit.simulator.target import TARGETS; assert len(TARGETS) >= 4")


def test_the_edgetpu_section_sums_itself_up_for_convert():
    """``convert`` prints ``summary_lines()`` of what the target's hook returned (no test of
    the section's class): the Edge TPU partition in one line, naming the first CPU op."""
    from devicefit.simulator.targets.edgetpu.partition import edgetpu_report

    profile = load_profile("coral-edgetpu")
    mapped = edgetpu_report(read_model(model_path("chain_int8")), profile, use_compiler=False)
    assert mapped.summary_lines() == [
        f"Edge TPU: {mapped.total_ops}/{mapped.total_ops} ops mapped"]
    leaky = edgetpu_report(read_model(model_path("leaky_mid_int8")), profile,
                           use_compiler=False)
    (line,) = leaky.summary_lines()
    assert leaky.first_unmapped is not None and leaky.mapped_ops < leaky.total_ops
    assert line.startswith(f"Edge TPU: {leaky.mapped_ops}/{leaky.total_ops} ops mapped; "
                           f"first on CPU: op {leaky.first_unmapped.index} ")
