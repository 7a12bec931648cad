"""``--weights int4``: 4-bit weights with int8 activations, on the operators the profile's
runtime runs that way, and 8-bit weights on the others.

The engine is Google's AI Edge Quantizer (``ai-edge-quantizer``): TensorFlow's converter
writes no int4 weights, and the quantizer writes the packed int4 tensors LiteRT and TFLM read.
It knows nothing of a device, so devicefit decides per operator, and asks rather than assumes:
every operator the quantizer can give int4 weights starts at int4 per channel; the written
model is judged by the simulator on the profile (the runtime's own op probe, the target's
compiler), and each operator it refuses steps down — per channel, then per tensor (TFLM's
reference FULLY_CONNECTED takes only per-tensor int4 filters), then int8 — until nothing is
refused. Each step down keeps the runtime's reason, and the report lists every operator with
weights, its bits, and why.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devicefit.sdk.convert.data import Dataset
from devicefit.simulator.errors import RuntimeFailure, UsageError, require_extra
from devicefit.simulator.infra.fileio import temporary_folder
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Operator, Subgraph

log = logging.getLogger(__name__)

#: The operators AI Edge Quantizer 0.10 writes int4 weights for with int8 activations, and
#: the granularities tried, in order. Its policy has no int4 DEPTHWISE_CONV_2D with integer
#: compute ("Unsupported op for ComputePrecision.INTEGER"), so depthwise weights stay int8.
INT4_STEPS: dict[str, tuple[str, ...]] = {
    "CONV_2D": ("CHANNELWISE", "TENSORWISE"),
    "FULLY_CONNECTED": ("CHANNELWISE", "TENSORWISE"),
}
#: Input index of the weights of the operators that have them.
WEIGHT_INPUT = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "FULLY_CONNECTED": 1,
                "TRANSPOSE_CONV": 1, "BATCH_MATMUL": 1, "EMBEDDING_LOOKUP": 1}
GRANULARITY = {"CHANNELWISE": "per channel", "TENSORWISE": "per tensor"}


@dataclass(frozen=True)
class LayerWeights:
    """One operator with weights in the written model."""

    op_index: int
    op: str
    #: Its output tensor's name: the layer it comes from.
    layer: str
    bits: int
    #: "per channel" or "per tensor".
    granularity: str
    #: Bytes the weights take in the file (int4: two per byte).
    weight_bytes: int
    #: Why the weights are not int4 per channel ("" when they are).
    why: str = ""


@dataclass(frozen=True)
class LowBitReport:
    """What ``--weights int4`` did to each operator with weights."""

    layers: tuple[LayerWeights, ...]
    #: "AI Edge Quantizer 0.10.0".
    engine: str
    #: How many times the model was quantized and judged (1: nothing was refused).
    rounds: int

    @property
    def int4_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.bits == 4)

    @property
    def weight_bytes(self) -> int:
        return sum(layer.weight_bytes for layer in self.layers)


def check_request(quant_scheme: str, io_type: str, sparsity: bool) -> None:
    """Refuse, before TensorFlow starts, what ``--weights int4`` cannot do yet."""
    require_extra("ai_edge_quantizer", "--weights int4")
    if quant_scheme != "int8":
        raise UsageError(f"--weights int4 keeps int8 activations: it needs --scheme int8, not "
                         f"{quant_scheme}")
    if io_type != "int8":
        raise UsageError(f"--weights int4 writes int8 inputs and outputs (AI Edge Quantizer's "
                         f"static quantization); --io-type {io_type} is not available with it")
    if sparsity:
        raise UsageError("--weights int4 quantizes the float model again, which would undo "
                         "pruning: give one of them")


def int4_weights(float_tflite: bytes, calibration: Dataset, profile: Profile,
                 name: str = "model") -> tuple[bytes, LowBitReport]:
    """The float32 ``.tflite`` with int4 weights where ``profile``'s runtime runs them
    (asked each round, see the module doc), int8 weights elsewhere, int8 activations
    calibrated on ``calibration``."""
    from devicefit.simulator.read.reader import parse_model

    model = parse_model(float_tflite, name)
    sg = model.main
    steps = {i: 0 for i, op in enumerate(sg.operators)
             if op.op_name in INT4_STEPS and _weights(sg, op) is not None}
    why: dict[int, str] = {}
    samples = _samples(float_tflite, calibration)
    rounds = 0
    while True:  # each round steps at least one operator down, and int8 is the last step
        rounds += 1
        recipe = {_scope(sg, sg.operators[i]): INT4_STEPS[sg.operators[i].op_name][s]
                  for i, s in steps.items() if s < len(INT4_STEPS[sg.operators[i].op_name])}
        data = _quantize(float_tflite, samples, recipe)
        refused = _refused(data, profile, name)
        stepped = False
        for i in steps:
            reason = refused.get(_scope(sg, sg.operators[i]))
            if reason is not None and steps[i] < len(INT4_STEPS[sg.operators[i].op_name]):
                was = INT4_STEPS[sg.operators[i].op_name][steps[i]]
                why[i] = f"int4 {GRANULARITY[was]} refused: {reason}"
                steps[i] += 1
                stepped = True
        if not stepped:
            return data, LowBitReport(_layers(parse_model(data, name), sg, why), engine(), rounds)


def engine() -> str:
    from importlib.metadata import version

    return f"AI Edge Quantizer {version('ai-edge-quantizer')}"


def _weights(sg: Subgraph, op: Operator) -> int | None:
    """The index of ``op``'s constant weight tensor, None when it has none."""
    k = WEIGHT_INPUT.get(op.op_name)
    if k is None or len(op.inputs) <= k or op.inputs[k] < 0:
        return None
    return op.inputs[k] if sg.tensors[op.inputs[k]].has_data else None


def _scope(sg: Subgraph, op: Operator) -> str:
    """The quantizer's name for an operator: its output tensors' names, each followed by
    ';' (``tfl_flatbuffer_utils.get_op_scope``)."""
    return "".join(f"{sg.tensors[i].name};" for i in op.outputs if i >= 0)


def _samples(float_tflite: bytes, calibration: Dataset) -> dict[str, list[dict[str, np.ndarray]]]:
    """The calibration data as the quantizer takes it: per signature, one dict of inputs
    by name per sample."""
    from ai_edge_litert.interpreter import Interpreter

    signatures = Interpreter(model_content=float_tflite).get_signature_list()
    if len(signatures) != 1:
        raise UsageError(f"--weights int4 needs a model with one signature, this one has "
                         f"{len(signatures)}")
    key, signature = next(iter(signatures.items()))
    if len(signature["inputs"]) != 1:
        raise UsageError("--weights int4 takes models with one input for now (the "
                         "calibration data holds one array)")
    (input_name,) = signature["inputs"]
    return {key: [{input_name: x[np.newaxis].astype(np.float32)} for x in calibration.x]}


def _quantize(float_tflite: bytes, samples: Mapping[str, list[dict[str, np.ndarray]]],
              int4: Mapping[str, str]) -> bytes:
    """Int8 activations and per-channel int8 weights everywhere the quantizer can, and int4
    weights (at the given granularity) on the operators named by their scope."""
    from ai_edge_quantizer import qtyping, quantizer

    q = quantizer.Quantizer(float_tflite)
    op_names = qtyping.TFLOperationName
    q.add_static_config(regex=".*", operation_name=op_names.ALL_SUPPORTED,
                        activation_num_bits=8, weight_num_bits=8,
                        weight_granularity=qtyping.QuantGranularity.CHANNELWISE)
    for scope, granularity in int4.items():
        # The latest matching config wins in the quantizer: these override the default.
        q.add_static_config(regex=f"^{re.escape(scope)}$", operation_name=op_names.ALL_SUPPORTED,
                            activation_num_bits=8, weight_num_bits=4,
                            weight_granularity=getattr(qtyping.QuantGranularity, granularity))
    # It prints sizes and timings, a progress bar per calibration pass, and LiteRT's warning
    # that its calibration keeps every tensor (for debugging, it says: not the user's).
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = q.quantize(q.calibrate(samples))
    return bytes(result.quantized_model)


def _refused(data: bytes, profile: Profile, name: str) -> dict[str, str]:
    """Scope → why the profile's runtime or compiler refuses that operator of ``data``."""
    from devicefit.simulator.read.reader import parse_model
    from devicefit.simulator.simulate import simulate

    sg = parse_model(data, name).main
    int4 = [i for i, op in enumerate(sg.operators) if _is_int4(sg, op)]
    with temporary_folder("devicefit-int4-") as tmp:
        path = Path(tmp) / Path(name).with_suffix(".int4.tflite").name
        path.write_bytes(data)
        try:
            report = simulate(path, profile)
        except RuntimeFailure as exc:  # Vela 5.2 dies of SIGFPE on int4 weights
            return {_scope(sg, sg.operators[i]): f"the target's tools failed on it: {exc}"
                    for i in int4}
    refused: dict[str, str] = {}
    if report.compatibility is not None:
        for entry in report.compatibility.unsupported_ops:
            if entry.subgraph == 0:
                refused[_scope(sg, sg.operators[entry.op_index])] = entry.reason
    refusal = report.compile_refusal
    if refusal is not None:
        ops = [refusal.op_index] if refusal.op_index is not None and refusal.subgraph == 0 \
            else int4
        said = refusal.message if refusal.message.startswith(refusal.compiler) else \
            f"{refusal.compiler}: {refusal.message}"
        for i in ops:
            refused[_scope(sg, sg.operators[i])] = said
    return refused


def _is_int4(sg: Subgraph, op: Operator) -> bool:
    w = _weights(sg, op)
    return w is not None and sg.tensors[w].dtype == "int4"


def _layers(model: Model, source: Subgraph, why: Mapping[int, str]) -> tuple[LayerWeights, ...]:
    """Every operator with weights in the written model; ``why`` is keyed by the source
    (float) model's operator index, matched to the written one by scope."""
    by_scope = {_scope(source, op): i for i, op in enumerate(source.operators)}
    sg = model.main
    out = []
    for i, op in enumerate(sg.operators):
        w = _weights(sg, op)
        if w is None:
            continue
        t = sg.tensors[w]
        per_channel = t.quantization is not None and t.quantization.per_channel
        bits = 4 if t.dtype == "int4" else 8 if t.dtype == "int8" else 16 if \
            t.dtype == "int16" else 32
        reason = why.get(by_scope.get(_scope(sg, op), -1), "")
        if not reason and bits != 4:
            reason = (f"AI Edge Quantizer {_version()} writes no int4 {op.op_name} weights"
                      if op.op_name not in INT4_STEPS else "")
        out.append(LayerWeights(
            i, op.op_name, next((sg.tensors[o].name for o in op.outputs if o >= 0), ""), bits,
            "per channel" if per_channel else "per tensor",
            (t.num_elements + 1) // 2 if t.dtype == "int4" else t.nbytes, reason))
    return tuple(out)


def _version() -> str:
    return engine().rsplit(" ", 1)[-1]
