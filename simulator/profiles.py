"""Device profiles: YAML files → typed, validated :class:`Profile` objects.

A profile names a target, its budgets, its runtime and the numbers the latency estimate uses.
Profiles inherit with ``extends:`` (deep merge; lists and scalars of the child replace the
parent's). Each file is validated on its own, so an error names the file that holds the bad
value, its key path, the value, what is allowed and the line where the YAML parser saw it.

What a profile may say about its runtime comes from the registered targets
(:mod:`simulator.targets`): the runtime names, device classes, kernels, delegates and op
tables each file is checked against are theirs, a target may declare keys of its own (the
Edge TPU's constants under ``cost_model``, parsed into ``Profile.target_settings``), and the
merged profile is checked against its own target's values and capabilities.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devicefit.simulator.errors import ProfileError, did_you_mean
from devicefit.simulator.infra.fileio import regular_file_problem
from devicefit.simulator.infra.safeyaml import load_yaml, read_regular_file
from devicefit.simulator.infra.schema import (
    MEMORY,
    SIZE,
    TIME,
    boolean,
    finite_number,
    integer,
    leaf,
    list_of,
    mapping_of,
    number,
    one_of,
    one_of_ints,
    share,
    string,
)
from devicefit.simulator.infra.units import FREQUENCY_HELP, parse_frequency_hz
from devicefit.simulator.profile_types import (
    KERNEL_SCALE,
    Budgets,
    CostModel,
    Device,
    Firmware,
    Ops,
    Profile,
    Quantization,
    Runtime,
    Sparsity,
)
from devicefit.simulator.target import TARGETS, Target, union

PROFILE_SUFFIXES = (".yaml", ".yml")
ENV_PROFILES = "DEVICEFIT_PROFILES"

QUANT_SCHEMES = ("int8", "int16x8", "float16", "dynamic", "float32")
IO_TYPES = ("int8", "uint8", "int16", "float32")
SPARSITY_KINDS = ("none", "n:m", "channel")

#: Names whose allowed values the registered targets declare (:mod:`simulator.targets`):
#: module attributes computed when read, so a registered target is accepted at once.
_FROM_TARGETS: dict[str, Callable[[Target], tuple[str, ...]]] = {
    "RUNTIMES": lambda t: (t.name,),
    "OP_TABLES": lambda t: (t.name,),
    "DEVICE_CLASSES": lambda t: t.device_kinds,
    "KERNELS": lambda t: t.kernels,
    "DELEGATES": lambda t: t.delegates,
}


def _declared(name: str) -> tuple[str, ...]:
    return union(_FROM_TARGETS[name])


def __getattr__(name: str) -> tuple[str, ...]:
    if name in _FROM_TARGETS:
        return _declared(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _nm_pattern(v: Any) -> str:
    if isinstance(v, str):
        parts = v.split(":")
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            n, m = int(parts[0]), int(parts[1])
            if 0 < n < m:
                return v
    raise ValueError("expected N:M with 0 < N < M")


def _version(v: Any) -> str:
    """A runtime version such as ``2.3.1`` (kept as text; the kernel tables compare it)."""
    from devicefit.simulator.estimate.kernels import parse_version

    text = str(v).strip()
    parse_version(text)
    return text


def _band(v: Any) -> tuple[float, float]:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ValueError("expected a list of two numbers")
    low, high = (finite_number(x) for x in v)
    if not (0 < low <= 1 <= high):
        raise ValueError("need 0 < low <= 1 <= high")
    return (low, high)


def kernel_groups() -> tuple[str, ...]:
    """The op groups ``kernel_scale`` may name: ``<kind>.<dtype>`` of the kernel tables'
    kinds and the tensor dtypes devicefit sizes (the estimate looks a scale up by these)."""
    from devicefit.simulator.estimate.kernels import KINDS
    from devicefit.simulator.read.model import DTYPE_BYTES

    return tuple(f"{kind}.{dtype}" for kind in KINDS for dtype in sorted(DTYPE_BYTES))


def _kernel_scale(v: Any) -> dict[str, float]:
    from devicefit.simulator.estimate.kernels import KINDS

    if not isinstance(v, dict):
        raise ValueError("expected a mapping")
    known = ("default", *kernel_groups())
    out = {}
    for key, x in v.items():
        name = str(key)
        if name not in known:
            # A misspelt group matched no op and was silently ignored.
            raise ValueError(f"'{name[:60]}' is not 'default' or <kind>.<dtype> with a kind "
                             f"of {', '.join(KINDS)}{did_you_mean(name[:60], known)}")
        out[name] = number().check(x)
        low, high = KERNEL_SCALE
        if not low <= out[name] <= high:
            raise ValueError(f"'{name[:60]}': a scale must be between {low:g} and {high:g}")
    return out


def profile_schema() -> dict[str, Any]:
    """The profile schema: nested mappings of key → Leaf; unknown keys are errors. Runtime
    names, device classes, kernels, delegates and op tables are those the registered
    targets declare (each file is checked on its own, so against all of them; :func:`_build`
    checks the merged profile against its own target)."""
    schema: dict[str, Any] = {
        "name": string(),
        "description": string(),
        "extends": string(),
        "abstract": boolean(),
        "device": {
            "class": one_of(*_declared("DEVICE_CLASSES")),
            "cpu": string(),
            "clock": leaf(parse_frequency_hz, FREQUENCY_HELP),
            "cores": integer(1, 1024),
            "sram": MEMORY,
            "flash": SIZE,
            "ram": MEMORY,
            "psram": MEMORY,
        },
        "runtime": {
            "name": one_of(*_declared("RUNTIMES")),
            "threads": integer(1, 64),
            "delegates": list_of(one_of(*_declared("DELEGATES"))),
            "kernels": one_of(*_declared("KERNELS")),
            "pointer_size": one_of_ints(4, 8),
            "code_size": SIZE,
            "version": leaf(_version, "a version such as 2.3.1"),
        },
        "budgets": {"flash": SIZE, "arena": MEMORY, "latency": TIME, "gpu_memory": MEMORY,
                    "train_memory": MEMORY},
        "quantization": {
            "schemes": list_of(one_of(*QUANT_SCHEMES), non_empty=True),
            "default": one_of(*QUANT_SCHEMES),
            "io_types": list_of(one_of(*IO_TYPES), non_empty=True),
            "per_channel": boolean(),
        },
        "sparsity": {
            "kinds": list_of(one_of(*SPARSITY_KINDS), non_empty=True),
            "n_m": leaf(_nm_pattern, "an N:M pattern such as 2:4"),
        },
        "ops": {"table": one_of(*_declared("OP_TABLES")), "allow": list_of(string()), "max_cpu_share": share()},
        "cost_model": {
            "cycles_per_mac": mapping_of(number()),
            "cycles_per_byte": number(),
            "op_overhead": TIME,
            "parallel_efficiency": number(),
            "error_band": leaf(_band, "[low, high] multipliers with 0 < low <= 1 <= high"),
            "sources": list_of(string()),
            "kernel_scale": leaf(_kernel_scale, "a mapping of 'default' or <kind>.<dtype> "
                                                "(conv.int8) to numbers from 0.001 to 1000"),
            "calibration": string(),
        },
        "firmware": {"reserve": MEMORY},
    }
    builtin = {section: set(keys) for section, keys in schema.items() if isinstance(keys, dict)}
    for target in TARGETS.values():
        for section, keys in target.profile_keys.items():
            clash = set(keys) & builtin.get(section, set())
            if clash or not isinstance(schema.setdefault(section, {}), dict):
                raise ValueError(f"target '{target.name}' declares {section}."
                                 f"{next(iter(clash), '')}, which every profile has")
            for key, check in keys.items():
                schema[section].setdefault(key, check)
    return schema


def _target_keys() -> dict[tuple[str, str], tuple[str, ...]]:
    """(section, key) → the targets that declare it."""
    owners: dict[tuple[str, str], tuple[str, ...]] = {}
    for target in TARGETS.values():
        for section, keys in target.profile_keys.items():
            for key in keys:
                owners[section, key] = (*owners.get((section, key), ()), target.name)
    return owners


# --------------------------------------------------------------------------- YAML with lines
def _compose(text: str, path: Path) -> tuple[Any, dict[tuple[str, ...], int]]:
    """Parse YAML safely and boundedly (see :mod:`simulator.infra.safeyaml`) and record the 1-based
    line of every mapping key."""
    return load_yaml(text, path, error=ProfileError)




def _validate(data: Any, schema: dict[str, Any], path: Path, lines: dict,
              warnings: list[str], prefix: tuple[str, ...] = ()) -> dict:
    """Check one file's mapping against the schema; return the parsed values and add to
    ``warnings`` what the leaves' lints say."""
    where = f"{path}:{lines[prefix]}" if prefix in lines else str(path)
    dotted = ".".join(prefix) or "<top level>"
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: {dotted} must be a mapping, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        key_path = (*prefix, str(key))
        kwhere = f"{path}:{lines.get(key_path, '?')}"
        kdotted = ".".join(key_path)
        if key not in schema:
            allowed = sorted(schema)
            raise ProfileError(
                f"{kwhere}: unknown key '{kdotted}'{did_you_mean(str(key), allowed)} "
                f"(allowed here: {', '.join(allowed)})"
            )
        spec = schema[key]
        if isinstance(spec, dict):
            out[key] = _validate(value, spec, path, lines, warnings, key_path)
            continue
        try:
            out[key] = spec.check(value)
        except ValueError as exc:
            raise ProfileError(
                f"{kwhere}: bad value for '{kdotted}': {_shown(value)} ({exc}); "
                f"allowed: {spec.allowed}"
            ) from exc
        if spec.lint is not None and (why := spec.lint(value)) is not None:
            warnings.append(f"{kwhere}: warning: {kdotted}: {why}")
    return out


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _deep_merge(base: dict, child: dict) -> dict:
    merged = dict(base)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# --------------------------------------------------------------------------- search + load
def builtin_profiles_dir() -> Path:
    """Where the shipped profiles are: inside the installed package, or the source tree."""
    installed = Path(__file__).parent / "device_profiles"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[1] / "device_profiles"


def search_dirs(extra: list[str | Path] | None = None) -> list[Path]:
    """User folders first (``--profiles-dir``, then ``$DEVICEFIT_PROFILES``), built-ins last."""
    dirs = [Path(d) for d in (extra or [])]
    env = os.environ.get(ENV_PROFILES)
    if env:
        dirs += [Path(d) for d in env.split(os.pathsep) if d]
    return [*dirs, builtin_profiles_dir()]


def _profile_files(dirs: list[Path]) -> dict[str, Path]:
    """Profile name (file stem) → file, the first folder that has it winning."""
    found: dict[str, Path] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.suffix in PROFILE_SUFFIXES and f.stem not in found:
                found[f.stem] = f
    return found


@dataclass(frozen=True)
class _RawFile:
    path: Path
    #: Parsed values (bytes, ms, Hz) and the file's own text values, for display.
    values: dict
    raw: dict
    lines: dict
    warnings: tuple[str, ...] = ()


def _read_file(path: Path) -> _RawFile:
    text = read_regular_file(path, "profile file", error=ProfileError)
    data, lines = _compose(text, path)
    if data is None:
        raise ProfileError(f"{path}: profile file is empty")
    warnings: list[str] = []
    values = _validate(data, profile_schema(), path, lines, warnings)
    return _RawFile(path, values, data, lines, tuple(warnings))


def _resolve_ref(ref: str, relative_to: Path | None, files: dict[str, Path]) -> Path:
    as_path = Path(ref)
    if as_path.suffix in PROFILE_SUFFIXES or os.sep in ref or "/" in ref:
        if not as_path.is_absolute() and relative_to is not None:
            as_path = relative_to.parent / as_path
        return as_path
    if ref in files:
        return files[ref]
    hint = did_you_mean(ref, sorted(files))
    raise ProfileError(f"unknown profile '{ref}'{hint} (see 'devicefit profiles list')")


class ProfileStore:
    """Finds profiles by name or path and resolves their inheritance."""

    def __init__(self, extra_dirs: list[str | Path] | None = None) -> None:
        self.dirs = search_dirs(extra_dirs)
        self.files = _profile_files(self.dirs)

    def names(self, include_abstract: bool = False) -> list[str]:
        names = []
        for name in sorted(self.files):
            if include_abstract or not self.load(name).abstract:
                names.append(name)
        return names

    def load(self, ref: str | Path) -> Profile:
        path = _resolve_ref(str(ref), None, self.files)
        chain: list[_RawFile] = []
        seen: list[Path] = []
        while True:
            resolved = path.resolve()
            if resolved in seen:
                loop = " -> ".join(p.stem for p in [*seen, resolved])
                raise ProfileError(f"{chain[0].path}: 'extends' loop: {loop}")
            seen.append(resolved)
            raw = _read_file(path)
            chain.append(raw)
            parent = raw.values.get("extends")
            if parent is None:
                break
            try:
                path = _resolve_ref(parent, raw.path, self.files)
            except ProfileError as exc:
                raise ProfileError(f"{raw.path}:{raw.lines.get(('extends',), '?')}: {exc}") from exc
            if not path.exists():
                raise ProfileError(
                    f"{raw.path}:{raw.lines.get(('extends',), '?')}: 'extends' file not found: {path}"
                )
            if (why := regular_file_problem(path)) is not None:
                raise ProfileError(f"{raw.path}:{raw.lines.get(('extends',), '?')}: 'extends' "
                                   f"names {path}, which {why}; give a profile .yaml")
        merged: dict = {}
        shown: dict = {}
        for raw in reversed(chain):
            merged = _deep_merge(merged, raw.values)
            shown = _deep_merge(shown, raw.raw)
        leaf = chain[0]
        for m in (merged, shown):
            m.pop("extends", None)
            # 'abstract' and 'name' are not inherited: they belong to the file itself.
            m["abstract"] = leaf.values.get("abstract", False)
            m["name"] = leaf.values.get("name", leaf.path.stem)
        profile = _build(merged, shown, leaf, tuple(r.path.stem for r in chain[1:]))
        return dataclasses.replace(profile, files=tuple(r.path for r in chain),
                                   warnings=tuple(w for r in chain for w in r.warnings))


def _require(merged: dict, section: str, key: str, leaf: _RawFile) -> Any:
    value = merged.get(section, {}).get(key)
    if value is None:
        raise ProfileError(
            f"{leaf.path}: missing required key '{section}.{key}' (set it here or in a profile "
            f"this one extends)"
        )
    return value


def _check_target(m: dict, target: Target, leaf: _RawFile) -> None:
    """Refuse settings the profile's target cannot honour: each file was checked against
    every target's values, the merged profile is checked against its own."""
    rt, q, sp = m.get("runtime", {}), m.get("quantization", {}), m.get("sparsity", {})
    asked = (("device.class", (m["device"]["class"],), target.device_kinds),
             ("runtime.kernels", (rt["kernels"],) if "kernels" in rt else (), target.kernels),
             ("runtime.delegates", rt.get("delegates", ()), target.delegates),
             ("quantization.schemes", q.get("schemes", ()), target.quant_schemes))
    for key, values, allowed in asked:
        wrong = [v for v in values if v not in allowed]
        if wrong:
            raise ProfileError(
                f"{leaf.path}: {key} '{wrong[0]}' is not for runtime '{target.name}' "
                f"({target.title} takes: {', '.join(allowed) or 'none'})")
    if "int16" in q.get("io_types", ()) and not target.int16_io:
        raise ProfileError(f"{leaf.path}: quantization.io_types has int16, which "
                           f"{target.title} does not take as model input or output")
    if "n:m" in sp.get("kinds", ()) and target.sparse_weights is not None:
        raise ProfileError(f"{leaf.path}: sparsity.kinds has 'n:m', which gives "
                           f"{target.title} nothing: {target.sparse_weights}")
    for (section, key), owners in _target_keys().items():
        if key in m.get(section, {}) and target.name not in owners:
            line = leaf.lines.get((section, key))
            raise ProfileError(
                f"{leaf.path}{f':{line}' if line else ''}: {section}.{key} is a setting of "
                f"the {' and '.join(owners)} target; this profile runs '{target.name}'")


def _target_settings(m: dict, target: Target) -> Any:
    """The target's typed settings from the values of the keys it declares."""
    if target.settings is None:
        return None
    return target.settings({section: {k: m[section][k] for k in keys if k in m.get(section, {})}
                            for section, keys in target.profile_keys.items()})


def _build(m: dict, shown: dict, leaf: _RawFile, parents: tuple[str, ...]) -> Profile:
    dev, rt = m.get("device", {}), m.get("runtime", {})
    kind = _require(m, "device", "class", leaf)
    runtime_name = _require(m, "runtime", "name", leaf)
    q = m.get("quantization", {})
    schemes = q.get("schemes", ("int8",))
    default = q.get("default", schemes[0])
    if default not in schemes:
        raise ProfileError(
            f"{leaf.path}: quantization.default '{default}' is not among quantization.schemes "
            f"({', '.join(schemes)})"
        )
    sp = m.get("sparsity", {})
    kinds = sp.get("kinds", ("none",))
    if "n:m" in kinds and not sp.get("n_m"):
        raise ProfileError(f"{leaf.path}: sparsity.kinds has 'n:m' but sparsity.n_m is not set")
    target = TARGETS[runtime_name]
    _check_target(m, target, leaf)
    if "gpu_memory" in m.get("budgets", {}) and kind != "mobile-gpu":
        line = leaf.lines.get(("budgets", "gpu_memory"))
        raise ProfileError(f"{leaf.path}{f':{line}' if line else ''}: budgets.gpu_memory is "
                           f"for a GPU (device.class mobile-gpu); this profile's device is "
                           f"'{kind}'")
    cm = m.get("cost_model", {})
    ops = m.get("ops", {})
    cpu = dev.get("cpu")
    if cpu is not None and not cm.get("cycles_per_mac") and not m.get("abstract", False):
        from devicefit.simulator.estimate.cores import find_core

        try:
            find_core(cpu)
        except ProfileError as exc:
            line = leaf.lines.get(("device", "cpu"))
            raise ProfileError(f"{leaf.path}{f':{line}' if line else ''}: {exc}") from exc
    return Profile(
        name=m["name"],
        description=m.get("description", ""),
        path=leaf.path,
        device=Device(
            kind=kind, cpu=dev.get("cpu"), clock_hz=dev.get("clock"), cores=dev.get("cores", 1),
            sram_bytes=dev.get("sram"), flash_bytes=dev.get("flash"), ram_bytes=dev.get("ram"),
            psram_bytes=dev.get("psram"),
        ),
        runtime=Runtime(
            name=runtime_name, threads=rt.get("threads", 1), delegates=rt.get("delegates", ()),
            kernels=rt.get("kernels", "reference"),
            pointer_bytes=rt.get("pointer_size", 4 if kind == "mcu" else 8),
            code_bytes=rt.get("code_size"), version=rt.get("version"),
        ),
        budgets=Budgets(**{f"{k}_{'ms' if k == 'latency' else 'bytes'}": v
                           for k, v in m.get("budgets", {}).items()}),
        quantization=Quantization(schemes=schemes, default=default,
                                  io_types=q.get("io_types", ("int8",)),
                                  per_channel=q.get("per_channel", True)),
        sparsity=Sparsity(kinds=kinds, n_m=sp.get("n_m")),
        ops=Ops(table=ops.get("table"), allow=ops.get("allow"),
                max_cpu_share=ops.get("max_cpu_share", Ops.max_cpu_share)),
        cost_model=CostModel(
            cycles_per_mac=cm.get("cycles_per_mac", {}), cycles_per_byte=cm.get("cycles_per_byte"),
            op_overhead_ms=cm.get("op_overhead", 0.0),
            parallel_efficiency=cm.get("parallel_efficiency", 1.0),
            error_band=cm.get("error_band"), sources=cm.get("sources", ()),
            kernel_scale=cm.get("kernel_scale", {}), calibration=cm.get("calibration"),
        ),
        firmware=Firmware(reserve_bytes=m.get("firmware", {}).get("reserve")),
        target_settings=_target_settings(m, target),
        abstract=m.get("abstract", False),
        extends=parents,
        resolved=shown,
    )


def load_profile(ref: str | Path, profiles_dirs: list[str | Path] | None = None) -> Profile:
    """Load a profile by name (searched in user folders, then built-ins) or by file path."""
    return ProfileStore(profiles_dirs).load(ref)


def dump_resolved(profile: Profile) -> str:
    """The profile after inheritance as YAML, in the user's own units."""
    data = {k: v for k, v in profile.resolved.items() if not (k == "abstract" and not v)}
    return yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def with_runtime(profile: Profile, *, kernels: str | None = None,
                 pointer_bytes: int | None = None) -> Profile:
    """``profile`` with its kernel flavour and/or pointer width replaced (e.g. to compare a
    prediction with the pip wheel, which runs reference kernels on a 64-bit host)."""
    changes: dict[str, Any] = {}
    if kernels is not None:
        changes["kernels"] = kernels
    if pointer_bytes is not None:
        changes["pointer_bytes"] = pointer_bytes
    if not changes:
        return profile
    return dataclasses.replace(profile, runtime=dataclasses.replace(profile.runtime, **changes))
