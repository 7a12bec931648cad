"""The CPU core registry: what decides a core's speed on ML kernels, as data.

``simulator/estimate/latency_data/cores.yaml`` lists the cores (Cortex-M0+ … M85, Xtensa LX6/LX7,
RISC-V MCU cores, the Cortex-A cores of the phone and Edge TPU host profiles) with their
int8 SIMD path, its peak MACs per cycle and lane width, the FPU and the cost of reading
weights from execute-in-place flash. A profile's ``device.cpu`` names one of them;
:func:`find_core` resolves names and aliases and answers an unknown one with a did-you-mean.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.infra.safeyaml import load_own_data

DATA_DIR = Path(__file__).parent / "latency_data"
SIMD_PATHS = ("none", "dsp", "mve", "pie", "p-ext", "neon", "neon-dotprod")
FPUS = ("none", "sp", "dp", "neon")


@dataclass(frozen=True)
class Core:
    name: str
    family: str
    arch: str
    simd: str
    #: Peak int8 MACs per cycle of the core's widest MAC path (ISA and issue width).
    int8_macs_per_cycle: float
    #: int8 elements per SIMD operation (1 for scalar cores).
    lanes: int
    fpu: str
    #: Cycles to read one weight byte from execute-in-place flash (0: weights in RAM).
    flash_cycles_per_byte: float
    aliases: tuple[str, ...] = ()
    #: The core designer's published CoreMark/MHz (None where none is published): how fast
    #: the core runs plain scalar code such as a kernel's per-op bookkeeping.
    coremark_per_mhz: float | None = None


def _core(name: str, d: dict) -> Core:
    try:
        core = Core(name=name, family=str(d["family"]), arch=str(d["arch"]), simd=str(d["simd"]),
                    int8_macs_per_cycle=float(d["int8_macs_per_cycle"]), lanes=int(d["lanes"]),
                    fpu=str(d["fpu"]), flash_cycles_per_byte=float(d["flash_cycles_per_byte"]),
                    aliases=tuple(str(a) for a in d.get("aliases", ())),
                    coremark_per_mhz=(float(d["coremark_per_mhz"])
                                      if d.get("coremark_per_mhz") is not None else None))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{DATA_DIR / 'cores.yaml'}: core '{name}' is malformed: {exc}") from exc
    if core.simd not in SIMD_PATHS or core.fpu not in FPUS or core.int8_macs_per_cycle <= 0 \
            or core.lanes < 1 or (core.coremark_per_mhz is not None and core.coremark_per_mhz <= 0):
        raise ProfileError(f"{DATA_DIR / 'cores.yaml'}: core '{name}' has an invalid value")
    return core


@cache
def cores() -> dict[str, Core]:
    """Every registered core by its canonical name."""
    data = load_own_data(DATA_DIR / "cores.yaml")
    return {name: _core(name, d) for name, d in data["cores"].items()}


@cache
def _by_name() -> dict[str, Core]:
    out: dict[str, Core] = {}
    for core in cores().values():
        for n in (core.name, *core.aliases):
            out[n.lower()] = core
    return out


def find_core(name: str) -> Core:
    """The core called ``name`` (or one of its aliases, any case); ProfileError if unknown."""
    core = _by_name().get(name.strip().lower())
    if core is None:
        close = difflib.get_close_matches(name.strip().lower(), sorted(_by_name()), n=1)
        hint = f"; did you mean '{_by_name()[close[0]].name}'?" if close else ""
        raise ProfileError(f"unknown device.cpu '{name}'{hint} (known cores: "
                           f"{', '.join(sorted(cores()))}; or give the profile its own "
                           f"cost_model.cycles_per_mac)")
    return core
