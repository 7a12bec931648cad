"""Sparsity of the weights as written: read back from the ``.tflite`` flatbuffer, so the report
shows what the file holds, not what pruning intended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from devicefit.simulator.read import writer


class GroupPattern(Protocol):
    """What the read-back checks group by group: at most ``n`` nonzero weights in every
    ``m`` (an N:M kind's pattern, :class:`sdk.convert.sparsity.nm.NMPattern`, which this
    module, below the kinds, does not import)."""

    @property
    def n(self) -> int: ...

    @property
    def m(self) -> int: ...


@dataclass
class WeightSparsity:
    """Sparsity of one weight tensor as stored in the written ``.tflite``."""

    tensor: str
    op: str
    shape: list[int]
    dtype: str
    zero_fraction: float
    #: Groups of M along the input-channel axis, and how many have fewer than M-N zeros.
    nm_groups: int | None = None
    nm_violations: int | None = None
    #: Most distinct stored values in one channel (along the quantized dimension): what
    #: weight clustering leaves after per-channel quantization, measured on the file.
    distinct_per_channel: int | None = None


_WEIGHT_OPS = {"CONV_2D": 1, "FULLY_CONNECTED": 1, "DEPTHWISE_CONV_2D": 1, "CONV_3D": 1}
_NUMPY_TYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT8": np.int8,
                "UINT8": np.uint8, "INT16": np.int16, "INT32": np.int32}


def tflite_weight_sparsity(model_bytes: bytes, pattern: GroupPattern | None = None
                           ) -> list[WeightSparsity]:
    """Zeros of every Conv/FC weight tensor read back from the flatbuffer.

    With ``pattern``, conv and fully-connected weights (input channels innermost) are also
    checked group by group: each group of M must hold at least M-N zeros. A float16 model's
    weights sit behind a DEQUANTIZE op; the stored float16 constant is the one read.
    """
    from ai_edge_litert import schema_py_generated as schema

    op_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    model = writer.unpack(model_bytes)
    out: list[WeightSparsity] = []
    for sg in model.subgraphs:
        producer = {o: op for op in sg.operators for o in op.outputs}
        for op in sg.operators:
            code = model.operatorCodes[op.opcodeIndex]
            op_name = op_names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")
            if op_name not in _WEIGHT_OPS or len(op.inputs) <= _WEIGHT_OPS[op_name]:
                continue
            t_index = op.inputs[_WEIGHT_OPS[op_name]]
            src = producer.get(t_index)
            if src is not None and op_names.get(model.operatorCodes[src.opcodeIndex].builtinCode) \
                    == "DEQUANTIZE":
                t_index = src.inputs[0]
            tensor = sg.tensors[t_index]
            data = model.buffers[tensor.buffer].data
            dtype = _NUMPY_TYPES.get(type_names.get(tensor.type, ""))
            if data is None or dtype is None:
                continue
            # Declared: numpy's stubs type this reshape's result as 0-d (shape ``tuple[()]``).
            values: np.ndarray = np.frombuffer(np.asarray(data, dtype=np.uint8).tobytes(),
                                               dtype=dtype).reshape([int(d) for d in tensor.shape])
            zero = _zero_point(tensor, values.shape)
            is_zero = values == zero
            entry = WeightSparsity(_decode(tensor.name), op_name, list(values.shape),
                                   type_names[tensor.type].lower(), float(is_zero.mean()),
                                   distinct_per_channel=_distinct_per_channel(tensor, values))
            if pattern is not None and op_name != "DEPTHWISE_CONV_2D" \
                    and values.shape[-1] % pattern.m == 0:
                zeros_per_group = is_zero.reshape(-1, pattern.m).sum(axis=1)
                entry.nm_groups = int(zeros_per_group.size)
                entry.nm_violations = int((zeros_per_group < pattern.m - pattern.n).sum())
            out.append(entry)
    return out


def _distinct_per_channel(tensor: Any, values: np.ndarray) -> int:
    q = tensor.quantization
    axis = int(q.quantizedDimension) if q is not None and q.scale is not None \
        and np.asarray(q.scale).size > 1 else None
    if axis is None or values.ndim == 0:
        return int(np.unique(values).size)
    rows = np.moveaxis(values, axis, 0).reshape(values.shape[axis], -1)
    return int(max(np.unique(row).size for row in rows))


def _zero_point(tensor: Any, shape: tuple[int, ...]) -> Any:
    q = tensor.quantization
    zp = None if q is None or q.zeroPoint is None else np.asarray(q.zeroPoint)
    if zp is None or zp.size <= 1:
        return 0 if zp is None or zp.size == 0 else int(zp.reshape(-1)[0])
    broadcast = [1] * len(shape)
    broadcast[q.quantizedDimension] = zp.size
    return zp.reshape(broadcast)


def _decode(name: Any) -> str:
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)
