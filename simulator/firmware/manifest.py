"""The manifest ``devicefit export`` writes beside the firmware component it exports
(``DIR/manifest.json``): what devicefit verified, which the link check holds the firmware to.

Version 1::

    {"devicefit_export": 1, "name": "digits", "profile": "stm32l4r5-cortex-m4",
     "model": {"bytes": 74412, "sha256": "<hex>", "symbol": "digits_model_data"},
     "arena": {"bytes": 6784, "start_arena_bytes": 6784, "symbol": "digits_tensor_arena",
               "alignment": 16},
     "build": {"core": "cortex-m4", "kernels": "cmsis-nn"}}

Unknown keys are ignored, so that a later writer may add some within version 1; a key this
reader needs that is missing or of the wrong type, or another version, is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import InputError
from devicefit.simulator.infra.safeyaml import read_regular_file

MANIFEST = "manifest.json"
VERSION = 1
#: The largest manifest read (one is a few hundred bytes).
MAX_BYTES = 64 * 1024

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ExportManifest:
    folder: Path
    name: str
    #: The profile the export was verified on.
    profile: str
    model_symbol: str
    model_bytes: int
    model_sha256: str
    arena_symbol: str
    #: The arena array's size in the exported code.
    arena_bytes: int
    #: The arena the verdict assumed (simulate's start arena): the least that may be linked.
    start_arena_bytes: int
    #: The arena's alignment in bytes (TFLM's is 16).
    alignment: int


def read_manifest(folder: Path) -> ExportManifest:
    """The manifest of the export in ``folder``; :class:`InputError` when there is none or
    it does not read as version 1."""
    if not folder.is_dir():
        raise InputError(f"--export {folder}: " + ("not a folder; give the folder devicefit "
                                                     "export wrote" if folder.exists()
                                                     else "no such folder"))
    path = folder / MANIFEST
    text = read_regular_file(path, "export manifest", limit=MAX_BYTES, kind=".json")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting thousands deep
        raise InputError(f"{path}: not JSON ({str(exc)[:80]})") from exc
    if not isinstance(data, dict) or "devicefit_export" not in data:
        raise InputError(f"{path}: not a devicefit export manifest (no 'devicefit_export' key)")
    if data["devicefit_export"] != VERSION or isinstance(data["devicefit_export"], bool):
        raise InputError(f"{path}: devicefit_export is {str(data['devicefit_export'])[:20]!r}; "
                         f"this devicefit reads version {VERSION} (a newer devicefit wrote it?)")
    model, arena = _section(data, "model", path), _section(data, "arena", path)
    return ExportManifest(
        folder=folder,
        name=_get(data, "name", str, path),
        profile=_get(data, "profile", str, path),
        model_symbol=_symbol(model, "model", path),
        model_bytes=_count(model, "model", "bytes", path),
        model_sha256=_sha256(model, path),
        arena_symbol=_symbol(arena, "arena", path),
        arena_bytes=_count(arena, "arena", "bytes", path),
        start_arena_bytes=_count(arena, "arena", "start_arena_bytes", path),
        alignment=_alignment(arena, path),
    )


def _section(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    return _get(data, key, dict, path)


#: The JSON types read, as an error names them.
_KINDS = {str: "a string", dict: "an object", int: "a whole number"}


def _get(data: dict[str, Any], key: str, kind: type, path: Path, where: str = "") -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) or value == "":
        shown = "missing" if key not in data else f"{str(value)[:40]!r}"
        raise InputError(f"{path}: {where}{key} is {shown}; expected {_KINDS[kind]}")
    return value


def _symbol(section: dict[str, Any], where: str, path: Path) -> str:
    name = _get(section, "symbol", str, path, f"{where}.")
    if not _SYMBOL.fullmatch(name):
        raise InputError(f"{path}: {where}.symbol {name[:40]!r} is not a C identifier")
    return name


def _count(section: dict[str, Any], where: str, key: str, path: Path) -> int:
    value = _get(section, key, int, path, f"{where}.")
    if value < 0:
        raise InputError(f"{path}: {where}.{key} is {value}; a size is never negative")
    return int(value)


def _sha256(model: dict[str, Any], path: Path) -> str:
    digest = _get(model, "sha256", str, path, "model.")
    if not _SHA256.fullmatch(digest.lower()):
        raise InputError(f"{path}: model.sha256 {digest[:70]!r} is not 64 hex digits")
    return digest.lower()


def _alignment(arena: dict[str, Any], path: Path) -> int:
    value = _get(arena, "alignment", int, path, "arena.")
    if value < 1 or value & (value - 1):
        raise InputError(f"{path}: arena.alignment is {value}; expected a power of two")
    return int(value)
