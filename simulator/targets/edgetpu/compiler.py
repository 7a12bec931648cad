"""The real ``edgetpu_compiler``: run it when it is installed, and read its log.

The compiler is x86 Debian only; devicefit's figures are predictions without it, and the
compiler's own word is reported beside them when it is on PATH.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from devicefit.simulator.infra.fileio import temporary_folder

log = logging.getLogger(__name__)

COMPILER = "edgetpu_compiler"
#: The compiler stops itself after 180 s ("Started a compilation timeout timer of 180
#: seconds"); the child process gets a margin on top before devicefit gives up on it.
COMPILER_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class OpTableRow:
    operator: str
    count: int
    status: str


@dataclass
class CompilerLog:
    """Figures read from a real ``edgetpu_compiler`` run (stdout and/or its ``.log``)."""

    version: str | None = None
    on_chip_used_bytes: int | None = None
    on_chip_remaining_bytes: int | None = None
    off_chip_bytes: int | None = None
    subgraphs: int | None = None
    total_ops: int | None = None
    tpu_ops: int | None = None
    cpu_ops: int | None = None
    table: list[OpTableRow] = field(default_factory=list)
    error: str | None = None


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(B|KiB|MiB|GiB)\s*$")
_SIZE_FACTORS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_ROW = re.compile(r"^([A-Z][A-Z0-9_]*|CUSTOM\S*)\s{2,}(\d+)\s{2,}(\S.*?)\s*$")
_SUMMARY = {
    "On-chip memory used for caching model parameters": ("on_chip_used_bytes", "size"),
    "On-chip memory remaining for caching model parameters": ("on_chip_remaining_bytes", "size"),
    "Off-chip memory used for streaming uncached model parameters": ("off_chip_bytes", "size"),
    "Number of Edge TPU subgraphs": ("subgraphs", "int"),
    "Total number of operations": ("total_ops", "int"),
    "Number of operations that will run on Edge TPU": ("tpu_ops", "int"),
    "Number of operations that will run on CPU": ("cpu_ops", "int"),
}
_ERRORS = ("ERROR:", "Invalid model", "Model could not be parsed", "Compilation failed",
           "Internal compiler error")


def compiler_size(text: str) -> int | None:
    """``7.67MiB`` → bytes. The compiler rounds to 2 decimals, so this is ±0.5 % at most."""
    m = _SIZE.match(text)
    return round(float(m.group(1)) * _SIZE_FACTORS[m.group(2)]) if m else None


def parse_compiler_log(text: str) -> CompilerLog:
    """Read ``edgetpu_compiler`` stdout (``-s``) or its ``*_edgetpu.log`` into figures."""
    out = CompilerLog()
    errors = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Edge TPU Compiler version"):
            out.version = stripped.rsplit(" ", 1)[-1]
            continue
        key, sep, value = stripped.partition(":")
        if sep and key in _SUMMARY:
            attr, kind = _SUMMARY[key]
            parsed = compiler_size(value) if kind == "size" else int(value.strip())
            setattr(out, attr, parsed)
            continue
        if stripped.startswith(_ERRORS) and "successfully" not in stripped:
            errors.append(stripped)
            continue
        m = _ROW.match(stripped)
        if m and m.group(1) != "Operator":
            out.table.append(OpTableRow(m.group(1), int(m.group(2)), m.group(3)))
    if errors:
        out.error = " ".join(errors)
    if out.table:
        mapped = sum(r.count for r in out.table if r.status == "Mapped to Edge TPU")
        total = sum(r.count for r in out.table)
        # The summary lines are missing from the .log and from fully mapped compilations.
        out.tpu_ops = mapped if out.tpu_ops is None else out.tpu_ops
        out.cpu_ops = total - mapped if out.cpu_ops is None else out.cpu_ops
        out.total_ops = total if out.total_ops is None else out.total_ops
    return out


def compiler_available() -> bool:
    return shutil.which(COMPILER) is not None


def run_compiler(model_path: str | Path, timeout_s: float = COMPILER_TIMEOUT_S) -> CompilerLog:
    """Run the real ``edgetpu_compiler`` (child process, timeout) into a temp folder; parse it.

    A crash, a refusal or a timeout is recorded in ``CompilerLog.error``, not raised: the
    prediction stands on its own and the compiler's word is reported beside it.
    """
    exe = shutil.which(COMPILER)
    if exe is None:
        return CompilerLog(error=f"{COMPILER} is not on PATH")
    with temporary_folder("devicefit-edgetpu-") as tmp:
        try:
            proc = subprocess.run([exe, "-s", "-o", tmp, str(Path(model_path).resolve())],
                                  capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            parsed = CompilerLog(error=f"{COMPILER} did not finish within {timeout_s:.0f} s")
        except OSError as exc:
            parsed = CompilerLog(error=f"{COMPILER} could not start: {exc}")
        else:
            text = proc.stdout + "\n" + proc.stderr
            parsed = parse_compiler_log(text)
            logs = sorted(Path(tmp).glob("*_edgetpu.log"))
            if not parsed.table and logs:  # the per-op table only went to the .log file
                parsed = parse_compiler_log(text + "\n" + logs[0].read_text(errors="replace"))
            if proc.returncode != 0 and parsed.error is None:
                parsed.error = f"{COMPILER} exited with status {proc.returncode}"
    if parsed.error:
        log.warning("%s on %s: %s", COMPILER, model_path, parsed.error)
    return parsed
