#!/usr/bin/env python3
"""A fake ``adb`` for the bench tests: it stands in for Android phones, since there is none here.

Configured by the JSON file named in ``$FAKE_ADB_CONFIG``::

    {"python": "<venv python that runs the fake benchmark_model>",
     "log": "<file: one JSON line per adb invocation>",
     "devices": [{"serial": "S", "state": "device" | "unauthorized" | "offline",
                  "storage": "<folder standing for the device's />",
                  "props": {"ro.product.cpu.abi": "arm64-v8a", ...},
                  "tools": ["sha256sum", "md5sum", "stat"],
                  "benchmark": {"crash": false, "garbage": false, "vanish": false,
                                "noexec": false, "hang": 0, "unplug_at_push": false,
                                "op_profile_file": null}}]}

Emulated: ``devices``, ``-s SERIAL``, ``push``, and ``shell`` with ``getprop``, ``mkdir -p``,
``chmod``, ``rm -f``, ``sha256sum``, ``md5sum``, ``stat -c %s`` and ``[taskset MASK] PROGRAM
ARGS``. A program is "executed" like the phone would: it must exist and be executable
(chmod), and its ELF ``e_machine`` must suit the device ABI; then ``fake_benchmark_model.py``
runs the pushed model in LiteRT on this machine. ``vanish`` makes the device disconnect
halfway through the benchmark (it stays gone: a ``.gone`` file in its storage); ``noexec``
ignores chmod (storage mounted noexec); ``hang`` sleeps that many seconds instead of running;
``unplug_at_push`` disconnects the device when the first push starts; ``flood`` prints that
many bytes of one line of noise (on stderr with ``flood_stderr``; forever when -1) before the
real output, or instead of it when ``flood_exit`` gives an exit status.
Messages and exit codes follow adb and Android's toybox/mksh.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ABI_MACHINE = {"arm64-v8a": 183, "armeabi-v7a": 40, "armeabi": 40, "x86_64": 62, "x86": 3}
HERE = Path(__file__).resolve().parent


def fail(msg: str, code: int = 1) -> int:
    print(msg, file=sys.stderr)
    return code


def visible(devices: list[dict]) -> list[dict]:
    return [d for d in devices if not (Path(d["storage"]) / ".gone").exists()]


def on_device(dev: dict, remote: str) -> Path:
    return Path(dev["storage"]) / remote.lstrip("/")


def shell(dev: dict, config: dict, words: list[str]) -> int:
    if not words:
        return fail("fake adb: interactive shell not emulated")
    cmd, args = words[0], words[1:]
    if cmd == "getprop":
        print(dev.get("props", {}).get(args[0], "") if args else "")
        return 0
    if cmd == "mkdir":
        for a in args:
            if a != "-p":
                on_device(dev, a).mkdir(parents=True, exist_ok=True)
        return 0
    if cmd == "chmod":
        target = on_device(dev, args[1])
        if not target.exists():
            return fail(f"chmod: {args[1]}: No such file or directory")
        if not dev.get("benchmark", {}).get("noexec"):  # else: a storage mounted noexec
            target.chmod(int(args[0], 8) if args[0].isdigit() else 0o755)
        return 0
    if cmd == "rm":
        for a in args:
            if not a.startswith("-"):
                on_device(dev, a).unlink(missing_ok=True)
        return 0
    if cmd in ("sha256sum", "md5sum", "stat"):
        if cmd not in dev.get("tools", ["sha256sum", "md5sum", "stat"]):
            return fail(f"/system/bin/sh: {cmd}: inaccessible or not found", 127)
        path = args[-1]
        target = on_device(dev, path)
        if not target.is_file():
            return fail(f"{cmd}: {path}: No such file or directory")
        if cmd == "stat":
            print(target.stat().st_size)
        else:
            print(f"{hashlib.new(cmd[:-3], target.read_bytes()).hexdigest()}  {path}")
        return 0
    if cmd == "taskset":
        try:
            int(args[0], 16)
        except (IndexError, ValueError):
            return fail("taskset: bad mask")
        return shell(dev, config, args[1:])
    if cmd.startswith("/"):
        return execute(dev, config, cmd, args)
    return fail(f"/system/bin/sh: {cmd}: inaccessible or not found", 127)


def flood(count: int, stream) -> None:
    """``count`` bytes of one line of noise (forever when negative), in 1 MiB writes."""
    chunk = "noise " * ((1 << 20) // 6)
    sent = 0
    while count < 0 or sent < count:
        part = chunk if count < 0 else chunk[:count - sent]
        stream.write(part)
        sent += len(part)
    stream.write("\n")
    stream.flush()


def execute(dev: dict, config: dict, program: str, args: list[str]) -> int:
    target = on_device(dev, program)
    if not target.is_file():
        return fail(f"/system/bin/sh: {program}: inaccessible or not found", 127)
    if not os.access(target, os.X_OK):
        return fail(f"/system/bin/sh: {program}: can't execute: Permission denied", 126)
    head = target.read_bytes()[:20]
    abi = dev.get("props", {}).get("ro.product.cpu.abi", "arm64-v8a")
    if head[:4] != b"\x7fELF" or int.from_bytes(head[18:20], "little") != ABI_MACHINE[abi]:
        return fail(f"/system/bin/sh: {program}: can't execute: Exec format error", 126)
    # Paths on the device are paths under its storage folder here.
    args = [f"--graph={on_device(dev, a.split('=', 1)[1])}" if a.startswith("--graph=") else a
            for a in args]
    behaviour = dev.get("benchmark", {})
    if behaviour.get("hang"):  # a benchmark that never ends (adb is killed by its caller)
        time.sleep(float(behaviour["hang"]))
        return 0
    if behaviour.get("flood"):  # a hostile device: noise first, on one line, or without end
        flood(int(behaviour["flood"]), sys.stderr if behaviour.get("flood_stderr") else sys.stdout)
        if behaviour.get("flood_exit"):
            return int(behaviour["flood_exit"])
    env = dict(os.environ, FAKE_BENCH=json.dumps(behaviour))
    proc = subprocess.run([config["python"], str(HERE / "fake_benchmark_model.py"), *args],
                          capture_output=True, text=True, env=env, check=False)
    stdout, stderr = proc.stdout, proc.stderr
    if behaviour.get("vanish"):
        # The cable comes out mid-run: the stream stops and adb exits 255.
        (Path(dev["storage"]) / ".gone").touch()
        sys.stdout.write(stdout)
        sys.stderr.write("".join(stderr.splitlines(keepends=True)[:6]))
        return 255
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    if proc.returncode < 0:  # killed by a signal: the device shell reports 128 + signal
        sys.stderr.write("Segmentation fault\n" if proc.returncode == -11 else "")
        return 128 - proc.returncode
    return proc.returncode


def main(argv: list[str]) -> int:
    config = json.loads(Path(os.environ["FAKE_ADB_CONFIG"]).read_text())
    if config.get("log"):
        with open(config["log"], "a") as f:
            f.write(json.dumps(argv) + "\n")
    serial = None
    if argv[:1] == ["-s"]:
        serial, argv = argv[1], argv[2:]
    devices = visible(config["devices"])
    if argv[:1] == ["devices"]:
        print("List of devices attached")
        for d in devices:
            print(f"{d['serial']}\t{d['state']}")
        print()
        return 0
    if serial is None:
        if not devices:
            return fail("adb: no devices/emulators found")
        if len(devices) > 1:
            return fail("adb: more than one device/emulator")
        dev = devices[0]
    else:
        dev = next((d for d in devices if d["serial"] == serial), None)
        if dev is None:
            return fail(f"adb: device '{serial}' not found")
    if dev["state"] == "unauthorized":
        return fail("adb: device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set")
    if dev["state"] == "offline":
        return fail("adb: device offline")
    if argv[:1] == ["push"]:
        if dev.get("benchmark", {}).get("unplug_at_push"):
            (Path(dev["storage"]) / ".gone").touch()
            return fail(f"adb: error: failed to get feature set: device '{dev['serial']}' not found")
        local, remote = Path(argv[1]), argv[2]
        target = on_device(dev, remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, target)
        target.chmod(0o644)
        print(f"{local}: 1 file pushed, 0 skipped. ({local.stat().st_size} bytes in 0.001s)")
        return 0
    if argv[:1] == ["shell"]:
        return shell(dev, config, shlex.split(" ".join(argv[1:])))
    return fail(f"fake adb: command not emulated: {argv}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
