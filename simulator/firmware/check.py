"""``devicefit link-check``: did the firmware link what devicefit verified?

The verdict of ``simulate`` holds for one model array, one arena of at least the start
arena, in RAM, 16-byte aligned, with the rest of the firmware leaving the stack and heap
their room. A build can break each of these without an error: a model array that is not
``const`` lands in RAM, a hand-edited arena constant shrinks the arena, an old model file is
compiled in, the application's own buffers eat the stack's RAM. This reads what the linker
wrote (a GNU ld map file, an ELF, or both of one link) and checks each point.

Reading (:mod:`.formats`), then placing the two symbols (:func:`_place`), then the checks
(:data:`CHECKS`, each a function whose docstring says what it means), then the result
(:class:`LinkCheck`, which the views render).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import InputError, UsageError, did_you_mean
from devicefit.simulator.firmware.formats import ELF, MAP, read_firmware
from devicefit.simulator.firmware.link import Link, Region, Symbol, combine
from devicefit.simulator.firmware.manifest import ExportManifest
from devicefit.simulator.infra.units import format_count
from devicefit.simulator.types import StrEnum

#: TFLM's arena alignment (``MicroArenaBufferAlignment()``), used without an export.
TFLM_ALIGNMENT = 16


class Outcome(StrEnum):
    OK = "ok"
    FAIL = "FAIL"
    #: The files do not hold what the check needs; never counted as passed.
    NOT_CHECKED = "NOT CHECKED"


@dataclass(frozen=True)
class Expected:
    """What the firmware is held to: the export's manifest, or symbols and a minimum arena
    given on the command line (which win over the manifest's)."""

    model_symbol: str | None = None
    model_bytes: int | None = None
    model_sha256: str | None = None
    arena_symbol: str | None = None
    #: The least arena that may be linked: the start arena the verdict assumed.
    arena_min_bytes: int | None = None
    #: The export's arena constant.
    arena_bytes: int | None = None
    alignment: int = TFLM_ALIGNMENT
    #: RAM to be left free in the arena's region (the profile's ``firmware.reserve``).
    reserve_bytes: int | None = None
    #: Where the reserve comes from, or why there is none.
    reserve_source: str = "no profile given (--profile, or an export naming one)"
    #: Where the figures come from: ``export DIR``, or the command line.
    source: str = "the command line"


def expected_from(manifest: ExportManifest | None, *, model_symbol: str | None = None,
                  arena_symbol: str | None = None, arena_min_bytes: int | None = None,
                  reserve_bytes: int | None = None, reserve_source: str = "") -> Expected:
    """The manifest's figures, with the symbols and minimum arena given instead."""
    if manifest is None and not (model_symbol or arena_symbol):
        raise UsageError("nothing to check: give --export DIR, or --arena-symbol and/or "
                         "--model-symbol")
    base = Expected() if manifest is None else Expected(
        model_symbol=manifest.model_symbol, model_bytes=manifest.model_bytes,
        model_sha256=manifest.model_sha256, arena_symbol=manifest.arena_symbol,
        arena_min_bytes=manifest.start_arena_bytes, arena_bytes=manifest.arena_bytes,
        alignment=manifest.alignment, source=f"export {manifest.folder}")
    return dataclasses.replace(
        base, model_symbol=model_symbol or base.model_symbol,
        arena_symbol=arena_symbol or base.arena_symbol,
        arena_min_bytes=base.arena_min_bytes if arena_min_bytes is None else arena_min_bytes,
        reserve_bytes=reserve_bytes, reserve_source=reserve_source or base.reserve_source)


@dataclass(frozen=True)
class Memory:
    """The memory a symbol lies in: a ``MEMORY`` region of the map, else an ELF section."""

    name: str
    #: None: the files do not say (:attr:`why`).
    writable: bool | None
    #: ``region FLASH (xr)``, ``section .rodata (read-only)``.
    detail: str
    why: str = ""


@dataclass(frozen=True)
class Placement:
    symbol: Symbol
    memory: Memory


@dataclass(frozen=True)
class RegionUse:
    """How much of the arena's region the link filled."""

    region: Region
    #: The end of the last section placed in it, as ld's ``--print-memory-usage`` counts:
    #: the heap grows from there and the stack down from the region's end.
    filled_to: int

    @property
    def used(self) -> int:
        return self.filled_to - self.region.origin

    @property
    def free(self) -> int:
        return self.region.end - self.filled_to


@dataclass(frozen=True)
class Check:
    name: str
    outcome: Outcome
    found: str
    expected: str
    #: Why it failed or was not done; "" when ok.
    why: str = ""


@dataclass(frozen=True)
class LinkCheck:
    files: tuple[Path, ...]
    #: The format of each file (:mod:`.formats`).
    formats: tuple[str, ...]
    expected: Expected
    model: Placement | None
    #: The linked model's sha256, where an ELF holds its bytes.
    model_sha256: str | None
    arena: Placement | None
    ram: RegionUse | None
    checks: tuple[Check, ...]
    notes: tuple[str, ...]

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.outcome == Outcome.FAIL]

    @property
    def not_checked(self) -> list[Check]:
        return [c for c in self.checks if c.outcome == Outcome.NOT_CHECKED]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        def placement(p: Placement | None) -> dict[str, Any] | None:
            return None if p is None else {**dataclasses.asdict(p.symbol),
                                           "memory": dataclasses.asdict(p.memory)}

        ram = None if self.ram is None else {
            **dataclasses.asdict(self.ram.region), "used_bytes": self.ram.used,
            "free_bytes": self.ram.free}
        return {"status": "pass" if self.ok else "fail",
                "files": [str(f) for f in self.files], "formats": list(self.formats),
                "expected": dataclasses.asdict(self.expected),
                "model": placement(self.model), "model_sha256": self.model_sha256,
                "arena": placement(self.arena), "ram": ram,
                "checks": [{**dataclasses.asdict(c), "outcome": c.outcome.value}
                           for c in self.checks],
                "notes": list(self.notes)}


# --------------------------------------------------------------------------- reading
def _read(paths: Sequence[Path], names: list[str]) -> tuple[Link, tuple[str, ...]]:
    """One link from one file, or from a map and an ELF of the same link."""
    if not 1 <= len(paths) <= 2:
        raise UsageError(f"give the firmware's ELF, its map file or both, got {len(paths)} files")
    read = [read_firmware(p, names) for p in paths]
    formats = tuple(fmt.name for fmt, _ in read)
    if len(read) == 1:
        return read[0][1], formats
    links = {fmt.name: link for fmt, link in read}
    if set(links) != {MAP.name, ELF.name}:
        raise UsageError(f"two files must be the map file and the ELF of one link; "
                         f"{paths[0]} and {paths[1]} are both {formats[0]}s")
    return combine(links[MAP.name], links[ELF.name], names), formats


def _place(link: Link, name: str | None) -> Placement | None:
    if name is None:
        return None
    symbol = link.symbols.get(name)
    if symbol is None:
        raise InputError(_missing(link, name))
    return Placement(symbol, _memory(link, symbol))


def _missing(link: Link, name: str) -> str:
    files = " and ".join(map(str, link.files))
    if (section := link.was_discarded(name)) is not None:
        return (f"{files}: the linker discarded {name} ({section}, --gc-sections): nothing "
                "in the firmware uses it")
    # Only names as long as a close match can be (difflib's ratio 2M/T >= 0.6) are compared.
    near = [n for n in link.names if name.lower() in n.lower()
            or 2 * min(len(n), len(name)) >= 0.6 * (len(n) + len(name))]
    return f"{files}: no symbol {name!r}{did_you_mean(name, sorted(near))}"


def _memory(link: Link, symbol: Symbol) -> Memory:
    """The region holding ``symbol`` if the map's script gives its access, else the ELF
    section holding it, else why neither tells."""
    region = link.region(symbol.address)
    if region is not None and region.writable is not None:
        return Memory(region.name, region.writable,
                      f"region {region.name} ({region.attributes})")
    section = link.section(symbol.address)
    if section is not None and section.writable is not None:
        return Memory(section.name, section.writable, f"section {section.name} "
                      f"({'writable' if section.writable else 'read-only'})")
    where = region.name if region else section.name if section else symbol.section
    return Memory(where, None, f"{'region' if region else 'section'} {where}",
                  _unknown_access(link, region))


def _unknown_access(link: Link, region: Region | None) -> str:
    if link.regions is None:
        return "no allocated section of the ELF holds it"
    flags = "and a map has no section flags: give the ELF too"
    if region is not None:
        return f"region {region.name} declares no access such as (rx) or (rwx), {flags}"
    if not link.regions:
        return f"the map has no MEMORY regions (a default linker script), {flags}"
    return f"no MEMORY region of the map holds it, {flags}"


def _ram_use(link: Link, arena: Placement | None) -> RegionUse | None:
    region = None if arena is None else link.region(arena.symbol.address)
    if region is None:
        return None
    ends = [s.end for s in link.sections if region.holds(s.address)]
    return RegionUse(region, max(ends, default=region.origin))


# --------------------------------------------------------------------------- the checks
@dataclass(frozen=True)
class _Facts:
    link: Link
    expected: Expected
    model: Placement | None
    arena: Placement | None
    ram: RegionUse | None


def _bytes(n: int) -> str:
    """Exact, however large: an arena 16 B short must not read as the expected one."""
    return f"{format_count(n)} B"


def _at(p: Placement) -> str:
    return f"{p.symbol.address:#010x} in {p.memory.detail}"


def model_size(f: _Facts) -> Check | None:
    """The model array is as long as the exported model: the linked model is the one
    devicefit measured."""
    if f.model is None:
        return None
    found, want = f.model.symbol.size, f.expected.model_bytes
    expected = "the export's model" if want is None else f"{_bytes(want)} (the export's)"
    if found is None:
        return Check("model size", Outcome.NOT_CHECKED, "unknown", expected,
                     f.model.symbol.size_unknown)
    if want is None:
        return Check("model size", Outcome.NOT_CHECKED, _bytes(found), expected,
                     "no export gives the model's size (--export DIR)")
    return Check("model size", Outcome.OK if found == want else Outcome.FAIL, _bytes(found),
                 expected, "" if found == want else "the linked model is not the exported one")


def model_in_flash(f: _Facts) -> Check | None:
    """The model array lies in flash (memory without write access): a model in RAM takes
    RAM the verdict did not count (a non-const array is copied there at start-up)."""
    if f.model is None:
        return None
    m = f.model.memory
    outcome = {True: Outcome.FAIL, False: Outcome.OK, None: Outcome.NOT_CHECKED}[m.writable]
    why = {Outcome.FAIL: f"{m.detail} is writable: the model takes RAM; declare the array "
                         "const", Outcome.NOT_CHECKED: m.why}.get(outcome, "")
    return Check("model in flash", outcome, _at(f.model), "flash (not writable)", why)


def model_content(f: _Facts) -> Check | None:
    """The model array's bytes hash to the export's sha256: what ships is what was checked."""
    if f.model is None:
        return None
    want = f.expected.model_sha256
    found = f.link.digests.get(f.model.symbol.name)
    expected = "the export's sha256" if want is None else f"sha256 {want[:16]}…"
    if found is None or want is None:
        why = ("no export gives the model's sha256 (--export DIR)" if found is not None
               else f.link.no_digest.get(f.model.symbol.name, "its bytes were not read"))
        return Check("model content", Outcome.NOT_CHECKED,
                     "not read" if found is None else f"sha256 {found[:16]}…", expected, why)
    same = found == want
    return Check("model content", Outcome.OK if same else Outcome.FAIL, f"sha256 {found[:16]}…",
                 expected, "" if same else "the linked model's bytes differ from the exported "
                 "model's: rebuild with the export's model file")


def arena_in_ram(f: _Facts) -> Check | None:
    """The arena array lies in RAM (memory with write access): TFLM writes the tensors
    there."""
    if f.arena is None:
        return None
    m = f.arena.memory
    outcome = {True: Outcome.OK, False: Outcome.FAIL, None: Outcome.NOT_CHECKED}[m.writable]
    why = {Outcome.FAIL: f"{m.detail} has no write access: the interpreter cannot write the "
                         "arena", Outcome.NOT_CHECKED: m.why}.get(outcome, "")
    return Check("arena in RAM", outcome, _at(f.arena), "RAM (writable)", why)


def arena_alignment(f: _Facts) -> Check | None:
    """The arena array starts on the alignment TFLM's planner assumes (16 bytes): a
    misaligned arena loses bytes to re-alignment and can no longer hold the plan."""
    if f.arena is None:
        return None
    step = f.expected.alignment
    address = f.arena.symbol.address
    ok = address % step == 0
    return Check("arena alignment", Outcome.OK if ok else Outcome.FAIL, f"{address:#010x}",
                 f"a multiple of {step}", "" if ok else
                 f"{address % step} B past a {step}-byte boundary: declare it alignas({step})")


def arena_size(f: _Facts) -> Check | None:
    """The arena array holds at least the start arena the verdict assumed."""
    if f.arena is None:
        return None
    found, least = f.arena.symbol.size, f.expected.arena_min_bytes
    expected = "the start arena" if least is None else f">= {_bytes(least)} (start arena)"
    if found is None:
        return Check("arena size", Outcome.NOT_CHECKED, "unknown", expected,
                     f.arena.symbol.size_unknown)
    if least is None:
        return Check("arena size", Outcome.NOT_CHECKED, _bytes(found), expected,
                     "no export or --arena-bytes gives the start arena")
    short = least - found
    return Check("arena size", Outcome.FAIL if short > 0 else Outcome.OK, _bytes(found), expected,
                 f"{_bytes(short)} smaller than the start arena the verdict assumed: the "
                 "interpreter's AllocateTensors() may fail" if short > 0 else "")


def ram_reserve(f: _Facts) -> Check | None:
    """The RAM region holding the arena has the profile's reserve left for stack and heap
    after everything the link placed in it."""
    if f.arena is None:
        return None
    want = f.expected.reserve_bytes
    expected = "the reserve free" if want is None else f">= {_bytes(want)} free"
    if want is None or f.ram is None:
        return Check("RAM reserve", Outcome.NOT_CHECKED, "unknown", expected,
                     f.expected.reserve_source if want is None else _no_region(f))
    found = f"{_bytes(f.ram.free)} free in {f.ram.region.name}"
    short = want - f.ram.free
    return Check("RAM reserve", Outcome.FAIL if short > 0 else Outcome.OK, found, expected,
                 f"{_bytes(short)} short of {f.expected.reserve_source}: the link placed "
                 f"{_bytes(f.ram.used)} of {f.ram.region.name}'s {_bytes(f.ram.region.length)}"
                 if short > 0 else "")


def _no_region(f: _Facts) -> str:
    """Why no region's fill is known."""
    if f.link.regions is None:
        return "an ELF does not record the linker script's memory regions: give the map too"
    if not f.link.regions:
        return "the map has no MEMORY regions (a default linker script): the RAM's size is unknown"
    assert f.arena is not None  # only asked with an arena
    return f"no MEMORY region of the map holds the arena ({f.arena.symbol.address:#010x})"


#: The checks, in the order they are shown; each returns None where it was not asked for
#: (no model symbol: no model checks).
CHECKS: tuple[Callable[[_Facts], Check | None], ...] = (
    model_size, model_in_flash, model_content, arena_in_ram, arena_alignment, arena_size,
    ram_reserve)


def _notes(f: _Facts) -> list[str]:
    size, constant = (f.arena.symbol.size if f.arena else None), f.expected.arena_bytes
    if size is None or constant is None or size == constant:
        return []
    least = f.expected.arena_min_bytes or 0
    if size > constant:
        return [f"the arena array is {_bytes(size)}, larger than the export's "
                f"{_bytes(constant)}: RAM the verified plan does not need"]
    if size >= least:
        return [f"the arena array is {_bytes(size)}, not the export's "
                f"{_bytes(constant)} (still at least the start arena)"]
    return []


def link_check(paths: Sequence[Path], expected: Expected) -> LinkCheck:
    """Check the firmware in ``paths`` (an ELF, a map file, or both of one link)."""
    names = [n for n in (expected.model_symbol, expected.arena_symbol) if n]
    link, formats = _read(paths, names)
    model, arena = _place(link, expected.model_symbol), _place(link, expected.arena_symbol)
    facts = _Facts(link, expected, model, arena, _ram_use(link, arena))
    checks = tuple(c for check in CHECKS if (c := check(facts)) is not None)
    return LinkCheck(files=tuple(paths), formats=formats, expected=expected, model=model,
                     model_sha256=link.digests.get(model.symbol.name) if model else None,
                     arena=arena, ram=facts.ram, checks=checks, notes=tuple(_notes(facts)))
