"""``channel`` pruning: filter pruning that *removes* filters/units by L1 magnitude and
rebuilds a smaller functional Keras model.

Every tensor carries a channel map (for each channel index: which group and which channel of
that group it is). Conv/Dense start a group; BatchNorm, activations, pooling and depthwise
convs pass it through; residual adds merge the groups they add (so both branches keep the
same channels); Flatten repeats it per position. A group that reaches a model output or a
layer this module does not know is left whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from devicefit.sdk.convert.sparsity.base import PrunedLayer, SparsityKind, SparsityOutcome, Training
from devicefit.sdk.convert.sparsity.readback import WeightSparsity
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile

if TYPE_CHECKING:
    from devicefit.sdk.convert.finetune import FineTuneResult

#: Most channel-pruning stages; fewer when there are fewer epochs.
MAX_STAGES = 3


@dataclass(frozen=True)
class ChannelRatio:
    """Remove ``ratio`` of the filters/units of every prunable group; ``layers`` gives some
    groups (producer layers joined by "+") their own ratio, and then ``ratio`` may be 0."""

    ratio: float
    layers: tuple[tuple[str, float], ...] = ()

    kind: ClassVar[str] = "channel"

    def __post_init__(self) -> None:
        low_ok = bool(self.layers) and self.ratio == 0.0
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) \
                or not (0.0 < self.ratio < 1.0 or low_ok):
            raise UsageError(f"--prune-channels {self.ratio}: give a fraction between 0 and 1")

    def __str__(self) -> str:
        return f"{self.ratio:g} of the channels"

    def layer_ratios(self) -> dict[str, float] | None:
        """Producer layer name → ratio, as :func:`prune_channels` takes it."""
        return {name: r for group, r in self.layers for name in group.split("+")} or None

    def option_value(self) -> float:
        return self.ratio

    def to_mapping(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "ratio": self.ratio}
        if self.layers:
            out["layers"] = dict(self.layers)
        return out

    def settings(self) -> dict[str, Any]:
        return {"prune_channels": self.ratio or None, "prune_layers": dict(self.layers) or None}

    def fits(self, profile: Profile) -> None:
        """Every ratio runs wherever the kind is allowed: the model just gets smaller."""

    def apply(self, model: Any, training: Training) -> tuple[Any, SparsityOutcome]:
        """Prune in stages with fine-tuning between them (one step without training data)."""
        result = prune_in_stages(model, self.ratio, training, self.layer_ratios())
        if not result.layers:
            raise UsageError("channel pruning found no prunable filters (every layer feeds an "
                             "output or a layer whose channels must stay)")
        return result.model, SparsityOutcome(pruned_layers=result.layers,
                                             fine_tune=result.fine_tune,
                                             prune_stages=result.stages)

    def group_pattern(self) -> None:
        """Channel pruning leaves no zero pattern to check in the file."""

    def check_written(self, weights: list[WeightSparsity], outcome: SparsityOutcome) -> None:
        """The removed channels are gone from the shapes; nothing more to check."""


def _from_mapping(data: Mapping[str, Any]) -> ChannelRatio:
    ratio, layers = data.get("ratio", 0.0), data.get("layers") or {}
    if not isinstance(layers, Mapping) or not all(
            isinstance(r, (int, float)) and not isinstance(r, bool) and 0 <= r < 1
            for r in layers.values()):
        raise ValueError("'layers' must map layer names to fractions in [0, 1)")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or \
            not (0 < ratio < 1 or (layers and ratio == 0)):
        raise ValueError(f"'ratio' must be a fraction between 0 and 1 such as 0.5, not {ratio!r}")
    return ChannelRatio(float(ratio), tuple((str(k), float(v)) for k, v in layers.items()))


@dataclass
class ChannelPruning:
    """Staged channel pruning: the model, its pruned layers (channels before the first
    stage, after the last), the fraction removed after each stage and the training runs."""

    model: Any
    layers: list[PrunedLayer]
    stages: list[float]
    fine_tune: list[FineTuneResult]


def prune_in_stages(model: Any, ratio: float, training: Training,
                    layer_ratios: dict[str, float] | None = None) -> ChannelPruning:
    """Remove ``ratio`` of the prunable channels, in stages with fine-tuning between them
    (removing half the filters at once loses more accuracy than removing them in steps the
    network can recover from).

    Without training data it is one step and no training (the report says so). Each stage
    removes the same share of the original channels: fractions kept go 1 → 1-r/K → … → 1-r.
    ``layer_ratios`` gives some layers their own ratio (see :func:`prune_channels`).
    """
    from devicefit.sdk.convert.finetune import PRUNING, fine_tune

    train, epochs = training.data, training.epochs
    # At least two epochs per stage: one epoch does not recover from a cut.
    stages = max(1, min(MAX_STAGES, epochs // 2)) if train is not None else 1
    first: dict[str, int] = {}
    last: dict[str, PrunedLayer] = {}
    results: list[FineTuneResult] = []
    ratios: list[float] = []
    for k in range(1, stages + 1):
        ratios.append(ratio * k / stages)
        staged = {n: r * k / stages for n, r in layer_ratios.items()} if layer_ratios else None
        pruned = prune_channels(model, ratios[-1], first, staged)
        model = pruned.model
        for layer in pruned.layers:
            first.setdefault(layer.name, layer.before)
            last[layer.name] = layer
        if train is not None:
            share = epochs // stages + (1 if k <= epochs % stages else 0)
            results.append(fine_tune(model, train, share, progress=training.progress,
                                     loss=training.loss, purpose=PRUNING))
    layers = [PrunedLayer(n, layer.op, first[n], layer.after) for n, layer in last.items()]
    return ChannelPruning(model, layers, ratios, results)


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
#: A Keras output shape: sizes, None for the batch (and any size not fixed).
Shape = tuple[Any, ...]

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
        args: tuple[Any, ...] = node.arguments.args if node.arguments is not None else ()
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


def _trace_producer(layer: Any, ins: list[ChannelMap], groups: _Groups, out_shape: Shape
                    ) -> ChannelMap:
    if getattr(layer, "groups", 1) != 1:
        return _trace_unknown(layer, ins, groups, out_shape)
    kernel = layer.kernel.numpy()
    l1 = np.abs(kernel).reshape(-1, kernel.shape[-1]).sum(axis=0)
    # Normalise so that groups merged by a residual add weigh their producers equally.
    score = l1 / max(float(l1.mean()), 1e-12)
    g = groups.new(kernel.shape[-1], score, producer=layer.name)
    return [(g, i) for i in range(kernel.shape[-1])]


def _trace_pass(layer: Any, ins: list[ChannelMap], groups: _Groups, out_shape: Shape
                ) -> ChannelMap:
    name = type(layer).__name__
    if name == "Activation" and getattr(layer.activation, "__name__", "") in \
            CHANNEL_MIXING_ACTIVATIONS:
        return _trace_unknown(layer, ins, groups, out_shape)
    if name == "BatchNormalization" and layer.axis not in (-1, len(out_shape) - 1):
        return _trace_unknown(layer, ins, groups, out_shape)
    if name == "DepthwiseConv2D" and layer.depth_multiplier != 1:
        return _trace_unknown(layer, ins, groups, out_shape)
    return ins[0]


def _trace_merge(layer: Any, ins: list[ChannelMap], groups: _Groups, out_shape: Shape
                 ) -> ChannelMap:
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


def _trace_concat(layer: Any, ins: list[ChannelMap], groups: _Groups, out_shape: Shape
                  ) -> ChannelMap:
    if layer.axis in (-1, len(out_shape) - 1):
        return [entry for m in ins for entry in m]
    return _trace_merge(layer, ins, groups, out_shape)


def _trace_flatten(layer: Any, ins: list[ChannelMap], groups: _Groups, out_shape: Shape
                   ) -> ChannelMap:
    # Keras flattens channels-last row-major: channel is the fastest-moving index.
    positions = int(out_shape[-1]) // max(len(ins[0]), 1)
    if positions * len(ins[0]) != int(out_shape[-1]):
        return _trace_unknown(layer, ins, groups, out_shape)
    return ins[0] * positions


def _trace_unknown(layer: Any, ins: list[ChannelMap], groups: _Groups, out_shape: Shape | None
                   ) -> ChannelMap:
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


def _rebuild(model: Any, functional: Any, nodes: list[_Node], maps: dict[int, ChannelMap],
             groups: _Groups, keep: dict[int, set[int]]) -> ChannelPruneResult:
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
            assert in_idx is not None  # a Dense or convolution layer reads a tensor
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


KIND = SparsityKind(
    name=ChannelRatio.kind, option="prune_channels", flag="--prune-channels",
    metavar="FRACTION", help="remove this fraction of filters/units, e.g. 0.5",
    parse=ChannelRatio, keys={"ratio": "a fraction such as 0.5",
                              "layers": "layer (group) name → its own fraction"},
    from_mapping=_from_mapping, flag_type=float, order=1)
