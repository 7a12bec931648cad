"""Two questions about the installed distributions that a command reading a profile asks —
does any declare a devicefit target (an entry point), which version of a runtime's wheel is
installed — answered from the folders :mod:`importlib.metadata` reads, without importing it.

Importing :mod:`importlib.metadata` (``email``, ``csv``, ``zipfile``, ``inspect`` …) and
scanning with it cost ~0.03 CPU-s each time, a tenth of a static ``simulate`` each. The
look here follows that module's own search for the common case — each ``sys.path`` folder in
order, its ``*.dist-info`` and ``*.egg-info`` folders by their normalized name, the first
one found, its ``METADATA`` (else ``PKG-INFO``) header — and gives no answer (the caller
then asks :mod:`importlib.metadata`) wherever that module could see more or parse
differently: a zip or an ``.egg`` on the path, a finder of distributions other than the
standard one, a folded header.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator


class _Unsure(Exception):
    """The path holds something only :mod:`importlib.metadata` reads."""


def _folders() -> Iterator[tuple[str, str]]:
    """(normalized name, path) of each metadata folder on ``sys.path``, in the order
    :mod:`importlib.metadata` searches them."""
    import importlib.machinery

    if any(hasattr(finder, "find_distributions") and finder is not importlib.machinery.PathFinder
           for finder in sys.meta_path):
        raise _Unsure
    for entry in sys.path:
        root = os.fspath(entry) or "."
        if os.path.basename(root).lower().endswith(".egg"):
            raise _Unsure
        try:
            children = os.listdir(root)
        except NotADirectoryError:
            raise _Unsure from None  # a zip: importlib.metadata reads the distributions in it
        except (OSError, TypeError, ValueError):
            continue
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                yield _normalize(low.rpartition(".")[0].partition("-")[0]), \
                    os.path.join(root, child)


def _normalize(name: str) -> str:
    """PEP 503 normalization with dashes as underscores, as :mod:`importlib.metadata`."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def may_declare(group: str) -> bool:
    """False when certainly no installed distribution declares an entry point of
    ``group``: no metadata folder's ``entry_points.txt`` names it."""
    try:
        return any(group.encode() in (_read(os.path.join(folder, "entry_points.txt")) or b"")
                   for _, folder in _folders())
    except _Unsure:
        return True


def version(name: str) -> str | None:
    """The installed version of distribution ``name`` as ``importlib.metadata.version``
    gives it; None where this look cannot tell (not found here either)."""
    wanted = _normalize(name)
    try:
        folder = next((path for found, path in _folders() if found == wanted), None)
    except _Unsure:
        return None
    if folder is None:
        return None
    for file in ("METADATA", "PKG-INFO"):
        data = _read(os.path.join(folder, file))
        if data:
            try:
                return _header_version(data.decode("utf-8"))
            except UnicodeDecodeError:
                return None  # importlib.metadata raises on it: let it
    return None


def _header_version(text: str) -> str | None:
    """The ``Version`` header as :mod:`email`'s compat32 parser gives it (leading blanks and
    the line end stripped), None for none, several or a folded one."""
    lines = re.split(r"\r\n|\r|\n", text)  # email's line ends, not str.splitlines'
    found = []
    for i, line in enumerate(lines):
        if not line:
            break  # the headers end at the first blank line
        if line[:8].lower() == "version:":
            if i + 1 < len(lines) and lines[i + 1][:1] in (" ", "\t"):
                return None
            found.append(line[8:].lstrip(" \t"))
    return found[0] if len(found) == 1 else None
