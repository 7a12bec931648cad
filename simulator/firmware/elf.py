"""Linked 32-bit little-endian ARM ELF files, read in bounded slices: the header, the
section headers, the symbol table and the bytes of the symbols asked for.

Layouts: the System V ABI's ``Elf32_Ehdr`` (52 bytes), ``Elf32_Shdr`` (40) and
``Elf32_Sym`` (16), with ``EM_ARM`` = 40 (Arm's "ELF for the Arm Architecture"). Every
offset and size comes from the file, so each is checked against the file's size before it
is read, and a table is read only up to :data:`MAX_TABLE` bytes: a cut-short or made-up file
is one line of error, never a traceback or a read past what is there.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from devicefit.simulator.errors import InputError
from devicefit.simulator.firmware.link import Link, Section, Symbol

MAGIC = b"\x7fELF"
_HEADER = struct.Struct("<16sHHIIIIIHHHHHH")
_SECTION = struct.Struct("<10I")
_SYMBOL = struct.Struct("<IIIBBH")

ELFCLASS32, ELFDATA2LSB, EM_ARM = 1, 1, 40
ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
SHT_SYMTAB, SHT_NOBITS = 2, 8
SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHN_LORESERVE, SHN_XINDEX = 0xFF00, 0xFFFF
STT_SECTION, STT_FILE = 3, 4
STB_LOCAL = 0

#: The largest section header, symbol or string table read (4 million symbols).
MAX_TABLE = 64 * 1024 * 1024
#: Bytes hashed at a time.
CHUNK = 1024 * 1024

#: Machines an ELF given by mistake is likely for, named in the error.
MACHINES = {3: "x86", 8: "MIPS", 62: "x86-64", 94: "Xtensa", 183: "AArch64", 243: "RISC-V"}


def sniff(head: bytes) -> bool:
    return head.startswith(MAGIC)


@dataclass(frozen=True)
class _Header:
    """One ``Elf32_Shdr``: the fields read here."""

    name: int
    type: int
    flags: int
    address: int
    offset: int
    size: int
    link: int


class _File:
    """Reads of an open file that never go past its end."""

    def __init__(self, f: BinaryIO, path: Path, size: int) -> None:
        self.f, self.path, self.size = f, path, size

    def read(self, offset: int, length: int, what: str) -> bytes:
        if length > MAX_TABLE:
            raise InputError(f"{self.path}: {what} is {length:,} bytes; the limit is "
                             f"{MAX_TABLE:,}")
        self._check(offset, length, what)
        self.f.seek(offset)
        data = self.f.read(length)
        if len(data) != length:
            raise InputError(f"{self.path}: {what} could not be read whole: is the file "
                             "being written?")
        return data

    def sha256(self, offset: int, length: int, what: str) -> str:
        self._check(offset, length, what)
        digest = hashlib.sha256()
        self.f.seek(offset)
        while length and (chunk := self.f.read(min(CHUNK, length))):
            digest.update(chunk)
            length -= len(chunk)
        if length:
            raise InputError(f"{self.path}: {what} could not be read whole")
        return digest.hexdigest()

    def _check(self, offset: int, length: int, what: str) -> None:
        if offset + length > self.size:
            raise InputError(f"{self.path}: {what} ends at byte {offset + length:,}, past the "
                             f"end of the file ({self.size:,} bytes): is it cut short?")


def _string(table: bytes, offset: int) -> str:
    """The NUL-terminated name at ``offset`` of a string table ('' outside it)."""
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace") \
        if offset < len(table) else ""


def _check_header(path: Path, ident: bytes, kind: int, machine: int) -> None:
    if ident[4] != ELFCLASS32:
        raise InputError(f"{path}: a 64-bit ELF; link-check reads 32-bit ARM firmware")
    if ident[5] != ELFDATA2LSB:
        raise InputError(f"{path}: a big-endian ELF; link-check reads little-endian ARM "
                         "firmware")
    if machine != EM_ARM:
        named = MACHINES.get(machine, f"machine {machine}")
        raise InputError(f"{path}: an ELF for {named}, not ARM")
    if kind == ET_REL:
        raise InputError(f"{path}: an object file, not a linked firmware: give the ELF the "
                         "link wrote")
    if kind not in (ET_EXEC, ET_DYN):
        raise InputError(f"{path}: an ELF of type {kind}, not a linked executable")


def _section_headers(file: _File, shoff: int, count: int, entsize: int) -> list[_Header]:
    if shoff == 0:
        raise InputError(f"{file.path}: this ELF has no section headers (stripped of them?)")
    if entsize != _SECTION.size:
        raise InputError(f"{file.path}: section headers of {entsize} bytes; ELF32 has "
                         f"{_SECTION.size}")
    if count == 0:  # more than 0xff00 sections: the count is in section 0 (ELF gABI)
        count = _SECTION.unpack(file.read(shoff, _SECTION.size, "section header 0"))[5]
    data = file.read(shoff, count * _SECTION.size, "the section header table")
    return [_Header(*(f[i] for i in (0, 1, 2, 3, 4, 5, 6)))
            for f in _SECTION.iter_unpack(data)]


def _table(file: _File, headers: list[_Header], index: int, what: str) -> bytes:
    if not 0 < index < len(headers):
        raise InputError(f"{file.path}: {what} is section {index}, which the ELF lacks")
    h = headers[index]
    return b"" if h.type == SHT_NOBITS else file.read(h.offset, h.size, what)


def read_elf(f: BinaryIO, path: Path, size: int, wanted: Collection[str]) -> Link:
    """The link an ELF records: its allocated sections with their flags, the symbols of
    ``wanted`` with their sizes, and the sha256 of each one's bytes where the file holds
    them."""
    file = _File(f, path, size)
    (ident, kind, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum,
     shstrndx) = _HEADER.unpack(file.read(0, _HEADER.size, "the ELF header"))
    _check_header(path, ident, kind, machine)
    headers = _section_headers(file, shoff, shnum, shentsize)
    if shstrndx == SHN_XINDEX and headers:
        shstrndx = headers[0].link
    names = _table(file, headers, shstrndx, "the section name table")
    sections = [_string(names, h.name) for h in headers]
    symtab = next((i for i, h in enumerate(headers) if h.type == SHT_SYMTAB), None)
    if symtab is None:
        raise InputError(f"{path}: this ELF has no symbol table (stripped?): give the "
                         "unstripped ELF or the map file")
    table = _table(file, headers, symtab, "the symbol table")
    strings = _table(file, headers, headers[symtab].link, "the symbol names")
    symbols: dict[str, tuple[Symbol, int]] = {}
    seen: set[str] = set()
    for name_at, value, length, info, _, shndx in _SYMBOL.iter_unpack(
            table[:len(table) - len(table) % _SYMBOL.size]):
        name = _string(strings, name_at)
        # Section and file symbols, and ARM's mapping symbols ($a, $t, $d), name no data.
        if not name or name.startswith("$") or info & 0xF in (STT_SECTION, STT_FILE) \
                or shndx == 0:
            continue
        seen.add(name)
        local = info >> 4 == STB_LOCAL
        if name in wanted and (name not in symbols or not local):
            held = sections[shndx] if shndx < min(len(sections), SHN_LORESERVE) else ""
            # A label of assembly without a .size directive has size 0: unknown, not empty.
            symbols[name] = (Symbol(name, value, length or None, held or "(no section)",
                                    "" if length else "the ELF gives it no size"), shndx)
    digests, no_digest = _digests(file, headers, sections, symbols)
    return Link(files=(path,), symbols={n: s for n, (s, _) in symbols.items()},
                names=frozenset(seen), regions=None,
                sections=tuple(Section(name, h.address, h.size, bool(h.flags & SHF_WRITE))
                               for h, name in zip(headers, sections)
                               if h.flags & SHF_ALLOC and h.size),
                digests=digests, no_digest=no_digest)


def _digests(file: _File, headers: list[_Header], sections: list[str],
             symbols: dict[str, tuple[Symbol, int]]) -> tuple[dict[str, str], dict[str, str]]:
    """sha256 of each symbol's bytes where the file holds them; else why not."""
    digests, no_digest = {}, {}
    for name, (symbol, shndx) in symbols.items():
        if not 0 < shndx < min(len(headers), SHN_LORESERVE):
            no_digest[name] = "no section holds it (an absolute or common symbol)"
            continue
        h = headers[shndx]
        if h.type == SHT_NOBITS:
            no_digest[name] = f"it lies in {sections[shndx]}, whose bytes the file does not hold"
            continue
        if symbol.size is None:
            no_digest[name] = symbol.size_unknown
            continue
        if not h.address <= symbol.address <= symbol.address + symbol.size <= h.address + h.size:
            raise InputError(f"{file.path}: {name} ({symbol.address:#010x}, {symbol.size:,} "
                             f"bytes) lies outside its section {sections[shndx]}: a damaged ELF")
        digests[name] = file.sha256(h.offset + symbol.address - h.address, symbol.size,
                                    f"the bytes of {name}")
    return digests, no_digest
