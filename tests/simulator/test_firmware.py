"""The firmware readers on real links (``tests/fixtures/firmware``, made by its build.sh with
the Arm GNU toolchain): GNU ld map files, ARM ELFs, the export manifest, and every way a
file can be cut short or made up."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from pathlib import Path

import pytest

from devicefit.simulator.errors import InputError
from devicefit.simulator.firmware import elf, mapfile
from devicefit.simulator.firmware.formats import read_firmware
from devicefit.simulator.firmware.link import Region
from devicefit.simulator.firmware.manifest import read_manifest
from tests.firmware_links import ARENA, FIXTURES, MODEL, manifest, model_bytes

NAMES = (MODEL, ARENA)


def test_the_model_bytes_are_those_the_readme_gives():
    data = model_bytes()
    assert len(data) == 1024 and data[4:8] == b"TFL3"
    assert hashlib.sha256(data).hexdigest() in (FIXTURES / "README.md").read_text()


def test_a_map_with_memory_regions():
    fmt, link = read_firmware(FIXTURES / "regions.map", NAMES)
    assert fmt.name == "GNU ld map file"
    assert link.regions == (Region("FLASH", 0x08000000, 2 * 1024**2, "xr"),
                            Region("RAM", 0x20000000, 640 * 1024, "xrw"))
    model, arena = link.symbols["x_model_data"], link.symbols["x_tensor_arena"]
    assert (model.address, model.size, model.section) == (0x08000400, 1024,
                                                          ".rodata.x_model_data")
    assert (arena.address, arena.size, arena.section) == (0x20000090, 4096,
                                                          ".bss.x_tensor_arena")
    # Allocated output sections only (not .ARM.attributes or .comment, at address 0).
    assert [s.name for s in link.sections] == [".text", ".rodata", ".ARM.exidx", ".init_array",
                                               ".data", ".bss"]
    assert max(s.end for s in link.sections if link.regions[1].holds(s.address)) == 0x20001120
    assert {"main", "memset", "x_model_data"} <= link.names
    assert not link.digests and "not their bytes" in link.no_digest["x_model_data"]
    assert ".text" in link.discarded  # crti.o's empty .text, in "Discarded input sections"


def test_a_map_of_the_default_linker_script_has_no_regions():
    _, link = read_firmware(FIXTURES / "default.map", NAMES)
    assert link.regions == ()
    assert link.symbols["x_tensor_arena"].size == 4096


def test_without_data_sections_a_map_gives_no_size():
    _, link = read_firmware(FIXTURES / "nods.map", NAMES)
    model = link.symbols["x_model_data"]
    assert (model.address, model.size, model.section) == (0x08000400, None, ".rodata")
    assert "-fdata-sections" in model.size_unknown and "nods.o" in model.size_unknown


def test_an_elf_gives_sizes_flags_and_bytes():
    fmt, link = read_firmware(FIXTURES / "regions.elf", NAMES)
    assert fmt.name == "ELF" and link.regions is None
    model, arena = link.symbols["x_model_data"], link.symbols["x_tensor_arena"]
    assert (model.address, model.size, model.section) == (0x08000400, 1024, ".rodata")
    assert (arena.address, arena.size, arena.section) == (0x20000090, 4096, ".bss")
    flags = {s.name: s.writable for s in link.sections}
    assert flags == {".text": False, ".rodata": False, ".ARM.exidx": False, ".init_array": True,
                     ".data": True, ".bss": True}
    assert link.digests == {"x_model_data": hashlib.sha256(model_bytes()).hexdigest()}
    assert "does not hold" in link.no_digest["x_tensor_arena"]  # .bss is NOBITS


def test_the_changed_model_hashes_differently():
    _, link = read_firmware(FIXTURES / "model_changed.elf", NAMES)
    assert link.digests["x_model_data"] == hashlib.sha256(model_bytes(0x1D)).hexdigest()


def test_a_local_symbol_is_found_by_its_input_section(tmp_path):
    """The map lists global symbols only; TFLM's examples keep their arena in an anonymous
    namespace, which -fdata-sections still gives a section of its own."""
    text = (FIXTURES / "regions.map").read_text()
    text = "\n".join(ln for ln in text.splitlines()
                     if not re.fullmatch(r"\s+0x[0-9a-f]+\s+x_tensor_arena", ln))
    (tmp_path / "local.map").write_text(text)
    _, link = read_firmware(tmp_path / "local.map", NAMES)
    arena = link.symbols["x_tensor_arena"]
    assert (arena.address, arena.size) == (0x20000090, 4096)


# --------------------------------------------------------------------------- hostile files
def _truncated_elf(at: int) -> bytes:
    return (FIXTURES / "regions.elf").read_bytes()[:at]


def _elf_with(*patches: tuple[int, str, int]) -> bytes:
    """regions.elf with values packed in: (offset, struct format, value)."""
    data = bytearray((FIXTURES / "regions.elf").read_bytes())
    for offset, fmt, value in patches:
        struct.pack_into(fmt, data, offset, value)
    return bytes(data)


#: Where regions.elf's section headers start (e_shoff).
SHOFF = struct.unpack_from("<I", (FIXTURES / "regions.elf").read_bytes(), 32)[0]


def _symtab_offset() -> int:
    """The file offset of regions.elf's symbol table (from its section headers)."""
    data = (FIXTURES / "regions.elf").read_bytes()
    shoff, = struct.unpack_from("<I", data, 32)
    shnum, = struct.unpack_from("<H", data, 48)
    for i in range(shnum):
        if struct.unpack_from("<I", data, shoff + 40 * i + 4)[0] == elf.SHT_SYMTAB:
            return struct.unpack_from("<I", data, shoff + 40 * i + 16)[0]
    raise AssertionError("no symbol table")


HOSTILE = [
    # (id, file bytes, fragment of the one error line)
    ("empty", b"", "neither an ELF nor a GNU ld map file"),
    ("text", b"hello\n", "neither an ELF nor a GNU ld map file"),
    ("elf-magic-only", b"\x7fELF", "ends at byte 52, past the end of the file (4 bytes)"),
    ("elf-cut-in-section-headers", _truncated_elf(0x1300), "the section header table ends at"),
    ("elf-64-bit", _elf_with((4, "<B", 2)), "a 64-bit ELF"),
    ("elf-big-endian", _elf_with((5, "<B", 2)), "big-endian"),
    ("elf-x86-64", _elf_with((18, "<H", 62)), "an ELF for x86-64, not ARM"),
    ("elf-object-file", _elf_with((16, "<H", elf.ET_REL)), "an object file"),
    ("elf-no-section-headers", _elf_with((32, "<I", 0)), "no section headers"),
    ("elf-section-headers-far", _elf_with((32, "<I", 0xFFFFFF00)), "past the end of the file"),
    ("elf-odd-header-size", _elf_with((46, "<H", 64)), "section headers of 64 bytes"),
    ("elf-bad-name-table", _elf_with((50, "<H", 999)), "section 999, which the ELF lacks"),
    # e_shnum 0: the count is section 0's sh_size, here 2**28 headers.
    ("elf-huge-extended-count", _elf_with((48, "<H", 0), (SHOFF + 20, "<I", 1 << 28)),
     "the section header table is 10,737,418,240 bytes; the limit is"),
    # .symtab (section 9, at 0x988) said to be 64 KiB long.
    ("elf-symbol-table-past-the-end", _elf_with((SHOFF + 9 * 40 + 20, "<I", 0x10000)),
     "the symbol table ends at byte 67,976, past the end of the file (5,308 bytes)"),
    ("elf-extended-count-zero", _elf_with((48, "<H", 0)), "which the ELF lacks"),
    ("map-heading-only", b"Memory Configuration\n", "no 'Linker script and memory map' part"),
    ("map-cut-short", (FIXTURES / "regions.map").read_bytes().split(b"Linker script")[0],
     "no 'Linker script and memory map' part"),
]


@pytest.mark.parametrize("data,fragment", [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_a_broken_file_is_one_input_error(tmp_path, data, fragment):
    path = tmp_path / "firmware"
    path.write_bytes(data)
    with pytest.raises(InputError, match=re.escape(fragment)):
        read_firmware(path, NAMES)


def test_a_symbol_outside_its_section_is_a_damaged_elf(tmp_path):
    """x_model_data's st_value moved past .rodata's end: no bytes are read from elsewhere."""
    data = bytearray((FIXTURES / "regions.elf").read_bytes())
    at = data.index(struct.pack("<II", 0x08000400, 1024), _symtab_offset())
    struct.pack_into("<I", data, at, 0x08000800)
    (tmp_path / "bad.elf").write_bytes(bytes(data))
    with pytest.raises(InputError, match="lies outside its section .rodata: a damaged ELF"):
        read_firmware(tmp_path / "bad.elf", NAMES)


def test_a_map_with_odd_lines_keeps_what_it_can_read(tmp_path):
    """Overlong lines, stray bytes and figures with nothing before them are skipped."""
    text = (FIXTURES / "regions.map").read_bytes()
    odd = (b"\n" + b"x" * (mapfile.MAX_LINE * 3) + b"\n\xff\xfe\x00 0x20000000 0x10\n"
           b"                0xzz  nothing\n .bss.\n")
    at = text.index(b".bss            0x20000070")
    (tmp_path / "odd.map").write_bytes(text[:at] + odd + text[at:])
    _, link = read_firmware(tmp_path / "odd.map", NAMES)
    assert link.symbols["x_tensor_arena"].size == 4096


def test_a_huge_map_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(mapfile, "MAX_BYTES", 10_000)
    with pytest.raises(InputError, match="a map file of 28,351 bytes; the limit is 10,000"):
        read_firmware(FIXTURES / "regions.map", NAMES)


def test_a_huge_symbol_table_is_refused(monkeypatch):
    monkeypatch.setattr(elf, "MAX_TABLE", 1000)
    with pytest.raises(InputError, match="the symbol table is 1,648 bytes; the limit is 1,000"):
        read_firmware(FIXTURES / "regions.elf", NAMES)


@pytest.mark.parametrize("where", ["folder", "fifo", "missing"])
def test_only_a_regular_file_is_read(tmp_path, where):
    path = tmp_path / "fw"
    if where == "folder":
        path.mkdir()
    elif where == "fifo":
        os.mkfifo(path)
    with pytest.raises(InputError, match={"folder": "is a folder", "fifo": "not a regular file",
                                          "missing": "cannot be read"}[where]):
        read_firmware(path, NAMES)


# --------------------------------------------------------------------------- the manifest
MANIFEST = manifest()


def _manifest(folder: Path, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "manifest.json").write_text(text)
    return folder


def test_the_manifest_of_the_contract_reads(tmp_path):
    m = read_manifest(_manifest(tmp_path / "x", json.dumps({**MANIFEST, "later_key": [1]})))
    assert (m.model_symbol, m.model_bytes, m.model_sha256) == (
        "x_model_data", 1024, hashlib.sha256(model_bytes()).hexdigest())
    assert (m.arena_symbol, m.arena_bytes, m.start_arena_bytes, m.alignment) == \
        ("x_tensor_arena", 4096, 4096, 16)
    assert m.profile == "stm32l4r5-cortex-m4"


def _broken(**changes: object) -> str:
    data = json.loads(json.dumps(MANIFEST))
    for dotted, value in changes.items():
        section, _, key = dotted.rpartition("__")
        (data[section] if section else data)[key] = value
    return json.dumps(data)


BAD_MANIFESTS = [
    ("not-json", "{", "not JSON"),
    ("deep", "[" * 60_000, "not JSON"),
    ("a-list", "[]", "no 'devicefit_export' key"),
    ("version-2", _broken(devicefit_export=2), "devicefit_export is '2'; this devicefit reads "
                                               "version 1"),
    ("version-true", _broken(devicefit_export=True), "devicefit_export is 'True'"),
    ("no-model", json.dumps({k: v for k, v in MANIFEST.items() if k != "model"}),
     "model is missing; expected an object"),
    ("bytes-text", _broken(model__bytes="1024"), "model.bytes is '1024'; expected a whole"),
    ("bytes-float", _broken(arena__bytes=4096.0), "arena.bytes is '4096.0'"),
    ("bytes-negative", _broken(arena__start_arena_bytes=-1), "never negative"),
    ("sha-short", _broken(model__sha256="abc"), "not 64 hex digits"),
    ("symbol-not-c", _broken(arena__symbol="a b"), "is not a C identifier"),
    ("alignment-12", _broken(arena__alignment=12), "a power of two"),
    ("huge-number", '{"devicefit_export": 1, "model": {"bytes": ' + "9" * 5000 + "}}",
     "not JSON"),
]


@pytest.mark.parametrize("text,fragment", [c[1:] for c in BAD_MANIFESTS],
                         ids=[c[0] for c in BAD_MANIFESTS])
def test_a_bad_manifest_is_one_input_error(tmp_path, text, fragment):
    with pytest.raises(InputError, match=re.escape(fragment)):
        read_manifest(_manifest(tmp_path / "x", text))


def test_an_export_folder_without_a_manifest(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="export manifest not found"):
        read_manifest(tmp_path / "empty")
    with pytest.raises(InputError, match="no such folder"):
        read_manifest(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="not a folder"):
        read_manifest(tmp_path / "file")
