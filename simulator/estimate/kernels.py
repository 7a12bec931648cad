"""Kernel libraries as data: cycles per MAC by core × library × op kind × dtype × version.

``simulator/estimate/latency_data/kernels.yaml`` holds the numbers; this module only evaluates them.
For one operator on one core with one kernel library::

    cycles = MACs × pad × cycles_per_mac(lib) × kind(op) × dtype(lib, dtype) × version
             / speed(core, lib)
             + (outputs × cycles_per_output + out_channels × cycles_per_channel
                + op_overhead_cycles) / scalar_speed(core)
             + weight_bytes × core.flash_cycles_per_byte

``cycles_per_output`` is the work done once per output element (requantization, bias,
activation clamp, the loop around each dot product): it is why a 1×1 convolution over 8
channels costs more per MAC than a 3×3 one over 64. ``cycles_per_channel`` is the work done
once per output channel; with it the fit puts the fixed per-op cost near its 3,000-cycle
prior instead of 16,000 cycles (see docs/benchmarks-log.md "Device latency").
These three are plain scalar code (address arithmetic, requantization, branches), so they run
at the core's general-purpose speed, not its MAC rate: ``scalar_speed`` is the core's published
CoreMark/MHz over ``reference_coremark_per_mhz`` (a Cortex-M85 runs the same bookkeeping in
0.64 of a Cortex-M33's cycles); a core without a published figure counts as the reference.
``cycles_per_mac(lib)`` is the library's figure for the code path it runs on this core: its
kernels for the core's SIMD extension (``dsp``, ``mve``, ``pie``, ``neon``…) when it has
them, else its plain C path (``scalar``). Each path's figure holds at the path's ``peak``
int8 MACs/cycle; a core with another peak on the same path scales by
``speed = (core peak / path peak) ** gamma`` (gamma < 1: kernels reach a smaller share of a
wider unit; a library may have its own gamma where figures on two peaks of one path fit it).
A path may cost one op kind as another (``kinds_as``: CMSIS-NN's Helium convolutions run its
1×1 kernel). ``pad`` charges SIMD lanes a channel count leaves empty (3 input channels on a
16-lane unit use 3/16 of it). ``version`` is the product of the ``versions`` rules that apply
to ``runtime.version`` (an older runtime's or library's slower kernels); a rule may also say
which op kinds a library version had no SIMD kernels for on a core (ESP-NN 1.1's ESP32-P4
port vectorised only convolutions): those run the library's plain C path. A dtype a library
has no kernels for runs on the ``fallback`` library (TFLM: reference kernels; CMSIS-NN and
ESP-NN have no float kernels).
The fitted numbers come from ``benchmarks/bench_latency.py --fit`` on published on-device
latencies (listed with their sources in ``latency_data/published.yaml``); the error band
each library carries is that script's leave-one-board-out spread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.estimate.cores import DATA_DIR, Core
from devicefit.simulator.infra.safeyaml import load_own_data

KINDS = ("conv", "conv1x1", "depthwise", "fully_connected", "recurrent", "elementwise")
#: Op name → kind; CONV_2D becomes conv1x1 when its filter is 1×1 (see :func:`op_kind`).
OP_KINDS = {
    "CONV_2D": "conv", "CONV_3D": "conv", "TRANSPOSE_CONV": "conv",
    "DEPTHWISE_CONV_2D": "depthwise",
    "FULLY_CONNECTED": "fully_connected", "BATCH_MATMUL": "fully_connected",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "recurrent", "BIDIRECTIONAL_SEQUENCE_LSTM": "recurrent",
    "LSTM": "recurrent", "UNIDIRECTIONAL_SEQUENCE_RNN": "recurrent", "RNN": "recurrent",
    "SVDF": "recurrent",
}

#: TFLM's DECODE operator (look-up-table compression) as the reader names it: a custom op
#: (``TFLM_DECODE``, simulator/targets/tflm/ops.py), costed by ``decode`` below.
DECODE_OP = "CUSTOM:TFLM_DECODE"


@dataclass(frozen=True)
class Path:
    """One code path of a library: cycles per MAC at ``peak`` int8 MACs/cycle."""

    cycles_per_mac: float
    peak: float
    #: Op kind → the kind whose cost it has on this path, where the library's source runs
    #: both through one kernel (CMSIS-NN's Helium path: k×k convolutions im2col in int8 into
    #: the 1×1 matrix kernel, where its DSP path widens them to int16 first).
    kinds_as: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LowBitPath:
    """What one code path of a library does with int4 weights (int8 activations).

    Either kernels of its own that read the packed weights (CMSIS-NN's ``*_s4``): the int8
    cost per MAC times ``per_mac`` of the op kind; or a pass per Invoke that unpacks the
    filter into int8 scratch before the int8 kernel runs (TFLM's reference kernels):
    ``unpack_cycles_per_weight`` per filter element, plain scalar code. ``spread`` is how
    far the real factor may lie from these figures: the band widens by it on the share of
    the time that rests on them.
    """

    per_mac: dict[str, float]
    unpack_cycles_per_weight: float
    spread: float
    #: What the figures rest on (a measurement and its kind, or the source read).
    basis: str
    #: The library whose kernels run the layer instead, int4 path and all (ESP-NN's TFLM
    #: wrappers hand int4 layers to the reference kernels); None: this one.
    runs_on: str | None = None


#: A library with no int4 entry: its int8 cost, an uncertainty as wide as an uncalibrated
#: table's.
UNKNOWN_INT4 = LowBitPath({}, 0.0, 2.0, "no int4 figure for this library: timed as its "
                          "int8 kernels")


@dataclass(frozen=True)
class Decode:
    """TFLM's DECODE operator (look-up-table compression): plain C, the same on every
    kernel library, run on every Invoke (nothing caches the decoded tensor)."""

    cycles_per_value: float
    spread: float
    basis: str


@dataclass(frozen=True)
class Library:
    name: str
    #: SIMD extension (or "scalar") → that path's cost; a core whose SIMD extension is not
    #: here runs the "scalar" path.
    paths: dict[str, Path]
    #: dtype → cost multiplier; a dtype missing here runs on ``fallback``.
    dtypes: dict[str, float]
    fallback: str | None
    op_overhead_cycles: float
    cycles_per_output: float
    #: Work done once per output channel (its requantization parameters, bias, the loop
    #: around one filter): what the published figures charge each op in proportion to its
    #: width, not a fixed per-op cost.
    cycles_per_channel: float
    #: This library's op-kind costs where they differ from the shared ``kinds`` (multiplied).
    kinds: dict[str, float]
    #: (low, high) of published / estimated from the leave-one-board-out validation.
    band: tuple[float, float]
    #: The dtypes published figures validated (the band means something only for these).
    calibrated: tuple[str, ...]
    #: This library's share of a wider core's extra peak (None: the tables' gamma).
    gamma: float | None = None
    #: How it runs int4 weights, by code path ("default": any path not named).
    int4: dict[str, LowBitPath] = field(default_factory=dict)


@dataclass(frozen=True)
class VersionRule:
    """What an older runtime or kernel library did differently, from the public record.

    The rule applies when ``component``'s version in ``runtime.version`` is below ``before``;
    an unversioned component is the current one, so no rule applies to it.
    """

    runtime: str
    library: str
    before: tuple[int, ...]
    #: Op kind → cost multiplier (fitted where figures of that version exist).
    kinds: dict[str, float]
    source: str
    #: Whose version is compared: "" for the runtime's own (``"2.3.1"``), else a library
    #: named in ``runtime.version`` (``"esp-nn 1.1.0"``).
    component: str = ""
    #: Cores the rule is about (empty: every core).
    cores: tuple[str, ...] = ()
    #: Op kinds that version had no SIMD kernels for on those cores: they run the library's
    #: plain C path.
    scalar_kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelData:
    gamma: float
    kinds: dict[str, float]
    libraries: dict[str, Library]
    versions: tuple[VersionRule, ...] = ()
    #: Multiplier for float math on a core without an FPU (software floating point).
    soft_float: float = 20.0
    #: The CoreMark/MHz the per-op, per-output and per-channel costs are stated for.
    reference_coremark_per_mhz: float = 4.02
    #: TFLM's DECODE (None: the tables give no figure; it costs its dispatch only).
    decode: Decode | None = None


def parse_versions(text: str) -> dict[str, tuple[int, ...]]:
    """``runtime.version`` → {component: version}: ``"2.3.1"`` is the runtime's own (key ""),
    ``"esp-nn 1.1.0"`` a kernel library's; several are comma-separated
    (``"2.3.1, esp-nn 1.1.0"``). ValueError on anything else."""
    out: dict[str, tuple[int, ...]] = {}
    for entry in str(text).split(","):
        words = entry.split()
        if len(words) not in (1, 2) or (len(words) == 2 and words[0][:1].isdigit()):
            raise ValueError(f"'{entry.strip()}' is not a version such as 2.3.1 or esp-nn 1.1.0")
        name = words[0].lower() if len(words) == 2 else ""
        if name in out:
            raise ValueError(f"'{text}' gives the version of {name or 'the runtime'} twice")
        out[name] = _one_version(words[-1])
    return out


def parse_version(text: str) -> tuple[int, ...]:
    """``"2.3.1"`` → (2, 3, 1); non-numeric parts end the version (``"2.16-nightly"`` → (2, 16)).

    A ``runtime.version`` naming library versions too (see :func:`parse_versions`) is checked
    whole; the runtime's own version is returned, () when it names none."""
    if "," in str(text) or len(str(text).split()) > 1:
        return parse_versions(text).get("", ())
    return _one_version(text)


def _one_version(text: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits or not part[0].isdigit():
            break
        out.append(int(digits))
        if digits != part:
            break
    if not out:
        raise ValueError(f"'{text}' is not a version such as 2.3.1")
    return tuple(out)


def _library(name: str, d: dict[str, Any]) -> Library:
    band = d.get("band", [0.5, 2.0])
    paths = {str(k): Path(float(v["cycles_per_mac"]), float(v["peak"]),
                          {str(a): str(b) for a, b in (v.get("kinds_as") or {}).items()})
             for k, v in d["paths"].items()}
    if "scalar" not in paths:
        raise ValueError(f"library '{name}' has no scalar path")
    return Library(
        name=name, paths=paths,
        dtypes={str(k): float(v) for k, v in d["dtypes"].items()}, fallback=d.get("fallback"),
        op_overhead_cycles=float(d.get("op_overhead_cycles", 0)),
        cycles_per_output=float(d.get("cycles_per_output", 0)),
        cycles_per_channel=float(d.get("cycles_per_channel", 0)),
        kinds={str(k): float(v) for k, v in (d.get("kinds") or {}).items()},
        band=(float(band[0]), float(band[1])),
        calibrated=tuple(str(t) for t in d.get("calibrated") or ()),
        gamma=float(d["gamma"]) if d.get("gamma") is not None else None,
        int4={str(k): _low_bit(v) for k, v in (d.get("int4") or {}).items()})


def _low_bit(d: dict[str, Any]) -> LowBitPath:
    spread = float(d["spread"])
    if spread < 1:
        raise ValueError(f"int4 spread {spread} is below 1")
    return LowBitPath({str(k): float(v) for k, v in (d.get("per_mac") or {}).items()},
                      float(d.get("unpack_cycles_per_weight", 0)), spread, str(d["basis"]),
                      str(d["runs_on"]) if d.get("runs_on") else None)


def load_kernels(data: dict[str, Any]) -> KernelData:
    """Kernel tables from a parsed ``kernels.yaml`` mapping (the fit script passes its own)."""
    try:
        out = KernelData(
            gamma=float(data["gamma"]), kinds={k: float(v) for k, v in data["kinds"].items()},
            libraries={n: _library(n, d) for n, d in data["libraries"].items()},
            versions=tuple(VersionRule(v["runtime"], v["library"], _one_version(v["before"]),
                                       {k: float(x) for k, x in (v.get("kinds") or {}).items()},
                                       v.get("source", ""), str(v.get("component", "")),
                                       tuple(v.get("cores") or ()),
                                       tuple(v.get("scalar_kinds") or ()))
                           for v in data.get("versions", ())),
            soft_float=float(data.get("soft_float", 20.0)),
            reference_coremark_per_mhz=float(data.get("reference_coremark_per_mhz", 4.02)),
            decode=Decode(float(data["decode"]["cycles_per_value"]),
                          float(data["decode"]["spread"]), str(data["decode"]["basis"]))
            if data.get("decode") else None)
        for lib in out.libraries.values():
            for path in lib.int4.values():
                if path.runs_on is not None and (path.runs_on == lib.name or any(
                        p.runs_on for p in out.libraries[path.runs_on].int4.values())):
                    raise ValueError(f"{lib.name}'s int4 runs_on '{path.runs_on}' must name "
                                     f"another library that runs int4 itself")
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{DATA_DIR / 'kernels.yaml'}: malformed kernel table: {exc}") from exc
    return out


FITTED = DATA_DIR / "kernels_fitted.yaml"


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` deep-merged onto ``base`` (lists replace)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def kernel_tables() -> dict[str, Any]:
    """kernels.yaml (structure and priors) with kernels_fitted.yaml (the fit's output) on top."""
    base = load_own_data(DATA_DIR / "kernels.yaml")
    fitted = load_own_data(FITTED) if FITTED.exists() else {}
    return merge(base, fitted or {})


@cache
def kernel_data() -> KernelData:
    return load_kernels(kernel_tables())


@dataclass(frozen=True)
class OpShape:
    """What the kernel tables need to know about one operator."""

    op: str
    dtype: str
    macs: int
    kind: str
    #: The length SIMD lanes run over (see :func:`simulator.estimate.latency.op_shape`), 0 if none.
    channels: int = 0
    weight_bytes: int = 0
    #: Output elements (requantized once each).
    outputs: int = 0
    #: Output channels (filters) of a MAC op, 0 for the rest.
    out_channels: int = 0
    #: The dtype of its constant weights ("" when it has none), and their element count.
    weight_dtype: str = ""
    weight_elements: int = 0


def lane_padding(channels: int, lanes: int) -> float:
    """MACs a SIMD unit spends per useful MAC when ``channels`` fills its lanes unevenly."""
    if lanes <= 1 or channels <= 0:
        return 1.0
    return math.ceil(channels / lanes) * lanes / channels


FLOATS = ("float32", "float16", "float64")


def library_for(data: KernelData, name: str, dtype: str) -> Library:
    """The library that runs ``dtype`` when ``name`` is asked for (following fallbacks)."""
    if name not in data.libraries:
        raise ProfileError(f"no kernel table for runtime.kernels '{name}' "
                           f"(have: {', '.join(sorted(data.libraries))})")
    lib = data.libraries[name]
    seen = {name}
    while dtype not in lib.dtypes and lib.fallback and lib.fallback not in seen:
        seen.add(lib.fallback)
        lib = data.libraries[lib.fallback]
    return lib


def version_rules(data: KernelData, runtime: str, version: str | None, library: str,
                  core: str) -> list[VersionRule]:
    """The rules of ``data`` that apply to ``library`` on ``core`` at ``runtime.version``."""
    if not version:
        return []
    given = parse_versions(version)
    out = []
    for rule in data.versions:
        have = given.get(rule.component) or (given.get(runtime) if not rule.component else None)
        if (rule.runtime == runtime and rule.library == library and have is not None
                and have < rule.before and (not rule.cores or core in rule.cores)):
            out.append(rule)
    return out


def _path_name(lib: Library, rules: list[VersionRule], core: Core, kind: str) -> str:
    """The code path ``lib`` runs ``kind`` on for ``core``: its SIMD path, else plain C."""
    simd = core.simd in lib.paths and not any(kind in r.scalar_kinds for r in rules)
    return core.simd if simd else "scalar"


def int4_path(data: KernelData, core: Core, library: str, runtime: str, version: str | None,
              op: OpShape) -> LowBitPath | None:
    """How ``op``'s int4 weights are run on this core and library (None: they are not int4)."""
    if op.weight_dtype != "int4" or not op.macs:
        return None
    lib = library_for(data, library, op.dtype)
    rules = version_rules(data, runtime, version, lib.name, core.name)
    name = _path_name(lib, rules, core, op.kind)
    return lib.int4.get(name) or lib.int4.get("default") or UNKNOWN_INT4


def op_cycles(data: KernelData, core: Core, library: str, runtime: str, version: str | None,
              op: OpShape) -> float | None:
    """Estimated cycles of one operator; None when no table covers its dtype ("no estimate")."""
    lib = library_for(data, library, op.dtype)
    dtype_cost = lib.dtypes.get(op.dtype)
    if dtype_cost is None:
        return None if op.macs else lib.op_overhead_cycles
    low_bit = int4_path(data, core, library, runtime, version, op)
    if low_bit is not None and low_bit.runs_on is not None:
        return op_cycles(data, core, low_bit.runs_on, runtime, version, op)
    if op.kind == "decode" and data.decode is not None:
        # Plain C over every value it writes, on every Invoke.
        return ((op.outputs * data.decode.cycles_per_value + lib.op_overhead_cycles)
                / scalar_speed(data, core))
    rules = version_rules(data, runtime, version, lib.name, core.name)
    name = _path_name(lib, rules, core, op.kind)
    simd = name != "scalar"
    path = lib.paths[name]
    # A SIMD core running plain C still issues one MAC per cycle at best.
    rate = core.int8_macs_per_cycle if simd or core.simd == "none" else 1.0
    speed = (rate / path.peak) ** (data.gamma if lib.gamma is None else lib.gamma)
    pad = lane_padding(op.channels, core.lanes) if simd else 1.0
    soft = data.soft_float if op.dtype in FLOATS and core.fpu == "none" else 1.0
    cost_kind = path.kinds_as.get(op.kind, op.kind)
    kind = data.kinds.get(cost_kind, 1.0) * lib.kinds.get(cost_kind, 1.0)
    if low_bit is not None:
        kind *= low_bit.per_mac.get(op.kind, 1.0)
    per_mac = (path.cycles_per_mac * kind * dtype_cost * soft
               * math.prod(r.kinds.get(op.kind, 1.0) for r in rules) / speed)
    bookkeeping = (op.outputs * lib.cycles_per_output * soft
                   + op.out_channels * lib.cycles_per_channel + lib.op_overhead_cycles
                   + (op.weight_elements * low_bit.unpack_cycles_per_weight
                      if low_bit is not None else 0.0))
    return (op.macs * pad * per_mac + bookkeeping / scalar_speed(data, core)
            + op.weight_bytes * core.flash_cycles_per_byte)


def scalar_speed(data: KernelData, core: Core) -> float:
    """How much faster than the reference core ``core`` runs plain scalar code."""
    if core.coremark_per_mhz is None:
        return 1.0
    return core.coremark_per_mhz / data.reference_coremark_per_mhz
