"""Asks LiteRT's own GPU delegate for its partition, where a GPU path of it runs here.

``ai-edge-litert`` ships a WebGPU accelerator (ML Drift on Dawn) that its CompiledModel API
loads for ``HardwareAccelerator.GPU``; Dawn needs a Vulkan adapter, and Chromium's
SwiftShader (a software Vulkan) is one (Mesa's lavapipe is not offered by Dawn:
``benchmarks/probe_gpu_paths.py``). The delegate logs its partition ("Following operations
are not supported by GPU delegate: ... N operations will run on the GPU, and the remaining
M operations will run on the CPU.") or nothing when it takes the whole graph. Each question
runs in a child process of its own with a timeout: a crash or hang is an answer, not the
caller's end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: The Vulkan drivers tried: the loader's own choice, Mesa's lavapipe, Chromium's SwiftShader.
ICDS: dict[str, str | None] = {
    "default": None,
    "lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
    "swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json",
}

CHILD = """
import sys
from ai_edge_litert.compiled_model import CompiledModel, HardwareAccelerator
m = CompiledModel.from_file(sys.argv[1],
    hardware_accel=HardwareAccelerator.GPU | HardwareAccelerator.CPU)
print("FULLY_ACCELERATED", m.is_fully_accelerated(), flush=True)
"""

SPLIT = re.compile(r"(\d+) operations will run on the GPU, and the remaining (\d+)")
NONE_ON_GPU = re.compile(r"No operations will run on the GPU, and all (\d+)")
WHY = ("No adapters found", "unresolved custom op", "failed to prepare", "Failed to modify",
       "Failed to initialize")
ADAPTER = re.compile(r"Selected adapter: ([^\n]*)")


@dataclass(frozen=True)
class DelegateAnswer:
    """``ok``: the model compiled for GPU|CPU; ``gpu_ops`` None when the delegate took the
    whole graph (it logs nothing then); ``unsupported``: its "OP: reason" lines."""

    ok: bool
    error: str
    adapter: str
    gpu_ops: int | None
    unsupported: frozenset[str]


def ask_delegate(model: Path, icd: str | None, timeout: float = 180) -> DelegateAnswer:
    """The delegate's own partition of ``model``, from its log, on the Vulkan driver ``icd``."""
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(model)], env=vulkan_env(icd),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return DelegateAnswer(False, f"timed out after {timeout:.0f} s", "", None, frozenset())
    return read_answer(done.stdout, done.stderr, done.returncode)


def vulkan_env(icd: str | None) -> dict[str, str]:
    """This process's environment with the Vulkan loader pointed at the driver ``icd``
    (None: the loader's own choice)."""
    env = dict(os.environ)
    if icd:
        env["VK_ICD_FILENAMES"] = env["VK_DRIVER_FILES"] = icd
    return env


def read_answer(stdout: str, stderr: str, returncode: int) -> DelegateAnswer:
    """The partition a child that compiled a model for GPU|CPU logged: its stdout holds
    ``FULLY_ACCELERATED`` once the compilation succeeded, its stderr the delegate's log."""
    log = stdout + stderr
    adapter = ADAPTER.search(log)
    found = adapter.group(1) if adapter else ""
    if "FULLY_ACCELERATED" not in stdout:
        # The runtime's own reason, not the missing vendor plug-ins it also logs.
        why = [line for line in log.splitlines() if any(w in line for w in WHY)
               and "compiler_plugin" not in line and "openvino" not in line]
        return DelegateAnswer(False, (why[0] if why else f"exit {returncode}").strip(),
                              found, None, frozenset())
    block = log.split("Following operations are not supported by GPU delegate:")
    if len(block) == 1:
        return DelegateAnswer(True, "", found, None, frozenset())
    tail = block[1].split(" operations will run on the CPU.")[0]
    unsupported = frozenset(line.strip() for line in tail.splitlines()
                            if re.match(r"^[A-Z0-9_]+(:[^:]*)?: ", line.strip()))
    split, none = SPLIT.search(tail), NONE_ON_GPU.search(tail)
    return DelegateAnswer(True, "", found,
                          int(split.group(1)) if split else 0 if none else None, unsupported)
