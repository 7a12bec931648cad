"""What an already-compiled Edge TPU model holds: the ``edgetpu-custom-op`` packages.

``edgetpu_compiler`` replaces the ops it maps by one ``edgetpu-custom-op`` whose
``custom_options`` is a FlexBuffer map; key ``"4"`` holds a DarwiNN ``Package`` flatbuffer
(file identifier ``DWN1``, schema ``executable/executable.fbs`` of
https://github.com/google-coral/libedgetpu). The package holds serialized executables: a
``PARAMETER_CACHING`` one whose ``parameters`` are loaded once into the TPU's on-chip memory,
and an ``EXECUTION_ONLY`` one whose ``parameters`` are streamed over the link every inference
(a ``STAND_ALONE`` executable, from older compilers, carries everything). So the compiled
file states the parameter-cache split the compiler chose, and the ops left beside the
custom op are the CPU part, exactly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from devicefit.simulator.errors import ModelFormatError
from devicefit.simulator.read.model import Model
from devicefit.simulator.read.reader import FlatbufferReader, Table

COMPILED_OP = "edgetpu-custom-op"
_PACKAGE_KEY = "4"
_IDENTIFIER = b"DWN1"
#: ``ExecutableType`` of executable.fbs.
STAND_ALONE, PARAMETER_CACHING, EXECUTION_ONLY = 0, 1, 2
# Field slots of executable.fbs: Package, MultiExecutable, Executable, InstructionBitstream.
_PKG_MULTI_EXECUTABLE, _PKG_COMPILER_VERSION = 1, 4
_MULTI_EXECUTABLES = 0
_EXE_INSTRUCTIONS, _EXE_PARAMETERS, _EXE_TYPE = 5, 6, 13
_BITSTREAM = 0


@dataclass(frozen=True)
class CompiledOp:
    """One ``edgetpu-custom-op``: its package's size and how its parameters are placed."""

    op_index: int
    #: Bytes of the op's ``custom_options`` (the compiled program and its parameters).
    data_bytes: int
    #: Parameters loaded once into on-chip memory (the ``PARAMETER_CACHING`` executable).
    cached_param_bytes: int
    #: Parameters streamed over USB/PCIe every inference (``EXECUTION_ONLY``/``STAND_ALONE``).
    streamed_param_bytes: int
    instruction_bytes: int
    executables: int
    #: The package's ``compiler_version`` string as written (compiler 16 writes ``cl/…``).
    compiler_version: str
    #: Why the package could not be read ("" when it was).
    error: str = ""


def _root(fb: FlatbufferReader) -> Table:
    return fb.table_at(struct.unpack_from("<I", fb.data, 0)[0])


def _bytes_field(fb: FlatbufferReader, table: Table, slot: int, what: str) -> bytes:
    start, n = fb.vector(table, slot, 1, what)
    return fb.data[start:start + n]


def _executables(multi: bytes, where: str) -> list[bytes]:
    fb = FlatbufferReader(multi, where)
    start, n = fb.vector(_root(fb), _MULTI_EXECUTABLES, 4, "serialized_executables")
    out = []
    for i in range(n):
        pos = start + 4 * i
        string = pos + struct.unpack_from("<I", multi, pos)[0]
        length = struct.unpack_from("<I", multi, string)[0]
        out.append(multi[string + 4:string + 4 + length])
    return out


def read_package(options: bytes, op_index: int, where: str) -> CompiledOp:
    """The figures of one custom op's ``custom_options``; ``error`` says why when unreadable."""
    from flatbuffers import flexbuffers

    empty = CompiledOp(op_index, len(options), 0, 0, 0, 0, "")
    try:
        ref = flexbuffers.GetRoot(options).AsMap[_PACKAGE_KEY]
        package = bytes(ref.AsBlob if ref.IsBlob else ref.AsStringBytes)
        if package[4:8] != _IDENTIFIER:
            return CompiledOp(**{**empty.__dict__, "error": "no DWN1 package in the op"})
        fb = FlatbufferReader(package, where)
        root = _root(fb)
        cached = streamed = instructions = 0
        exes = _executables(_bytes_field(fb, root, _PKG_MULTI_EXECUTABLE, "executables"), where)
        for exe in exes:
            efb = FlatbufferReader(exe, where)
            e = _root(efb)
            params = efb.vector(e, _EXE_PARAMETERS, 1, "parameters")[1]
            kind_at = e.field(_EXE_TYPE)  # an int16 enum, STAND_ALONE when absent
            kind = struct.unpack_from("<h", exe, kind_at)[0] if kind_at else STAND_ALONE
            if kind == PARAMETER_CACHING:
                cached += params
            else:
                streamed += params
            instructions += sum(efb.vector(b, _BITSTREAM, 1, "bitstream")[1]
                                for b in efb.tables(e, _EXE_INSTRUCTIONS, "bitstreams"))
        return CompiledOp(op_index, len(options), cached, streamed, instructions, len(exes),
                          fb.string(root, _PKG_COMPILER_VERSION))
    except (ModelFormatError, KeyError, IndexError, ValueError, TypeError, struct.error) as exc:
        return CompiledOp(**{**empty.__dict__, "error": f"unreadable package ({exc})"})


def compiled_ops(model: Model) -> list[CompiledOp]:
    """Every ``edgetpu-custom-op`` of the main graph, read from the model file."""
    from ai_edge_litert import schema_py_generated as fbs

    from devicefit.simulator.read.reader import model_file_bytes

    indices = [op.index for op in model.main.operators if op.op_name == f"CUSTOM:{COMPILED_OP}"]
    if not indices:
        return []
    data = model_file_bytes(model)
    if data is None:
        return [CompiledOp(i, 0, 0, 0, 0, 0, "", "the model file changed since it was read")
                for i in indices]
    sg = fbs.Model.GetRootAs(data, 0).Subgraphs(model.main.index)
    out = []
    for i in indices:
        options = sg.Operators(i).CustomOptionsAsNumpy()  # 0 when the op has none
        out.append(read_package(b"" if isinstance(options, int) else options.tobytes(), i,
                                model.path))
    return out
