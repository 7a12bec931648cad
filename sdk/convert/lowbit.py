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

``--weights auto`` then spends int4 only where the flash budget needs it: each layer the
runtime takes at int4 is tried alone at int4 (the others int8) and run in LiteRT on the
evaluation data — its accuracy drop against the all-int8 model (top-1 disagreement without
labels) and the bytes it saves in the file, both measured — and the layers that cost least
accuracy per byte saved go to int4, one by one, until the simulator's flash figure is within
the budget. HAQ and Sony's MCT choose bit widths under a resource target the same way in
spirit; here the resource is the profile's own flash figure and the accuracy is the
runtime's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devicefit.sdk.convert.accuracy import AccuracyReport
from devicefit.sdk.convert.data import Dataset
from devicefit.simulator.errors import RuntimeFailure, UsageError, require_extra
from devicefit.simulator.infra.fileio import temporary_folder
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import WEIGHTS_INPUT, Model, Operator, Subgraph
from devicefit.simulator.report.report import Report

log = logging.getLogger(__name__)

#: The operators AI Edge Quantizer 0.10 writes int4 weights for with int8 activations, and
#: the granularities tried, in order. Its policy has no int4 DEPTHWISE_CONV_2D with integer
#: compute ("Unsupported op for ComputePrecision.INTEGER"), so depthwise weights stay int8.
INT4_STEPS: dict[str, tuple[str, ...]] = {
    "CONV_2D": ("CHANNELWISE", "TENSORWISE"),
    "FULLY_CONNECTED": ("CHANNELWISE", "TENSORWISE"),
}
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
class Sensitivity:
    """One layer alone at int4 (every other layer int8), run in LiteRT on the evaluation
    data."""

    op_index: int
    layer: str
    #: Bytes the file shrinks by against the all-int8 model.
    saved_bytes: int
    #: Accuracy points lost against the all-int8 model; without labels, points of top-1
    #: agreement with the float model lost.
    drop_pp: float
    chosen: bool


@dataclass(frozen=True)
class LowBitReport:
    """What ``--weights int4`` did to each operator with weights."""

    layers: tuple[LayerWeights, ...]
    #: "AI Edge Quantizer 0.10.0".
    engine: str
    #: How many times the model was quantized and judged (1: nothing was refused).
    rounds: int

    #: ``--weights auto``: each candidate layer alone at int4, measured (empty for int4).
    sensitivity: tuple[Sensitivity, ...] = ()
    #: ``--weights auto``: the flash budget and the all-int8 model's flash figure.
    flash_limit_bytes: int | None = None
    int8_flash_bytes: int | None = None

    @property
    def int4_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.bits == 4)

    @property
    def weight_bytes(self) -> int:
        return sum(layer.weight_bytes for layer in self.layers)


def check_request(quant_scheme: str, io_type: str, sparsity: bool, weights: str = "int4",
                  evaluation: bool = True, flash_limit: int | None = None) -> None:
    """Refuse, before TensorFlow starts, what ``--weights int4|auto`` cannot do (yet)."""
    require_extra("ai_edge_quantizer", f"--weights {weights}")
    if weights == "auto" and not evaluation:
        raise UsageError("--weights auto measures each layer's accuracy at int4: give --eval "
                         "DATA (held-out samples, labelled if possible)")
    if weights == "auto" and flash_limit is None:
        raise UsageError("--weights auto chooses int4 layers under the profile's flash "
                         "budget, and this profile sets none: give it budgets.flash or use "
                         "--weights int4")
    if quant_scheme != "int8":
        raise UsageError(f"--weights {weights} keeps int8 activations: it needs --scheme int8, not "
                         f"{quant_scheme}")
    if io_type != "int8":
        raise UsageError(f"--weights {weights} writes int8 inputs and outputs (AI Edge Quantizer's "
                         f"static quantization); --io-type {io_type} is not available with it")
    if sparsity:
        raise UsageError(f"--weights {weights} quantizes the float model again, which would undo "
                         "pruning: give one of them")


def int4_weights(float_tflite: bytes, calibration: Dataset, profile: Profile,
                 name: str = "model") -> tuple[bytes, LowBitReport]:
    """The float32 ``.tflite`` with int4 weights where ``profile``'s runtime runs them
    (asked each round, see the module doc), int8 weights elsewhere, int8 activations
    calibrated on ``calibration``."""
    asked = _ask(float_tflite, _samples(float_tflite, calibration), profile, name)
    return asked.data, asked.report(name)


def int4_under_budget(float_tflite: bytes, calibration: Dataset, evaluation: Dataset,
                      reference: np.ndarray, profile: Profile, name: str = "model"
                      ) -> tuple[bytes, LowBitReport]:
    """``--weights auto`` (module doc): int4 on the layers that cost least accuracy per byte
    saved, as few as bring the simulator's flash figure within the profile's budget less
    :data:`METADATA_ALLOWANCE` (all the runtime takes when even that is not enough: the
    verdict then says flash is over)."""
    from devicefit.sdk.convert.accuracy import compare

    samples = _samples(float_tflite, calibration)
    asked = _ask(float_tflite, samples, profile, name)
    int8 = _quantize(float_tflite, samples, {})
    budget, int8_flash = _flash(int8, profile, name)
    limit = budget - METADATA_ALLOWANCE
    by_scope = {_scope(asked.sg, op): i for i, op in enumerate(asked.sg.operators)}
    if int8_flash <= limit or not asked.recipe:
        why = {**asked.why, **{by_scope[scope]: "int8 fits the flash budget"
                               for scope in asked.recipe}}
        return int8, LowBitReport(_layers(_parse(int8, name), asked.sg, why), engine(),
                                  asked.rounds, (), budget, int8_flash)
    base = _score(compare(reference, _outputs(int8, evaluation, name), evaluation.y))
    tried = []
    for scope, granularity in asked.recipe.items():
        data = _quantize(float_tflite, samples, {scope: granularity})
        drop = base - _score(compare(reference, _outputs(data, evaluation, name), evaluation.y))
        tried.append((max(drop, 0.0) / max(len(int8) - len(data), 1), scope, len(int8) - len(data),
                      drop))
    tried.sort(key=lambda t: (t[0], -t[2]))
    chosen: dict[str, str] = {}
    saved_so_far = 0
    data = int8
    for _, scope, saved, _ in tried:
        chosen[scope] = asked.recipe[scope]
        saved_so_far += saved
        if int8_flash - saved_so_far > limit and len(chosen) < len(tried):
            continue  # the layers' own savings say it is still over: add the next
        data = _quantize(float_tflite, samples, chosen)
        _, flash = _flash(data, profile, name)
        if flash <= limit:
            break
    sensitivity = tuple(Sensitivity(by_scope[scope], scope.split(";")[0], saved, round(drop, 3),
                                    scope in chosen) for _, scope, saved, drop in tried)
    why = {**asked.why, **{by_scope[scope]: "not needed for the flash budget"
                           for scope in asked.recipe if scope not in chosen}}
    return data, LowBitReport(_layers(_parse(data, name), asked.sg, why), engine(),
                              asked.rounds, sensitivity, budget, int8_flash)


@dataclass(frozen=True)
class _Asked:
    """What asking the runtime left: the model with int4 wherever it takes it, the recipe
    (scope → granularity) that wrote it, and why each other layer steps down."""

    data: bytes
    recipe: dict[str, str]
    why: dict[int, str]
    rounds: int
    sg: Subgraph

    def report(self, name: str) -> LowBitReport:
        return LowBitReport(_layers(_parse(self.data, name), self.sg, self.why), engine(),
                            self.rounds)


def _ask(float_tflite: bytes, samples: Mapping[str, list[dict[str, np.ndarray]]],
         profile: Profile, name: str) -> _Asked:
    sg = _parse(float_tflite, name).main
    steps = {i: 0 for i, op in enumerate(sg.operators)
             if op.op_name in INT4_STEPS and _weights(sg, op) is not None}
    why: dict[int, str] = {}
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
            return _Asked(data, recipe, why, rounds, sg)


def _parse(data: bytes, name: str) -> Model:
    from devicefit.simulator.read.reader import parse_model

    return parse_model(data, name)


def _score(measured: AccuracyReport) -> float:
    """Points of accuracy, or of top-1 agreement with the float model without labels."""
    value = measured.converted_accuracy if measured.converted_accuracy is not None \
        else measured.top1_agreement
    if value is None:
        raise UsageError("--weights auto compares classes: the model's output is not a "
                         "classifier's; use --weights int4")
    return 100.0 * value


def _outputs(data: bytes, evaluation: Dataset, name: str) -> np.ndarray:
    from devicefit.sdk.convert.accuracy import run_tflite

    with temporary_folder("devicefit-int4-") as tmp:
        path = Path(tmp) / Path(name).with_suffix(".candidate.tflite").name
        path.write_bytes(data)
        return run_tflite(path, evaluation.x)


def _flash(data: bytes, profile: Profile, name: str) -> tuple[int, int]:
    """The profile's flash budget and the simulator's flash figure for ``data``."""
    report = _judge(data, profile, name)
    flash = next((b for b in report.budgets if b.name == "flash"), None)
    if flash is None or flash.limit is None:
        raise UsageError(f"--weights auto: profile '{profile.name}' has no flash budget "
                         "the simulator can judge; use --weights int4")
    return int(flash.limit), int(flash.value)


#: Flash ``--weights auto`` leaves under the budget for what the caller adds to the bare
#: model: devicefit's own metadata entry (480-500 B on the digits CNN and search's
#: candidates: the conversion's settings as JSON and its flatbuffer table), with room for
#: longer settings. Without it a file chosen 215 B under the budget came out 281 B over once
#: written (search's auto twin, 2026-12-03).
METADATA_ALLOWANCE = 1024


#: What ``--weights int4`` may cost before ``convert`` warns: the issue's "at most 1 pp of
#: accuracy", or without labels 1 % of top-1 agreement, or (not a classifier) an SQNR below
#: 20 dB, where int8 models of the demo keep 26-44 dB.
COSTLY_DROP_PP = 1.0
COSTLY_AGREEMENT = 0.99
COSTLY_SQNR_DB = 20.0


def costly(measured: AccuracyReport) -> str | None:
    """A warning when int4 on every layer the runtime takes cost more than the thresholds
    above against the float model, else None."""
    if measured.accuracy_drop_pp is not None:
        lost = measured.accuracy_drop_pp > COSTLY_DROP_PP
        what = f"{measured.accuracy_drop_pp:.2f} pp of accuracy"
    elif measured.top1_agreement is not None:
        lost = measured.top1_agreement < COSTLY_AGREEMENT
        what = f"top-1 agreement with the float model down to {measured.top1_agreement:.2%}"
    else:
        lost = measured.sqnr_db is not None and measured.sqnr_db < COSTLY_SQNR_DB
        what = f"an SQNR of {measured.sqnr_db or 0:.1f} dB against the float model"
    if not lost:
        return None
    return (f"int4 weights on every layer the runtime takes cost {what}: --weights auto puts "
            "int4 only where the flash budget needs it, the layers that cost least first")


def float_input_shape(path: Path) -> tuple[int, ...]:
    """The per-sample input shape of a float32 ``.tflite`` given to ``--weights int4|auto``;
    one clear line for a file that is not one (quantized already, several or dynamic
    inputs)."""
    from devicefit.simulator.errors import InputError
    from devicefit.simulator.read.reader import read_model

    sg = read_model(path).main
    quantized = sorted({sg.tensors[w].dtype for op in sg.operators
                        if (w := _weights(sg, op)) is not None
                        and sg.tensors[w].dtype != "float32"})
    if quantized:
        raise InputError(f"{path} is quantized already ({', '.join(quantized)} weights): give "
                         "the float32 .tflite, or the Keras model it came from")
    if len(sg.inputs) != 1:
        raise InputError(f"{path} has {len(sg.inputs)} inputs; --weights takes models with one "
                         "input for now (the calibration data holds one array)")
    shape = sg.tensors[sg.inputs[0]].shape_signature or sg.tensors[sg.inputs[0]].shape
    if any(d < 1 for d in shape[1:]):
        raise InputError(f"{path}: its input has dynamic dimensions {list(shape)}; give a "
                         "float32 .tflite with a fixed input shape")
    return tuple(shape[1:])


def engine() -> str:
    from importlib.metadata import version

    return f"AI Edge Quantizer {version('ai-edge-quantizer')}"


def _weights(sg: Subgraph, op: Operator) -> int | None:
    """The index of ``op``'s constant weight tensor, None when it has none."""
    k = WEIGHTS_INPUT.get(op.op_name)
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
    return _inline_buffers(bytes(result.quantized_model))


def _inline_buffers(data: bytes) -> bytes:
    """``data`` with every constant inside the flatbuffer. AI Edge Quantizer 0.10 writes a
    model whose constants pass 256 KiB (``model_modifier.py``) with them after the
    flatbuffer, the layout meant for models over 2 GB; devicefit's writer, which then adds
    the conversion metadata, edits only a file that holds its constants."""
    from ai_edge_litert import schema_py_generated as schema

    from devicefit.simulator.read import writer

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    outside = [b for b in model.buffers or [] if b.offset]
    if not outside:
        return data
    for buf in outside:  # the offset counts from the file's first byte
        buf.data = np.frombuffer(data, np.uint8, count=buf.size, offset=buf.offset)
        buf.offset = buf.size = 0
    return writer.pack(model)


def _refused(data: bytes, profile: Profile, name: str) -> dict[str, str]:
    """Scope → why the profile's runtime or compiler refuses that operator of ``data``."""
    sg = _parse(data, name).main
    int4 = [i for i, op in enumerate(sg.operators) if _is_int4(sg, op)]
    try:
        report = _judge(data, profile, name)
    except RuntimeFailure as exc:
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


def _judge(data: bytes, profile: Profile, name: str) -> Report:
    """The simulator's static report on ``data`` for ``profile``."""
    from devicefit.simulator.simulate import simulate

    with temporary_folder("devicefit-int4-") as tmp:
        path = Path(tmp) / Path(name).with_suffix(".int4.tflite").name
        path.write_bytes(data)
        return simulate(path, profile)


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
            t.stored_bytes, reason))
    return tuple(out)


def _version() -> str:
    return engine().rsplit(" ", 1)[-1]


def int4_as_before(float_tflite: bytes, trained_float: bytes, calibration: Dataset,
                   report: LowBitReport, name: str = "model") -> tuple[bytes, LowBitReport]:
    """``trained_float`` (``float_tflite``'s model after ``convert --qat``, or
    ``float_tflite`` itself) with int4 weights on the layers ``report`` says are at 4 bits,
    at the same granularity, and nothing asked or measured again: QAT trained exactly those
    layers (search's screen passes a report with fewer of them at 4 bits).
    Training changes no operator, so the two graphs' operators with weights pair up in
    order; their tensor names may not (a trained model is a clone, named anew)."""
    before, after = _parse(float_tflite, name).main, _parse(trained_float, name).main
    ops_before = [op for op in before.operators if _weights(before, op) is not None]
    ops_after = [op for op in after.operators if _weights(after, op) is not None]
    if [op.op_name for op in ops_before] != [op.op_name for op in ops_after]:
        raise RuntimeFailure("the trained model's layers with weights differ from the "
                             "model's: its int4 layers cannot be matched")
    scopes = {_scope(before, a): _scope(after, b)
              for a, b in zip(ops_before, ops_after, strict=True)}
    steps = {label: step for step, label in GRANULARITY.items()}
    recipe = {scopes[f"{w.layer};"]: steps[w.granularity] for w in report.layers if w.bits == 4}
    data = _quantize(trained_float, _samples(trained_float, calibration), recipe)
    # The written models pair up the same way; each layer keeps the first pass's reason.
    layers = tuple(dataclasses.replace(new, why=old.why) for new, old in zip(
        _layers(_parse(data, name), after, {}), report.layers, strict=True))
    return data, dataclasses.replace(report, layers=layers)
