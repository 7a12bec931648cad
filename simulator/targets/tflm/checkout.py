"""The user's TFLM checkout as devicefit reads it: its identity (commit and local changes)
and its op resolver's method names (``micro_mutable_op_resolver.h``), which an export
registers. Only read: nothing here writes into the checkout; git runs without taking
the checkout's index lock, on a copy of its index.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from devicefit.simulator.errors import InputError

RESOLVER_HEADER = "tensorflow/lite/micro/micro_mutable_op_resolver.h"


@dataclass(frozen=True)
class OpBinding:
    """How the op resolver adds one operator: its method and its registration function."""

    key: str  # builtin name ("CONV_2D") or custom code ("SignalEnergy")
    method: str  # MicroMutableOpResolver method ("AddConv2D")
    registration: str | None  # "Register_CONV_2D"; None: the method names none



def user_env() -> dict[str, str]:
    """The environment devicefit was started in, for finding tools; git never takes the
    checkout's index lock (``git status`` refreshes the index otherwise)."""
    return {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}



def source_key(tflm_dir: Path) -> str:
    """The checkout's sources: its git commit, plus a hash of its local changes (tracked
    and untracked files git does not ignore); a hash of every file without git.

    git reads a copy of the checkout's index: ``git diff`` rewrites the index it reads
    when a tracked file was touched without being changed (its stat is stale), whatever
    ``GIT_OPTIONAL_LOCKS`` says, and the user's checkout is never written."""
    env = user_env()

    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(tflm_dir), *args], env=env,
                              capture_output=True, check=True).stdout

    try:
        if (tflm_dir / ".git").exists():
            with tempfile.TemporaryDirectory(prefix="devicefit-git-") as tmp:
                index = Path(git("rev-parse", "--path-format=absolute", "--git-path", "index")
                             .decode().strip())
                copy = Path(tmp, "index")
                if index.is_file():
                    shutil.copyfile(index, copy)
                env = {**env, "GIT_INDEX_FILE": str(copy)}
                head = git("rev-parse", "HEAD").decode().strip()
                changes = hashlib.sha256(git("diff", "HEAD", "--binary"))
                for name in sorted(git("ls-files", "--others", "--exclude-standard", "-z")
                                   .split(b"\0")):
                    if name and (path := tflm_dir / name.decode(errors="replace")).is_file():
                        changes.update(name + b"\0"
                                       + hashlib.sha256(path.read_bytes()).digest())
            dirty = changes.hexdigest() != hashlib.sha256(b"").hexdigest()
            return head[:12] + (f"+{changes.hexdigest()[:8]}" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    return "tree-" + tree_hash(tflm_dir)


def tree_hash(root: Path, skip: Iterable[str] = ("gen", ".git")) -> str:
    """sha256 over every regular file's path and content (``skip``: top-level folders
    left out)."""
    h = hashlib.sha256()
    for rel, path in files(root, set(skip)):
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:12]


def files(root: Path, skip: set[str]) -> Iterable[tuple[str, Path]]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (folder == str(root) and d in skip))
        for name in sorted(files):
            path = Path(folder, name)
            if not path.is_symlink() and path.is_file():
                yield str(path.relative_to(root)), path



def parse_resolver(header: str) -> dict[str, OpBinding]:
    """Operator → resolver method, from ``micro_mutable_op_resolver.h``'s ``Add*`` methods."""
    bindings: dict[str, OpBinding] = {}
    starts = [m for m in re.finditer(r"TfLiteStatus (Add\w+)\(", header)]
    for m, nxt in zip(starts, [*starts[1:], None], strict=True):
        body = header[m.start():nxt.start() if nxt else len(header)]
        method = m.group(1)
        builtin = re.search(r"BuiltinOperator_(\w+)", body)
        custom = re.search(r'AddCustom\(\s*"([^"]+)"', body)
        key = builtin.group(1) if builtin else custom.group(1) if custom else None
        if key is None or method in ("AddBuiltin", "AddCustom"):
            continue
        reg = re.search(r"\b(Register_\w+)\(", body)
        bindings.setdefault(key, OpBinding(key, method, reg.group(1) if reg else None))
    return bindings


def resolver_methods(header: str) -> dict[str, str]:
    """Operator key → resolver method, from ``micro_mutable_op_resolver.h`` (what an export
    registers). ``AddEthosU`` names its custom code through a function, not a literal:
    it is TFLM's "ethos-u" (``GetString_ETHOSU``)."""
    methods = {key: b.method for key, b in parse_resolver(header).items()}
    if re.search(r"TfLiteStatus AddEthosU\(", header):
        methods["ethos-u"] = "AddEthosU"
    return dict(sorted(methods.items()))


def checkout_methods(checkout: Path) -> tuple[dict[str, str], str]:
    """The resolver methods of a TFLM checkout (:func:`resolver_methods`) and its name in an
    export ("TFLM <commit> (your checkout)": no local path, so the files are the same
    wherever the checkout lies)."""
    header = checkout / RESOLVER_HEADER
    try:
        text = header.read_text(errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read {header} ({exc.strerror or exc}); give a "
                               "TFLite-Micro checkout") from None
    return resolver_methods(text), f"TFLM {source_key(checkout)} (your checkout)"



def op_key(op_name: str) -> str:
    """The resolver's key of a simulator op name ("CUSTOM:SignalEnergy" → "SignalEnergy")."""
    return op_name.split(":", 1)[1] if op_name.startswith("CUSTOM:") else op_name


