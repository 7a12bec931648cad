"""Writing outputs safely: atomically (temp file + rename) and never over an input."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from simulator.errors import UsageError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, data: bytes | str, *,
                 inputs: Iterable[str | Path] = ()) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``.

    A reader never sees a half-written file, and a crash leaves the old file intact.
    ``inputs`` are the command's input files: writing over one of them is refused.
    """
    target = Path(path)
    for source in inputs:
        if Path(source).exists() and target.exists() and target.resolve() == Path(source).resolve():
            raise UsageError(f"refusing to overwrite the input file {source}; choose another output")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"output folder does not exist: {folder}")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file private (0600); an output gets the mode a plain open() gives.
        os.fchmod(fd, target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
