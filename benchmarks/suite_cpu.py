"""A pytest plugin: the machine's CPU time spent during each test, children and fork-server
children included (the per-process clocks miss a zygote's forks, which are not the test
process's children). Read from /proc/stat's busy time around each test, so it is exact only
in a serial run on an otherwise quiet machine (no ``-n``):

    PYTHONPATH=benchmarks .venv/bin/pytest -q -p suite_cpu [--suite-cpu-top 30]
        [--suite-cpu-json out.jsonl]

At the end it prints the tests and the files that took the most CPU, with the run's total.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Spent:
    test: str
    cpu_s: float
    wall_s: float


def busy_seconds() -> float:
    """Seconds of CPU the whole machine spent outside idle and I/O wait since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


_SPENT: list[Spent] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("suite_cpu")
    group.addoption("--suite-cpu-top", type=int, default=30, help="tests and files to print")
    group.addoption("--suite-cpu-json", default=None, help="write one JSON line per test")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    busy, started = busy_seconds(), time.monotonic()
    yield
    _SPENT.append(Spent(item.nodeid, busy_seconds() - busy, time.monotonic() - started))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if not _SPENT:
        return
    top = config.getoption("--suite-cpu-top")
    out = config.getoption("--suite-cpu-json")
    if out:
        Path(out).write_text("".join(json.dumps(vars(s)) + "\n" for s in _SPENT))
    write = terminalreporter.write_line
    write(f"CPU of the tests: {sum(s.cpu_s for s in _SPENT):.0f} s "
          f"(wall {sum(s.wall_s for s in _SPENT):.0f} s), {len(_SPENT)} tests")
    for s in sorted(_SPENT, key=lambda s: -s.cpu_s)[:top]:
        write(f"{s.cpu_s:7.1f} s CPU {s.wall_s:7.1f} s wall  {s.test}")
    files: dict[str, float] = {}
    for s in _SPENT:
        name = s.test.split("::")[0]
        files[name] = files.get(name, 0.0) + s.cpu_s
    for name, cpu in sorted(files.items(), key=lambda kv: -kv[1])[:top]:
        write(f"{cpu:7.1f} s CPU  {name}")
