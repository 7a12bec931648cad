"""Structured sparsity for Keras 3 models, without tensorflow-model-optimization.

Two kinds (the names profiles use in ``sparsity.kinds``). Neither is ever written in TFLite's
sparse tensor encoding (``Optimize.EXPERIMENTAL_SPARSITY``): TFLM has no DENSIFY kernel and
the Edge TPU compiler rejects it, and XNNPACK runs it only for a narrow pattern; the zeros
stay in a dense tensor, where they buy a smaller compressed download.

* ``n:m`` — magnitude pruning of Conv/Dense kernels: in every group of M consecutive input
  channels keep the N largest weights. TFLite stores conv weights as (out, h, w, in) and
  fully-connected weights as (out, in), so the groups are contiguous in the written file;
  :func:`tflite_weight_sparsity` checks them there.
* ``channel`` — filter pruning that *removes* filters/units by L1 magnitude and rebuilds a
  smaller functional model. Every tensor carries a channel map (for each channel index: which
  group and which channel of that group it is). Conv/Dense start a group; BatchNorm,
  activations, pooling and depthwise convs pass it through; residual adds merge the groups
  they add (so both branches keep the same channels); Flatten repeats it per position.
  A group that reaches a model output or a layer this module does not know is left whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator import writer
from simulator.errors import UsageError
from simulator.profiles import Profile

log = logging.getLogger(__name__)



# --------------------------------------------------------------------------- profile policy
@dataclass(frozen=True)
class NMPattern:
    n: int
    m: int

    def __str__(self) -> str:
        return f"{self.n}:{self.m}"


def parse_nm(text: str) -> NMPattern:
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--sparsity {text!r}: expected N:M such as 2:4")
    n, m = int(parts[0]), int(parts[1])
    if not 0 < n < m:
        raise UsageError(f"--sparsity {text}: need 0 < N < M (N weights kept of every M)")
    return NMPattern(n, m)


def check_allowed(profile: Profile, kind: str, pattern: NMPattern | None = None) -> None:
    """Refuse a sparsity kind the profile's runtime cannot use; never apply it silently."""
    kinds = profile.sparsity.kinds
    if kind not in kinds:
        why = {"tflm": "TFLite-Micro kernels do not skip zero weights",
               "edgetpu": "the Edge TPU compiler does not use sparse weights"}.get(
                   profile.runtime.name, f"runtime {profile.runtime.name} cannot use it")
        raise UsageError(f"profile {profile.name} does not allow {kind} sparsity ({why}; "
                         f"it allows: {', '.join(k for k in kinds if k != 'none') or 'none'})")
    if kind == "n:m" and pattern is not None and profile.sparsity.n_m:
        want = parse_nm(profile.sparsity.n_m)
        if pattern.m != want.m or pattern.n > want.n:
            raise UsageError(f"profile {profile.name} uses {want} sparsity; --sparsity {pattern} "
                             f"does not fit it (same M, at most {want.n} kept)")


# --------------------------------------------------------------------------- N:M
def _nm_layer(layer: Any) -> str | None:
    """Why ``layer`` cannot take N:M along its input channels, or None when it can."""
    kind = type(layer).__name__
    if kind not in ("Dense", "Conv1D", "Conv2D", "Conv3D"):
        return "not a Conv/Dense layer"
    if getattr(layer, "groups", 1) != 1:
        return "grouped convolution"
    return None


def nm_masks(model: Any, pattern: NMPattern) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Masks (layer name → 0/1 array shaped like the kernel) and the layers left dense, why."""
    masks: dict[str, np.ndarray] = {}
    skipped: dict[str, str] = {}
    for layer in model.layers:
        reason = _nm_layer(layer)
        if reason is not None:
            if layer.weights and type(layer).__name__ not in ("BatchNormalization",):
                skipped[layer.name] = reason
            continue
        kernel = layer.kernel.numpy()
        cin = kernel.shape[-2]
        if cin % pattern.m:
            skipped[layer.name] = f"{cin} input channels is not a multiple of {pattern.m}"
            continue
        masks[layer.name] = _nm_mask(kernel, pattern)
    return masks, skipped


def _nm_mask(kernel: np.ndarray, pattern: NMPattern) -> np.ndarray:
    # Put input channels last, group them by M, keep the N largest magnitudes in each group.
    moved = np.moveaxis(np.abs(kernel), -2, -1)
    groups = moved.reshape(-1, pattern.m)
    order = np.argsort(-groups, axis=1, kind="stable")
    keep = np.zeros_like(groups, dtype=bool)
    np.put_along_axis(keep, order[:, :pattern.n], True, axis=1)
    return np.moveaxis(keep.reshape(moved.shape), -1, -2).astype(kernel.dtype)


def apply_masks(model: Any, masks: dict[str, np.ndarray]) -> None:
    """Zero the masked kernel weights in place (after pruning and after each training step)."""
    for name, mask in masks.items():
        kernel = model.get_layer(name).kernel
        kernel.assign(kernel.numpy() * mask)


# --------------------------------------------------------------------------- channel pruning
@dataclass
class PrunedLayer:
    name: str
    op: str
    before: int
    after: int


@dataclass
class ChannelPruneResult:
    model: Any
    layers: list[PrunedLayer] = field(default_factory=list)


@dataclass
class _Node:
    layer: Any
    inputs: list[int]
    outputs: list[int]
    called_with_list: bool


class _Groups:
    """Union-find over channel groups; each root holds its size, importance, and whether it is
    pinned (must keep all channels)."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.size: list[int] = []
        self.score: list[np.ndarray] = []
        self.pinned: list[bool] = []
        #: Layers that produce each group (its filters live there).
        self.producers: list[list[str]] = []

    def new(self, size: int, score: np.ndarray | None = None, pinned: bool = False,
            producer: str | None = None) -> int:
        self.producers.append([producer] if producer else [])
        self.parent.append(len(self.parent))
        self.size.append(size)
        self.score.append(np.zeros(size) if score is None else score)
        self.pinned.append(pinned)
        return len(self.parent) - 1

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        self.parent[rb] = ra
        self.score[ra] = self.score[ra] + self.score[rb]
        self.pinned[ra] = self.pinned[ra] or self.pinned[rb]
        self.producers[ra] += self.producers[rb]

    def pin(self, g: int) -> None:
        self.pinned[self.find(g)] = True


#: A tensor's channel map: for each index on its last axis, (group, channel within group).
ChannelMap = list[tuple[int, int]]

PRODUCERS = ("Dense", "Conv1D", "Conv2D", "Conv3D")
PASS_THROUGH = (
    "BatchNormalization", "ReLU", "LeakyReLU", "ELU", "Dropout", "SpatialDropout1D",
    "SpatialDropout2D", "GaussianNoise", "MaxPooling1D", "MaxPooling2D", "AveragePooling1D",
    "AveragePooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
    "GlobalMaxPooling2D", "ZeroPadding1D", "ZeroPadding2D", "Cropping1D", "Cropping2D",
    "UpSampling1D", "UpSampling2D", "Identity", "DepthwiseConv2D", "Activation",
)
ELEMENTWISE_MERGE = ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum")
#: Activations that mix channels: a map cannot pass through them.
CHANNEL_MIXING_ACTIVATIONS = ("softmax", "log_softmax")


def prune_channels(model: Any, ratio: float, original: dict[str, int] | None = None,
                   layer_ratios: dict[str, float] | None = None) -> ChannelPruneResult:
    """Remove ``ratio`` of the filters/units of every prunable group, by L1 magnitude.

    ``original`` (producer layer name → its channel count before any pruning) makes ``ratio``
    a fraction of the original model's channels, so pruning in stages lands on the same
    count as pruning at once. ``layer_ratios`` (producer layer name → ratio, 0 ≤ r < 1)
    overrides ``ratio`` for the groups those layers produce; a group several layers produce
    (a residual add) takes the smallest of their ratios. With it, ``ratio`` may be 0.
    """
    if not 0.0 < ratio < 1.0 and not (layer_ratios and ratio == 0.0):
        raise UsageError(f"--prune-channels {ratio}: give a fraction between 0 and 1 (e.g. 0.5)")
    for name, r in (layer_ratios or {}).items():
        if not 0.0 <= r < 1.0:
            raise UsageError(f"pruning ratio {r} for layer {name!r}: give a fraction in [0, 1)")
    functional, nodes = _graph(model)
    groups = _Groups()
    maps = _trace(functional, nodes, groups)
    keep = _choose(groups, ratio, original or {}, layer_ratios or {})
    return _rebuild(model, functional, nodes, maps, groups, keep)


def prunable_groups(model: Any) -> list[list[str]]:
    """The producer layers of each group channel pruning may shrink, in graph order (layers
    in one group — joined by a residual add — always keep the same channels)."""
    functional, nodes = _graph(model)
    groups = _Groups()
    _trace(functional, nodes, groups)
    return [list(groups.producers[g]) for g in range(len(groups.parent))
            if groups.find(g) == g and not groups.pinned[g] and groups.producers[g]]


def _graph(model: Any) -> tuple[Any, list[_Node]]:
    """The functional graph of a Sequential or functional model, in topological order."""
    import keras

    functional = model._functional if isinstance(model, keras.Sequential) else model
    node_keys = getattr(functional, "_nodes", None)
    if node_keys is None or not hasattr(functional, "operations"):
        raise UsageError("channel pruning needs a Sequential or functional Keras model, "
                         f"not a subclassed {type(model).__name__}")
    nodes: list[_Node] = []
    for op in functional.operations:
        if isinstance(op, keras.Model):
            raise UsageError(f"channel pruning does not look inside nested model {op.name!r}; "
                             "flatten it into one functional model first")
        mine = [n for i, n in enumerate(op._inbound_nodes) if f"{id(op)}_ib-{i}" in node_keys]
        if len(mine) > 1:
            raise UsageError(f"channel pruning does not support layer {op.name!r} used "
                             f"{len(mine)} times (shared weights)")
        if type(op).__name__ == "InputLayer" or not mine:
            continue
        node = mine[0]
        args = node.arguments.args if node.arguments is not None else ()
        nodes.append(_Node(op, [id(t) for t in node.input_tensors],
                           [id(t) for t in node.output_tensors],
                           bool(args) and isinstance(args[0], (list, tuple))))
    return functional, nodes


def _trace(functional: Any, nodes: list[_Node], groups: _Groups) -> dict[int, ChannelMap]:
    maps: dict[int, ChannelMap] = {}
    for t in functional.inputs:
        g = groups.new(int(t.shape[-1]), pinned=True)  # the model's input channels are data
        maps[id(t)] = [(g, i) for i in range(int(t.shape[-1]))]
    for node in nodes:
        ins = [maps[i] for i in node.inputs]
        out_shape = tuple(node.layer.output.shape) if len(node.outputs) == 1 else None
        handler = _TRACE_HANDLERS.get(type(node.layer).__name__, _trace_unknown)
        if out_shape is None:
            handler = _trace_unknown
        result = handler(node.layer, ins, groups, out_shape)
        for o in node.outputs:
            maps[o] = result
    for t in functional.outputs:
        for g, _ in maps[id(t)]:
            groups.pin(g)
    return maps


def _fresh(groups: _Groups, size: int, score: np.ndarray | None = None,
           pinned: bool = False) -> ChannelMap:
    g = groups.new(size, score, pinned)
    return [(g, i) for i in range(size)]


def _trace_producer(layer, ins, groups, out_shape) -> ChannelMap:
    if getattr(layer, "groups", 1) != 1:
        return _trace_unknown(layer, ins, groups, out_shape)
    kernel = layer.kernel.numpy()
    l1 = np.abs(kernel).reshape(-1, kernel.shape[-1]).sum(axis=0)
    # Normalise so that groups merged by a residual add weigh their producers equally.
    score = l1 / max(float(l1.mean()), 1e-12)
    g = groups.new(kernel.shape[-1], score, producer=layer.name)
    return [(g, i) for i in range(kernel.shape[-1])]


def _trace_pass(layer, ins, groups, out_shape) -> ChannelMap:
    name = type(layer).__name__
    if name == "Activation" and getattr(layer.activation, "__name__", "") in \
            CHANNEL_MIXING_ACTIVATIONS:
        return _trace_unknown(layer, ins, groups, out_shape)
    if name == "BatchNormalization" and layer.axis not in (-1, len(out_shape) - 1):
        return _trace_unknown(layer, ins, groups, out_shape)
    if name == "DepthwiseConv2D" and layer.depth_multiplier != 1:
        return _trace_unknown(layer, ins, groups, out_shape)
    return ins[0]


def _trace_merge(layer, ins, groups, out_shape) -> ChannelMap:
    first = ins[0]
    if any(len(m) != len(first) for m in ins):
        return _trace_unknown(layer, ins, groups, out_shape)  # broadcasting: keep all
    for other in ins[1:]:
        for (ga, ca), (gb, cb) in zip(first, other, strict=True):
            if ca != cb or groups.size[groups.find(ga)] != groups.size[groups.find(gb)]:
                return _trace_unknown(layer, ins, groups, out_shape)
    for other in ins[1:]:
        for (ga, _), (gb, _) in zip(first, other, strict=True):
            groups.union(ga, gb)
    return first


def _trace_concat(layer, ins, groups, out_shape) -> ChannelMap:
    if layer.axis in (-1, len(out_shape) - 1):
        return [entry for m in ins for entry in m]
    return _trace_merge(layer, ins, groups, out_shape)


def _trace_flatten(layer, ins, groups, out_shape) -> ChannelMap:
    # Keras flattens channels-last row-major: channel is the fastest-moving index.
    positions = int(out_shape[-1]) // max(len(ins[0]), 1)
    if positions * len(ins[0]) != int(out_shape[-1]):
        return _trace_unknown(layer, ins, groups, out_shape)
    return ins[0] * positions


def _trace_unknown(layer, ins, groups, out_shape) -> ChannelMap:
    """A layer this module does not understand: keep every channel around it."""
    for m in ins:
        for g, _ in m:
            groups.pin(g)
    size = int(out_shape[-1]) if out_shape else 0
    return _fresh(groups, size, pinned=True)


_TRACE_HANDLERS: dict[str, Callable[..., ChannelMap]] = {
    **{n: _trace_producer for n in PRODUCERS},
    **{n: _trace_pass for n in PASS_THROUGH},
    **{n: _trace_merge for n in ELEMENTWISE_MERGE},
    "Concatenate": _trace_concat,
    "Flatten": _trace_flatten,
}


def _choose(groups: _Groups, ratio: float, original: dict[str, int],
            layer_ratios: dict[str, float]) -> dict[int, set[int]]:
    """Root group → channels kept (all of them for pinned groups)."""
    keep: dict[int, set[int]] = {}
    for g in range(len(groups.parent)):
        root = groups.find(g)
        if root in keep:
            continue
        size = groups.size[root]
        if groups.pinned[root]:
            keep[root] = set(range(size))
            continue
        before = max([size, *(original.get(p, 0) for p in groups.producers[root])])
        share = min((layer_ratios.get(p, ratio) for p in groups.producers[root]), default=ratio)
        n_keep = min(size, max(1, int(round(before * (1.0 - share)))))
        order = np.argsort(-groups.score[root], kind="stable")
        keep[root] = {int(i) for i in order[:n_keep]}
    return keep


def _kept(cmap: ChannelMap, groups: _Groups, keep: dict[int, set[int]]) -> np.ndarray:
    return np.array([i for i, (g, c) in enumerate(cmap) if c in keep[groups.find(g)]], dtype=int)


def _rebuild(model, functional, nodes, maps, groups, keep) -> ChannelPruneResult:
    import keras

    tensors: dict[int, Any] = {}
    new_inputs = []
    for t in functional.inputs:
        new = keras.Input(shape=tuple(t.shape[1:]), dtype=t.dtype, name=t.name)
        tensors[id(t)] = new
        new_inputs.append(new)
    report: list[PrunedLayer] = []
    for node in nodes:
        layer, name = node.layer, type(node.layer).__name__
        in_idx = _kept(maps[node.inputs[0]], groups, keep) if node.inputs else None
        out_idx = _kept(maps[node.outputs[0]], groups, keep)
        config = layer.get_config()
        weights = [np.asarray(w) for w in layer.get_weights()]
        if name in PRODUCERS and getattr(layer, "groups", 1) == 1:
            config["units" if name == "Dense" else "filters"] = len(out_idx)
            weights[0] = np.take(np.take(weights[0], in_idx, axis=-2), out_idx, axis=-1)
            if len(weights) > 1:
                weights[1] = weights[1][out_idx]
            if len(out_idx) != len(maps[node.outputs[0]]):
                report.append(PrunedLayer(layer.name, name, len(maps[node.outputs[0]]),
                                          len(out_idx)))
        elif name == "DepthwiseConv2D" and layer.depth_multiplier == 1:
            weights[0] = weights[0][:, :, in_idx, :]
            if len(weights) > 1:
                weights[1] = weights[1][in_idx]
        elif name == "BatchNormalization":
            weights = [w[in_idx] for w in weights]
        new_layer = type(layer).from_config(config)
        args = [tensors[i] for i in node.inputs]
        out = new_layer(args if node.called_with_list else args[0])
        for o, t in zip(node.outputs, out if isinstance(out, (list, tuple)) else [out],
                        strict=True):
            tensors[o] = t
        new_layer.set_weights(weights)
    outputs = [tensors[id(t)] for t in functional.outputs]
    pruned = keras.Model(new_inputs[0] if len(new_inputs) == 1 else new_inputs,
                         outputs[0] if len(outputs) == 1 else outputs, name=model.name)
    return ChannelPruneResult(pruned, report)


# --------------------------------------------------------------------------- read-back
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


def tflite_weight_sparsity(model_bytes: bytes, pattern: NMPattern | None = None
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
            values = np.frombuffer(np.asarray(data, dtype=np.uint8).tobytes(), dtype=dtype)
            values = values.reshape([int(d) for d in tensor.shape])
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
