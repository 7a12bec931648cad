"""The ``ethos_u:`` section of a device profile, and the Vela configuration made from it.

Vela reads the NPU's system (clock, AXI ports, the speed of each memory) and its memory mode
(where weights, the arena and the cache live) from a ``.ini`` file. devicefit writes that file
from the profile, so a profile is the only thing a user edits; ``config_file`` still lets one
point at an ``.ini`` of their own (then ``system_config`` and ``memory_mode`` name sections in
it). The keys and their meaning are Vela's (``ethosu/config_files/Arm/vela.ini`` and Vela's
``OPTIONS.md``)::

    ethos_u:
      accelerator: ethos-u55-128          # vela --accelerator-config
      npu_clock: 400MHz                   # [System_Config] core_clock
      system_config: Alif_E7_HE           # the section's name
      axi0: sram                          # the memory on each AXI port
      axi1: off_chip_flash
      memories:                           # per memory: Vela's <Memory>_<key> settings
        sram: {clock_scale: 1.0, burst_length: 32, read_latency: 32, write_latency: 32,
               max_reads: 4, max_writes: 4}
        off_chip_flash: {clock_scale: 0.125, burst_length: 128, read_latency: 64, ...}
      memory_mode: Shared_Sram            # [Memory_Mode] section name
      const_area: axi1                    # weights and command stream
      arena_area: axi0                    # the feature-map arena (the TFLM-visible scratch)
      cache_area: axi0                    # the fast scratch (Dedicated_Sram)
      arena_cache_size: 384KiB            # optional
      optimise: Performance               # vela --optimise
      timeout: 300s                       # devicefit gives up on Vela after this
"""

from __future__ import annotations

import configparser
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.infra.schema import MEMORY, Leaf, one_of
from devicefit.simulator.infra.units import FREQUENCY_HELP, parse_frequency_hz, parse_time_ms

#: The accelerator configurations ethos-u-vela 5.2.0 accepts (``vela --help``).
ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
                "ethos-u65-256", "ethos-u65-512", "ethos-u85-128", "ethos-u85-256",
                "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048")
#: Profile name of a memory → Vela's name for it.
MEMORIES = {"sram": "Sram", "dram": "Dram", "on_chip_flash": "OnChipFlash",
            "off_chip_flash": "OffChipFlash"}
#: Per-memory settings Vela reads as ``<Memory>_<key>`` (``ports_used``: Ethos-U85 only).
MEMORY_KEYS = {"clock_scale": float, "burst_length": int, "read_latency": int,
               "write_latency": int, "max_reads": int, "max_writes": int, "ports_used": int}
AREAS = {"axi0": "Axi0", "axi1": "Axi1"}
OPTIMISE = ("Performance", "Size")
#: Vela compiles small models in about a second; a big one may take minutes.
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Memory:
    name: str  # Vela's name: Sram, Dram, OnChipFlash, OffChipFlash
    settings: tuple[tuple[str, float | int], ...]


@dataclass(frozen=True)
class VelaConfig:
    """Everything that decides a Vela compilation, from one profile."""

    accelerator: str
    system_config: str
    memory_mode: str
    npu_clock_hz: float | None = None
    axi0: str | None = None
    axi1: str | None = None
    memories: tuple[Memory, ...] = ()
    const_area: str | None = None
    arena_area: str | None = None
    cache_area: str | None = None
    arena_cache_size: int | None = None
    optimise: str = "Performance"
    #: A user's own ``.ini``: then the sections named above are read from it, not generated.
    config_file: Path | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def arena_in_sram(self) -> bool:
        """Whether the feature-map arena (the TFLM arena's NPU scratch) sits in SRAM."""
        port = {"Axi0": self.axi0, "Axi1": self.axi1}.get(self.arena_area or "")
        return port == "Sram"

    def ini_text(self) -> str:
        """The Vela ``.ini`` of this profile: one system config and one memory mode."""
        if self.config_file is not None:
            return read_user_ini(self.config_file)
        parser = configparser.ConfigParser()
        parser.optionxform = str  # type: ignore[assignment]  # Vela's keys are case-sensitive
        system: dict[str, str] = {"core_clock": f"{self.npu_clock_hz:.6g}",
                                  "axi0_port": str(self.axi0), "axi1_port": str(self.axi1)}
        for mem in self.memories:
            for key, value in mem.settings:
                system[f"{mem.name}_{key}"] = f"{value:g}" if isinstance(value, float) else str(value)
        parser[f"System_Config.{self.system_config}"] = system
        mode = {"const_mem_area": str(self.const_area), "arena_mem_area": str(self.arena_area),
                "cache_mem_area": str(self.cache_area)}
        if self.arena_cache_size is not None:
            mode["arena_cache_size"] = str(self.arena_cache_size)
        parser[f"Memory_Mode.{self.memory_mode}"] = mode
        out = io.StringIO()
        out.write("; Generated by devicefit from a device profile's ethos_u section.\n")
        parser.write(out)
        return out.getvalue()

    def vela_args(self, ini: Path) -> list[str]:
        """Vela's command-line options for this configuration (the model and output aside)."""
        return ["--accelerator-config", self.accelerator, "--config", str(ini),
                "--system-config", self.system_config, "--memory-mode", self.memory_mode,
                "--optimise", self.optimise]


def read_user_ini(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"ethos_u.config_file {path}: cannot read: "
                           f"{exc.strerror or exc}") from exc


# --------------------------------------------------------------------------- profile keys
def _text(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("expected a non-empty string")
    return v


def _section_name(v: Any) -> str:
    """A Vela section name: letters, digits and underscores (it becomes ``[X.<name>]``)."""
    text = _text(v)
    if not all(c.isalnum() or c == "_" for c in text):
        raise ValueError("only letters, digits and _")
    return text


def _memories(v: Any) -> dict[str, dict[str, float | int]]:
    if not isinstance(v, dict) or not v:
        raise ValueError("expected a mapping of memory names to settings")
    out: dict[str, dict[str, float | int]] = {}
    for name, settings in v.items():
        if name not in MEMORIES:
            raise ValueError(f"unknown memory {name!r} (known: {', '.join(MEMORIES)})")
        if not isinstance(settings, dict):
            raise ValueError(f"memories.{name} must be a mapping")
        parsed: dict[str, float | int] = {}
        for key, value in settings.items():
            kind = MEMORY_KEYS.get(key)
            if kind is None:
                raise ValueError(f"unknown memories.{name} key {key!r} "
                                 f"(known: {', '.join(MEMORY_KEYS)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"memories.{name}.{key} must be a number >= 0")
            if kind is int and value != int(value):
                raise ValueError(f"memories.{name}.{key} must be an integer")
            parsed[key] = kind(value)
        out[name] = parsed
    return out


def _timeout(v: Any) -> float:
    ms = parse_time_ms(v)
    if ms <= 0:
        raise ValueError("must be > 0")
    return ms / 1000.0


#: The ``ethos_u:`` keys a profile may set, each with its check (the target declares them).
PROFILE_KEYS: dict[str, Leaf] = {
    "accelerator": one_of(*ACCELERATORS),
    "npu_clock": Leaf(parse_frequency_hz, FREQUENCY_HELP),
    "system_config": Leaf(_section_name, "a Vela section name (letters, digits, _)"),
    "memory_mode": Leaf(_section_name, "a Vela section name (letters, digits, _)"),
    "axi0": one_of(*MEMORIES),
    "axi1": one_of(*MEMORIES),
    "memories": Leaf(_memories, "a mapping of memory names (" + ", ".join(MEMORIES)
                     + ") to Vela settings (" + ", ".join(MEMORY_KEYS) + ")"),
    "const_area": Leaf(one_of(*AREAS).check, "axi0 or axi1"),
    "arena_area": Leaf(one_of(*AREAS).check, "axi0 or axi1"),
    "cache_area": Leaf(one_of(*AREAS).check, "axi0 or axi1"),
    "arena_cache_size": MEMORY,
    "optimise": Leaf(one_of(*OPTIMISE).check, "Performance or Size"),
    "config_file": Leaf(_text, "a path to a Vela .ini (relative to the profile file)"),
    "timeout": Leaf(_timeout, "a time such as 300s"),
}

#: Keys a generated ``.ini`` needs (a user's ``config_file`` brings its own).
_GENERATED_NEEDS = ("npu_clock", "axi0", "axi1", "memories", "const_area", "arena_area",
                    "cache_area")
SECTION = "ethos_u"


def settings(values: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``Profile.target_settings``: the ``ethos_u`` values as parsed (checked when used, as
    an abstract profile may leave the accelerator to the profiles that extend it)."""
    return dict(values.get(SECTION, {}))


def vela_config(values: Mapping[str, Any], where: Path, profile_name: str) -> VelaConfig:
    """A profile's parsed ``ethos_u`` values as a :class:`VelaConfig`; ``where`` is the
    profile file (errors name it; a relative ``config_file`` starts there)."""
    for key in ("accelerator", "system_config", "memory_mode"):
        if key not in values:
            raise ProfileError(f"{where}: profile '{profile_name}' needs '{SECTION}.{key}'")
    user_ini = values.get("config_file")
    if user_ini is None:
        missing = [k for k in _GENERATED_NEEDS if k not in values]
        if missing:
            raise ProfileError(f"{where}: profile '{profile_name}' needs "
                               f"{', '.join(f'{SECTION}.{k}' for k in missing)} to generate "
                               f"Vela's system config (or {SECTION}.config_file for your own)")
        ports = {values["axi0"], values["axi1"]}
        absent = sorted(p for p in ports if p not in values["memories"])
        if absent:
            raise ProfileError(f"{where}: {SECTION}.memories lacks {', '.join(absent)}, "
                               f"named by {SECTION}.axi0/axi1")
    ini = Path(user_ini) if user_ini is not None else None
    if ini is not None and not ini.is_absolute():
        ini = where.parent / ini
    memories = tuple(Memory(MEMORIES[name], tuple(sorted(s.items())))
                     for name, s in sorted(values.get("memories", {}).items()))
    return VelaConfig(
        accelerator=values["accelerator"], system_config=values["system_config"],
        memory_mode=values["memory_mode"], npu_clock_hz=values.get("npu_clock"),
        axi0=MEMORIES.get(values.get("axi0", "")), axi1=MEMORIES.get(values.get("axi1", "")),
        memories=memories, const_area=AREAS.get(values.get("const_area", "")),
        arena_area=AREAS.get(values.get("arena_area", "")),
        cache_area=AREAS.get(values.get("cache_area", "")),
        arena_cache_size=values.get("arena_cache_size"),
        optimise=values.get("optimise", "Performance"), config_file=ini,
        timeout_s=values.get("timeout", DEFAULT_TIMEOUT_S))
