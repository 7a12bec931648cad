"""Shared test setup.

The terminal's settings are not the test's: pytest-xdist's workers start with
``COLUMNS=80`` while a plain ``pytest`` run has none, and a developer may export
``NO_COLOR``. Each test starts without them; the tests about width and colour set them.
"""

from __future__ import annotations

import pytest

TERMINAL_VARIABLES = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")


@pytest.fixture(autouse=True)
def _no_terminal_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TERMINAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
