"""The parts of the TFLite schema the reader decodes: enum names and the builtin options'
layouts, from ``schema_table.json``.

The table is data the schema LiteRT ships gave (``python -m tests.schema_table --write``
after changing the pinned ``ai-edge-litert``; a test fails until it matches the installed
wheel). The reader does not import that schema module: it imports ``flatbuffers`` and with
it NumPy, a third of a static ``simulate``'s CPU time, for a few integers per operator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).with_name("schema_table.json")


@dataclass(frozen=True)
class Field:
    """One field of an options table: its key in the reader's dict (the object API's
    attribute in snake_case), its table slot, what it holds and its value when absent."""

    key: str
    slot: int
    #: A ``struct`` code, ``vector:`` and one, or ``string``.
    kind: str
    default: Any


@dataclass(frozen=True)
class OptionsUnion:
    """A union of options tables in the operator: the slots of its type and its table, and
    each member's fields by type code."""

    type_slot: int
    table_slot: int
    members: dict[int, tuple[Field, ...]]


def _load() -> tuple[dict[str, dict[int, str]], tuple[OptionsUnion, ...]]:
    table = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    enums = {name: {int(code): member for code, member in values.items()}
             for name, values in table["enums"].items()}
    unions = tuple(
        OptionsUnion(table["operator_slots"][union][0], table["operator_slots"][union][1],
                     {int(code): tuple(Field(key, slot, kind, default)
                                       for key, slot, kind, default in fields)
                      for code, (_, fields) in members.items()})
        for union, members in table["options"].items())
    return enums, unions


ENUMS, UNIONS = _load()
