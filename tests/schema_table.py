"""The TFLite schema's tables that the reader decodes, taken from the schema LiteRT ships.

``python -m tests.schema_table --write`` regenerates ``simulator/read/schema_table.json``
from the pinned ``ai_edge_litert.schema_py_generated``; ``tests/simulator/read/
test_schema_table.py`` fails until the stored table is what the installed wheel gives.

Why a table and not the module: the generated module imports ``flatbuffers``, which
imports NumPy whenever it is installed — together a third of a static ``simulate``'s CPU
time — for the builtin options alone, which are a few integers per operator. The reader
decodes them with ``struct`` from this table instead, to the same values the module's
object API gives (the test compares both on every model of the zoo and the corpus).

What is taken, all from the module itself (its source is parsed, nothing is copied by hand):

- the enums the reader names (``BuiltinOperator``, ``TensorType``, ``Padding``,
  ``ActivationFunctionType``);
- each member of the ``BuiltinOptions`` and ``BuiltinOptions2`` unions, by union code: its
  fields in the order of the object API's class (the keys of the dict the reader gave),
  each with its table slot, its kind (a ``struct`` code, ``vector:`` and a code, or
  ``string``) and its default.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

import devicefit.simulator.read

#: ``simulator.read.schema.SCHEMA_FILE``, named without importing that module (it loads it).
SCHEMA_FILE = Path(devicefit.simulator.read.__file__ or "").with_name("schema_table.json")

#: flatbuffers' number types as ``struct`` codes.
_FLAGS = {"BoolFlags": "?", "Uint8Flags": "B", "Int8Flags": "b", "Uint16Flags": "H",
          "Int16Flags": "h", "Uint32Flags": "I", "Int32Flags": "i", "Uint64Flags": "Q",
          "Int64Flags": "q", "Float32Flags": "f", "Float64Flags": "d"}
_ENUMS = ("BuiltinOperator", "TensorType", "Padding", "ActivationFunctionType")
_UNIONS = ("BuiltinOptions", "BuiltinOptions2")


def snake(name: str) -> str:
    """The reader's key for an object API attribute (``strideW`` → ``stride_w``)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _enum(module: Any, name: str) -> dict[str, str]:
    return {str(v): k for k, v in vars(getattr(module, name)).items() if not k.startswith("_")}


def _flags(method: ast.FunctionDef) -> str:
    """The ``struct`` code of the number type a field accessor reads."""
    found = {node.attr for node in ast.walk(method) if isinstance(node, ast.Attribute)
             and node.attr in _FLAGS and node.attr != "UOffsetTFlags"}
    if len(found) != 1:
        raise SystemExit(f"schema_table: {method.name} reads {sorted(found)}, not one type")
    return _FLAGS[found.pop()]


def _slot(method: ast.FunctionDef) -> int:
    offsets = [node.args[0] for node in ast.walk(method) if isinstance(node, ast.Call)
               and isinstance(node.func, ast.Attribute) and node.func.attr == "Offset"]
    if len(offsets) != 1 or not isinstance(offsets[0], ast.Constant):
        raise SystemExit(f"schema_table: {method.name} has no single vtable offset")
    return (int(offsets[0].value) - 4) // 2


def _field(method: ast.FunctionDef) -> list[Any]:
    """[slot, kind, default] of one field accessor of an options table."""
    text = ast.unparse(method)
    if len(method.args.args) == 2:  # Name(self, j): one element of a vector
        if "Indirect" in text:
            raise SystemExit(f"schema_table: {method.name} is a vector of tables")
        return [_slot(method), "vector:" + _flags(method), None]
    if "_tab.String(" in text:
        return [_slot(method), "string", None]
    if "_tab.Get(" not in text:
        raise SystemExit(f"schema_table: {method.name} is a table, struct or union field")
    last = method.body[-1]
    if not isinstance(last, ast.Return) or not isinstance(last.value, ast.Constant):
        raise SystemExit(f"schema_table: {method.name} has no constant default")
    return [_slot(method), _flags(method), last.value.value]


def _options(tree: ast.Module, module: Any, union: str) -> dict[str, Any]:
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    table: dict[str, Any] = {}
    for code, name in _enum(module, union).items():
        if name == "NONE":
            continue
        methods = {f.name: f for f in classes[name].body if isinstance(f, ast.FunctionDef)}
        init = next(f for f in classes[name + "T"].body
                    if isinstance(f, ast.FunctionDef) and f.name == "__init__")
        # The object API's attributes in the order its __init__ sets them: vars() order.
        attrs = [node.targets[0].attr for node in init.body if isinstance(node, ast.Assign)
                 and isinstance(node.targets[0], ast.Attribute)]
        table[code] = [name, [[snake(attr), *_field(methods[attr[0].upper() + attr[1:]])]
                              for attr in attrs]]
    return table


def build() -> dict[str, Any]:
    """The table, from the installed wheel's schema module."""
    from importlib import metadata

    from ai_edge_litert import schema_py_generated as module

    tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    operator = next(node for node in tree.body
                    if isinstance(node, ast.ClassDef) and node.name == "Operator")
    methods = {f.name: f for f in operator.body if isinstance(f, ast.FunctionDef)}
    return {
        "source": f"ai-edge-litert {metadata.version('ai-edge-litert')} "
                  "schema_py_generated (python -m tests.schema_table --write)",
        "enums": {name: _enum(module, name) for name in _ENUMS},
        # The operator's slots of each union's type and table.
        "operator_slots": {union: [_slot(methods[union + "Type"]), _slot(methods[union])]
                           for union in _UNIONS},
        "options": {union: _options(tree, module, union) for union in _UNIONS},
    }


def text(table: dict[str, Any]) -> str:
    """The table as JSON, one enum or options table a line (a reviewable diff)."""
    def block(entries: dict[str, Any], indent: str) -> str:
        inner = ",\n".join(f"{indent} {json.dumps(k)}: {json.dumps(v)}" for k, v in entries.items())
        return "{\n" + inner + "\n" + indent + "}"

    parts = [f' "source": {json.dumps(table["source"])}',
             ' "enums": ' + block(table["enums"], " "),
             f' "operator_slots": {json.dumps(table["operator_slots"])}',
             ' "options": {\n' + ",\n".join(
                 f"  {json.dumps(union)}: {block(members, '  ')}"
                 for union, members in table["options"].items()) + "\n }"]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {SCHEMA_FILE.name}")
    args = parser.parse_args()
    out = text(build())
    if args.write:
        SCHEMA_FILE.write_text(out, encoding="utf-8")
        print(f"wrote {SCHEMA_FILE}")
    else:
        sys.stdout.write(out)


if __name__ == "__main__":
    main()
