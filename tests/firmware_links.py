"""The linked firmware of ``tests/fixtures/firmware`` (its README says how each file was
made) and export manifests that describe it, for the link check's tests."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.paths import TESTS

FIXTURES = TESTS / "fixtures" / "firmware"
MODEL, ARENA = "x_model_data", "x_tensor_arena"
#: The Arm GNU toolchain's C++ compiler, when installed (CI may lack it).
TOOLCHAIN = shutil.which("arm-none-eabi-g++")
NO_TOOLCHAIN = "the Arm GNU toolchain (arm-none-eabi-g++) is not installed"


def model_bytes(first: int = 0x1C) -> bytes:
    """The model array of firmware.cc, from its source (not through any reader of devicefit)."""
    source = (FIXTURES / "firmware.cc").read_text()
    body = source[source.index("x_model_data[1024] = {"):].split("};")[0]
    body = re.sub(r"//.*", "", body).replace("MODEL_FIRST_BYTE", f"{first:#x}")
    return bytes(int(h, 16) for h in re.findall(r"0x[0-9a-f]{2}\b", body))


def manifest(**arena: Any) -> dict[str, Any]:
    """The manifest devicefit export would write for firmware.cc's model and arena."""
    data = model_bytes()
    return {"devicefit_export": 1, "name": "x", "profile": "stm32l4r5-cortex-m4",
            "model": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "symbol": MODEL},
            "arena": {"bytes": 4096, "start_arena_bytes": 4096, "symbol": ARENA,
                      "alignment": 16, **arena},
            "build": {"core": "cortex-m4", "kernels": "cmsis-nn"}}


def write_export(folder: Path, data: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(data))
    return folder


def build(out: Path) -> Path:
    """Link the fixtures anew into ``out`` with build.sh (needs :data:`TOOLCHAIN`)."""
    subprocess.run(["sh", str(FIXTURES / "build.sh"), str(out)], check=True,
                   capture_output=True, timeout=300)
    return out
