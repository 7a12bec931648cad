"""Talk to an Android device through the ``adb`` binary: pick it, check it, push, run, clean.

Every call has a timeout, because adb waits forever on a device that is half-connected
(USB debugging prompt pending, phone asleep, cable loose). Errors say what the user can do
next; a device that disappears mid-way raises :class:`DeviceGone`, which the caller can
tell apart from a benchmark that failed on a healthy device.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from devicefit.sdk.bench.benchmark_output import brief, tail
from devicefit.simulator.errors import InputError, ToolFailure, UsageError

log = logging.getLogger(__name__)

#: Short adb calls (devices, getprop, chmod, rm, hashes).
QUICK_TIMEOUT_S = 30.0
#: A push of a model of a few hundred MB over USB 2.
PUSH_TIMEOUT_S = 600.0

#: ELF e_machine of each Android ABI (System V ABI; android.googlesource.com/platform/ndk ABIs).
ABI_MACHINE = {"arm64-v8a": 183, "armeabi-v7a": 40, "armeabi": 40, "x86_64": 62, "x86": 3}
MACHINE_NAMES = {183: "AArch64", 40: "ARM (32-bit)", 62: "x86-64", 3: "x86"}
#: What adb prints when the device it was talking to is no longer there.
_GONE = re.compile(r"device '[^']*' not found|no devices/emulators found|device offline"
                   r"|device not found|error: closed|protocol fault|device unauthorized")


class AdbError(ToolFailure):
    """adb failed for a reason other than the device going away (exit 2: a missing phone is
    not a model that does not work)."""


class DeviceGone(AdbError):
    """The device was disconnected, went offline or lost authorization mid-way."""


class DeviceNotReady(AdbError):
    """No device, or one that is not ready for commands (unauthorized, offline, booting)."""


@dataclass(frozen=True)
class DeviceEntry:
    serial: str
    #: adb's state column: "device" (ready), "unauthorized", "offline", "recovery", ...
    state: str


@dataclass(frozen=True)
class ShellResult:
    returncode: int
    stdout: str
    stderr: str


def find_adb(adb: str | None = None) -> str:
    """The adb executable: ``adb`` if given (a path or a name on PATH), else ``adb`` on PATH."""
    candidate = adb or "adb"
    found = shutil.which(candidate)
    if found is None:
        where = f"'{adb}' is not an executable file" if adb else "adb is not on PATH"
        raise UsageError(f"{where}: install Android platform-tools "
                         "(https://developer.android.com/tools/releases/platform-tools) or pass "
                         "--adb PATH")
    return found


def elf_machine(path: Path) -> int:
    """The ELF ``e_machine`` of ``path``; raises InputError if it is not an ELF executable."""
    try:
        with path.open("rb") as f:
            head = f.read(20)
    except OSError as exc:
        raise InputError(f"cannot read benchmark binary {path}: {exc.strerror}") from exc
    if len(head) < 20 or head[:4] != b"\x7fELF":
        raise InputError(f"{path} is not an ELF executable; pass the prebuilt "
                         "android_aarch64_benchmark_model (or one you built with bazel)")
    order: Literal["big", "little"] = "big" if head[5] == 2 else "little"
    e_type = int.from_bytes(head[16:18], order)
    if e_type not in (2, 3):  # ET_EXEC, ET_DYN (Android executables are PIE = ET_DYN)
        raise InputError(f"{path} is an ELF file but not an executable (e_type {e_type})")
    return int.from_bytes(head[18:20], order)


def check_binary_arch(path: Path, abis: Sequence[str]) -> str:
    """The binary's architecture name if the device runs it; InputError naming both if not."""
    machine = elf_machine(path)
    arch = MACHINE_NAMES.get(machine, f"e_machine {machine}")
    if machine not in {ABI_MACHINE.get(a) for a in abis}:
        wanted = next((MACHINE_NAMES[ABI_MACHINE[a]] for a in abis if a in ABI_MACHINE), "?")
        raise InputError(f"{path.name} is built for {arch} but the device runs "
                         f"{', '.join(abis)}: use a benchmark_model built for {wanted} "
                         "(android_aarch64_benchmark_model for arm64-v8a)")
    return arch


def file_digest(path: Path, algo: str = "sha256") -> str:
    digest = hashlib.new(algo)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


#: What one adb call may print that is kept: its first and its last half (benchmark_model's
#: results come last). A device that prints forever costs this much memory, no more.
OUTPUT_LIMIT = 16 * 1024 * 1024


class _Capped:
    """A stream's first ``limit / 2`` bytes and its last ``limit / 2``."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 2 * self.half:  # trimmed in bulk: amortised O(1) a byte
            cut = len(self.tail) - self.half
            self.dropped += cut
            del self.tail[:cut]

    def text(self) -> str:
        tail = self.tail[-self.half:] if len(self.tail) > self.half else self.tail
        self.dropped += len(self.tail) - len(tail)
        gap = f"\n[... {self.dropped:,} bytes left out ...]\n" if self.dropped else ""
        return (bytes(self.head).decode(errors="replace") + gap
                + bytes(tail).decode(errors="replace"))


def run_bounded(cmd: Sequence[str], timeout: float, limit: int = OUTPUT_LIMIT
                ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with both memory and time bounded, whatever the device prints.

    ``capture_output`` keeps everything (a phone printing without end filled 4 GB in 12 s)
    and its timeout is only checked between reads of a stream that never ends. Here each
    stream keeps its first and last ``limit / 2`` bytes, and the deadline is wall-clock:
    at it the adb process group is killed and :class:`subprocess.TimeoutExpired` raised.
    """
    deadline = time.monotonic() + timeout
    proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None  # both PIPE
    streams = {proc.stdout: _Capped(limit), proc.stderr: _Capped(limit)}
    try:
        with selectors.DefaultSelector() as sel:
            for stream, capped in streams.items():
                sel.register(stream, selectors.EVENT_READ, capped)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(list(cmd), timeout)
                for key, _ in sel.select(min(left, 1.0)):
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        key.data.add(chunk)
                    else:
                        sel.unregister(key.fileobj)
        code = proc.wait(max(0.0, deadline - time.monotonic()))
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        for stream in streams:
            stream.close()
    out, err = streams.values()
    return subprocess.CompletedProcess(list(cmd), code, out.text(), err.text())


class AdbClient:
    """One adb executable and, after :meth:`select`, one device serial."""

    def __init__(self, adb_path: str, serial: str | None = None) -> None:
        self.adb_path = adb_path
        self.serial = serial

    # ------------------------------------------------------------------ plumbing
    def _run(self, args: Sequence[str], timeout: float, *, device: bool = True,
             what: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [self.adb_path]
        if device and self.serial:
            cmd += ["-s", self.serial]
        cmd += list(args)
        what = what or "adb " + " ".join(args[:2])
        try:
            proc = run_bounded(cmd, timeout)
        except subprocess.TimeoutExpired as exc:
            hint = " (it may still be running on the device)" if args[:1] == ["shell"] else ""
            raise AdbError(f"{what} timed out after {timeout:g} s{hint}; check that the device "
                           "is awake and connected, or raise --timeout") from exc
        except OSError as exc:
            raise AdbError(f"cannot run {self.adb_path}: {exc.strerror}") from exc
        if device and proc.returncode != 0 and _GONE.search(proc.stderr[-64 * 1024:]):
            raise DeviceGone(f"device {self.serial or '(default)'} is no longer available during "
                             f"{what} ({brief(proc.stderr.strip().splitlines()[0])}); reconnect "
                             "it and run again")
        return proc

    def _checked(self, args: Sequence[str], timeout: float = QUICK_TIMEOUT_S,
                 what: str | None = None) -> str:
        proc = self._run(args, timeout, what=what)
        if proc.returncode != 0:
            raise AdbError(f"{what or 'adb ' + ' '.join(args[:2])} failed "
                           f"(exit {proc.returncode}): {tail(proc.stderr or proc.stdout)}")
        return proc.stdout

    # ------------------------------------------------------------------ devices
    def devices(self) -> list[DeviceEntry]:
        proc = self._run(["devices"], QUICK_TIMEOUT_S, device=False, what="adb devices")
        if proc.returncode != 0:
            raise AdbError(f"adb devices failed (exit {proc.returncode}): "
                           f"{tail(proc.stderr or proc.stdout)}")
        entries = []
        for line in proc.stdout.splitlines():
            parts = line.split()
            # Skip the "List of devices attached" header and "* daemon started" notices.
            if len(parts) >= 2 and not line.startswith(("List of", "*")):
                entries.append(DeviceEntry(parts[0], parts[1]))
        return entries

    def select(self, serial: str | None) -> DeviceEntry:
        """Pick the device to use (the only one, or ``serial``) and check it is ready."""
        entries = self.devices()
        entry: DeviceEntry | None
        if not entries:
            raise DeviceNotReady("no Android device found (adb devices lists none): connect a "
                                 "phone with USB debugging enabled")
        if serial is None:
            if len(entries) > 1:
                listed = ", ".join(f"{e.serial} ({e.state})" for e in entries)
                raise UsageError(f"{len(entries)} devices are connected ({listed}): choose one "
                                 "with --serial")
            entry = entries[0]
        else:
            entry = next((e for e in entries if e.serial == serial), None)
            if entry is None:
                listed = ", ".join(e.serial for e in entries)
                raise UsageError(f"device {serial} is not connected (adb lists: {listed})")
        if entry.state == "unauthorized":
            raise DeviceNotReady(f"device {entry.serial} is unauthorized: unlock the phone and "
                                 "accept the 'Allow USB debugging' prompt, then run again")
        if entry.state == "offline":
            raise DeviceNotReady(f"device {entry.serial} is offline: reconnect the USB cable "
                                 "(or run 'adb kill-server') and run again")
        if entry.state != "device":
            raise DeviceNotReady(f"device {entry.serial} is in state '{entry.state}', not ready "
                                 "for commands: boot it normally and run again")
        self.serial = entry.serial
        return entry

    def is_online(self) -> bool:
        """Whether the selected device is still listed as ready."""
        try:
            return any(e.serial == self.serial and e.state == "device" for e in self.devices())
        except AdbError:
            return False

    # ------------------------------------------------------------------ commands
    def shell(self, command: str, timeout: float = QUICK_TIMEOUT_S,
              what: str | None = None) -> ShellResult:
        """Run ``command`` in the device shell; its exit status is the command's (adb >= 24)."""
        proc = self._run(["shell", command], timeout, what=what or f"adb shell {command[:40]}")
        return ShellResult(proc.returncode, proc.stdout, proc.stderr)

    def getprop(self, name: str) -> str:
        return self._checked(["shell", f"getprop {name}"], what=f"getprop {name}").strip()

    def abis(self) -> list[str]:
        """The ABIs the device runs, primary first (``ro.product.cpu.abi``, then the abilist)."""
        primary = self.getprop("ro.product.cpu.abi")
        listed = [a for a in self.getprop("ro.product.cpu.abilist").split(",") if a]
        return list(dict.fromkeys([a for a in [primary, *listed] if a]))

    def push(self, local: Path, remote: str) -> None:
        self._checked(["push", str(local), remote], PUSH_TIMEOUT_S, what=f"adb push {local.name}")

    def mkdir(self, remote_dir: str) -> None:
        self._checked(["shell", f"mkdir -p {shlex.quote(remote_dir)}"], what="mkdir on device")

    def chmod_executable(self, remote: str) -> None:
        self._checked(["shell", f"chmod 755 {shlex.quote(remote)}"], what="chmod on device")

    def remove(self, remotes: Sequence[str]) -> None:
        if remotes:
            self._checked(["shell", "rm -f " + " ".join(shlex.quote(r) for r in remotes)],
                          what="rm on device")

    def same_file(self, local: Path, remote: str) -> bool:
        """Whether ``remote`` already holds ``local``'s bytes (so the push can be skipped).

        Compares size and SHA-256 with the device's ``sha256sum`` (toybox, Android >= 6);
        falls back to ``md5sum``, and to the size alone where neither tool exists.
        """
        size = self._remote_size(remote)
        if size is None or size != local.stat().st_size:
            return False
        for tool, algo in (("sha256sum", "sha256"), ("md5sum", "md5")):
            res = self.shell(f"{tool} {shlex.quote(remote)}", what=f"{tool} on device")
            if res.returncode == 0 and res.stdout.split():
                return res.stdout.split()[0].lower() == file_digest(local, algo)
        log.warning("device has neither sha256sum nor md5sum: %s compared by size only", remote)
        return True

    def _remote_size(self, remote: str) -> int | None:
        res = self.shell(f"stat -c %s {shlex.quote(remote)}", what="stat on device")
        out = res.stdout.strip()
        return int(out) if res.returncode == 0 and out.isdigit() else None
