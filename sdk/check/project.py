"""The project file of ``devicefit check`` (``devicefit.yaml``) → a validated :class:`Project`.

A project lists models, the profiles each must fit, optional budget overrides and optional
regression rules against a baseline. Unlike a profile, which stops at its first error, the
project file is checked completely before anything runs: a CI log that names every problem
at once (file:line, key, what is allowed) saves a round trip per typo.

Budgets and rules merge from the outside in: ``defaults`` < the model < one profile entry
of that model, key by key; ``null`` drops a profile's budget for that model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import DevicefitError, InputError, did_you_mean
from devicefit.simulator.infra.safeyaml import load_yaml, read_regular_file
from devicefit.simulator.infra.units import (
    SIZE_UNITS_HELP,
    TIME_UNITS_HELP,
    parse_size,
    parse_time_ms,
)
from devicefit.simulator.plan.shapes import parse_input_shape
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import ProfileStore
from devicefit.simulator.read.reader import FILE_IDENTIFIER, other_format
from devicefit.simulator.types import BudgetName

DEFAULT_PROJECT_FILE = "devicefit.yaml"
#: The budgets a project file may set or override, ``check``'s table shows and a baseline
#: keeps. A GPU profile's ``gpu_memory`` is judged in each report's verdict, not here; the
#: training budget is a profile's only (``budgets.train_memory``), shown where a model has a
#: train signature (:func:`devicefit.sdk.check.views.table_metrics`).
METRICS = (BudgetName.FLASH, BudgetName.ARENA, BudgetName.LATENCY)
#: Budget name → (Budgets field, parser, what is allowed).
_BUDGET_FIELDS: dict[str, tuple[str, Callable[[Any], float], str]] = {
    "flash": ("flash_bytes", parse_size, SIZE_UNITS_HELP),
    "arena": ("arena_bytes", parse_size, SIZE_UNITS_HELP),
    "latency": ("latency_ms", parse_time_ms, TIME_UNITS_HELP),
}
_TOP_KEYS = ("version", "models", "defaults", "profiles_dir", "baseline")
_DEFAULTS_KEYS = ("profiles", "budgets", "regression")
_MODEL_KEYS = ("name", "path", "profiles", "budgets", "regression", "input_shapes")
_PROFILE_ENTRY_KEYS = ("name", "budgets", "regression", "input_shapes")
#: (input name or None for the only input, shape), as ``--input-shape`` gives them.
InputShapes = tuple[tuple[str | None, tuple[int, ...]], ...]


class ProjectError(InputError):
    """A project file with one or more problems; the message lists all of them."""


@dataclass(frozen=True)
class RegressionRule:
    """How much a metric may grow over its baseline: a fraction or an absolute amount."""

    metric: BudgetName
    #: As written in the project file, e.g. ``"5%"`` or ``"2KiB"``, for messages.
    text: str
    relative: float | None = None
    absolute: float | None = None

    def limit(self, baseline: float) -> float:
        if self.relative is not None:
            return baseline * (1.0 + self.relative)
        return baseline + (self.absolute or 0.0)


@dataclass(frozen=True)
class Target:
    """One model checked against one profile: the unit of work of the gate."""

    model: str
    model_path: Path
    #: The profile with this model's budget overrides applied.
    profile: Profile
    rules: tuple[RegressionRule, ...] = ()
    #: Budgets the project file set for this target (shown as overrides).
    overridden: tuple[BudgetName, ...] = ()
    #: Shapes the dynamic dimensions are resolved from (``input_shapes:``; simulate's
    #: ``--input-shape``), the profile entry's over the model's.
    input_shapes: InputShapes = ()


@dataclass(frozen=True)
class Project:
    path: Path
    targets: tuple[Target, ...]
    #: The baseline file the project names (``baseline:``), resolved against its folder.
    baseline: Path | None = None

    @property
    def model_paths(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys(t.model_path for t in self.targets))


# --------------------------------------------------------------------------- problem list
class _Problems:
    """Collects every problem with its file:line and key path instead of raising the first."""

    def __init__(self, path: Path, lines: dict[tuple[str, ...], int]) -> None:
        self.path = path
        self.lines = lines
        self.found: list[tuple[int, str]] = []

    @property
    def items(self) -> list[str]:
        """The problems in file order (stable, so the order they were found breaks ties),
        each once: a bad default profile would otherwise be reported for every model."""
        ordered = [text for _, text in sorted(self.found, key=lambda f: f[0])]
        return list(dict.fromkeys(ordered))

    def add(self, key: tuple[str, ...], message: str) -> None:
        line = self._line(key)
        where = f"{self.path}:{line}" if line else str(self.path)
        text = f"{where}: {_dotted(key)}: {message}" if key else f"{where}: {message}"
        self.found.append((line or 0, text))

    def _line(self, key: tuple[str, ...]) -> int | None:
        # A missing key has no line of its own: point at the nearest enclosing one.
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return None

    def mapping(self, value: Any, key: tuple[str, ...], allowed: Sequence[str]
                ) -> dict[Any, Any]:
        """``value`` as a mapping with only ``allowed`` keys; problems for the others."""
        if not isinstance(value, dict):
            self.add(key, f"must be a mapping with keys {', '.join(allowed)}, "
                          f"got {_kind(value)}")
            return {}
        for k in value:
            if k not in allowed:
                self.add((*key, str(k)), f"unknown key{did_you_mean(str(k), list(allowed))} "
                                         f"(allowed here: {', '.join(allowed)})")
        return {k: v for k, v in value.items() if k in allowed}


def _dotted(key: tuple[str, ...]) -> str:
    out = ""
    for part in key:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


# --------------------------------------------------------------------------- sections
def _budgets(p: _Problems, value: Any, key: tuple[str, ...]) -> dict[str, float | None]:
    """Budget overrides: name → parsed value, or None to drop the profile's budget."""
    out: dict[str, float | None] = {}
    for name, raw in p.mapping(value, key, METRICS).items():
        parse = _BUDGET_FIELDS[name][1]
        if raw is None:
            out[name] = None
            continue
        try:
            out[name] = parse(raw)
        except ValueError as exc:
            p.add((*key, name), f"{exc}, or null to drop the profile's budget")
    return out


def _rules(p: _Problems, value: Any, key: tuple[str, ...]) -> dict[str, RegressionRule]:
    out: dict[str, RegressionRule] = {}
    for name, raw in p.mapping(value, key, METRICS).items():
        text = str(raw).strip()
        try:
            if text.endswith("%"):
                percent = float(text[:-1])
                if not math.isfinite(percent) or percent < 0:
                    raise ValueError("a growth allowance is a finite number >= 0")
                out[name] = RegressionRule(BudgetName(name), text, relative=percent / 100.0)
            else:
                out[name] = RegressionRule(BudgetName(name), text,
                                           absolute=_BUDGET_FIELDS[name][1](raw))
        except ValueError:
            example = "1ms" if name == "latency" else "2KiB"
            p.add((*key, name), f"bad value {raw!r}; allowed: how much it may grow, as a "
                                f"percentage such as 5% or an amount such as {example}")
    return out


def _input_shapes(p: _Problems, value: Any, key: tuple[str, ...]) -> InputShapes | None:
    """``input_shapes: [NAME:1x1280, ...]`` (or one string); None when not set."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        p.add(key, f"must be a shape such as 1x1280 or NAME:1x1280, or a list of them, got "
                   f"{_kind(value)}")
        return None
    out = []
    for i, text in enumerate(items):
        try:
            out.append(parse_input_shape(text))
        except DevicefitError as exc:
            p.add((*key, str(i)) if isinstance(value, list) else key, str(exc))
    return tuple(out)


def _string_list(p: _Problems, value: Any, key: tuple[str, ...]) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        p.add(key, f"must be a path or a list of paths, got {_kind(value)}")
        return []
    return items


@dataclass(frozen=True)
class _ProfileEntry:
    name: str
    key: tuple[str, ...]
    budgets: dict[str, float | None]
    rules: dict[str, RegressionRule]
    input_shapes: InputShapes | None = None


def _profile_entries(p: _Problems, value: Any, key: tuple[str, ...]) -> list[_ProfileEntry]:
    """``[name, ...]`` or ``[{name: ..., budgets: ..., regression: ...}, ...]``, mixed freely."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        p.add(key, f"must be a non-empty list of profile names, got {_kind(value)}")
        return []
    entries: list[_ProfileEntry] = []
    for i, item in enumerate(value):
        ikey = (*key, str(i))
        if isinstance(item, str) and item:
            entries.append(_ProfileEntry(item, ikey, {}, {}))
            continue
        body = p.mapping(item, ikey, _PROFILE_ENTRY_KEYS)
        if not body:
            continue
        name = body.get("name")
        if not isinstance(name, str) or not name:
            p.add((*ikey, "name"), "missing or empty: the profile name or a path to its .yaml")
            continue
        entries.append(_ProfileEntry(
            name, ikey, _budgets(p, body.get("budgets", {}), (*ikey, "budgets")),
            _rules(p, body.get("regression", {}), (*ikey, "regression")),
            _input_shapes(p, body.get("input_shapes"), (*ikey, "input_shapes"))))
    seen: set[str] = set()
    for e in entries:
        if e.name in seen:
            p.add(e.key, f"profile '{e.name}' is listed twice for this model")
        seen.add(e.name)
    return entries


def _check_model_file(p: _Problems, path: Path, key: tuple[str, ...]) -> None:
    """Cheap checks here (exists, is a .tflite) so they join the list; simulate reads it fully."""
    if not path.exists():
        p.add(key, f"model file not found: {path}")
    elif not path.is_file():
        p.add(key, f"{path}: {other}" if (other := other_format(path, b"")) else
              f"not a file: {path}")
    else:
        try:
            with path.open("rb") as f:
                head = f.read(8)
        except OSError as exc:
            p.add(key, f"cannot read {path}: {exc.strerror or exc}")
            return
        if head[4:8] != FILE_IDENTIFIER:
            p.add(key, f"{path}: {other}" if (other := other_format(path, head)) else
                  f"not a .tflite model: {path} (file identifier {head[4:8]!r})")


class _Profiles:
    """Loads each referenced profile once; a bad or unknown profile becomes a problem."""

    def __init__(self, store: ProfileStore, project_dir: Path) -> None:
        self.store = store
        self.project_dir = project_dir
        self.cache: dict[str, Profile | DevicefitError] = {}

    def get(self, p: _Problems, ref: str, key: tuple[str, ...]) -> Profile | None:
        if ref not in self.cache:
            # A path (has a suffix or a slash) is relative to the project file, like models.
            looks_like_path = ref.endswith((".yaml", ".yml")) or "/" in ref
            target = str(self.project_dir / ref) if looks_like_path else ref
            try:
                self.cache[ref] = self.store.load(target)
            except DevicefitError as exc:
                self.cache[ref] = exc
        found = self.cache[ref]
        if isinstance(found, DevicefitError):
            p.add(key, str(found))
            return None
        if found.abstract:
            p.add(key, f"profile '{ref}' is abstract (a base for other profiles); name a "
                       f"concrete one (see 'devicefit profiles list')")
            return None
        return found


def _apply(profile: Profile, budgets: dict[str, float | None]) -> Profile:
    if not budgets:
        return profile
    # Each value has its field's type: parse_size gave the sizes, parse_time_ms the time.
    fields: dict[str, Any] = {_BUDGET_FIELDS[k][0]: v for k, v in budgets.items()}
    return dataclasses.replace(profile, budgets=dataclasses.replace(profile.budgets, **fields))


@dataclass(frozen=True)
class _Defaults:
    budgets: dict[str, float | None]
    rules: dict[str, RegressionRule]
    #: None when the project sets no default profiles.
    profiles: list[_ProfileEntry] | None


def _defaults(p: _Problems, value: Any) -> _Defaults:
    d = p.mapping(value, ("defaults",), _DEFAULTS_KEYS)
    return _Defaults(
        _budgets(p, d.get("budgets", {}), ("defaults", "budgets")),
        _rules(p, d.get("regression", {}), ("defaults", "regression")),
        _profile_entries(p, d["profiles"], ("defaults", "profiles")) if "profiles" in d else None)


def _model_targets(p: _Problems, item: Any, mkey: tuple[str, ...], base: Path,
                   defaults: _Defaults, profiles: _Profiles,
                   names: dict[str, str]) -> list[Target]:
    """The targets of one ``models`` entry (one per profile); problems go to ``p``."""
    m = p.mapping(item, mkey, _MODEL_KEYS)
    if not m:
        return []
    raw_path = m.get("path")
    if not isinstance(raw_path, str) or not raw_path:
        p.add((*mkey, "path"), "missing: the .tflite file to check (relative to this file)")
        return []
    model_path = base / raw_path
    _check_model_file(p, model_path, (*mkey, "path"))
    name = m.get("name", Path(raw_path).stem)
    if not isinstance(name, str) or not name:
        p.add((*mkey, "name"), f"must be a non-empty string, got {_kind(name)}")
        return []
    if name in names:
        p.add((*mkey, "name") if "name" in m else (*mkey, "path"),
              f"model name '{name}' is used twice (also {names[name]}); set a unique 'name'")
    names[name] = _dotted(mkey)
    budgets = {**defaults.budgets, **_budgets(p, m.get("budgets", {}), (*mkey, "budgets"))}
    rules = {**defaults.rules, **_rules(p, m.get("regression", {}), (*mkey, "regression"))}
    shapes = _input_shapes(p, m.get("input_shapes"), (*mkey, "input_shapes")) or ()
    if "profiles" in m:
        entries = _profile_entries(p, m["profiles"], (*mkey, "profiles"))
    elif defaults.profiles is not None:
        entries = defaults.profiles
    else:
        p.add((*mkey, "profiles"), "missing: the device profiles this model must fit "
                                   "(or set defaults.profiles)")
        entries = []
    targets = []
    for e in entries:
        name_key = (*e.key, "name")
        profile = profiles.get(p, e.name, name_key if name_key in p.lines else e.key)
        if profile is None:
            continue
        b, r = {**budgets, **e.budgets}, {**rules, **e.rules}
        targets.append(Target(name, model_path, _apply(profile, b),
                              tuple(r[k] for k in METRICS if k in r),
                              tuple(k for k in METRICS if k in b),
                              shapes if e.input_shapes is None else e.input_shapes))
    return targets


# --------------------------------------------------------------------------- load
def load_project(path: str | Path, profiles_dirs: Sequence[str | Path] = ()) -> Project:
    """Read and validate a project file; raise :class:`ProjectError` listing every problem."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        hint = (f" (create one, see examples/ci/{DEFAULT_PROJECT_FILE})"
                if path.name == DEFAULT_PROJECT_FILE else "")
        raise ProjectError(f"{path}: project file not found{hint}")
    text = read_regular_file(path, "project file", error=ProjectError)
    data, lines = load_yaml(text, path, error=ProjectError)
    p = _Problems(path, lines)
    top = p.mapping(data, (), _TOP_KEYS) if data is not None else {}
    if data is None:
        p.add((), "the project file is empty; it needs a 'models:' list")
    version = top.get("version", 1)
    if version != 1:
        p.add(("version",), f"unsupported version {version!r}; allowed: 1")
    base = path.parent
    dirs = [*profiles_dirs, *(base / d for d in _string_list(
        p, top.get("profiles_dir", []), ("profiles_dir",)))]
    baseline = top.get("baseline")
    if baseline is not None and not (isinstance(baseline, str) and baseline):
        p.add(("baseline",), f"must be a path to a JSON file, got {_kind(baseline)}")
        baseline = None
    defaults = _defaults(p, top.get("defaults", {}))
    models = top.get("models")
    if isinstance(data, dict) and (not isinstance(models, list) or not models):
        p.add(("models",), f"must be a non-empty list of models, got {_kind(models)}")
        models = []
    profiles = _Profiles(ProfileStore(dirs), base)
    targets: list[Target] = []
    names: dict[str, str] = {}
    for i, item in enumerate(models or []):
        targets += _model_targets(p, item, ("models", str(i)), base, defaults, profiles, names)
    problems = p.items
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        raise ProjectError(f"{path}: {count}:\n" + "\n".join(f"  {i}" for i in problems))
    return Project(path, tuple(targets), base / baseline if baseline else None)
