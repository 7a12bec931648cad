"""The order the suite runs in under pytest-xdist (``tests/conftest.py``): the longest
modules of a recorded run first, from ``tests/durations.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tests.conftest import DURATIONS, _longest_first
from tests.paths import ROOT


def test_every_module_the_durations_name_exists():
    """A module renamed or removed since the figures were recorded: record them again
    (``pytest -n 2 --record-durations``)."""
    named = json.loads(DURATIONS.read_text())
    assert named and [m for m in named if not (ROOT / m).is_file()] == []


@dataclass(frozen=True)
class _Test:
    """What the order reads of a collected test."""

    nodeid: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return name if name == "slow" and self.slow else None


def test_longest_recorded_first_then_unrecorded_slow_ones_first_and_the_rest_last():
    recorded = json.loads(DURATIONS.read_text())
    longest, shortest = (max(recorded, key=recorded.get), min(recorded, key=recorded.get))
    items = [_Test(f"{shortest}::a"), _Test("tests/new_fast.py::b"),
             _Test(f"{longest}::c"), _Test(f"{longest}::d"),
             _Test("tests/new_slow.py::e", slow=True), _Test("tests/new_slow.py::f")]
    _longest_first(items)  # type: ignore[arg-type]
    assert [t.nodeid.split("::")[1] for t in items] == ["e", "f", "c", "d", "a", "b"]
