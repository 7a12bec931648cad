"""LiteRT's GPU delegate: which operators it takes, by its own rules, each rule cited.

The rules are read from the delegate's sources (:data:`SOURCE`): ``NewOperationParser``
(an operator with no parser is "Operation is not supported."), the per-parser version
caps read there, and ``GetOpsToReplace``'s tensor check (every non-constant input and output
of a type the delegate computes in, no tensor of rank 5 or more). What those sources hand on
to ``CheckGpuDelegateCompatibility`` (``tflite/tools/versioning/gpu_compatibility.cc``:
per-op options, constant-input and shape checks) is not encoded: an operator that passes
these rules and fails that one is a disagreement with the delegate, which
``benchmarks/probe_gpu_paths.py`` asks where it runs (LiteRT's WebGPU accelerator on a
software Vulkan adapter) and counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicefit.simulator.read.model import Operator, Subgraph

#: The delegate's sources the rules below are read from (the file and the commit).
SOURCE = ("google-ai-edge/LiteRT@34ec5badbbbfd4d2147d1362f299f58843f84dfc "
          "tflite/delegates/gpu/common/model_builder.cc")

#: Builtin operators ``NewOperationParser`` has a parser for (DENSIFY too, left out: see
#: :data:`ML_DRIFT_SOURCE`). QUANTIZE and DEQUANTIZE get
#: one only with ``allow_quant_ops``, which the delegate's default options set
#: (``TFLITE_GPU_EXPERIMENTAL_FLAGS_ENABLE_QUANT``; the WebGPU accelerator here takes the
#: int8 zoo chain whole, ``benchmarks/probe_gpu_paths.py``).
PARSED_OPS = frozenset({
    "ABS", "ADD", "ADD_N", "AVERAGE_POOL_2D", "BATCH_MATMUL", "CAST", "CONCATENATION",
    "CONV_2D", "COS", "CUMSUM", "DEPTHWISE_CONV_2D", "DEPTH_TO_SPACE",
    "DEQUANTIZE", "DIV", "EQUAL", "ELU", "EXP", "FLOOR", "FLOOR_DIV", "FLOOR_MOD",
    "FULLY_CONNECTED", "GATHER", "GELU", "GREATER", "GREATER_EQUAL", "HARD_SWISH", "LESS",
    "LESS_EQUAL", "LOGISTIC", "LOG", "LOGICAL_AND", "LSTM", "MAXIMUM", "MAX_POOL_2D", "MEAN",
    "MINIMUM", "MIRROR_PAD", "MUL", "NEG", "NOT_EQUAL", "ONE_HOT", "PACK", "PAD", "PADV2",
    "POW", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "QUANTIZE", "RELU", "RELU6",
    "RELU_0_TO_1", "RELU_N1_TO_1", "LEAKY_RELU", "PRELU", "RESHAPE", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "RSQRT", "SELECT", "SELECT_V2", "SIGN", "SIN", "SLICE",
    "SOFTMAX", "SPACE_TO_DEPTH", "SPLIT", "SPLIT_V", "SQRT", "SQUARE", "SQUARED_DIFFERENCE",
    "STRIDED_SLICE", "SUB", "SUM", "TANH", "TILE", "TRANSPOSE", "TRANSPOSE_CONV", "UNPACK",
})

#: LiteRT's GPU accelerator (ML Drift, the delegate ``ai-edge-litert`` ships) departs from
#: the TFLite delegate here: its ``ml_drift_delegate/tflite/model_builder.cc`` (LiteRT,
#: ``DequantizeOperationParser``) says "the DENSIFY is no longer supported", and refuses
#: the DEQUANTIZE a DENSIFY feeds; the accelerator here refuses both on the public sparse
#: models (``benchmarks/probe_gpu_paths.py --corpus``).
ML_DRIFT_SOURCE = "google-ai-edge/LiteRT ml_drift_delegate/tflite/model_builder.cc"
DENSIFY_DEQUANTIZE = "Dequantize for Densify is not supported"

#: Custom operators with a parser of their own in ``NewOperationParser``; any other custom
#: op goes to ``NewCustomOperationParser``, which the open-source build leaves unsupported.
PARSED_CUSTOM_OPS = frozenset({
    "Convolution2DTransposeBias", "MaxPoolingWithArgmax2D", "MaxUnpooling2D", "Resampler"})

#: ``CheckMaxSupportedOpVersion`` caps read in the parsers' ``IsSupported``.
MAX_VERSION = {"STRIDED_SLICE": 4, "TRANSPOSE": 4, "TRANSPOSE_CONV": 3}

#: ``GetOpsToReplace``'s allowed types of non-constant tensors: float always, int8/uint8
#: with ``allow_quant_ops``, and the per-op additions below.
BASE_TYPES = frozenset({"float32", "float16", "int8", "uint8"})
#: ``IsLogicalCode``: comparison operators whose output may be bool.
LOGICAL_OPS = frozenset({"EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS",
                         "LESS_EQUAL"})
EXTRA_IN = {"CAST": frozenset({"bool", "int32"}), "ONE_HOT": frozenset({"int32"}),
            "SELECT": frozenset({"bool"}), "SELECT_V2": frozenset({"bool"}),
            "LOGICAL_AND": frozenset({"bool"}), "GATHER": frozenset({"int32"})}
EXTRA_OUT = {"CAST": frozenset({"int32", "bool"}), "LOGICAL_AND": frozenset({"bool"}),
             **{op: frozenset({"bool"}) for op in LOGICAL_OPS}}
#: ``IsAllAllowedTensors``: a tensor of this rank or more is refused, constant or not.
MAX_RANK = 5

NOT_SUPPORTED = "Operation is not supported."
TYPE_SHAPE = "OP is supported, but tensor type/shape isn't compatible."


@dataclass(frozen=True)
class Verdict:
    """One operator's answer: ``reason`` is the delegate's own words, "" when it takes it;
    ``rule`` names the rule that decided, as the report cites it."""

    supported: bool
    reason: str = ""
    rule: str = ""


def _refused_tensor(sg: Subgraph, indices: tuple[int, ...],
                    allowed: frozenset[str]) -> str | None:
    """What makes ``IsAllAllowedTensors`` refuse these tensors (None: nothing)."""
    for t in indices:
        if t < 0:  # kTfLiteOptionalTensor
            continue
        tensor = sg.tensors[t]
        if len(tensor.shape) >= MAX_RANK:
            return f"tensor {t} has rank {len(tensor.shape)}"
        # Only arena tensors (kTfLiteArenaRw) are type-checked: constants and variables not.
        if not tensor.has_data and not tensor.is_variable and tensor.dtype not in allowed:
            return f"tensor {t} is {tensor.dtype}"
    return None


def verdict(sg: Subgraph, op: Operator) -> Verdict:
    """Whether the GPU delegate takes ``op`` of ``sg``, by the rules above."""
    name = op.op_name
    if op.is_custom:
        custom = name.partition(":")[2]
        if custom in PARSED_CUSTOM_OPS:
            return Verdict(True, rule="NewOperationParser: custom parser")
        return Verdict(False, NOT_SUPPORTED, "NewOperationParser: no parser")
    if name not in PARSED_OPS:
        return Verdict(False, NOT_SUPPORTED, "NewOperationParser: no parser"
                       if name != "DENSIFY" else f"{ML_DRIFT_SOURCE}: DENSIFY")
    if name == "DEQUANTIZE" and any(
            p.op_name == "DENSIFY" for p in sg.operators
            if op.inputs and op.inputs[0] in p.outputs):
        return Verdict(False, DENSIFY_DEQUANTIZE, f"{ML_DRIFT_SOURCE}: DequantizeOperationParser")
    cap = MAX_VERSION.get(name)
    if cap is not None and op.version > cap:
        return Verdict(False, f"Max version supported: {cap}. Requested version {op.version}.",
                       "CheckMaxSupportedOpVersion")
    allowed_in = BASE_TYPES | EXTRA_IN.get(name, frozenset())
    allowed_out = BASE_TYPES | EXTRA_OUT.get(name, frozenset())
    refused = (_refused_tensor(sg, op.inputs, allowed_in)
               or _refused_tensor(sg, op.outputs, allowed_out))
    if refused:
        return Verdict(False, TYPE_SHAPE, f"GetOpsToReplace: IsAllAllowedTensors ({refused})")
    return Verdict(True, rule="NewOperationParser + IsAllAllowedTensors")
