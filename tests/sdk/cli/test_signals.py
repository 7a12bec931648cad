"""A bounded sample of ``benchmarks/bench_signals.py``: signals at chosen moments to the
command and to its process group, for ``simulate --run`` and ``check --run --jobs 2``.

Each case must end with no traceback, no process of its session left, no partial output
and no changed input (the benchmark's checks, reused). The moments are fixed fractions of
a reference run's duration on this machine, so the sample covers start-up, the middle
and the end wherever it runs; the benchmark draws hundreds of them at random. ``check``
runs two of the benchmark's four models (each on a TFLM and a LiteRT profile): four targets
keep both ``--jobs 2`` workers busy, at half the cost of a run.
"""

from __future__ import annotations

import random
import signal
import statistics
import subprocess
import sys
import time

import pytest

from benchmarks import bench_signals as bench

#: (signal, to the group?, moment as a fraction of the reference run)
CASES = [(signal.SIGINT, False, 0.05), (signal.SIGTERM, True, 0.5),
         (signal.SIGHUP, True, 0.8), (signal.SIGTERM, False, 0.95)]


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    work = tmp_path_factory.mktemp("signals")
    found = {c.name: c for c in bench.commands(work, {"simulate", "check"}, ("ic", "ms"))}
    reference = {}
    for name, cmd in found.items():
        code, err, seconds, left = bench._run_once(cmd, work, None, 0.0, False)
        assert code in (0, 1) and not left, err
        reference[name] = ({o: bench._fingerprint(work / "out" / o) for o in cmd.outputs},
                           seconds)
    return work, found, reference, _interpreter_start()


def _interpreter_start() -> float:
    """Seconds until devicefit's first line has set its handlers (``python -c "import
    devicefit.__main__"``), median of 3: before that a signal meets Python's own start-up,
    which no code of a package can cover (docs/benchmarks.md, "A cancelled check --jobs;
    Ctrl-C at start-up")."""
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import devicefit.__main__"], check=True)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


class _Fixed(random.Random):
    """Hands ``trial`` the case's signal, target and moment instead of random ones."""

    def __init__(self, sig: int, group: bool, fraction: float) -> None:
        super().__init__(0)
        self.case = (sig, group, fraction)

    def choice(self, seq):  # the signal
        return self.case[0]

    def random(self):  # group when below 0.5
        return 0.0 if self.case[1] else 1.0

    def uniform(self, a, b):  # the moment
        return a + (b - a) * self.case[2] / 1.1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["simulate", "check"])
@pytest.mark.parametrize("sig,group,fraction", CASES,
                         ids=[f"{signal.Signals(s).name}-{'group' if g else 'process'}-{f}"
                              for s, g, f in CASES])
def test_a_signal_leaves_nothing_behind(commands, name, sig, group, fraction):
    work, found, reference, start = commands
    tally = bench.Tally()
    outputs, seconds = reference[name]
    # The start-up case lands just after the interpreter's own start (twice its measured
    # time: the machine's load varies between runs), not inside it.
    fraction = max(fraction, 2 * start / seconds)
    bench.trial(found[name], work, outputs, _Fixed(sig, group, fraction), seconds, tally)
    assert tally.trials == 1
    assert tally.defects == {}
