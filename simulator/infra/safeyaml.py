"""Bounded reading of the YAML files devicefit takes from anywhere (profiles, project files).

Profiles and ``devicefit.yaml`` arrive in pull requests, so loading one must end quickly and in
little memory whatever it holds. PyYAML's safe loader refuses Python objects but not size:
an alias bomb ("billion laughs") is a few hundred bytes whose aliases expand to billions of
nodes in any code that walks the data, a deep nesting overflows the recursive composer, and
an integer of a million digits takes seconds to convert. So a file is

* read only when it is a regular file (no device, FIFO or ``/proc`` entry) of at most
  :data:`MAX_YAML_BYTES`;
* pre-scanned as a flat event stream (PyYAML's parser is a state machine, not recursive)
  that bounds nesting depth, aliases, events and wall time before anything is composed;
* walked once, counting every node as often as aliases repeat it, up to
  :data:`MAX_NODES`: every later walk (validation, merging, ``profiles show``) is then
  bounded too;
* refused on duplicate mapping keys (YAML says keys are unique; PyYAML silently keeps the
  last, which lost a budget), integers longer than :data:`MAX_INT_CHARS` and non-finite
  numbers (``.nan``, ``.inf``, ``1e999``): no devicefit setting is infinite.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from pathlib import Path
from typing import Any, Protocol

import yaml

from devicefit.simulator.errors import DevicefitError, InputError
from devicefit.simulator.infra.fileio import read_regular_bytes

MAX_YAML_BYTES = 1024 * 1024
MAX_DEPTH = 40
MAX_ALIASES = 256
#: Nodes after alias expansion; the largest shipped file has a few hundred.
MAX_NODES = 200_000
MAX_EVENTS = 500_000
MAX_SECONDS = 10.0
#: Longer integer literals are refused before Python converts them (no setting needs them).
MAX_INT_CHARS = 40

#: Texts up to this size are parsed once per process (see :func:`load_yaml`).
MAX_CACHED_BYTES = 64 * 1024

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_own_data(path: Path) -> Any:
    """One of devicefit's own data files (cores, kernels, the Edge TPU's op table): trusted,
    so parsed whole by libyaml's C parser where PyYAML has it, a tenth of the pure-Python
    one's time (which was a tenth of a static ``simulate``). Files from anywhere go through
    :func:`load_yaml`."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (safe)


def read_regular_file(path: Path, what: str, *, limit: int = MAX_YAML_BYTES,
                      error: type[DevicefitError] = InputError, kind: str = ".yaml") -> str:
    """The UTF-8 text of ``path``, refusing anything but a regular file of at most ``limit``
    bytes; ``what`` names the file in messages ("profile", "project file"), ``kind`` what
    to give instead."""
    data = read_regular_bytes(path, what, limit, f"{kind} file", error=error,
                              missing=f"{what} not found")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from exc


def load_yaml(text: str, path: Path, *, error: type[DevicefitError] = InputError
              ) -> tuple[Any, dict[tuple[str, ...], int]]:
    """Parse YAML safely within the bounds above; return the data and the 1-based line of
    every mapping key and list item (keyed by its path, list items by index)."""
    if len(text) > MAX_YAML_BYTES:
        raise error(f"{path}: YAML text is larger than the limit of {MAX_YAML_BYTES:,} bytes")
    if len(text) > MAX_CACHED_BYTES:
        return _parse(text, path, error)
    # Every command loads its profile and the profiles it extends with PyYAML's pure-Python
    # parser (~4 ms a shipped profile; copying a cached one takes ~1 ms): a process that
    # runs many commands (the test suite, check over many models, fit's trials) parses the
    # same text once. The key is the text itself, so a file that changed is parsed anew;
    # the caller gets its own copy to change.
    try:
        data, lines = _parse_cached(text, path)
    except _NotCached:
        return _parse(text, path, error)  # the same refusal, as the caller's error class
    return copy.deepcopy(data), dict(lines)


class _NotCached(DevicefitError):
    """A text the cache refuses (its message is raised again as the caller's class)."""


@functools.lru_cache(maxsize=64)
def _parse_cached(text: str, path: Path) -> tuple[Any, dict[tuple[str, ...], int]]:
    return _parse(text, path, _NotCached)


#: libyaml's parser where PyYAML has it: a tenth of the pure-Python one's time, which was
#: a sixth of a static ``simulate`` (its profile and the profiles that profile extends).
#: The same bounds apply to its events and nodes; a text it refuses is parsed again by the
#: pure-Python parser, so that a syntax error reads as it always has.
_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def _parse(text: str, path: Path, error: type[DevicefitError]
           ) -> tuple[Any, dict[tuple[str, ...], int]]:
    if _FAST_LOADER is not None:
        try:
            return _parse_with(_FAST_LOADER, text, path, error)
        except yaml.YAMLError:
            pass
    return _parse_with(yaml.SafeLoader, text, path, error)


def _parse_with(loader_class: Any, text: str, path: Path, error: type[DevicefitError]
                ) -> tuple[Any, dict[tuple[str, ...], int]]:
    """:func:`_parse` with one of PyYAML's safe loaders; a syntax error is raised as
    :class:`yaml.YAMLError` by the fast one, as ``error`` by the pure-Python one."""
    try:
        _prescan(text, path, error, loader_class)
        loader = loader_class(text)
        try:
            node = loader.get_single_node()
            lines = _walk(node, path, error)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        if loader_class is _FAST_LOADER:
            raise
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}{_at(getattr(exc, 'problem_mark', None))}: YAML syntax error: "
                    f"{problem}") from exc
    except (ValueError, OverflowError, RecursionError) as exc:
        # The walk bounds what the constructor sees; this is the last line of defence.
        raise error(f"{path}: YAML value out of range: {exc}") from exc
    return data, lines


class _Mark(Protocol):
    """A parser position: PyYAML's pure-Python and C marks alike."""

    line: int


def _at(mark: _Mark | None) -> str:
    """``:line`` (1-based) of a parser mark, or nothing when the error has none."""
    return f":{mark.line + 1}" if mark is not None else ""


def _prescan(text: str, path: Path, error: type[DevicefitError], loader_class: Any) -> None:
    depth = aliases = 0
    start = time.monotonic()
    for count, event in enumerate(yaml.parse(text, Loader=loader_class)):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise error(f"{path}{_at(event.start_mark)}: YAML nested deeper than "
                            f"{MAX_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise error(f"{path}{_at(event.start_mark)}: more than {MAX_ALIASES} "
                            f"YAML aliases (*name)")
        if count > MAX_EVENTS or (count % 4096 == 0 and time.monotonic() - start > MAX_SECONDS):
            raise error(f"{path}: YAML too large to load (more than {MAX_EVENTS:,} events or "
                        f"{MAX_SECONDS:g} s)")


def _walk(root: yaml.Node | None, path: Path, error: type[DevicefitError]
          ) -> dict[tuple[str, ...], int]:
    """Record key lines, count expanded nodes, refuse duplicate keys and bad numbers."""
    lines: dict[tuple[str, ...], int] = {}
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())] if root is not None else []
    seen = 0
    while stack:
        node, prefix = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise error(f"{path}: YAML expands to more than {MAX_NODES:,} values (an alias "
                        f"bomb?); write the values out")
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            keys: dict[str, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    stack.append((value_node, prefix))
                    continue
                name = str(key_node.value)
                key_line = key_node.start_mark.line + 1
                # A named key, not lines[(*prefix, name)]: Python 3.10 takes that form,
                # but mypy, parsing on 3.11+, cannot tell it from 3.11's lines[*prefix, name].
                key = (*prefix, name)
                if isinstance(key_node, yaml.ScalarNode) and name in keys:
                    raise error(f"{path}:{key_line}: duplicate key "
                                f"'{'.'.join(key)}' (also on line {keys[name]}); "
                                f"YAML keeps only one of them")
                keys[name] = key_line
                lines[key] = key_line
                stack.append((key_node, (*prefix, "<key>")))
                stack.append((value_node, key))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                key = (*prefix, str(index))
                lines[key] = item.start_mark.line + 1
                stack.append((item, key))
        elif node.tag == _INT_TAG and len(node.value) > MAX_INT_CHARS:
            raise error(f"{path}:{line}: integer of {len(node.value):,} characters; "
                        f"the limit is {MAX_INT_CHARS}")
        elif node.tag == _FLOAT_TAG and not _finite(node.value):
            raise error(f"{path}:{line}: the number {node.value[:40]!r} is not finite; "
                        f"give a finite number")
    return lines


def _finite(literal: str) -> bool:
    text = literal.replace("_", "").lower()
    if text.lstrip("+-") in (".inf", ".nan"):
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:
        # YAML 1.1 sexagesimal floats ("1:30.5"): finite by construction.
        return ":" in text

