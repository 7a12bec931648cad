"""A fork server: child processes that start with their imports already done.

devicefit runs native code it does not trust (a runtime on a hostile model, an operator cut
out for the op probe, TensorFlow's converter) in a child process, so a crash or a hang cannot
take the command down. Starting ``python -m MODULE`` costs the interpreter and its imports
every time: 0.3-0.4 s of CPU for a runtime worker, ~8.5 s for TensorFlow; a command that
runs many children (the probe and ``--run`` per model, ``check`` over a project, a test
suite calling the converter in-process) paid it for each.

A zygote is one child started once per parent process (and set of preloaded modules): it
imports the modules and then forks a child per request, which runs the module as
``python -m`` would, in a session of its own, on the stdin/stdout/stderr the parent hands
over (passed as file descriptors over a Unix socket), with the parent's environment and
working directory of the moment. Each child is still a process of its own: what a runtime
does to its memory cannot reach the next child, and a crash is reported by its exit status
exactly as before. Only what the preloaded modules did at import time is shared.

Forking is safe only while the zygote has a single thread (a lock held by another thread
would be copied held). NumPy's OpenBLAS starts a thread pool at import, so the zygote runs
with ``OPENBLAS_NUM_THREADS=1`` (its children's BLAS is single-threaded; the runtimes and
TensorFlow make their own threads after the fork); a zygote that still has more than one
thread after its imports refuses to serve, and the caller starts the child the plain way.
The zygote ends when its parent closes the socket or dies, and kills the children still
running then.
"""

from __future__ import annotations

import atexit
import importlib
import itertools
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

#: Environment variables that change how native libraries load or behave from import on:
#: a zygote started under other values cannot serve a child asking for these.
_IMPORT_TIME_ENV = ("TF_", "CUDA", "OMP_", "MKL", "KMP_", "XLA_", "PYTHON", "LD_",
                    "DEVICEFIT_ZYGOTE")
#: Seconds a zygote may take to import its modules (TensorFlow on a loaded machine).
START_TIMEOUT_S = 300.0
#: ``DEVICEFIT_ZYGOTE=0`` starts every child the plain way (for comparing, or debugging a
#: child with tools that expect it to be exec'd).
ENV_SWITCH = "DEVICEFIT_ZYGOTE"
_PACKET = 1 << 20


class Unavailable(Exception):
    """This zygote cannot serve (failed to start, more than one thread, gone)."""


@dataclass
class Child:
    """A forked child, as much of :class:`subprocess.Popen` as devicefit uses."""

    pid: int
    zygote: Zygote
    stdin: IO[bytes] | None = None
    stdout: IO[bytes] | None = None
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.zygote.pump(0.0)
            self.returncode = self.zygote.exits.pop(self.pid, None)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0.0)
            self.zygote.pump(0.5 if left is None else min(0.5, left))
        return self.returncode  # type: ignore[return-value]


@dataclass
class Zygote:
    preload: tuple[str, ...]
    process: subprocess.Popen
    sock: socket.socket
    exits: dict[int, int] = field(default_factory=dict)
    started: dict[int, int] = field(default_factory=dict)
    live: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    dead: bool = False
    ids: itertools.count = field(default_factory=itertools.count)

    @classmethod
    def start(cls, preload: tuple[str, ...], env: dict[str, str]) -> Zygote:
        """Start one under ``env`` (the first child's: what the imports see)."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = _with_root(dict(env, OPENBLAS_NUM_THREADS="1"))
        try:
            # Its own session: Ctrl-C at the terminal reaches the command, which stops its
            # children; the zygote ends when the command closes the socket.
            process = subprocess.Popen(
                [sys.executable, "-m", "devicefit.simulator.run.zygote", str(child.fileno()),
                 *preload], pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            child.close()
        zygote = cls(preload, process, parent)
        try:
            ready = zygote._receive(START_TIMEOUT_S)
        except BaseException:
            zygote.abort()
            raise
        if not ready or not ready.get("ready"):
            zygote.close()
            raise Unavailable(str(ready))
        return zygote

    def spawn(self, module: str, argv: list[str], *, env: dict[str, str], cwd: str,
              stdin: int, stdout: int, stderr: int) -> int:
        """Fork a child running ``python -m module *argv``; its pid."""
        request_id = next(self.ids)
        message = json.dumps({"id": request_id, "module": module, "argv": argv, "env": env,
                              "cwd": cwd}).encode()
        if len(message) >= _PACKET:
            raise Unavailable("request too large")
        with self.lock:
            try:
                socket.send_fds(self.sock, [message], [stdin, stdout, stderr])
            except OSError as exc:
                self.dead = True
                raise Unavailable(str(exc)) from exc
        deadline = time.monotonic() + 60
        while request_id not in self.started:
            if self.dead or time.monotonic() > deadline:
                raise Unavailable("the zygote did not fork")
            self.pump(0.5)
        pid = self.started.pop(request_id)
        self.live.add(pid)
        return pid

    def pump(self, timeout: float) -> None:
        """Take what the zygote reported (forks and exits), waiting up to ``timeout``."""
        if not self.lock.acquire(timeout=max(timeout, 0.0)):
            return
        try:
            message = self._receive(timeout)
        finally:
            self.lock.release()
        if message is None:
            return
        if "started" in message:
            self.started[message["id"]] = message["started"]
        elif "exit" in message:
            self.live.discard(message["exit"])
            self.exits[message["exit"]] = message["code"]

    def _receive(self, timeout: float) -> dict[str, Any] | None:
        if self.dead:
            return None
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return None
        try:
            data = self.sock.recv(_PACKET)
        except OSError:
            data = b""
        if not data:  # the zygote is gone
            self._lost()
            return None
        return json.loads(data)

    def _lost(self) -> None:
        """No more reports: the children it ran are killed, and so their exit status."""
        self.dead = True
        for pid in self.live:
            _killpg(pid)
            self.exits[pid] = -signal.SIGKILL
        self.live.clear()

    def abort(self) -> None:
        """Kill a zygote whose start was cut short (a signal): still importing, it would
        read the closed socket only once done (seconds for TensorFlow), and nothing has
        forked from it yet."""
        self._lost()
        self.sock.close()
        _killpg(self.process.pid)
        self.process.wait()

    def close(self) -> None:
        """Close the socket; the zygote kills what it still runs and ends."""
        self._lost()
        self.sock.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


#: The folder that holds the ``devicefit`` package: a checkout's root, or site-packages.
_ROOT = str(Path(importlib.import_module("devicefit").__file__ or ".").resolve().parents[1])
_ZYGOTES: dict[tuple[str, ...], tuple[tuple[str, ...], Zygote]] = {}
_RETIRED: list[Zygote] = []
#: Keys a zygote could not be started for (e.g. a preload that starts a thread).
_REFUSED: set[tuple[str, ...]] = set()
_REGISTRY_LOCK = threading.Lock()


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a devicefit child, plus ``extra``: this checkout first
    on ``PYTHONPATH``, so a child started the plain way imports the same code."""
    return _with_root(dict(os.environ, **extra))


def _with_root(env: dict[str, str]) -> dict[str, str]:
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    return env


def _key(preload: tuple[str, ...], env: dict[str, str]) -> tuple[str, ...]:
    pinned = sorted(f"{k}={v}" for k, v in env.items() if k.startswith(_IMPORT_TIME_ENV))
    return (sys.executable, *preload, "", *pinned)


def _zygote(preload: tuple[str, ...], env: dict[str, str]) -> Zygote | None:
    """The zygote for ``preload`` under ``env``, started if needed. One per preload: one
    started under other import-time settings is replaced once it runs nothing."""
    if env.get(ENV_SWITCH, "1") == "0":
        return None
    key = _key(preload, env)
    with _REGISTRY_LOCK:
        known = _ZYGOTES.get(preload)
        if known is not None and known[0] == key and not known[1].dead:
            return known[1]
        if key in _REFUSED:
            return None
        try:
            zygote = Zygote.start(preload, env)
        except (Unavailable, OSError, ValueError):
            _REFUSED.add(key)
            return None
        if known is not None:
            _retire(known[1])
        _ZYGOTES[preload] = (key, zygote)
        return zygote


def _retire(zygote: Zygote) -> None:
    if zygote.live:  # its children still report to it: closed at the end
        _RETIRED.append(zygote)
    else:
        zygote.close()


def popen(module: str, argv: list[str], *, preload: tuple[str, ...], env: dict[str, str],
          cwd: str | Path | None = None, stdin: int | None = subprocess.DEVNULL,
          stdout: int | IO[Any] | None = subprocess.DEVNULL,
          stderr: int | IO[Any] | None = None) -> Started:
    """``python -m module *argv`` in a new session, forked from a zygote that has imported
    ``preload``, or started the plain way where no zygote can serve.

    ``stdin``/``stdout`` are ``subprocess.PIPE``, ``subprocess.DEVNULL`` or a descriptor;
    ``stderr`` a descriptor or a file. The result has ``pid``, ``stdin``/``stdout`` (for
    pipes), ``poll()``, ``wait(timeout)`` and ``returncode`` (negative: killed by a signal).
    """
    zygote = _zygote(preload, env)
    if zygote is not None:
        try:
            return _forked(zygote, module, argv, env, str(cwd or os.getcwd()), stdin, stdout,
                           stderr)
        except Unavailable:
            pass
    return subprocess.Popen([sys.executable, "-m", module, *argv], stdin=stdin, stdout=stdout,
                            stderr=stderr, env=env, cwd=cwd, start_new_session=True)


@dataclass(frozen=True)
class Finished:
    """What a child run by :func:`run` left: its exit status (None: it ran past its time
    and was killed) and what it wrote."""

    code: int | None
    stdout: bytes
    stderr: bytes


def run(module: str, argv: list[str], *, preload: tuple[str, ...], env: dict[str, str],
        timeout_s: float, work: Path, cwd: str | Path | None = None) -> Finished:
    """:func:`popen` to its end, its stdout and stderr in ``work/stdout.txt`` and
    ``work/stderr.txt`` (files, not pipes: a child that writes much never blocks, and one
    that crashes leaves what it wrote). The child is killed on a timeout and on any
    exception meanwhile (Ctrl-C, SIGTERM)."""
    with open(work / "stdout.txt", "w+b") as out, open(work / "stderr.txt", "w+b") as err:
        child = popen(module, argv, preload=preload, env=env, cwd=cwd, stdout=out, stderr=err)
        try:
            code: int | None = child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if child.poll() is None:
                kill(child)
        out.seek(0)
        err.seek(0)
        return Finished(code, out.read(), err.read())


def _forked(zygote: Zygote, module: str, argv: list[str], env: dict[str, str], cwd: str,
            stdin: int | None, stdout: int | IO[Any] | None,
            stderr: int | IO[Any] | None) -> Child:
    opened: list[int] = []  # descriptors made here: the child has its copies once forked
    mine: dict[str, IO[bytes]] = {}

    def descriptor(spec: int | IO[Any] | None, name: str, reading: bool) -> int:
        if spec is None:
            return {"stdin": 0, "stdout": 1, "stderr": 2}[name]
        if spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            opened.append(fd)
            return fd
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            theirs, ours = (r, w) if reading else (w, r)
            opened.append(theirs)
            mine[name] = os.fdopen(ours, "wb" if reading else "rb", buffering=0 if not reading
                                   else -1)
            return theirs
        return spec if isinstance(spec, int) else spec.fileno()

    try:
        fds = (descriptor(stdin, "stdin", True), descriptor(stdout, "stdout", False),
               descriptor(stderr, "stderr", False))
        pid = zygote.spawn(module, argv, env=env, cwd=cwd, stdin=fds[0], stdout=fds[1],
                           stderr=fds[2])
    except BaseException:
        for f in mine.values():
            f.close()
        raise
    finally:
        for fd in opened:
            os.close(fd)
    return Child(pid, zygote, stdin=mine.get("stdin"), stdout=mine.get("stdout"))


Started = Child | subprocess.Popen


def kill(child: Started) -> None:
    """SIGKILL to the child's whole session (its own helpers and threads too); wait for it."""
    _killpg(child.pid)
    child.wait()


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all(preload: tuple[str, ...] | None = None) -> None:
    """End every zygote of this process (the command is done), or only those of
    ``preload`` (and forget its refusals), leaving the others serving."""
    with _REGISTRY_LOCK:
        if preload is None:
            zygotes = _forget()
            _REFUSED.clear()
        else:
            known = _ZYGOTES.pop(preload, None)
            zygotes = [z for z in _RETIRED if z.preload == preload]
            _RETIRED[:] = [z for z in _RETIRED if z.preload != preload]
            zygotes += [known[1]] if known is not None else []
            _REFUSED.difference_update({k for k in _REFUSED if k[1:k.index("")] == preload})
    for zygote in zygotes:
        zygote.close()


def _forget() -> list[Zygote]:
    """Every zygote of the registry, which is left empty."""
    zygotes = [zygote for _, zygote in _ZYGOTES.values()] + _RETIRED
    _ZYGOTES.clear()
    _RETIRED.clear()
    return zygotes


def _forget_after_fork() -> None:
    """A forked copy of this process must not talk to its parent's zygotes."""
    for zygote in _forget():
        zygote.dead = True
        try:
            zygote.sock.close()
        except OSError:
            pass


atexit.register(stop_all)
os.register_at_fork(after_in_child=_forget_after_fork)


# --------------------------------------------------------------------------- zygote side
def serve(fd: int, preload: list[str]) -> int:
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command decides when we stop
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 — the child will meet the same error and report it
            pass
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") \
        else threading.active_count()
    sock.send(json.dumps({"ready": threads == 1, "threads": threads}).encode())
    if threads != 1:
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    watched: list[socket.socket | int] = [sock, wake_r]
    try:
        while True:
            readable, _, _ = select.select(watched, [], [])
            if wake_r in readable:
                os.read(wake_r, 4096)
            _reap(sock, live)
            if sock in readable:
                try:
                    data, fds, _, _ = socket.recv_fds(sock, _PACKET, 3)
                except OSError:
                    data, fds = b"", []
                if not data:
                    return 0
                request = json.loads(data)
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(request, fds)
                for f in fds:
                    os.close(f)
                live.add(pid)
                sock.send(json.dumps({"id": request["id"], "started": pid}).encode())
    finally:
        for pid in live:
            _killpg(pid)


def _reap(sock: socket.socket, live: set[int]) -> None:
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        live.discard(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            sock.send(json.dumps({"exit": pid, "code": code}).encode())
        except OSError:
            pass


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """Become ``python -m MODULE ARGV`` on the descriptors given; never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh python has
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # $TMPDIR is the request's
        module = request["module"]
        sys.modules.pop(module, None)  # run fresh as __main__, as ``python -m`` does
        sys.argv = [module, *request["argv"]]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
    except BaseException:  # noqa: BLE001 — what python -m would print before exit 1
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


if __name__ == "__main__":
    # Without the interpreter's teardown: its output is /dev/null and its children are
    # killed, so nothing is left to do, and tearing down TensorFlow's modules took 6-7 s on
    # a loaded machine, which the command's exit waited for (close: 5 s, then a kill).
    os._exit(serve(int(sys.argv[1]), sys.argv[2:]))
