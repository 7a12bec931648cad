"""The reader's own decoding of builtin options and constants (``simulator/read/schema.py``'s
table, ``struct``) against the schema LiteRT ships, which the reader no longer imports."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as fb

from devicefit.simulator.read.reader import constant_ints, constant_values, parse_model
from devicefit.simulator.read.schema import SCHEMA_FILE, UNIONS
from devicefit.simulator.read.writer import pack
from tests import schema_table
from tests.paths import ROOT
from tests.zoo import model_path


def test_the_stored_table_is_the_installed_schemas() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_table.text(schema_table.build()), \
        "the pinned ai-edge-litert changed: python -m tests.schema_table --write"


def object_api_options(data: bytes, subgraph: int, index: int) -> dict[str, Any]:
    """An operator's options as the schema's object API gives them (what the reader
    returned before it decoded them itself)."""
    op = fb.Model.GetRootAs(data, 0).Subgraphs(subgraph).Operators(index)
    enums = {"padding": fb.Padding, "fused_activation_function": fb.ActivationFunctionType}
    out: dict[str, Any] = {}
    for kind, table, creator in ((op.BuiltinOptionsType(), op.BuiltinOptions(),
                                  fb.BuiltinOptionsCreator),
                                 (op.BuiltinOptions2Type(), op.BuiltinOptions2(),
                                  fb.BuiltinOptions2Creator)):
        obj = creator(kind, table) if kind and table is not None else None
        for key, value in vars(obj).items() if obj is not None else ():
            key = schema_table.snake(key)
            if isinstance(value, np.ndarray):
                value = value.tolist()
            elif isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if key in enums and isinstance(value, int):
                value = next((k for k, v in vars(enums[key]).items() if v == value), value)
            out[key] = value
    return out


def assert_options_as_the_object_api(data: bytes) -> int:
    """Every operator's options equal, key order and value types included; the count."""
    model = parse_model(data)
    count = 0
    for sg in model.subgraphs:
        for op in sg.operators:
            ours, theirs = dict(op.options), object_api_options(data, sg.index, op.index)
            assert list(ours.items()) == list(theirs.items()), (sg.index, op.index, op.op_name)
            assert [type(v) for v in ours.values()] == [type(v) for v in theirs.values()]
            count += 1
    return count


def _set(options: Any, field: Any, attr: str) -> None:
    """A value other than the default in every field: what a file written with it holds."""
    kind = field.kind
    value: Any = ("x" if kind == "string" else [True, False] if kind == "vector:?"
                  else [3, 1, 2] if kind.startswith("vector:") else True if kind == "?"
                  else 0.25 if kind in "fd" else field.default + 1)
    setattr(options, attr, value)


def every_options_model(set_fields: bool) -> bytes:
    """One operator per member of both options unions, with every field set (or none)."""
    ops = []
    for union, attrs in zip(UNIONS, (("builtinOptionsType", "builtinOptions"),
                                     ("builtinOptions2Type", "builtinOptions2")), strict=True):
        members = getattr(fb, "BuiltinOptions" if attrs[0] == "builtinOptionsType"
                          else "BuiltinOptions2")
        for code, fields in union.members.items():
            name = next(k for k, v in vars(members).items() if v == code)
            options = getattr(fb, f"{name}T")()
            for field in fields if set_fields else ():
                attr = next(a for a in vars(options) if schema_table.snake(a) == field.key)
                _set(options, field, attr)
            op = fb.OperatorT()
            op.opcodeIndex, op.inputs, op.outputs = 0, [], []
            setattr(op, attrs[0], code)
            setattr(op, attrs[1], options)
            ops.append(op)
    code = fb.OperatorCodeT()
    code.builtinCode, code.version = fb.BuiltinOperator.ADD, 1
    t = fb.TensorT()
    t.name, t.shape, t.type, t.buffer = "t", [1], fb.TensorType.FLOAT32, 0
    sg = fb.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = [t], ops, [0], [0]
    m = fb.ModelT()
    m.version, m.operatorCodes, m.subgraphs, m.buffers = 3, [code], [sg], [fb.BufferT()]
    return pack(m)


@pytest.mark.parametrize("set_fields", [True, False], ids=["every field set", "all absent"])
def test_every_options_table_decodes_as_the_object_api(set_fields: bool) -> None:
    n = assert_options_as_the_object_api(every_options_model(set_fields))
    assert n == sum(len(u.members) for u in UNIONS) > 140


@pytest.mark.parametrize("name", ["residual_int8", "if_float32", "chain_int8"])
def test_real_models_decode_as_the_object_api(name: str) -> None:
    data = model_path(name).read_bytes()
    assert assert_options_as_the_object_api(data) > 0
    model = parse_model(data, str(model_path(name)))
    ints = [t for sg in model.subgraphs for t in sg.tensors
            if t.has_data and t.dtype in ("int8", "int32")]
    assert ints
    for t in ints:
        values = constant_values(model, t)
        assert values is not None
        assert constant_ints(model, t) == tuple(int(v) for v in values.reshape(-1))


@pytest.mark.parametrize("name", ["chain_int8", "residual_int8"])
def test_a_static_simulate_imports_no_numpy_flatbuffers_or_importlib_metadata(name: str
                                                                              ) -> None:
    # What 0.18 of its 0.44 CPU-s went to (docs/benchmarks.md, "Start-up"): a model with
    # no shape arithmetic to compute needs none once the op probe's answers are cached
    # (asking the runtime writes one-op models with the schema's writer: the first run).
    code = ("import sys\n"
            "from devicefit.sdk.cli import main\n"
            f"status = main(['simulate', {str(model_path(name))!r}, '--profile', "
            "'stm32l4r5-cortex-m4'])\n"
            "print(status, sorted(m for m in ('numpy', 'flatbuffers', 'importlib.metadata')\n"
            "                    if m in sys.modules))\n")
    for _ in range(2):  # the first run fills the op probe's cache
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    assert out.splitlines()[-1] == "0 []"
