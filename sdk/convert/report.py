"""What ``convert`` reports: typed records, turned into JSON only by ``to_dict``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from devicefit.sdk.convert.accuracy import AccuracyReport
from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.convert.sparsity import PrunedLayer, WeightSparsity

if TYPE_CHECKING:
    from devicefit.sdk.convert.lowbit import LowBitReport
    from devicefit.simulator.optimize.driver import OptimizeReport
    from devicefit.simulator.report.report import Report


@dataclass(frozen=True)
class CalibrationInfo:
    source: str
    samples: int
    random: bool


@dataclass(frozen=True)
class ConversionSettings:
    """What was asked and applied; its :meth:`to_dict` is stored in the ``.tflite`` metadata
    (:mod:`sdk.convert.metadata`), so ``simulate`` can show how a file was made."""

    profile: str
    runtime: str
    source: str
    source_format: str
    scheme: str
    io_type: str
    per_channel: bool
    sparsity: str | None = None
    prune_channels: float | None = None
    #: Layer group → its own pruning ratio (fit's per-layer candidates).
    prune_layers: dict[str, float] | None = None
    prune_stages: list[float] | None = None
    fine_tune_epochs: int = 0
    calibration: CalibrationInfo | None = None
    #: Never: zeros stay in dense tensors (see :mod:`sdk.convert.sparsity`).
    sparse_encoding: bool = False
    converter: str = ""
    distill: bool = False
    optimize_memory: bool = False
    patches: str | None = None
    #: "int4": 4-bit weights where the runtime runs them (``ConversionReport.low_bit``);
    #: "lut4": TFLM look-up-table compression (:mod:`sdk.convert.lut`).
    weights: str = "int8"
    #: The 4-bit layers trained on the int4 grid (``--qat``; fit's QAT candidates say so too).
    qat: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.weights == "int8":  # absent means int8, as in every file written before it
            del out["weights"]
        if not self.qat:
            del out["qat"]
        return out


@dataclass(frozen=True)
class QATOutcome:
    """What ``--qat`` did: whether the 4-bit layers trained, and PTQ int4's accuracy to set
    against the written (QAT) model's, both measured in LiteRT on the evaluation data."""

    #: "always" or "auto" (``ConversionSpec.qat``).
    mode: str
    trained: bool
    #: Why it trained or not, in words (PTQ's loss against the tolerance for "auto").
    why: str
    epochs: int
    #: The Keras layers trained on the int4 grid.
    layers: tuple[str, ...]
    ptq_accuracy: AccuracyReport


@dataclass
class ConversionReport:
    source: str
    output: str
    profile: str
    runtime: str
    settings: ConversionSettings
    output_bytes: int
    #: Why this scheme for the profile's device, where the device has a reason of its own
    #: (a phone's GPU: :mod:`sdk.convert.gpu`); None elsewhere.
    scheme_reason: str | None = None
    #: The input model converted without pruning or quantization (the "before" size;
    #: only with ``float_baseline``: it costs a second conversion).
    float_tflite_bytes: int | None = None
    #: The model's weights as float32 (the cheap "before" size, always known).
    float_weight_bytes: int | None = None
    #: Seconds per stage, in the order they ran.
    stages: dict[str, float] = field(default_factory=dict)
    #: Sparsity of every Conv/FC weight tensor, read back from the written file.
    weights: list[WeightSparsity] = field(default_factory=list)
    pruned_layers: list[PrunedLayer] = field(default_factory=list)
    #: Layers N:M pruning left dense, and why.
    nm_skipped: dict[str, str] = field(default_factory=dict)
    fine_tune: list[FineTuneResult] = field(default_factory=list)
    accuracy: AccuracyReport | None = None
    warnings: list[str] = field(default_factory=list)
    #: The simulator's report on the written model on the profile.
    simulation: Report | None = None
    verdict: str | None = None
    #: What the target's ``after_convert`` hook reported on the written model (Edge TPU:
    #: its predicted partition, an ``EdgeTpuReport``); in JSON under the target's name.
    target_extra: Any = None
    #: What ``--optimize-memory`` did.
    memory_optimization: OptimizeReport | None = None
    #: What ``--weights int4`` did, operator by operator.
    low_bit: LowBitReport | None = None
    #: What ``--qat`` did, with PTQ int4's accuracy (``accuracy`` is the written model's).
    qat: QATOutcome | None = None
    #: Keras layer name → class (names unsupported ops' layers in verdict lines).
    layers: dict[str, str] = field(default_factory=dict)
    #: Keras layer of each unsupported op, keyed "subgraph:op_index".
    unsupported_layers: dict[str, str] = field(default_factory=dict)
    #: Budgets the profile sets that the simulation could not judge, and why.
    unchecked_budgets: dict[str, str] = field(default_factory=dict)

    @property
    def size_ratio(self) -> float | None:
        """Output size over the float32 .tflite, or over the float32 weights without one."""
        before = self.float_tflite_bytes or self.float_weight_bytes
        return self.output_bytes / before if before else None

    def layer_of(self, subgraph: int, op_index: int) -> str | None:
        """The Keras layer of an unsupported op of the simulation, if known."""
        return self.unsupported_layers.get(f"{subgraph}:{op_index}")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("settings", "simulation"):
            out[name] = None if out[name] is None else out[name].to_dict()
        extra = out.pop("target_extra")
        if extra is not None:
            out[self.runtime] = _plain(extra)
        for name in ("weights", "pruned_layers", "fine_tune", "accuracy", "memory_optimization",
                     "low_bit", "qat"):
            out[name] = _plain(out[name])
        del out["unsupported_layers"]
        if self.simulation is not None:  # the layer next to each unsupported op, as before
            for op in (out["simulation"].get("compatibility") or {}).get("unsupported_ops") or []:
                layer = self.layer_of(op.get("subgraph", 0), op["op_index"])
                if layer:
                    op["layer"] = layer
        out["size_ratio"] = self.size_ratio
        if self.accuracy is not None:
            out["accuracy"]["accuracy_drop_pp"] = self.accuracy.accuracy_drop_pp
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) \
        and not isinstance(value, type) else value
