"""Flash of a linked firmware image, by part, from GNU ld's map file.

The export's example linked for the device's core (:meth:`~.build.TflmBuild.binaries`) is a
firmware image without a board: the model array, TFLM's core, the kernels it registers, the
kernel library (CMSIS-NN) they call, the export's own code and the C/C++ runtime the link
pulled in. The map (read by :mod:`simulator.firmware.mapfile`) lists every input section
the linker kept, with its size and the object or archive member it came from; the output
sections that live in flash add up to what ``arm-none-eabi-size`` calls text + data, and
their input sections, by object, give each part. The rest is a part of its own: the
alignment fill between input sections, less the duplicate strings the linker merged (a
map lists string sections at their size before merging), so it can be negative.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from pathlib import Path

from devicefit.simulator.firmware.mapfile import read_map
from devicefit.simulator.report.report import FirmwareFlash, FlashPart

#: Output sections a Cortex-M image keeps in flash (``.data``: its initial values).
FLASH_SECTIONS = (".text", ".rodata", ".ARM.extab", ".ARM.exidx", ".preinit_array",
                  ".init_array", ".fini_array", ".data")
#: The parts, in the order reports list them.
PARTS = ("model", "tflm core", "kernels", "kernel library", "export", "c runtime",
         "fill, merged strings")


def classifier(core: Iterable[str], kernels: Iterable[str], library: Iterable[str],
               model: str, export: Iterable[str]) -> dict[str, str]:
    """Object base name → part, from the build's object lists."""
    out: dict[str, str] = {}
    for part, objs in (("tflm core", core), ("kernels", kernels),
                       ("kernel library", library), ("export", export)):
        out.update({Path(o).name: part for o in objs})
    out[Path(model).name] = "model"
    return out


def _base(where: str) -> str:
    """``lib.a(member.o)`` → ``member.o``; a plain object's file name."""
    where = where.strip()
    if where.endswith(")") and "(" in where:
        where = where[where.rindex("(") + 1:-1]
    return Path(where).name


def read_image(map_text: str) -> tuple[int, dict[tuple[str, str], int]]:
    """(flash bytes, bytes of each kept input section in flash by (object base name, input
    section)) of the image whose map is ``map_text``."""
    data = map_text.encode()
    link = read_map(io.BytesIO(data), Path("firmware.map"), len(data), ())
    total = sum(s.size for s in link.sections if s.name in FLASH_SECTIONS)
    pieces: dict[tuple[str, str], int] = {}
    for (section, obj, name), size in link.contents.items():
        if section in FLASH_SECTIONS:
            key = (_base(obj), name)
            pieces[key] = pieces.get(key, 0) + size
    return total, pieces


def firmware_flash(map_text: str, classify: Mapping[str, str], image: str) -> FirmwareFlash:
    """The flash of the image whose map is ``map_text``, by part (an object ``classify``
    does not name is the C runtime's)."""
    total, pieces = read_image(map_text)
    parts = dict.fromkeys(PARTS, 0)
    for (obj, _), size in pieces.items():
        parts[classify.get(obj) or "c runtime"] += size
    parts[PARTS[-1]] = total - sum(parts.values())
    return FirmwareFlash(total, tuple(FlashPart(p, parts[p]) for p in PARTS), image)
