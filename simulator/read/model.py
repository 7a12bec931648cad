"""devicefit's own typed view of a ``.tflite`` model (the IR every stage reads).

Built by :mod:`simulator.read.reader`; frozen so stages cannot change what another stage reads.
Dtype names are lower-case numpy-style strings (``int8``, ``float32``, ``int4`` ...), op
names are TFLite builtin names (``CONV_2D``) or ``CUSTOM:<code>`` for custom ops.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Integer activation dtypes: quantized with a scale and zero point.
INTEGER_DTYPES = frozenset({"int8", "uint8", "int16"})

#: Bytes per element by dtype name; int4 counts one byte per element, as TFLM plans it.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float16": 2, "int32": 4, "uint8": 1, "int64": 8, "string": 1, "bool": 1,
    "int16": 2, "complex64": 8, "int8": 1, "float64": 8, "complex128": 16, "uint64": 8,
    "resource": 0, "variant": 0, "uint32": 4, "uint16": 2, "int4": 1, "bfloat16": 2,
}


@dataclass(frozen=True)
class QuantParams:
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    quantized_dimension: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    #: True when the flatbuffer holds this tensor's data (a constant: weights, bias ...).
    has_data: bool = False
    is_variable: bool = False
    #: ``shape_signature`` with -1 for dynamic dimensions, when the file has one.
    shape_signature: tuple[int, ...] | None = None
    quantization: QuantParams | None = None
    #: True when the constant is stored in TFLite's sparse format.
    is_sparse: bool = False
    #: True when the constant's bytes lie after the flatbuffer (``Buffer.offset``, as large
    #: models and ai-edge-quantizer write them). TFLM reads only ``Buffer.data``: for it the
    #: tensor has no data, so it plans it in the arena like an activation.
    data_after_flatbuffer: bool = False

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= max(d, 0)
        return n

    @property
    def nbytes(self) -> int:
        return self.num_elements * DTYPE_BYTES.get(self.dtype, 0)

    @property
    def stored_bytes(self) -> int:
        """Bytes the file holds for the constant: int4 packs two elements per byte (``nbytes``
        counts one per element, as TFLM plans an unpacked int4 tensor)."""
        return (self.num_elements + 1) // 2 if self.dtype == "int4" else self.nbytes

    @property
    def is_dynamic(self) -> bool:
        return self.shape_signature is not None and any(d < 0 for d in self.shape_signature)


#: Ops whose kernel takes a constant weights tensor: the input index of the weights.
WEIGHTS_INPUT = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "FULLY_CONNECTED": 1,
                 "TRANSPOSE_CONV": 1, "BATCH_MATMUL": 1, "EMBEDDING_LOOKUP": 1, "SVDF": 1,
                 "UNIDIRECTIONAL_SEQUENCE_LSTM": 2}


@dataclass(frozen=True)
class Operator:
    index: int
    op_name: str
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    intermediates: tuple[int, ...] = ()
    #: Builtin options, read-only (e.g. ``{"stride_w": 2, "padding": "SAME"}``; the reader
    #: gives a mapping decoded on first access).
    options: Mapping[str, Any] = field(default_factory=dict)
    opcode_index: int = 0

    @property
    def is_custom(self) -> bool:
        return self.op_name.startswith("CUSTOM:")


@dataclass(frozen=True)
class Subgraph:
    index: int
    name: str
    tensors: tuple[Tensor, ...]
    operators: tuple[Operator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Signature:
    """One of the file's SignatureDefs: a named method (``train``, ``infer`` ...) that runs
    one subgraph, its inputs and outputs by name (name → tensor index in that subgraph)."""

    key: str
    subgraph: int
    inputs: tuple[tuple[str, int], ...] = ()
    outputs: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Model:
    path: str
    size_bytes: int
    sha256: str
    schema_version: int
    description: str
    subgraphs: tuple[Subgraph, ...]
    #: Size in bytes of each buffer's data (0 for buffers without data).
    buffer_sizes: tuple[int, ...]
    #: Metadata entries: name → raw bytes of the buffer it points to.
    metadata: dict[str, bytes] = field(default_factory=dict)
    #: The SignatureDefs, in file order (a model converted from a SavedModel with several
    #: signatures, a trainable one among them, has one per method).
    signatures: tuple[Signature, ...] = ()

    def signature(self, key: str) -> Signature | None:
        return next((s for s in self.signatures if s.key == key), None)

    @property
    def main(self) -> Subgraph:
        return self.subgraphs[0]

    @property
    def op_types(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for sg in self.subgraphs:
            for op in sg.operators:
                counts[op.op_name] = counts.get(op.op_name, 0) + 1
        return dict(sorted(counts.items()))
