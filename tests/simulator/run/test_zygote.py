"""The fork server children start from (simulator/run/zygote.py): each child is still a process
of its own that runs its module as ``python -m`` does; crashes, kills and the parent's end
behave as with a plain child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from devicefit.simulator.run import zygote
from tests.paths import ROOT

PRELOAD = ("tests.zygote_preload",)
MODULE = "tests.zygote_child"


@pytest.fixture
def env(tmp_path):
    # Only this file's zygote: the worker's TensorFlow zygote serves the tests after these.
    zygote.stop_all(PRELOAD)
    (tmp_path / "tmp").mkdir()
    yield {**os.environ, "PYTHONPATH": str(ROOT), "ZT": "given", "TMPDIR": str(tmp_path / "tmp")}
    zygote.stop_all(PRELOAD)


def _start(env, arg, **kw):
    return zygote.popen(MODULE, [arg], preload=PRELOAD, env=env, stdout=subprocess.PIPE, **kw)


def _report(child) -> dict:
    return json.loads(child.stdout.readline())


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_until(what, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_forked_child_runs_its_module_like_python_m(env, tmp_path):
    err = tmp_path / "err.txt"
    with open(err, "wb") as f:
        child = _start(env, "exit:7", stderr=f)
        report = _report(child)
        assert child.wait(30) == 7
    assert isinstance(child, zygote.Child)  # served by the zygote, not started plainly
    assert report["argv"] == ["exit:7"]
    assert report["cwd"] == os.getcwd()
    assert report["env"] == "given"
    assert report["tmp"] == env["TMPDIR"]
    assert report["sid"] == report["pid"]  # a session of its own: killpg reaches it all
    assert err.read_text() == "to stderr\n"


def test_children_share_the_imports_not_the_state(env):
    first = _start(env, "mark")
    one = _report(first)
    assert first.wait(30) == 0
    second = _start(env, "exit:0")
    two = _report(second)
    second.wait(30)
    assert one["ppid"] == two["ppid"]  # the same zygote forked both
    assert one["loaded_at"] == two["loaded_at"]  # imported once, before either child
    assert two["mark"] == "initial"  # what the first child changed stayed in it
    assert one["pid"] != two["pid"]


def test_a_crash_is_the_exit_status_of_a_plain_child(env):
    child = _start(env, "segv")
    _report(child)
    assert child.wait(30) == -signal.SIGSEGV


def test_stdin_pipe_and_kill(env):
    child = _start(env, "echo", stdin=subprocess.PIPE)
    _report(child)
    child.stdin.write(b"hello\n")
    child.stdin.flush()
    assert child.stdout.readline() == b"hello\n"
    assert child.wait(30) == 0
    sleeper = _start(env, "sleep")
    pid = _report(sleeper)["pid"]
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(0.2)
    zygote.kill(sleeper)
    assert sleeper.returncode == -signal.SIGKILL
    assert _gone(pid)


def test_stopping_the_zygote_stops_what_it_runs(env):
    sleeper = _start(env, "sleep")
    report = _report(sleeper)
    zygote.stop_all(PRELOAD)
    assert sleeper.wait(30) == -signal.SIGKILL  # known killed, not waited for forever
    assert _wait_until(lambda: _gone(report["pid"]) and _gone(report["ppid"]))


def test_stopping_one_preloads_zygote_leaves_the_others_serving(env):
    other = ("json",)
    child = zygote.popen(MODULE, ["exit:0"], preload=other, env=env)
    assert child.wait(30) == 0
    serving = zygote._ZYGOTES[other][1]
    _report(_start(env, "sleep"))
    zygote.stop_all(PRELOAD)
    assert PRELOAD not in zygote._ZYGOTES and zygote._ZYGOTES[other][1] is serving
    assert not serving.dead and serving.process.poll() is None
    zygote.stop_all(other)
    assert other not in zygote._ZYGOTES and serving.process.wait(30) is not None


def test_a_parent_killed_outright_leaves_no_zygote_nor_child(env):
    code = ("import json, subprocess, sys; from devicefit.simulator.run import zygote; "
            f"c = zygote.popen({MODULE!r}, ['sleep'], preload={PRELOAD!r}, "
            "env=dict(__import__('os').environ), stdout=subprocess.PIPE); "
            "print(c.stdout.readline().decode(), flush=True); __import__('time').sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              cwd=ROOT)
    report = json.loads(parent.stdout.readline())
    parent.kill()
    parent.wait()
    assert _wait_until(lambda: _gone(report["pid"]) and _gone(report["ppid"]))


@pytest.mark.parametrize("why", ["switched off", "a thread in the zygote"])
def test_where_no_zygote_can_serve_the_child_starts_the_plain_way(env, why):
    env = {**env, "DEVICEFIT_ZYGOTE": "0"} if why == "switched off" else {**env, "ZT_THREAD": "1"}
    for _ in range(2):  # a refusal is remembered, not tried again for every child
        child = _start(env, "exit:3")
        report = _report(child)
        assert child.wait(30) == 3
        assert isinstance(child, subprocess.Popen)
        assert report["ppid"] == os.getpid()
    refused = [k for k in zygote._REFUSED if k[1:k.index("")] == PRELOAD]
    assert len(refused) == (why == "a thread in the zygote")
