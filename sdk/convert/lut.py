"""``--weights lut4``: conv and fully-connected filters clustered to 16 int8 values per channel
and stored as TFLM's look-up-table compression, written by TFLM's own tool.

The int8 model is converted as usual; each filter is then clustered (1-D k-means on its int8
values, one set of 16 per channel of its quantization: the output channel, a depthwise
filter's last axis) and handed to the compression tool the ``tflite-micro`` wheel ships
(``tflite_micro.tensorflow.lite.micro.compression``): 4-bit indices plus a value table per
channel, and a ``TFLM_DECODE`` custom operator before each consumer that decodes the filter
into the arena when the model runs. The flash saved is paid in RAM: the largest decoded
filter is an arena tensor (``docs/benchmarks.md`` "TFLM look-up-table compression").

Only TFLM reads it, and only a build whose op resolver registers the DECODE kernel: the
profile says so (``runtime.compression: true``). Clustering itself is devicefit's (the tool
compresses tensors that already have few values; it does not cluster).
"""

from __future__ import annotations

import importlib

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read import writer

#: Index bits of ``lut4``: 16 values per channel.
BITS = 4
#: The input index of the filter of the operators whose weights are clustered.
FILTER_INPUT = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "FULLY_CONNECTED": 1}
_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def check_request(profile: Profile, quant_scheme: str, sparsity: bool,
                  weights: str = "lut4") -> None:
    """Refuse, before TensorFlow starts, a profile whose build cannot decode the model."""
    if profile.runtime.name != "tflm":
        raise UsageError(f"--weights {weights} writes TFLM's look-up-table compression, which "
                         f"only TFLite Micro decodes; profile '{profile.name}' runs "
                         f"'{profile.runtime.name}'")
    # The TFLM target's settings (``runtime.compression``); sdk does not import a target.
    if getattr(profile.target_settings, "compression", False) is not True:
        raise UsageError(f"--weights {weights}: profile '{profile.name}' does not say its TFLM "
                         "build registers the DECODE kernel the compressed model needs; set "
                         "runtime.compression: true in a profile of a build that calls "
                         "AddDecode()")
    if quant_scheme != "int8":
        raise UsageError(f"--weights {weights} clusters int8 weights: it needs --scheme int8, "
                         f"not {quant_scheme}")
    if sparsity:
        raise UsageError(f"--weights {weights} stores 4-bit indices whether a weight is 0 or "
                         "not: pruning saves no byte more (docs/benchmarks.md, \"TFLM "
                         "look-up-table compression\"); give one of them")


def kmeans_1d(values: np.ndarray, k: int, iters: int = 30) -> np.ndarray:
    """``values`` (int8) mapped onto at most ``k`` int8 centres (Lloyd's, quantile start)."""
    if np.unique(values).size <= k:
        return values
    x = values.astype(np.float64).ravel()
    centres = np.quantile(x, (np.arange(k) + 0.5) / k)
    for _ in range(iters):
        assign = np.abs(x[:, None] - centres[None, :]).argmin(axis=1)
        counts = np.bincount(assign, minlength=k)
        sums = np.bincount(assign, weights=x, minlength=k)
        # An empty cluster keeps its centre.
        centres = np.where(counts > 0, sums / np.maximum(counts, 1), centres)
    centres = np.clip(np.round(centres), -128, 127)
    assign = np.abs(x[:, None] - centres[None, :]).argmin(axis=1)
    return centres[assign].astype(np.int8).reshape(values.shape)


def prune_2_4(w: np.ndarray) -> np.ndarray:
    """The two smallest of each four consecutive weights of a channel's row set to 0 (for
    the probe's comparison with Vela; ``convert --sparsity 2:4`` prunes while training)."""
    flat = w.reshape(w.shape[0], -1)
    n = flat.shape[1] // 4 * 4
    groups = flat[:, :n].reshape(flat.shape[0], -1, 4).copy()
    drop = np.argsort(np.abs(groups.astype(np.int16)), axis=2)[:, :, :2]
    np.put_along_axis(groups, drop, 0, axis=2)
    out = flat.copy()
    out[:, :n] = groups.reshape(flat.shape[0], -1)
    return out.reshape(w.shape)


def edit_filters(model_bytes: bytes, bits: int | None, prune: bool = False
                 ) -> tuple[bytes, dict[int, int]]:
    """Each int8 filter 2:4-pruned (``prune``) and/or clustered to ``2**bits`` values per
    channel of its quantization; the model and ``{filter's tensor index: that axis}``."""
    model = writer.unpack(model_bytes)
    done: dict[int, int] = {}
    for sg_index, sg in enumerate(model.subgraphs):
        for op in sg.operators or []:
            code = model.operatorCodes[op.opcodeIndex]
            k = FILTER_INPUT.get(_NAMES.get(max(code.builtinCode, code.deprecatedBuiltinCode),
                                            ""))
            if k is None or sg_index or len(op.inputs) <= k or op.inputs[k] < 0:
                continue  # the tool's spec names subgraph 0 here; others stay int8
            t = sg.tensors[op.inputs[k]]
            buf = model.buffers[t.buffer]
            if t.type != schema.TensorType.INT8 or t.buffer == 0 or buf.data is None:
                continue
            w = np.asarray(buf.data, dtype=np.uint8).view(np.int8).reshape(t.shape)
            # The DECODE kernel reads one table per channel of the tensor's quantization.
            axis = t.quantization.quantizedDimension if t.quantization is not None else 0
            if bits is not None and w.size * bits // 8 + w.shape[axis] * 2 ** bits >= w.size:
                continue  # a tiny filter: its tables would outweigh the bytes saved
            out = prune_2_4(w) if prune else w
            if bits is not None:
                out = np.moveaxis(np.stack([kmeans_1d(ch, 2 ** bits)
                                            for ch in np.moveaxis(out, axis, 0)]), 0, axis)
            buf.data = np.ascontiguousarray(out).view(np.uint8).ravel()
            done[op.inputs[k]] = axis
    return writer.pack(model), done


def compress(model_bytes: bytes, tensors: dict[int, int], bits: int = BITS) -> bytes:
    """TFLM's own tool (the wheel's copy): LUT compression of ``{tensor: channel axis}`` in
    subgraph 0, one value table per channel."""
    # The package's __init__ re-exports the function under the module's own name.
    tool = importlib.import_module("tflite_micro.tensorflow.lite.micro.compression.compress")
    spec = importlib.import_module("tflite_micro.tensorflow.lite.micro.compression.spec")
    lines = ["tensors:"]
    for t, axis in tensors.items():
        lines += ["  - subgraph: 0", f"    tensor: {t}", "    compression:",
                  "      - lut:", f"          index_bitwidth: {bits}",
                  "          per_channel:", f"            axis: {axis}"]
    return bytes(tool.compress(model_bytes, spec.parse_yaml("\n".join(lines))))


def lut_weights(tflite: bytes, bits: int = BITS) -> bytes:
    """The int8 model with its filters clustered and stored as look-up tables."""
    clustered, filters = edit_filters(tflite, bits)
    return compress(clustered, filters, bits) if filters else clustered
