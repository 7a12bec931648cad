"""Flash of a linked firmware image, by part, from GNU ld's map file.

The export's example linked for the device's core (:meth:`~.build.TflmBuild.binaries`) is a
firmware image without a board: the model array, TFLM's core, the kernels it registers, the
kernel library (CMSIS-NN) they call, the export's own code and the C/C++ runtime the link
pulled in. The map lists every input section the linker kept, with its size and the object
(or archive member) it came from; summing the sections of the output sections that live in
flash gives each part's bytes, and their sum is what ``arm-none-eabi-size`` calls text +
data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from devicefit.simulator.report import FirmwareFlash, FlashPart

#: Output sections a Cortex-M image keeps in flash (``.data``: its initial values).
FLASH_SECTIONS = (".text", ".rodata", ".ARM.extab", ".ARM.exidx", ".preinit_array",
                  ".init_array", ".fini_array", ".data")
#: The parts, in the order reports list them.
PARTS = ("model", "tflm core", "kernels", "kernel library", "export", "c runtime")

_OUTPUT = re.compile(r"^(\.[\w.]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)")
#: An input section: ` .text.name  0xADDR  0xSIZE  file`, the name alone on its line when
#: long (the address, size and file on the next), or ` *fill*  0xADDR  0xSIZE`.
_INPUT = re.compile(r"^ (\S+)?\s*0x([0-9a-f]+)\s+0x([0-9a-f]+)(?:\s+(\S.*))?$")
_MEMBER = re.compile(r"\(([^()]+)\)$")


def parse_map(text: str, classify: Mapping[str, str]) -> tuple[int, dict[str, int]]:
    """(flash bytes, bytes by part) of the map ``text``: each kept input section of a flash
    output section goes to ``classify[file name]`` (the object's or archive member's base
    name), else to "c runtime"; fill between sections goes with its output section's
    part that precedes it."""
    body = text.split("Linker script and memory map", 1)[-1]
    total = 0
    parts: dict[str, int] = dict.fromkeys(PARTS, 0)
    section: str | None = None
    pending: str | None = None
    last = "c runtime"
    for line in body.splitlines():
        if out := _OUTPUT.match(line):
            section = out.group(1) if out.group(1) in FLASH_SECTIONS else None
            if section is not None:
                total += int(out.group(3), 16)
            continue
        if line and not line[0].isspace():
            # another output section (named alone on its line) or a directive
            first = line.split()[0]
            section = first if first in FLASH_SECTIONS else None
            pending = None
            continue
        if section is None:
            continue
        m = _INPUT.match(line)
        if m is None:
            stripped = line.strip()
            # a long input section's name, alone: its figures follow on the next line
            pending = stripped if stripped.startswith((".", "*fill*")) and " " not in \
                stripped else None
            continue
        name = m.group(1) or pending
        size, where = int(m.group(3), 16), m.group(4)
        pending = None
        if name is None or size == 0 or name.startswith("*("):
            continue
        if name == "*fill*":
            parts[last] += size
            continue
        if where is None:
            continue
        last = classify.get(_base(where)) or "c runtime"
        parts[last] += size
    return total, parts


def _base(where: str) -> str:
    member = _MEMBER.search(where.strip())
    return Path(member.group(1) if member else where.strip()).name


def classifier(core: Iterable[str], kernels: Iterable[str], library: Iterable[str],
               model: str, export: Iterable[str]) -> dict[str, str]:
    """Object base name → part, from the build's object lists."""
    out: dict[str, str] = {}
    for part, objs in (("tflm core", core), ("kernels", kernels),
                       ("kernel library", library), ("export", export)):
        out.update({Path(o).name: part for o in objs})
    out[Path(model).name] = "model"
    return out


def firmware_flash(map_text: str, classify: Mapping[str, str], image: str) -> FirmwareFlash:
    """The flash of the image whose map is ``map_text``, by part."""
    total, parts = parse_map(map_text, classify)
    return FirmwareFlash(total, tuple(FlashPart(p, parts[p]) for p in PARTS), image)
