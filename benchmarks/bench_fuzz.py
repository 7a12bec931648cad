"""Fuzz benchmark: thousands of hostile inputs through every command, counted by outcome.

Inputs, all generated from a seed (same seed, same cases):

- ``simulate``: byte mutants (flips, truncations, splices, interesting int32s) and schema
  mutants (shapes, types, indices, names with control characters, custom codes, control-flow
  subgraph indices, offline plans) of real zoo models, and hostile-but-valid graphs
  (nested IF, 100k unused tensors, 20k-operator chains);
- ``simulate --run``: model mutants and data-file mutants (``--input``: header bombs,
  truncated, scalar, pickled, zip-bomb ``.npz``, ``/dev/null``) run in the real runtimes;
- ``profiles``: profile YAML mutants (hostile scalars at every key, alias bombs, deep
  nesting, duplicate keys, ``extends`` to devices/FIFOs/folders, byte noise);
- ``check``: project-file mutants, each with ``--junit`` and ``--markdown``;
- ``outputs``: every command (simulate, check, optimize, convert, fit, bench) with outputs
  aimed at its inputs, at each other, at folders, unwritable or missing places;
- ``optimize``: model mutants through the optimizer;
- ``signals``: SIGTERM/SIGHUP/SIGINT sent to ``simulate --run`` and ``check --run`` at a
  random moment after the run started;
- ``special paths``: ``/dev/zero``, ``/dev/null``, a FIFO, a folder, ``/proc`` entries where a
  model, profile, project, baseline or data file is expected.

Every in-process case runs ``sdk.cli.main(argv)`` in a long-lived worker process (so 10,000
cases take minutes, not hours); the signal cases start ``python -m sdk.cli``. Outcome classes,
counted per command:

- ``traceback``: an exception other than SystemExit escaped ``main`` (or "Traceback" on
  stderr); ``signal``: the CLI process died by a signal (the worker is restarted);
- ``input modified``: a file the case reads changed; ``bad junit``: a JUnit file that does
  not parse; ``leftover``: a ``devicefit-run-*`` folder or a runtime worker left behind;
- ``>60 s`` and ``>2 GB`` (the worker's peak resident memory crossed 2 GiB during the case).

    .venv/bin/python benchmarks/bench_fuzz.py [--seed 0] [--scale 1.0] [--workers 2] [--json out.json]

``--scale 1`` is the full run (about 10,000 cases); tests/simulator/test_fuzz.py runs a seeded
``--scale 0.03`` subset.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.procs import runtime_workers  # noqa: E402 — needs ROOT on the path

SLOW_S = 60.0
BIG_BYTES = 2 * 1024**3
#: A case the worker has not answered after this long is killed and counted as > 60 s.
KILL_S = 150.0
WORKER_ADDRESS_SPACE = 6 * 1024**3
#: Paths that are not regular files, given where a command expects a file.
SPECIAL_PATHS = ("/dev/zero", "/dev/null", "{d}/pipe", "{d}/dir", "/proc/self/mem",
                 "/proc/self/status", "{d}/missing")
CLASSES = ("traceback", "signal", "input modified", "bad junit", "leftover", ">60 s", ">2 GB")
#: Cases per family at --scale 1 (≈ 10,000 in all).
FAMILIES = {"simulate-bytes": 3550, "simulate-schema": 3000, "simulate-hostile": 30,
            "profiles": 1250, "check": 1100, "outputs": 600, "run-model": 120,
            "run-data": 160, "optimize": 60, "signals": 30, "special-paths": 100}
PROFILES = ("esp32-s3", "stm32l4r5-cortex-m4", "android-arm64-cpu", "coral-edgetpu",
            "nrf52840-cortex-m4", "stm32h743-cortex-m7")
HOSTILE_SCALARS = [".nan", ".inf", "-.inf", "-1", "0", "0MHz", "1e999", "9" * 5000, "''", "[]",
                   "{}", '"\\e[2J\\a"', "null", "true", "10 parsecs", str(2**70), "nan%",
                   "-5%", "1.5", "'\\x00'", "*undefined", "&a x", "!!python/object:os.system x",
                   "[1, [2, [3]]]", "'" + "x" * 10_000 + "'", "0x7fffffff", "-0.0", "1:30"]
INTERESTING_I32 = (0, 1, -1, 2**31 - 1, -(2**31), 2**16, 255, 4096, 0x7FFF_FFF0)


@dataclass
class Case:
    """One run: ``argv`` (``{d}`` is the case's folder), the files to create there, which of
    them are inputs that must not change, and which outputs are JUnit files to parse."""

    id: int
    command: str
    argv: list[str]
    files: dict[str, str] = field(default_factory=dict)  # name → hex bytes or special
    inputs: list[str] = field(default_factory=list)
    junit: list[str] = field(default_factory=list)
    signal: int = 0
    delay: float = 0.0


# --------------------------------------------------------------------------- model mutants
def _base_models() -> dict[str, bytes]:
    """Real converter output from the test zoo (cached on disk) and hand-built graphs."""
    from tests import hostile
    from tests.zoo import model_path

    out = {name: model_path(name).read_bytes() for name in ("chain_int8", "mlp_int8")}
    out["relu"] = hostile.relu_chain(3)
    out["if2"] = hostile.nested_if(2)
    return out


def _byte_mutant(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0:
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1:
        b = b[:rng.randrange(len(b))]
    elif kind == 2:
        pos = rng.randrange(0, len(b) - 4, 4) if len(b) > 8 else 0
        b[pos:pos + 4] = struct.pack("<i", rng.choice(INTERESTING_I32))
    elif kind == 3:
        a, c = sorted(rng.randrange(len(b)) for _ in range(2))
        del b[a:c][: rng.randint(1, 64)]
    elif kind == 4:
        a = rng.randrange(len(b))
        b[a:a] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    else:
        a, c = sorted(rng.randrange(len(b)) for _ in range(2))
        pos = rng.randrange(len(b))
        b[pos:pos + (c - a)] = b[a:c]
    return bytes(b)


def _schema_mutant(rng: random.Random, data: bytes) -> bytes | None:
    from ai_edge_litert import schema_py_generated as fb

    from devicefit.simulator.read.writer import pack

    m = fb.ModelT.InitFromPackedBuf(data, 0)
    sg = rng.choice(m.subgraphs)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(12)
        t = rng.choice(sg.tensors) if sg.tensors else None
        op = rng.choice(sg.operators) if sg.operators else None
        if kind == 0 and t is not None:
            shape = list(t.shape if t.shape is not None else [1])
            shape[rng.randrange(len(shape))] = rng.choice([0, -1, 2**31 - 1, 2**20, 3])
            t.shape = shape if rng.random() < 0.8 else shape * rng.randint(2, 9)
        elif kind == 1 and t is not None:
            t.type = rng.randrange(-2, 24)
        elif kind == 2 and t is not None:
            t.buffer = rng.choice([0, len(m.buffers), 2**31 - 1, rng.randrange(len(m.buffers))])
        elif kind == 3 and t is not None:
            t.name = rng.choice(["\x1b[2J\x1b]0;x\x07", "\u202eevil", "a" * 5000, "<&>\"'",
                                 "\x00", "]]>"]) + str(t.name)
        elif kind == 4 and op is not None:
            op.opcodeIndex = rng.choice([len(m.operatorCodes), 2**31 - 1, 0])
        elif kind == 5 and op is not None:
            ins = list(op.inputs if op.inputs is not None else [])
            ins.append(rng.choice([-1, -2, len(sg.tensors), 2**31 - 1, 0]))
            op.inputs = ins if rng.random() < 0.5 else ins[::-1]
        elif kind == 6:
            code = rng.choice(m.operatorCodes)
            code.builtinCode = rng.choice([32, 0, 118, 119, 160, 2**31 - 1, rng.randrange(200)])
            code.deprecatedBuiltinCode = min(code.builtinCode, 127)
            if code.builtinCode == 32:
                code.customCode = rng.choice(["Flex\x1b[31mAdd", "TFLite_Detection_PostProcess",
                                              "edgetpu-custom-op", "\u202e" * 3])
        elif kind == 7:
            sg.inputs = [rng.choice([-1, 0, len(sg.tensors), 2**31 - 1])]
        elif kind == 8 and op is not None:  # an IF calling arbitrary subgraphs
            options = fb.IfOptionsT()
            options.thenSubgraphIndex = rng.choice([0, 1, len(m.subgraphs), -1, 2**31 - 1])
            options.elseSubgraphIndex = rng.choice([0, 1, len(m.subgraphs)])
            op.builtinOptionsType, op.builtinOptions = fb.BuiltinOptions.IfOptions, options
            code = fb.OperatorCodeT()
            code.builtinCode = code.deprecatedBuiltinCode = 118  # IF
            code.version = 1
            m.operatorCodes.append(code)
            op.opcodeIndex = len(m.operatorCodes) - 1
        elif kind == 9:
            meta = fb.MetadataT()
            meta.name = rng.choice(["OfflineMemoryAllocation", "devicefit.conversion",
                                    "min_runtime_version"])
            buf = fb.BufferT()
            buf.data = list(rng.randbytes(rng.choice([0, 4, 12, 13, 64])))
            m.buffers.append(buf)
            meta.buffer = len(m.buffers) - 1
            m.metadata = [*(m.metadata or []), meta]
        elif kind == 10 and sg.operators:
            del sg.operators[rng.randrange(len(sg.operators))]
        elif kind == 11:
            m.subgraphs.append(rng.choice(m.subgraphs))
    try:
        return pack(m)
    except Exception:  # noqa: BLE001 — an unpackable mutant is simply not a case
        return None


# --------------------------------------------------------------------------- YAML mutants
@cache
def profile_keys() -> dict[str, list[str]]:
    """Section → keys, from the profile schema itself (targets' own keys included), so the
    mutants reach every key a profile may have, including ones added later."""
    from devicefit.simulator.profiles import profile_schema

    return {section: sorted(keys) for section, keys in profile_schema().items()
            if isinstance(keys, dict)}


def _alias_bomb(rng: random.Random, levels: int, fan: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['x'] * fan)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]")
    return "\n".join(lines) + "\n"


def _structural_yaml(rng: random.Random, top: str) -> str:
    kind = rng.randrange(8)
    if kind == 0:
        return _alias_bomb(rng, rng.randint(3, 12), rng.randint(2, 12))
    if kind == 1:
        n = rng.choice([50, 500, 5000])
        return f"{top}: " + "[" * n + "]" * n + "\n"
    if kind == 2:
        n = rng.choice([50, 500, 5000])
        return "".join(f"{' ' * i}k{i}:\n" for i in range(n)) + " " * n + "v: 1\n"
    if kind == 3:
        return f"{top}: 1\n{top}: 2\n"
    if kind == 4:
        return "\ufeff" + rng.choice(["\t", "\x00", "\x1b[2J", "%YAML 9.9\n---", "--- !!binary"])
    if kind == 5:
        return f"{top}: " + "9" * rng.choice([4301, 100_000]) + "\n"
    if kind == 6:
        return "? [a, b]\n: 1\n"
    return "---\na: 1\n---\nb: 2\n"


def _profile_yaml(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return _structural_yaml(rng, "budgets")
    lines = [f"extends: {rng.choice(PROFILES + ('/dev/zero', '/proc/self/status', './pipe.yaml', './dir', './self.yaml', 'nope'))}"]
    sections = profile_keys()
    for section in rng.sample(sorted(sections), rng.randint(1, 3)):
        lines.append(f"{section}:")
        keys = sections[section]
        for key in rng.sample(keys, rng.randint(1, min(3, len(keys)))):
            lines.append(f"  {key}: {rng.choice(HOSTILE_SCALARS)}")
        if rng.random() < 0.2:
            lines.append(f"  {key}: 1")  # duplicate
    text = "\n".join(lines) + "\n"
    if rng.random() < 0.2:
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        text = raw.decode("utf-8", "surrogateescape")
    return text


def _project_yaml(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return _structural_yaml(rng, "models")
    name = rng.choice(["m", "\x1b[2Jm", "a|b*c*", "<&>", "\u202em", "]]>", "x" * 300, "\x01"])
    profile = rng.choice([*PROFILES[:3], "mine.yaml", "/dev/zero", "pipe.yaml", "dir",
                          "\x1b[31m"])
    budget = rng.choice(HOSTILE_SCALARS + ["1MB", "100ms"])
    rule = rng.choice(HOSTILE_SCALARS + ["5%", "2KiB"])
    body = (f"models:\n  - path: m.tflite\n    name: {json.dumps(name)}\n"
            f"    profiles: [{json.dumps(profile)}]\n"
            f"    budgets: {{arena: {budget}}}\n"
            f"    regression: {{flash: {rule}}}\n")
    if rng.random() < 0.3:
        body += f"baseline: {rng.choice(['base.json', '/dev/zero', 'dir', 'm.tflite'])}\n"
    if rng.random() < 0.2:
        body += "models: []\n"  # duplicate top key
    return body


# --------------------------------------------------------------------------- data mutants
def _npy(shape: str, descr: str = "<f4", tail: bytes = b"") -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + tail


def _data_mutant(rng: random.Random) -> tuple[str, bytes | None]:
    """(file name, bytes) of an input-data file for the relu model (x: [1, 8] float32);
    None: the name is a special path (``/dev/null``, a folder)."""
    import numpy as np

    kind = rng.randrange(10)
    good = np.arange(8, dtype=np.float32).reshape(1, 8)
    buf = io.BytesIO()
    if kind == 0:
        return "x.npy", _npy(rng.choice(["(1, 1099511627776)", "(2**40,)", "(-1, 8)",
                                         "(1, 8, 9, 10, 11, 12, 13)", "()", "(1,8"]))
    if kind == 1:
        return "x.npy", _npy("(1, 8)", rng.choice(["|O", "<U10", "<f2", "|b1", "<c16", "V8",
                                                   "<M8[s]"]), b"\x00" * 32)
    if kind == 2:
        np.save(buf, good)
        data = buf.getvalue()
        return "x.npy", data[:rng.randrange(len(data))]
    if kind == 3:
        np.save(buf, np.float32(rng.choice([1.0, float("nan"), float("inf")])))
        return "x.npy", buf.getvalue()
    if kind == 4:
        np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        return "x.npy", buf.getvalue()
    if kind == 5:  # a zip bomb: tiny file, 1 GiB of zeros claimed and stored
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            with z.open("x.npy", "w", force_zip64=True) as f:
                f.write(_npy("(268435456,)"))
                chunk = bytes(1 << 20)
                for _ in range(rng.choice([4, 16])):
                    f.write(chunk)
        return "x.npz", buf.getvalue()
    if kind == 6:
        np.savez(buf, **{rng.choice(["x", "y", "\x1b[2J", ""]): good, "extra": good})
        return "x.npz", buf.getvalue()
    if kind == 7:
        return rng.choice(["/dev/null", "/dev/zero", "dir"]), None
    if kind == 8:
        with np.errstate(invalid="ignore"):
            bad = (good * rng.choice([1, float("nan"), float("inf")])).astype(
                rng.choice([np.float32, np.float64, np.int8]))
        np.save(buf, bad)
        return "x.npy", buf.getvalue()
    np.save(buf, good)
    return "x.npy", _byte_mutant(rng, buf.getvalue())


# --------------------------------------------------------------------------- generation
def case_count(scale: float) -> int:
    return sum(_family_count(f, scale) for f in FAMILIES)


def _family_count(family: str, scale: float) -> int:
    return max(1, round(FAMILIES[family] * scale))


def generate(seed: int, scale: float) -> Iterator[Case]:
    """Every case of a run, deterministic in ``seed``, made one at a time (a model mutant
    is held only until a worker has taken it)."""
    from tests import hostile

    rng = random.Random(seed)
    models = _base_models()
    names = sorted(models)
    made_cases = 0

    def add(command: str, argv: list[str], files: dict[str, bytes | None] | None = None,
            inputs: list[str] = (), junit: list[str] = (), sig: int = 0,
            delay: float = 0.0) -> Case:
        nonlocal made_cases
        encoded = {k: ("" if v is None else v.hex()) for k, v in (files or {}).items()}
        made_cases += 1
        return Case(made_cases - 1, command, argv, encoded, list(inputs), list(junit), sig,
                    delay)

    def count(family: str) -> int:
        return _family_count(family, scale)

    for _ in range(count("simulate-bytes")):
        data = _byte_mutant(rng, models[rng.choice(names)])
        yield add("simulate", ["simulate", "{d}/m.tflite", "--profile", rng.choice(PROFILES),
                         *rng.choice([[], ["--json"], ["--top", "3"]])],
            {"m.tflite": data}, ["m.tflite"])
    made = 0
    while made < count("simulate-schema"):
        data = _schema_mutant(rng, models[rng.choice(names)])
        if data is None:
            continue
        made += 1
        yield add("simulate", ["simulate", "{d}/m.tflite", "--profile", rng.choice(PROFILES),
                         *rng.choice([[], ["--json"], ["--html", "{d}/r.html"]])],
            {"m.tflite": data}, ["m.tflite"])
    builders = [lambda: hostile.nested_if(rng.choice([3, 10, 17, 30, 63, 64, 65])),
                lambda: hostile.unused_tensors(rng.choice([1000, 30_000, 100_000])),
                lambda: hostile.relu_chain(rng.choice([1000, 5000, 20_000])),
                lambda: hostile.huge_input(rng.choice([2**20, 2**29, 2**31 - 1]))]
    for _ in range(count("simulate-hostile")):
        yield add("simulate", ["simulate", "{d}/m.tflite", "--profile", rng.choice(PROFILES)],
            {"m.tflite": rng.choice(builders)()}, ["m.tflite"])
    for _ in range(count("special-paths")):
        path = rng.choice(SPECIAL_PATHS)
        files = {"pipe": None, "dir": None, "m.tflite": models["relu"]}
        command = rng.choice(["simulate", "profiles", "check", "optimize", "run"])
        if command == "simulate":
            argv = ["simulate", path, "--profile", "esp32-s3"]
        elif command == "profiles":
            argv = ["profiles", "validate", path]
        elif command == "check":
            files["devicefit.yaml"] = (f"models: [{{path: {path}, profiles: [esp32-s3]}}]\n"
                                       f"baseline: {path}\n").encode()
            argv = ["check", rng.choice(["{d}/devicefit.yaml", path])]
        elif command == "optimize":
            argv = ["optimize", path, "--profile", "stm32l4r5-cortex-m4", "-o", "{d}/o.tflite"]
        else:
            argv = ["simulate", "{d}/m.tflite", "--profile", "esp32-s3", "--run", "--input",
                    path]
        yield add(f"special paths {command}", argv, files, ["m.tflite"])
    for _ in range(count("profiles")):
        files = {"p.yaml": _profile_yaml(rng).encode("utf-8", "surrogateescape"),
                 "self.yaml": b"extends: ./self.yaml\n", "pipe.yaml": None, "dir": None}
        yield add("profiles", ["profiles", rng.choice(["validate", "show"]), "{d}/p.yaml"], files,
            ["p.yaml", "self.yaml"])
    for _ in range(count("check")):
        files = {"devicefit.yaml": _project_yaml(rng).encode("utf-8", "surrogateescape"),
                 "m.tflite": models["relu"] if rng.random() < 0.8 else
                 _byte_mutant(rng, models["relu"]),
                 "mine.yaml": b"extends: esp32-s3\n", "pipe.yaml": None, "dir": None,
                 "base.json": rng.choice([b"{}", b"[", b'{"version": 1e999}', b"\x1b"])}
        yield add("check", ["check", "{d}/devicefit.yaml", "--junit", "{d}/out/j.xml", "--markdown",
                      "{d}/out/s.md", *rng.choice([[], ["--json"], ["--html", "{d}/r.html"]])],
            files, ["devicefit.yaml", "m.tflite", "mine.yaml", "base.json"], ["out/j.xml"])
    for _ in range(count("outputs")):
        yield add(*_output_case(rng, models["relu"]))
    for _ in range(count("run-model")):
        data = (_byte_mutant(rng, models["relu"]) if rng.random() < 0.5
                else _schema_mutant(rng, models["relu"]) or models["relu"])
        yield add("simulate --run", ["simulate", "{d}/m.tflite", "--profile",
                               rng.choice(PROFILES[:3]), "--run", "--runs", "2",
                               "--timeout", "30"], {"m.tflite": data}, ["m.tflite"])
    for _ in range(count("run-data")):
        name, data = _data_mutant(rng)
        path = name if name.startswith("/") else "{d}/" + name
        files = {"m.tflite": models["relu"], "dir": None}
        if data is not None:
            files[name] = data
        yield add("simulate --run", ["simulate", "{d}/m.tflite", "--profile", "android-arm64-cpu",
                               "--run", "--runs", "1", "--input", path, "--timeout", "30"],
            files, [n for n in files if n != "dir"])
    for _ in range(count("optimize")):
        data = _byte_mutant(rng, models["chain_int8"]) if rng.random() < 0.7 else \
            models["chain_int8"]
        yield add("optimize", ["optimize", "{d}/m.tflite", "--profile", "stm32l4r5-cortex-m4", "-o",
                         "{d}/o.tflite"], {"m.tflite": data}, ["m.tflite"])
    for _ in range(count("signals")):
        sig = rng.choice([signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
        if rng.random() < 0.5:
            argv = ["simulate", "{d}/m.tflite", "--profile", "android-arm64-cpu", "--run",
                    "--runs", "100000000", "--html", "{d}/r.html"]
        else:
            argv = ["check", "{d}/devicefit.yaml", "--run", "--jobs", "2", "--junit",
                    "{d}/j.xml"]
        yield add("signals", argv, {"m.tflite": models["relu"], "devicefit.yaml":
                              b"models: [{path: m.tflite, profiles: [android-arm64-cpu, "
                              b"esp32-s3, stm32l4r5-cortex-m4]}]\n"},
            ["m.tflite", "devicefit.yaml"], ["j.xml"], sig=int(sig),
            delay=rng.uniform(0.0, 2.0))


def _output_case(rng: random.Random, model: bytes) -> tuple:
    """A command whose outputs collide with its inputs, each other or the file system."""
    files = {"m.tflite": model, "p.yaml": b"extends: esp32-s3\n", "cal.npy": b"\x93NUMPY",
             "sm/saved_model.pb": b"stand-in", "dir": None,
             "devicefit.yaml": b"models: [{path: m.tflite, profiles: [p.yaml]}]\n"}
    targets = ["{d}/m.tflite", "{d}/p.yaml", "{d}/cal.npy", "{d}/sm/saved_model.pb",
               "{d}/sm/new.tflite", "{d}/dir", "/proc/x.html", "{d}/no/such/x", "{d}/same",
               "{d}/devicefit.yaml", "{d}/sm", "/dev/null"]
    command = rng.choice(["simulate", "check", "optimize", "convert", "fit", "bench"])
    pick = rng.choice
    if command == "simulate":
        argv = ["simulate", "{d}/m.tflite", "--profile", "{d}/p.yaml", "--html", pick(targets),
                "--plot", pick(targets)]
    elif command == "check":
        argv = ["check", "{d}/devicefit.yaml", "--junit", pick(targets), "--markdown",
                pick(targets), "--html", pick(targets)]
    elif command == "optimize":
        argv = ["optimize", "{d}/m.tflite", "--profile", "{d}/p.yaml", "-o", pick(targets)]
    elif command == "convert":
        # Every target but {d}/same is refused, and {d}/same twice collides: TensorFlow
        # never starts here.
        argv = ["convert", "{d}/sm", "--profile", "{d}/p.yaml", "-o", pick(targets),
                "--calibration", "{d}/cal.npy", "--report", pick(targets)]
    elif command == "fit":
        argv = ["fit", "{d}/sm", "--profile", "{d}/p.yaml", "--train", "{d}/cal.npy", "--eval",
                "{d}/cal.npy", "-o", "{d}/cal.npy", "--report", pick(targets)]
    else:
        argv = ["bench", "{d}/m.tflite", "--profile", "android-arm64-cpu", "--adb",
                "/nonexistent/adb", "--html", pick(targets), "--plot", "{d}/m.tflite"]
    # The files this command reads: those must never change (others may be written).
    inputs = {"simulate": ["m.tflite", "p.yaml"], "optimize": ["m.tflite", "p.yaml"],
              "check": ["devicefit.yaml", "m.tflite", "p.yaml"],
              "convert": ["sm/saved_model.pb", "p.yaml", "cal.npy"],
              "fit": ["sm/saved_model.pb", "p.yaml", "cal.npy"],
              "bench": ["m.tflite"]}[command]
    return ("outputs " + command, argv, files, inputs)


# --------------------------------------------------------------------------- running
def _materialise(case: Case, folder: Path) -> None:
    for name, hexdata in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "dir":
            path.mkdir(exist_ok=True)
        elif name in ("pipe.yaml", "pipe"):
            os.mkfifo(path)
        else:
            path.write_bytes(bytes.fromhex(hexdata))


def _digests(case: Case, folder: Path) -> dict[str, str]:
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() if (folder / n).is_file()
            else "missing" for n in case.inputs}


def _junit_ok(case: Case, folder: Path) -> bool:
    for name in case.junit:
        path = folder / name
        if path.exists():
            try:
                ET.parse(path)
            except ET.ParseError:
                return False
    return True


def _leftovers(tmp: Path) -> list[str]:
    return [p.name for p in tmp.glob("devicefit-run-*")] + \
        [f"worker {pid}" for pid in runtime_workers(tmp)]


def _run_in_process(case: Case, folder: Path) -> dict:
    from devicefit.sdk.cli import main

    argv = [a.replace("{d}", str(folder)) for a in case.argv]
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    classes = []
    code: int | str
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 — that is what is counted
            code = f"{type(exc).__name__}: {str(exc)[:200]}"
            classes.append("traceback")
    seconds = time.perf_counter() - start
    if "Traceback (most recent call last)" in err.getvalue() and "traceback" not in classes:
        classes.append("traceback")
    return {"code": code, "seconds": seconds, "classes": classes,
            "stderr": err.getvalue()[-300:]}


def worker(result_fd: int) -> None:
    """Run cases read from stdin (one JSON per line); answer on ``result_fd``."""
    # A runaway case must not take the shared machine's memory: past this it fails here
    # (a MemoryError counts as a traceback) instead of meeting the OOM killer.
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_ADDRESS_SPACE, WORKER_ADDRESS_SPACE))
    results = os.fdopen(result_fd, "w", buffering=1)
    tmp = Path(tempfile.mkdtemp(prefix="fuzz-worker-"))
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None
    for line in sys.stdin:
        case = Case(**json.loads(line))
        folder = tmp / f"case-{case.id}"
        folder.mkdir()
        _materialise(case, folder)
        before = _digests(case, folder)
        res = _run_in_process(case, folder)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if _digests(case, folder) != before:
            res["classes"].append("input modified")
        if not _junit_ok(case, folder):
            res["classes"].append("bad junit")
        if _leftovers(tmp):
            res["classes"].append("leftover")
        if res["seconds"] > SLOW_S:
            res["classes"].append(">60 s")
        res["peak"] = peak
        shutil.rmtree(folder, ignore_errors=True)
        results.write(json.dumps({"id": case.id, **res}) + "\n")


def _signal_case(case: Case, folder: Path, tmp: Path) -> dict:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    argv = [a.replace("{d}", str(folder)) for a in case.argv]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "devicefit.sdk.cli", *argv], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # A CI runner cancels a job that is working: wait until a run has started (its
    # devicefit-run-* folder exists), then a random moment more.
    deadline = time.monotonic() + 60
    while not list(tmp.glob("devicefit-run-*")) and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(case.delay)
    proc.send_signal(case.signal)
    try:
        _, err = proc.communicate(timeout=KILL_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    classes = []
    text = err.decode(errors="replace")
    if "Traceback (most recent call last)" in text:
        classes.append("traceback")
    if proc.returncode < 0:
        classes.append("signal")
    deadline = time.monotonic() + 10
    while _leftovers(tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _leftovers(tmp):
        classes.append("leftover")
    # Outputs are written whole or not at all: one that exists must be complete.
    html = folder / "r.html"
    if (html.exists() and not html.read_text(errors="replace").rstrip().endswith("</html>")) \
            or not _junit_ok(case, folder):
        classes.append("leftover")
    return {"code": proc.returncode, "seconds": time.perf_counter() - start,
            "classes": classes, "stderr": text[-300:], "peak": 0}


class _Worker:
    def __init__(self) -> None:
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(write)], pass_fds=(write,),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            start_new_session=True)
        os.close(write)
        self.results = os.fdopen(read, "r")
        self.case: Case | None = None
        self.started = 0.0
        self.peak = 0

    def send(self, case: Case) -> None:
        self.case, self.started = case, time.monotonic()
        self.proc.stdin.write(json.dumps(asdict(case)) + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def run(cases: Iterable[Case], workers: int = 2, log=None) -> dict:
    """Run every case; return per-command counts of exit codes and outcome classes."""
    table: dict[str, Counter] = defaultdict(Counter)
    examples: dict[str, list] = defaultdict(list)
    signal_cases: list[Case] = []
    pending = iter(cases)

    def next_case() -> Case | None:
        for case in pending:
            if not case.signal:
                return case
            signal_cases.append(case)
        return None

    pool = [_Worker() for _ in range(max(1, workers))]
    idle = list(pool)
    busy: dict[int, _Worker] = {}

    slowest: dict[str, float] = defaultdict(float)
    peak = [0]

    def record(case: Case, res: dict) -> None:
        row = table[case.command]
        row["cases"] += 1
        slowest[case.command] = max(slowest[case.command], res.get("seconds", 0.0))
        peak[0] = max(peak[0], res.get("peak", 0))
        code = res["code"]
        row[f"exit {code}" if isinstance(code, int) and code in (0, 1, 2) else
            "exit 128+s" if isinstance(code, int) and code in (129, 130, 143)
            else "exit other"] += 1
        for cls in res["classes"]:
            row[cls] += 1
            if len(examples[cls]) < 5:
                examples[cls].append({"id": case.id, "command": case.command, "argv": case.argv,
                                      "code": code, "stderr": res["stderr"]})

    try:
        while True:
            while idle:
                case = next_case()
                if case is None:
                    break
                w = idle.pop()
                w.send(case)
                busy[w.results.fileno()] = w
            if not busy:
                break
            ready, _, _ = select.select(list(busy), [], [], 1.0)
            for fd in ready:
                w = busy.pop(fd)
                line = w.results.readline()
                if not line:  # the worker died: the case killed the CLI process
                    w.proc.wait()
                    record(w.case, {"code": w.proc.returncode, "classes": ["signal"],
                                    "stderr": f"worker exit {w.proc.returncode}"})
                    pool.remove(w)
                    w = _Worker()
                    pool.append(w)
                    idle.append(w)
                    continue
                res = json.loads(line)
                if res["peak"] > BIG_BYTES >= w.peak:
                    res["classes"].append(">2 GB")
                w.peak = res["peak"]
                record(w.case, res)
                idle.append(w)
            now = time.monotonic()
            for fd, w in list(busy.items()):
                if now - w.started > KILL_S:
                    busy.pop(fd)
                    record(w.case, {"code": "killed", "classes": [">60 s"],
                                    "stderr": "no answer"})
                    w.stop()
                    pool.remove(w)
                    w = _Worker()
                    pool.append(w)
                    idle.append(w)
            if log:
                log(sum(r["cases"] for r in table.values()))
    finally:
        for w in pool:
            w.stop()
    tmp = Path(tempfile.mkdtemp(prefix="fuzz-signals-"))
    try:
        for case in signal_cases:
            folder = tmp / f"case-{case.id}"
            folder.mkdir()
            _materialise(case, folder)
            before = _digests(case, folder)
            res = _signal_case(case, folder, tmp)
            if _digests(case, folder) != before:
                res["classes"].append("input modified")
            record(case, res)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"counts": {k: dict(v) for k, v in sorted(table.items())},
            "slowest_s": {k: round(v, 2) for k, v in sorted(slowest.items())},
            "worker_peak_bytes": peak[0], "examples": dict(examples)}


def print_table(summary: dict) -> None:
    cols = ["cases", "exit 0", "exit 1", "exit 2", "exit 128+s", "exit other", *CLASSES]
    counts = summary["counts"]
    width = max(len(c) for c in counts) if counts else 10
    print(f"{'command':<{width}}  " + "  ".join(f"{c:>9}" for c in cols))
    total: Counter = Counter()
    for command, row in counts.items():
        total.update(row)
        print(f"{command:<{width}}  " + "  ".join(f"{row.get(c, 0):>9}" for c in cols))
    print(f"{'total':<{width}}  " + "  ".join(f"{total.get(c, 0):>9}" for c in cols))
    bad = sum(total.get(c, 0) for c in CLASSES)
    print(f"\n{total['cases']} cases, {bad} in a defect class "
          f"({', '.join(f'{c} {total.get(c, 0)}' for c in CLASSES)})")


def campaign(cases: Iterable[Case], total: int, seed: int, scale: float, workers: int) -> dict:
    """:func:`run` the cases with a progress line every 30 s and the table at the end; the
    summary gains the wall time (``seconds``)."""
    start = time.perf_counter()
    print(f"{total} cases (seed {seed}, scale {scale:g})", flush=True)
    last = [0.0]

    def log(done: int) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(f"  {done}/{total} in {time.perf_counter() - start:.0f} s", flush=True)

    summary = run(cases, workers, log)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    print_table(summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        worker(args.worker)
        return 0
    summary = campaign(generate(args.seed, args.scale), case_count(args.scale), args.seed,
                       args.scale, args.workers)
    print(f"wall time {summary['seconds']} s with {args.workers} worker(s); slowest case "
          f"{max(summary['slowest_s'].values()):.1f} s ("
          + ", ".join(f"{k} {v:.1f}" for k, v in summary["slowest_s"].items())
          + f"); CLI worker peak RSS {summary['worker_peak_bytes'] / 1024**2:.0f} MiB")
    for cls, found in summary["examples"].items():
        for e in found[:2]:
            print(f"example {cls} (case {e['id']}): {e['command']} "
                  f"{' '.join(map(str, e['argv']))[:160]} → "
                  f"{e['code']}: {e['stderr'][-200:]!r}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
