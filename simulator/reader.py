"""Read a ``.tflite`` flatbuffer into devicefit's IR (:mod:`simulator.model`), no TensorFlow.

Uses the flatbuffer schema that LiteRT ships (``ai_edge_litert.schema_py_generated``) through
its lazy accessors, and checks every vector length against the file size before walking it,
so a corrupt or hostile file yields one :class:`ModelFormatError` instead of a traceback, a
multi-gigabyte allocation or a hang.
"""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as fb

from simulator.errors import ModelFormatError
from simulator.model import (
    DTYPE_BYTES,
    Model,
    Operator,
    QuantParams,
    Subgraph,
    Tensor,
)

FILE_IDENTIFIER = b"TFL3"
#: Largest model read into memory; bigger ones are not MCU/phone deployment candidates.
MAX_MODEL_BYTES = 2 * 1024**3

_BUILTIN_NAMES = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
_DTYPE_NAMES = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
_PADDING = {v: k for k, v in vars(fb.Padding).items() if not k.startswith("_")}
_ACTIVATION = {v: k for k, v in vars(fb.ActivationFunctionType).items() if not k.startswith("_")}
_ENUM_FIELDS = {"padding": _PADDING, "fused_activation_function": _ACTIVATION}
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError,
                  UnicodeDecodeError, AttributeError, RecursionError, MemoryError)


def builtin_op_name(code: int) -> str:
    return _BUILTIN_NAMES.get(code, f"UNKNOWN_{code}")


def read_model(path: str | Path) -> Model:
    """Parse ``path`` into a :class:`Model`; raise :class:`ModelFormatError` if it is not one."""
    p = Path(path)
    if not p.exists():
        raise ModelFormatError(f"{p}: file not found")
    if p.is_dir():
        raise ModelFormatError(f"{p}: is a directory, expected a .tflite file")
    try:
        size = p.stat().st_size
        if size > MAX_MODEL_BYTES:
            raise ModelFormatError(f"{p}: {size} bytes is larger than the 2 GiB devicefit reads")
        data = p.read_bytes()
    except OSError as exc:
        raise ModelFormatError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    return parse_model(data, str(p))


def parse_model(data: bytes, path: str = "<bytes>") -> Model:
    """Parse flatbuffer bytes; see :func:`read_model`."""
    if len(data) == 0:
        raise ModelFormatError(f"{path}: empty file, not a .tflite model")
    if len(data) < 8:
        raise ModelFormatError(f"{path}: {len(data)} bytes is too short for a .tflite model")
    if data[4:8] != FILE_IDENTIFIER:
        raise ModelFormatError(
            f"{path}: not a .tflite model (file identifier {data[4:8]!r}, expected b'TFL3')"
        )
    try:
        return _Decoder(data, path).model()
    except ModelFormatError:
        raise
    except _DECODE_ERRORS as exc:
        raise ModelFormatError(
            f"{path}: corrupt or truncated .tflite ({type(exc).__name__}: {exc})"
        ) from exc


class _Decoder:
    def __init__(self, data: bytes, path: str) -> None:
        self.data = data
        self.path = path
        self.root = fb.Model.GetRootAs(data, 0)

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: invalid .tflite: {what}")

    def count(self, n: int, what: str, elem_bytes: int = 4) -> int:
        if n < 0 or n * elem_bytes > len(self.data):
            raise self.fail(f"{what} has {n} entries, more than the file can hold")
        return n

    def ints(self, obj: Any, name: str, what: str) -> tuple[int, ...]:
        n = self.count(getattr(obj, f"{name}Length")(), what)
        if n == 0:
            return ()
        return tuple(int(v) for v in getattr(obj, f"{name}AsNumpy")())

    def model(self) -> Model:
        r = self.root
        op_codes = [r.OperatorCodes(i) for i in range(self.count(r.OperatorCodesLength(),
                                                                 "operator_codes"))]
        buffer_sizes, buffer_data = self.buffers()
        subgraphs = tuple(
            self.subgraph(i, r.Subgraphs(i), op_codes, buffer_sizes)
            for i in range(self.count(r.SubgraphsLength(), "subgraphs"))
        )
        if not subgraphs:
            raise self.fail("the model has no subgraph")
        metadata = {}
        for i in range(self.count(r.MetadataLength(), "metadata")):
            entry = r.Metadata(i)
            name = (entry.Name() or b"").decode("utf-8")
            buf = entry.Buffer()
            if not 0 <= buf < len(buffer_data):
                raise self.fail(f"metadata '{name}' points to buffer {buf}, "
                                f"but there are {len(buffer_data)} buffers")
            metadata[name] = buffer_data[buf]
        return Model(
            path=self.path,
            size_bytes=len(self.data),
            sha256=hashlib.sha256(self.data).hexdigest(),
            schema_version=int(r.Version()),
            description=(r.Description() or b"").decode("utf-8", "replace"),
            subgraphs=subgraphs,
            buffer_sizes=tuple(buffer_sizes),
            metadata=metadata,
        )

    def buffers(self) -> tuple[list[int], list[bytes]]:
        r = self.root
        sizes: list[int] = []
        datas: list[bytes] = []
        for i in range(self.count(r.BuffersLength(), "buffers")):
            b = r.Buffers(i)
            offset, size = int(b.Offset()), int(b.Size())
            if offset > 1:
                # Large models keep buffer data after the flatbuffer, addressed by offset.
                if offset + size > len(self.data):
                    raise self.fail(f"buffer {i} data lies beyond the end of the file")
                sizes.append(size)
                datas.append(self.data[offset:offset + size])
                continue
            n = self.count(b.DataLength(), f"buffer {i}", elem_bytes=1)
            sizes.append(n)
            datas.append(b.DataAsNumpy().tobytes() if n else b"")
        return sizes, datas

    def subgraph(self, index: int, sg: Any, op_codes: list, buffer_sizes: list[int]) -> Subgraph:
        tensors = tuple(self.tensor(index, t, sg.Tensors(t), buffer_sizes)
                        for t in range(self.count(sg.TensorsLength(), "tensors")))
        n_tensors = len(tensors)

        def check_refs(refs: tuple[int, ...], what: str) -> tuple[int, ...]:
            for t in refs:
                if t != -1 and not 0 <= t < n_tensors:
                    raise self.fail(f"subgraph {index} {what} refers to tensor {t}, "
                                    f"but it has {n_tensors} tensors")
            return refs

        operators = []
        for i in range(self.count(sg.OperatorsLength(), "operators")):
            op = sg.Operators(i)
            code_index = int(op.OpcodeIndex())
            if not 0 <= code_index < len(op_codes):
                raise self.fail(f"operator {i} uses opcode {code_index}, "
                                f"but there are {len(op_codes)} operator codes")
            code = op_codes[code_index]
            builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
            name = builtin_op_name(builtin)
            if name == "CUSTOM":
                name = "CUSTOM:" + (code.CustomCode() or b"").decode("utf-8", "replace")
            operators.append(Operator(
                index=i,
                op_name=name,
                version=int(code.Version()),
                inputs=check_refs(self.ints(op, "Inputs", f"operator {i} inputs"),
                                  f"operator {i} ({name}) inputs"),
                outputs=check_refs(self.ints(op, "Outputs", f"operator {i} outputs"),
                                   f"operator {i} ({name}) outputs"),
                intermediates=check_refs(
                    self.ints(op, "Intermediates", f"operator {i} intermediates"),
                    f"operator {i} ({name}) intermediates"),
                options=_options(op),
                opcode_index=code_index,
            ))
        return Subgraph(
            index=index,
            name=(sg.Name() or b"").decode("utf-8", "replace"),
            tensors=tensors,
            operators=tuple(operators),
            inputs=check_refs(self.ints(sg, "Inputs", "subgraph inputs"), "inputs"),
            outputs=check_refs(self.ints(sg, "Outputs", "subgraph outputs"), "outputs"),
        )

    def tensor(self, sg_index: int, index: int, t: Any, buffer_sizes: list[int]) -> Tensor:
        dtype_code = int(t.Type())
        if dtype_code not in _DTYPE_NAMES:
            raise self.fail(f"subgraph {sg_index} tensor {index} has unknown dtype {dtype_code}")
        dtype = _DTYPE_NAMES[dtype_code]
        buffer = int(t.Buffer())
        if not 0 <= buffer < max(len(buffer_sizes), 1):
            raise self.fail(f"subgraph {sg_index} tensor {index} points to buffer {buffer}, "
                            f"but there are {len(buffer_sizes)} buffers")
        shape = self.ints(t, "Shape", f"tensor {index} shape")
        signature = self.ints(t, "ShapeSignature", f"tensor {index} shape_signature") or None
        has_data = bool(buffer_sizes) and buffer_sizes[buffer] > 0
        tensor = Tensor(
            index=index,
            name=(t.Name() or b"").decode("utf-8", "replace"),
            shape=shape,
            dtype=dtype,
            buffer=buffer,
            has_data=has_data,
            is_variable=bool(t.IsVariable()),
            shape_signature=signature,
            quantization=self.quant(t.Quantization(), index),
            is_sparse=t.Sparsity() is not None,
        )
        if has_data and not tensor.is_sparse and dtype != "string":
            expected = tensor.nbytes if dtype != "int4" else (tensor.num_elements + 1) // 2
            if DTYPE_BYTES.get(dtype) and buffer_sizes[buffer] < expected:
                raise self.fail(f"tensor {index} '{tensor.name}' needs {expected} bytes "
                                f"but its buffer {buffer} holds {buffer_sizes[buffer]}")
        return tensor

    def quant(self, q: Any, index: int) -> QuantParams | None:
        if q is None:
            return None
        n_scale = self.count(q.ScaleLength(), f"tensor {index} quantization scale")
        n_zp = self.count(q.ZeroPointLength(), f"tensor {index} quantization zero_point", 8)
        if n_scale == 0 and n_zp == 0:
            return None
        scale = tuple(float(s) for s in q.ScaleAsNumpy()) if n_scale else ()
        zero = tuple(int(z) for z in q.ZeroPointAsNumpy()) if n_zp else ()
        return QuantParams(scale, zero, int(q.QuantizedDimension()))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _options(op: Any) -> dict[str, Any]:
    """Builtin options as a plain dict with snake_case keys and enum names for enums."""
    out: dict[str, Any] = {}
    for type_getter, table_getter, creator in (
        (op.BuiltinOptionsType, op.BuiltinOptions, fb.BuiltinOptionsCreator),
        (op.BuiltinOptions2Type, op.BuiltinOptions2, fb.BuiltinOptions2Creator),
    ):
        kind = int(type_getter())
        table = table_getter()
        if kind == 0 or table is None:
            continue
        obj = creator(kind, table)
        if obj is None:
            continue
        for key, value in vars(obj).items():
            key = _snake(key)
            if isinstance(value, np.ndarray):
                value = value.tolist()
            elif isinstance(value, (bytes, bytearray)):
                value = value.decode("utf-8", "replace")
            elif not isinstance(value, (int, float, bool, str, list, type(None))):
                continue
            if key in _ENUM_FIELDS and isinstance(value, int):
                value = _ENUM_FIELDS[key].get(value, value)
            out[key] = value
    return out
