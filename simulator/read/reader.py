"""Read a ``.tflite`` flatbuffer into devicefit's IR (:mod:`simulator.read.model`), no TensorFlow.

The structural fields (tensors, operators, buffers, quantization, metadata) are decoded
directly with ``struct`` from the TFLite schema's field slots: a Python accessor call per
field (the generated schema code) costs ~20× more, and the reader is most of the static
simulation's time. Every read is bounds-checked, every vector length checked against the
file, and flatbuffer offsets only point forward (vtables aside), so a corrupt or hostile
file yields one :class:`ModelFormatError` instead of a traceback, a multi-gigabyte
allocation or a hang. Builtin options, which few stages read, are decoded on first access,
with ``struct`` too, from the layouts in :mod:`simulator.read.schema` (the schema LiteRT
ships, as data: importing that module would import NumPy, a third of a static
``simulate``'s time). NumPy is imported only by :func:`constant_values`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import shlex
import struct
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit.simulator.errors import ModelFormatError, did_you_mean
from devicefit.simulator.infra.fileio import regular_file_problem
from devicefit.simulator.infra.limits import check_ops
from devicefit.simulator.read.model import (
    DTYPE_BYTES,
    Model,
    Operator,
    QuantParams,
    Signature,
    Subgraph,
    Tensor,
)
from devicefit.simulator.read.schema import ENUMS, UNIONS, Field

if TYPE_CHECKING:
    import numpy as np

FILE_IDENTIFIER = b"TFL3"
#: Largest model read into memory; bigger ones are not MCU/phone deployment candidates.
MAX_MODEL_BYTES = 2 * 1024**3

_BUILTIN_NAMES = ENUMS["BuiltinOperator"]
_DTYPE_NAMES = {code: name.lower() for code, name in ENUMS["TensorType"].items()}
_ENUM_FIELDS = {"padding": ENUMS["Padding"],
                "fused_activation_function": ENUMS["ActivationFunctionType"]}
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError,
                  UnicodeDecodeError, AttributeError, RecursionError, MemoryError)

# Field slots of the schema's tables (schema.fbs order; a union takes two: type, value).
_MODEL_VERSION, _MODEL_OPCODES, _MODEL_SUBGRAPHS, _MODEL_DESCRIPTION, _MODEL_BUFFERS = 0, 1, 2, 3, 4
_MODEL_METADATA, _MODEL_SIGNATURES = 6, 7
_CODE_DEPRECATED, _CODE_CUSTOM, _CODE_VERSION, _CODE_BUILTIN = 0, 1, 2, 3
_SG_TENSORS, _SG_INPUTS, _SG_OUTPUTS, _SG_OPERATORS, _SG_NAME = 0, 1, 2, 3, 4
_T_SHAPE, _T_TYPE, _T_BUFFER, _T_NAME, _T_QUANT, _T_VARIABLE, _T_SPARSITY, _T_SIGNATURE = range(8)
_Q_SCALE, _Q_ZERO_POINT, _Q_DIMENSION = 2, 3, 6
_OP_OPCODE, _OP_INPUTS, _OP_OUTPUTS, _OP_INTERMEDIATES = 0, 1, 2, 8
_BUF_DATA, _BUF_OFFSET, _BUF_SIZE = 0, 1, 2
_META_NAME, _META_BUFFER = 0, 1
_SIG_INPUTS, _SIG_OUTPUTS, _SIG_KEY, _SIG_SUBGRAPH = 0, 1, 2, 4
_MAP_NAME, _MAP_TENSOR = 0, 1


def builtin_op_name(code: int) -> str:
    return _BUILTIN_NAMES.get(code, f"UNKNOWN_{code}")


#: What devicefit convert reads, for the hint given where such a file is passed as a .tflite.
_CONVERTIBLE = "a SavedModel folder, .keras or .h5"
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def other_format(path: str | Path, head: bytes) -> str | None:
    """What a file that is not a .tflite is, and how to get one from it (``head``: its
    first bytes; ``b""`` for a folder); None when it is nothing devicefit knows.

    A newcomer passes the trained model itself more often than a broken .tflite."""
    p = Path(path)
    suffix = p.suffix.lower()
    if p.is_dir():
        if not any((p / name).is_file() for name in ("saved_model.pb", "saved_model.pbtxt")):
            return None
        return f"a TensorFlow SavedModel folder, not a .tflite: convert it first: {_convert(p)}"
    if head.startswith(b"PK\x03\x04") and suffix == ".keras":
        return f"a Keras model (.keras), not a .tflite: convert it first: {_convert(p)}"
    if head.startswith(HDF5_SIGNATURE):
        return f"a Keras model in HDF5 (.h5), not a .tflite: convert it first: {_convert(p)}"
    if p.name == "saved_model.pb":
        return (f"the graph of a TensorFlow SavedModel, not a .tflite: convert its folder "
                f"first: {_convert(p.parent)}")
    if suffix in (".pb", ".onnx"):
        what = "a TensorFlow graph (.pb)" if suffix == ".pb" else "an ONNX model"
        how = "save it as a SavedModel" if suffix == ".pb" else \
            "turn it into a SavedModel (for example with onnx2tf)"
        return (f"{what}, not a .tflite; devicefit convert reads {_CONVERTIBLE}: {how}, then: "
                f"{_convert(None)}")
    return None


def _convert(source: Path | None) -> str:
    """The convert command for ``source`` (None: a SavedModel folder still to be made)."""
    name = "FOLDER" if source is None else shlex.quote(str(source))
    out = "model" if source is None else source.resolve().stem or "model"
    return f"devicefit convert {name} --profile NAME -o {shlex.quote(out + '.tflite')}"


def read_model(path: str | Path) -> Model:
    """Parse ``path`` into a :class:`Model`; raise :class:`ModelFormatError` if it is not one."""
    p = Path(path)
    if not p.exists():
        raise ModelFormatError(f"{p}: file not found{_near(p)}")
    if p.is_dir():
        raise ModelFormatError(f"{p}: " + (other_format(p, b"")
                                           or "is a directory, expected a .tflite file"))
    if (why := regular_file_problem(p)) is not None:
        # /dev/zero never ends and a FIFO blocks: only a regular file has a size to trust.
        raise ModelFormatError(f"{p}: {why}, expected a .tflite file")
    try:
        size = p.stat().st_size
        if size > MAX_MODEL_BYTES:
            raise ModelFormatError(f"{p}: {size} bytes is larger than the 2 GiB devicefit reads")
        with p.open("rb") as f:
            data = f.read(MAX_MODEL_BYTES + 1)
        if len(data) > MAX_MODEL_BYTES:
            raise ModelFormatError(f"{p}: larger than the 2 GiB devicefit reads")
    except OSError as exc:
        raise ModelFormatError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    return parse_model(data, str(p))


def _near(path: Path) -> str:
    """A did-you-mean among the files beside a missing ``path`` (its folder's first 1,000
    names: a folder of millions is no reason to wait)."""
    try:
        names = [f.name for _, f in zip(range(1000), path.parent.iterdir())]
    except OSError:
        return ""
    return did_you_mean(path.name, names)


def _zip_contents(data: bytes) -> str | None:
    """What a zip archive passed as a model holds, by its member names (a renamed file keeps
    its content): a Keras model or NumPy arrays; None for another archive."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()[:10_000]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None
    if "config.json" in names and any(n.endswith(".h5") for n in names):
        return "a Keras model (.keras)"
    if names and all(n.endswith(".npy") for n in names):
        return "NumPy arrays (.npz: data, not a model)"
    return None


def parse_model(data: bytes, path: str = "<bytes>") -> Model:
    """Parse flatbuffer bytes; see :func:`read_model`."""
    if len(data) == 0:
        raise ModelFormatError(f"{path}: empty file, not a .tflite model")
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        if other := other_format(path, bytes(data[:8])):
            raise ModelFormatError(f"{path}: {other}")
        if data[:4] == b"PK\x03\x04" and (inside := _zip_contents(bytes(data))):
            how = (f"convert it first: {_convert(Path(path))}" if "Keras" in inside
                   else "devicefit reads such a file as --calibration/--train/--eval data")
            raise ModelFormatError(f"{path}: a zip archive of {inside}, not a .tflite; {how}")
        if len(data) < 8:
            raise ModelFormatError(f"{path}: {len(data)} bytes is too short for a .tflite model")
        raise ModelFormatError(
            f"{path}: not a .tflite model (file identifier {data[4:8]!r}, expected b'TFL3')")
    try:
        return _Decoder(bytes(data), path).model()
    except ModelFormatError:
        raise
    except _DECODE_ERRORS as exc:
        raise ModelFormatError(
            f"{path}: corrupt or truncated .tflite ({type(exc).__name__}: {exc})"
        ) from exc


_I32, _U32, _U16 = struct.Struct("<i"), struct.Struct("<I"), struct.Struct("<H")
_SCALARS = {"<" + code: struct.Struct("<" + code) for code in "?bBhHiIqQfd"}


class Table:
    """A table's position and its vtable (field offsets, 0 = absent), read once."""

    __slots__ = ("pos", "slots")

    def __init__(self, pos: int, slots: tuple[int, ...]) -> None:
        self.pos, self.slots = pos, slots

    def field(self, slot: int) -> int:
        """Absolute position of field ``slot``, 0 if absent."""
        off = self.slots[slot] if slot < len(self.slots) else 0
        return self.pos + off if off else 0


class FlatbufferReader:
    """Bounds-checked reads of flatbuffer tables, vectors and strings at absolute offsets."""

    def __init__(self, data: bytes, path: str) -> None:
        self.data = data
        self.n = len(data)
        self.path = path

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: invalid .tflite: {what}")

    def _at(self, fmt: struct.Struct, pos: int) -> Any:
        if pos < 0 or pos + fmt.size > self.n:
            if pos >= self.n:  # what a copy or download cut short looks like
                raise self.fail(f"an offset points past its end (byte {pos:,} of a "
                                f"{self.n:,}-byte file): the file is truncated (an "
                                f"interrupted copy or download?) or corrupt")
            raise self.fail(f"an offset points outside the file ({pos})")
        return fmt.unpack_from(self.data, pos)[0]

    def table_at(self, pos: int) -> Table:
        vtable = pos - self._at(_I32, pos)
        vt_size = self._at(_U16, vtable)
        if vt_size < 4 or vtable + vt_size > self.n:
            raise self.fail(f"a table's vtable at {vtable} is {vt_size} bytes")
        return Table(pos, struct.unpack_from(f"<{(vt_size - 4) // 2}H", self.data, vtable + 4))

    def scalar(self, t: Table, slot: int, fmt: str, default: int = 0) -> Any:
        pos = t.field(slot)
        return self._at(_SCALARS[fmt], pos) if pos else default

    def table(self, t: Table, slot: int) -> Table | None:
        """The sub-table in field ``slot``, None if absent."""
        pos = t.field(slot)
        return self.table_at(pos + self._at(_U32, pos)) if pos else None

    def vector(self, t: Table, slot: int, elem_bytes: int, what: str) -> tuple[int, int]:
        """(position of the first element, length) of a vector field; (0, 0) if absent."""
        pos = t.field(slot)
        if not pos:
            return 0, 0
        start = pos + self._at(_U32, pos)
        n = self._at(_U32, start)
        if start + 4 + n * elem_bytes > self.n:
            raise self.fail(f"{what} has {n} entries, more than the file can hold")
        return start + 4, n

    def numbers(self, t: Table, slot: int, code: str, what: str) -> tuple[Any, ...]:
        start, n = self.vector(t, slot, struct.calcsize(code), what)
        return struct.unpack_from(f"<{n}{code}", self.data, start) if n else ()

    def tables(self, t: Table, slot: int, what: str) -> list[Table]:
        start, n = self.vector(t, slot, 4, what)
        offsets = struct.unpack_from(f"<{n}I", self.data, start) if n else ()
        return [self.table_at(start + 4 * i + off) for i, off in enumerate(offsets)]

    def string(self, t: Table, slot: int) -> str:
        start, n = self.vector(t, slot, 1, "a string")
        return self.data[start:start + n].decode("utf-8", "replace") if n else ""


class _Decoder(FlatbufferReader):
    #: Buffers whose data lies after the flatbuffer (set by :meth:`model` first).
    outside: frozenset[int] = frozenset()

    def model(self) -> Model:
        root = self.table_at(self._at(_U32, 0))
        op_codes = [self.op_code(c) for c in self.tables(root, _MODEL_OPCODES, "operator_codes")]
        buffers = self.tables(root, _MODEL_BUFFERS, "buffers")
        buffer_sizes = [self.buffer_extent(i, b)[1] for i, b in enumerate(buffers)]
        self.outside = frozenset(i for i, b in enumerate(buffers)
                                 if self.scalar(b, _BUF_OFFSET, "<Q") > 1)
        sg_tables = self.tables(root, _MODEL_SUBGRAPHS, "subgraphs")
        # Counted from the vector headers before anything is decoded: a bound on the work.
        check_ops(self.path, sum(self.vector(sg, _SG_OPERATORS, 4, "operators")[1]
                                 for sg in sg_tables))
        check_ops(self.path, sum(self.vector(sg, _SG_TENSORS, 4, "tensors")[1]
                                 for sg in sg_tables), "tensors")
        subgraphs = tuple(self.subgraph(i, sg, op_codes, buffer_sizes)
                          for i, sg in enumerate(sg_tables))
        if not subgraphs:
            raise self.fail("the model has no subgraph")
        metadata = {}
        for entry in self.tables(root, _MODEL_METADATA, "metadata"):
            name = self.string(entry, _META_NAME)
            buf = self.scalar(entry, _META_BUFFER, "<I")
            if not 0 <= buf < len(buffers):
                raise self.fail(f"metadata '{name}' points to buffer {buf}, "
                                f"but there are {len(buffers)} buffers")
            start, size = self.buffer_extent(buf, buffers[buf])
            metadata[name] = self.data[start:start + size]
        return Model(
            path=self.path,
            size_bytes=self.n,
            sha256=hashlib.sha256(self.data).hexdigest(),
            schema_version=self.scalar(root, _MODEL_VERSION, "<I"),
            description=self.string(root, _MODEL_DESCRIPTION),
            subgraphs=subgraphs,
            buffer_sizes=tuple(buffer_sizes),
            metadata=metadata,
            signatures=tuple(self.signature(s, subgraphs)
                             for s in self.tables(root, _MODEL_SIGNATURES, "signature_defs")),
        )

    def signature(self, sig: Table, subgraphs: tuple[Subgraph, ...]) -> Signature:
        key = self.string(sig, _SIG_KEY)
        index = self.scalar(sig, _SIG_SUBGRAPH, "<I")
        if not 0 <= index < len(subgraphs):
            raise self.fail(f"signature '{key}' runs subgraph {index}, "
                            f"but there are {len(subgraphs)} subgraphs")
        n_tensors = len(subgraphs[index].tensors)

        def names(slot: int, what: str) -> tuple[tuple[str, int], ...]:
            out = []
            for entry in self.tables(sig, slot, f"signature '{key}' {what}"):
                name, tensor = self.string(entry, _MAP_NAME), self.scalar(entry, _MAP_TENSOR, "<I")
                if not 0 <= tensor < n_tensors:
                    raise self.fail(f"signature '{key}' {what} '{name}' is tensor {tensor}, "
                                    f"but subgraph {index} has {n_tensors} tensors")
                out.append((name, tensor))
            return tuple(out)

        return Signature(key=key, subgraph=index, inputs=names(_SIG_INPUTS, "input"),
                         outputs=names(_SIG_OUTPUTS, "output"))

    def buffer(self, index: int) -> bytes:
        """The data of buffer ``index``."""
        start, n = self.vector(self.table_at(self._at(_U32, 0)), _MODEL_BUFFERS, 4, "buffers")
        if not 0 <= index < n:
            raise self.fail(f"there is no buffer {index} of {n}")
        pos = start + 4 * index
        first, size = self.buffer_extent(index, self.table_at(pos + self._at(_U32, pos)))
        return self.data[first:first + size]

    def op_code(self, code: Table) -> tuple[str, int]:
        builtin = max(self.scalar(code, _CODE_BUILTIN, "<i"),
                      self.scalar(code, _CODE_DEPRECATED, "<b"))
        name = builtin_op_name(builtin)
        if name == "CUSTOM":
            name = "CUSTOM:" + self.string(code, _CODE_CUSTOM)
        return name, self.scalar(code, _CODE_VERSION, "<i", 1)

    def buffer_extent(self, index: int, buf: Table) -> tuple[int, int]:
        """(start, size) of a buffer's data in the file; large models keep it after the
        flatbuffer, addressed by offset."""
        offset = self.scalar(buf, _BUF_OFFSET, "<Q")
        if offset > 1:
            size = self.scalar(buf, _BUF_SIZE, "<Q")
            if offset + size > self.n:
                raise self.fail(f"buffer {index} data lies beyond the end of the file")
            return offset, size
        return self.vector(buf, _BUF_DATA, 1, f"buffer {index}")

    def subgraph(self, index: int, sg: Table, op_codes: list[tuple[str, int]],
                 buffer_sizes: list[int]) -> Subgraph:
        tensors = tuple(self.tensor(index, t, pos, buffer_sizes) for t, pos in
                        enumerate(self.tables(sg, _SG_TENSORS, "tensors")))
        n_tensors = len(tensors)

        def refs(table: Table, slot: int, what: str) -> tuple[int, ...]:
            values = self.numbers(table, slot, "i", what)
            for t in values:
                if t != -1 and not 0 <= t < n_tensors:
                    raise self.fail(f"subgraph {index} {what} refers to tensor {t}, "
                                    f"but it has {n_tensors} tensors")
            return values

        operators = []
        for i, op in enumerate(self.tables(sg, _SG_OPERATORS, "operators")):
            code_index = self.scalar(op, _OP_OPCODE, "<I")
            if not 0 <= code_index < len(op_codes):
                raise self.fail(f"operator {i} uses opcode {code_index}, "
                                f"but there are {len(op_codes)} operator codes")
            name, version = op_codes[code_index]
            operators.append(Operator(
                index=i,
                op_name=name,
                version=version,
                inputs=refs(op, _OP_INPUTS, f"operator {i} ({name}) inputs"),
                outputs=refs(op, _OP_OUTPUTS, f"operator {i} ({name}) outputs"),
                intermediates=refs(op, _OP_INTERMEDIATES, f"operator {i} ({name}) intermediates"),
                options=LazyOptions(self.data, op.pos, f"{self.path}: operator {i} ({name})"),
                opcode_index=code_index,
            ))
        return Subgraph(
            index=index,
            name=self.string(sg, _SG_NAME),
            tensors=tensors,
            operators=tuple(operators),
            inputs=refs(sg, _SG_INPUTS, "inputs"),
            outputs=refs(sg, _SG_OUTPUTS, "outputs"),
        )

    def tensor(self, sg_index: int, index: int, t: Table, buffer_sizes: list[int]) -> Tensor:
        dtype_code = self.scalar(t, _T_TYPE, "<b")
        if dtype_code not in _DTYPE_NAMES:
            raise self.fail(f"subgraph {sg_index} tensor {index} has unknown dtype {dtype_code}")
        dtype = _DTYPE_NAMES[dtype_code]
        buffer = self.scalar(t, _T_BUFFER, "<I")
        if not 0 <= buffer < max(len(buffer_sizes), 1):
            raise self.fail(f"subgraph {sg_index} tensor {index} points to buffer {buffer}, "
                            f"but there are {len(buffer_sizes)} buffers")
        signature = self.numbers(t, _T_SIGNATURE, "i", f"tensor {index} shape_signature")
        has_data = bool(buffer_sizes) and buffer_sizes[buffer] > 0
        tensor = Tensor(
            index=index,
            name=self.string(t, _T_NAME),
            shape=self.numbers(t, _T_SHAPE, "i", f"tensor {index} shape"),
            dtype=dtype,
            buffer=buffer,
            has_data=has_data,
            is_variable=bool(self.scalar(t, _T_VARIABLE, "<B")),
            shape_signature=signature or None,
            quantization=self.quant(self.table(t, _T_QUANT), index),
            is_sparse=t.field(_T_SPARSITY) != 0,
            data_after_flatbuffer=has_data and buffer in self.outside,
        )
        if has_data and not tensor.is_sparse and dtype != "string":
            expected = tensor.stored_bytes
            if DTYPE_BYTES.get(dtype) and buffer_sizes[buffer] < expected:
                raise self.fail(f"tensor {index} '{tensor.name}' needs {expected} bytes "
                                f"but its buffer {buffer} holds {buffer_sizes[buffer]}")
        return tensor

    def quant(self, q: Table | None, index: int) -> QuantParams | None:
        if q is None:
            return None
        scale = self.numbers(q, _Q_SCALE, "f", f"tensor {index} quantization scale")
        zero = self.numbers(q, _Q_ZERO_POINT, "q", f"tensor {index} quantization zero_point")
        if not scale and not zero:
            return None
        return QuantParams(scale, zero,
                           self.scalar(q, _Q_DIMENSION, "<i"))


class LazyOptions(Mapping[str, Any]):
    """An operator's builtin options as a read-only dict, decoded on first access.

    Keys are snake_case option names; enum options (``padding``,
    ``fused_activation_function``) hold their names. A corrupt options table raises
    :class:`ModelFormatError` when it is first read. Until then it shares (does not copy)
    the file's bytes, so a :class:`Model` keeps its file in memory while it lives; the IR
    itself copies no weights.
    """

    __slots__ = ("_data", "_pos", "_where", "_values")

    def __init__(self, data: bytes, pos: int, where: str) -> None:
        self._data, self._pos, self._where = data, pos, where
        self._values: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._values is None:
            try:
                self._values = _options(FlatbufferReader(self._data, self._where), self._pos)
            except _DECODE_ERRORS as exc:
                raise ModelFormatError(f"{self._where}: corrupt builtin options "
                                       f"({type(exc).__name__}: {exc})") from exc
            self._data = b""  # the options are all we needed from the file
        return self._values

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __repr__(self) -> str:
        return repr(self._decoded())


def _options(reader: FlatbufferReader, pos: int) -> dict[str, Any]:
    """The builtin options of the operator table at ``pos`` as a plain dict: the values
    the schema's object API gives (its attributes in snake_case, vectors as lists, strings
    decoded, a field absent from the file at its default), enum names for the enums."""
    op = reader.table_at(pos)
    out: dict[str, Any] = {}
    for union in UNIONS:
        kind = reader.scalar(op, union.type_slot, "<B")
        table = reader.table(op, union.table_slot) if kind else None
        fields = union.members.get(kind)
        if table is None or fields is None:
            continue
        for field in fields:
            value = _option(reader, table, field)
            if field.key in _ENUM_FIELDS and isinstance(value, int):
                value = _ENUM_FIELDS[field.key].get(value, value)
            out[field.key] = value
    return out


def _option(reader: FlatbufferReader, table: Table, field: Field) -> Any:
    if field.kind == "string":
        return reader.string(table, field.slot) if table.field(field.slot) else None
    if field.kind.startswith("vector:"):
        code = field.kind.removeprefix("vector:")
        return list(reader.numbers(table, field.slot, code, f"option {field.key}")) \
            if table.field(field.slot) else None
    return reader.scalar(table, field.slot, "<" + field.kind, field.default)


@functools.lru_cache(maxsize=4)
def _file_bytes(path: str, sha256: str) -> bytes | None:
    """The model file's bytes if it is still the file the IR was read from."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


def model_file_bytes(model: Model) -> bytes | None:
    """The model file's bytes, None when the file changed since the IR was read."""
    return _file_bytes(model.path, model.sha256)


#: Dtypes whose constants :func:`constant_values` decodes.
_VALUE_DTYPES = frozenset({"int8", "uint8", "int16", "int32", "int64", "float16", "float32"})
#: The ``struct`` codes of the integer ones, for :func:`constant_ints`.
_INT_CODES = {"int8": "b", "uint8": "B", "int16": "h", "int32": "i", "int64": "q"}


def _constant_bytes(model: Model, t: Tensor) -> bytes | None:
    if not t.has_data or t.dtype not in _VALUE_DTYPES or t.is_sparse:
        return None
    data = model_file_bytes(model)
    return None if data is None else _Decoder(data, model.path).buffer(t.buffer)


def constant_values(model: Model, t: Tensor) -> np.ndarray | None:
    """A constant tensor's values, read from the model file (the IR keeps only sizes);
    None when the file changed since it was read, or the dtype is not a plain number."""
    raw = _constant_bytes(model, t)
    if raw is None:
        return None
    import numpy as np  # here only: the static stages read integers (constant_ints)

    dtype = np.dtype(t.dtype)
    if len(raw) < t.num_elements * dtype.itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype, count=t.num_elements).reshape(t.shape)


def constant_ints(model: Model, t: Tensor) -> tuple[int, ...] | None:
    """An integer constant's values in order (shape vectors, axes, paddings), as
    :func:`constant_values` reads them but without NumPy; None where it gives None or the
    dtype is not an integer."""
    code = _INT_CODES.get(t.dtype)
    raw = _constant_bytes(model, t) if code else None
    if code is None or raw is None or len(raw) < t.num_elements * struct.calcsize(code):
        return None
    return struct.unpack_from(f"<{t.num_elements}{code}", raw)
