"""The measuring stage (:mod:`simulator.run.measure`): one read of the model, op support from the
static half, a new report, and what is a target's own reached through its record."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from devicefit.simulator.errors import InputError
from devicefit.simulator.plan import compat
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read import reader
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.run.measure import measure
from devicefit.simulator.simulate import simulate, static_report
from devicefit.simulator.target import target_for
from devicefit.simulator.types import BuildRequest, MeasureOptions
from tests.dummy_target import DUMMY_PROFILE, installed, write_dummy
from tests.zoo import model_path

PROFILE = "stm32l4r5-cortex-m4"


class _CountingCheckers(Mapping):
    """The op tables by name, counting each one asked (a wrapper around the real ones)."""

    def __init__(self, real: Mapping, counts: Counter) -> None:
        self._real, self._counts = real, counts

    def __getitem__(self, table):
        checker = self._real[table]

        def counted(*args):
            self._counts[table] += 1
            return checker(*args)
        return counted

    def __iter__(self):
        return iter(self._real)

    def __len__(self) -> int:
        return len(self._real)


def test_a_run_reads_the_model_once_and_takes_op_support_from_the_static_half(monkeypatch):
    parsed: list[str] = []
    real_parse = reader.parse_model

    def parse(data: bytes, path: str = "<bytes>"):
        parsed.append(path)
        return real_parse(data, path)

    tables: Counter = Counter()
    monkeypatch.setattr(reader, "parse_model", parse)
    monkeypatch.setattr(compat, "CHECKERS", _CountingCheckers(compat.CHECKERS, tables))
    report = simulate(model_path("chain_int8"), PROFILE, run=MeasureOptions(runs=1))
    assert report.measured.failure is None and report.measured.outputs_agree is True
    # One read in this process: the runs load the same file in their children (before
    # measure.py each run read it again here, and each child parsed it for its inputs).
    assert parsed == [str(model_path("chain_int8"))]
    # The profile's table once (the static half); LiteRT's once, for the cross-check.
    assert tables == {"tflm": 1, "litert": 1}


def test_measure_gives_a_new_report_and_leaves_the_static_one_as_it_was():
    path = model_path("chain_int8")
    profile = load_profile(PROFILE)
    model = read_model(path)
    static = static_report(model, profile)
    before = static.to_dict()
    measured = measure(model, profile, target_for(profile), static, MeasureOptions(runs=1),
                       file=model)
    assert static.to_dict() == before and static.measured is None
    assert measured.measured is not None and measured.latency.host_ms.runs == 1
    assert measured.notes[:len(static.notes)] == static.notes
    with pytest.raises(dataclasses.FrozenInstanceError):
        measured.notes = []  # type: ignore[misc]


#: What the dummy NPU of test_targets adds to its record: a device build (its CPU reference
#: runs in LiteRT).
DEVICE_BUILD = """

import dataclasses
from pathlib import Path


def _device_build(request, profile):
    def on_device(measured, model, profile, setup, host, memory):
        return measured, [f"dummy build {Path(request.checkout).name}, beside "
                          f"{host.runtime}'s run"]
    return on_device


TARGET = dataclasses.replace(TARGET, device_build=_device_build)
"""


@pytest.fixture
def dummy(tmp_path: Path) -> Iterator[Path]:
    site = tmp_path / "site"
    write_dummy(site, "litert")
    with (site / "dummy_npu" / "__init__.py").open("a") as record:
        record.write(DEVICE_BUILD)
    path = tmp_path / "dummy-board.yaml"
    path.write_text(DUMMY_PROFILE)
    with installed(site):
        yield path


def test_a_target_s_own_measurements_are_its_record_s_hooks(dummy, tmp_path):
    report = simulate(model_path("chain_int8"), load_profile(dummy), run=MeasureOptions(
        runs=1, target_build=BuildRequest(str(tmp_path / "sdk"))))
    assert report.measured.runtime == "litert" and report.measured.failure is None
    assert "dummy build sdk, beside litert's run" in report.notes
    # The arena is read by the runner's target (TFLM), which did not run here.
    assert report.measured.arena_head_bytes is None
    # The cross-check is TFLM's, on any profile whose integer model TFLM can run.
    assert report.measured.cross_check.runtimes == ("tflm", "litert (reference kernels)")
    assert report.measured.outputs_agree is True


def test_target_build_on_a_target_without_a_device_build_is_one_clear_error(tmp_path):
    """The TFLM record's hook is the only device build here."""
    with pytest.raises(InputError, match="--target-build builds TensorFlow Lite Micro; "
                                         "profile 'android-arm64-cpu' runs 'litert'"):
        simulate(model_path("chain_int8"), "android-arm64-cpu", run=MeasureOptions(
            runs=1, target_build=BuildRequest(str(tmp_path))))
