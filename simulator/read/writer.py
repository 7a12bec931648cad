"""Edit a ``.tflite`` flatbuffer without TensorFlow: small functions, bytes in, bytes out.

Each edit unpacks the model with the schema LiteRT ships (``ai_edge_litert``'s object API,
``ModelT``), changes it and packs it again. Packing keeps every constant buffer 16-byte
aligned, as the TFLite converter writes them: kernels on MCUs read int32/float data in place
and an unaligned buffer can fault there.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from devicefit.simulator.errors import ModelFormatError

#: The flatbuffer file identifier of TFLite models.
FILE_IDENTIFIER = b"TFL3"
#: Alignment of constant data, as the converter writes it (``ForceVectorAlignment(16)``).
BUFFER_ALIGNMENT = 16
#: Metadata name TFLite-Micro reads an offline arena plan from (``GetOfflinePlannedOffsets``).
OFFLINE_MEMORY_ALLOCATION = "OfflineMemoryAllocation"


class _AlignedBufferT(schema.BufferT):
    """A BufferT whose data vector is packed 16-byte aligned."""

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 (flatbuffers' name)
        data = None
        if self.data is not None and len(self.data):
            raw = np.asarray(self.data, dtype=np.uint8).tobytes()
            builder.StartVector(1, len(raw), BUFFER_ALIGNMENT)
            builder.head -= len(raw)
            builder.Bytes[builder.head:builder.head + len(raw)] = raw
            data = builder.EndVector()
        schema.BufferStart(builder)
        if data is not None:
            schema.BufferAddData(builder, data)
        schema.BufferAddOffset(builder, self.offset)
        schema.BufferAddSize(builder, self.size)
        return schema.BufferEnd(builder)


def unpack(model_bytes: bytes) -> schema.ModelT:
    """Flatbuffer bytes → ``ModelT``; a clear error for anything that is not a TFLite model."""
    if len(model_bytes) < 8 or model_bytes[4:8] != FILE_IDENTIFIER:
        raise ModelFormatError("not a .tflite model (the flatbuffer identifier is not TFL3)")
    try:
        model = schema.ModelT.InitFromPackedBuf(bytearray(model_bytes), 0)
    except Exception as exc:  # a corrupt flatbuffer raises anything from struct to IndexError
        raise ModelFormatError(f"corrupt .tflite flatbuffer: {exc}") from exc
    if any(b.offset for b in model.buffers or []):
        # Data stored after the flatbuffer (models > 2 GB) moves when the model is repacked.
        raise ModelFormatError("cannot edit a .tflite whose buffers live outside the flatbuffer")
    return model


def pack(model: schema.ModelT) -> bytes:
    """``ModelT`` → flatbuffer bytes with the TFL3 identifier and aligned constant buffers."""
    for buf in model.buffers or []:
        buf.__class__ = _AlignedBufferT
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def read_metadata(model_bytes: bytes) -> dict[str, bytes]:
    """The model's metadata entries, name → raw bytes."""
    model = unpack(model_bytes)
    return {_name(m): _buffer_bytes(model, m.buffer) for m in model.metadata or []}


def add_metadata(model_bytes: bytes, name: str, data: bytes) -> bytes:
    """Return the model with metadata entry ``name`` set to ``data`` (replaced if present)."""
    model = unpack(model_bytes)
    buf = schema.BufferT()
    buf.data = np.frombuffer(data, dtype=np.uint8)
    model.buffers = model.buffers or []
    model.metadata = model.metadata or []
    existing = next((m for m in model.metadata if _name(m) == name), None)
    if existing is not None:
        # Leave the old buffer in place (other entries may point at it) but empty it when
        # nothing else refers to it, so the file does not grow with every rewrite.
        if sum(m.buffer == existing.buffer for m in model.metadata) == 1:
            model.buffers[existing.buffer].data = None
        existing.buffer = len(model.buffers)
    else:
        entry = schema.MetadataT()
        entry.name = name
        entry.buffer = len(model.buffers)
        model.metadata.append(entry)
    model.buffers.append(buf)
    return pack(model)


def _name(entry: schema.MetadataT) -> str:
    name = entry.name
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)


def _buffer_bytes(model: schema.ModelT, index: int) -> bytes:
    data = model.buffers[index].data if 0 <= index < len(model.buffers or []) else None
    return b"" if data is None else np.asarray(data, dtype=np.uint8).tobytes()


def reorder_operators(model_bytes: bytes, order: Sequence[int], subgraph: int = 0) -> bytes:
    """Return the model with ``subgraph``'s operators listed (and so run) in ``order``.

    ``order[k]`` is the current index of the operator that becomes the k-th. The caller
    keeps the order topological (:mod:`simulator.optimize` does); nothing in a ``.tflite``
    refers to operators by index, so the list is all that changes.
    """
    model = unpack(model_bytes)
    ops = model.subgraphs[subgraph].operators or []
    if sorted(order) != list(range(len(ops))):
        raise ValueError(f"order must be a permutation of 0..{len(ops) - 1}")
    model.subgraphs[subgraph].operators = [ops[i] for i in order]
    return pack(model)


def offline_plan_bytes(offsets: Sequence[int]) -> bytes:
    """TFLM's ``OfflineMemoryAllocation`` buffer: little-endian int32 [version 0, subgraph 0,
    n, offset × n], one offset per tensor of every subgraph (−1: plan online)."""
    return struct.pack(f"<3i{len(offsets)}i", 0, 0, len(offsets), *offsets)


def set_offline_plan(model_bytes: bytes, offsets: Sequence[int]) -> bytes:
    """Return the model with its ``OfflineMemoryAllocation`` metadata set to ``offsets``."""
    model = unpack(model_bytes)
    total = sum(len(sg.tensors or []) for sg in model.subgraphs or [])
    if len(offsets) != total:
        raise ValueError(f"an offline plan needs one offset per tensor ({total}), "
                         f"got {len(offsets)}")
    return add_metadata(model_bytes, OFFLINE_MEMORY_ALLOCATION, offline_plan_bytes(offsets))


def model_table(model_bytes: bytes) -> schema.Model:
    """The model's root table, nothing unpacked yet: :func:`cut_ops` unpacks only the
    operators, tensors and buffers of its cut. A whole :func:`unpack` of a phone-sized
    model takes about a second in Python, as long as probing all its operators."""
    if len(model_bytes) < 8 or model_bytes[4:8] != FILE_IDENTIFIER:
        raise ModelFormatError("not a .tflite model (the flatbuffer identifier is not TFL3)")
    return schema.Model.GetRootAs(bytearray(model_bytes), 0)


def cut_ops(model: schema.Model, subgraph: int, op_indices: Sequence[int]) -> bytes:
    """A model of a few operators of ``model`` (``op_indices``, in execution order; usually
    one, plus the ops that compute its weights from constants), with those operators' own
    tensors (shapes, types, quantization, constant data, variable flags) and options: what a
    runtime is asked when it must say whether it runs an operator
    (:mod:`simulator.run.probe`).

    Tensors the cut consumes but does not produce, and that are neither constants nor
    variables, become the graph's inputs; the last operator's outputs its outputs.
    ``model`` is the file's root table (:func:`model_table`), read once by the caller; only
    the parts the cut uses are unpacked.
    """
    sg = model.Subgraphs(subgraph)
    ops = [schema.OperatorT.InitFromObj(sg.Operators(i)) for i in op_indices]
    used = list(dict.fromkeys(i for op in ops
                              for i in (*op.inputs, *op.outputs, *(op.intermediates or ()))
                              if i >= 0))
    remap = {old: new for new, old in enumerate(used)}
    codes: dict[int, int] = {}
    buffers = [schema.BufferT()]
    tensors = []
    for old in used:
        t = schema.TensorT.InitFromObj(sg.Tensors(old))
        buf = model.Buffers(t.buffer) if 0 < t.buffer < model.BuffersLength() else None
        if buf is not None and buf.Offset():
            raise ModelFormatError("the tensor's data lives outside the flatbuffer")
        if buf is not None and buf.DataLength():
            buffers.append(schema.BufferT.InitFromObj(buf))
            t.buffer = len(buffers) - 1
        else:
            t.buffer = 0
        tensors.append(t)
    for op in ops:  # unpacked for this cut: renumbered in place
        op.opcodeIndex = codes.setdefault(op.opcodeIndex, len(codes))
        op.inputs = [remap.get(i, -1) for i in op.inputs]
        op.outputs = [remap[i] for i in op.outputs]
        op.intermediates = [remap[i] for i in op.intermediates or ()] or None
    produced = {i for op in ops for i in op.outputs}
    out = schema.SubGraphT()
    out.tensors, out.operators = tensors, ops
    out.inputs = list(dict.fromkeys(
        i for op in ops for i in op.inputs if i >= 0 and i not in produced
        and tensors[i].buffer == 0 and not tensors[i].isVariable))
    out.outputs = ops[-1].outputs
    m = schema.ModelT()
    m.version, m.description = 3, "devicefit op probe"
    m.operatorCodes = [schema.OperatorCodeT.InitFromObj(model.OperatorCodes(code))
                       for code in codes]
    m.subgraphs, m.buffers = [out], buffers
    return pack(m)
