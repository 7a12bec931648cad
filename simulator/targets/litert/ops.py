"""LiteRT op support and load constraints.

LiteRT's ``BuiltinOpResolver`` covers nearly the whole builtin schema. What it cannot run:

- TensorFlow ("Flex") ops, which need the Flex delegate the ``ai-edge-litert`` wheel does not
  ship, and custom ops nobody registers. The builtin resolver registers a few custom ops
  (LiteRT ``tensorflow/lite/core/kernels/register.cc``, AddCustom lines); the XNNPACK
  delegate claims MediaPipe's custom ops itself (``xnnpack_delegate.cc``: the interpreter
  leaves an unresolved custom op as a placeholder a delegate may take, and fails it at
  prepare if none does) — so they run only on a profile whose runtime names ``xnnpack``.
  Both sets are checked against the installed wheel by ``tests/simulator/targets/litert/test_litert_support.py``.
- Files its loader refuses before any kernel runs (``interpreter_builder.cc``,
  ``ParseQuantization``): a quantized tensor whose ``quantized_dimension`` is outside
  ``[0, rank)``, or whose number of scales is neither 1 nor the size of that dimension
  ("Tensor N has invalid quantization parameters").
- Ops compiled for an accelerator (``ethos-u``, ``edgetpu-custom-op``), which only that
  accelerator's delegate runs.
- Builtin ops it lacks, and op versions newer than it registers (probed: one-op models per
  version; "Didn't find op for builtin opcode 'CONV_2D' version '9'" at load).
- Type combinations its kernels refuse (``litert_support.json``, probed from the wheel by
  ``python -m tests.op_probe --write`` with the same one-op models as TFLM's table, through
  the builtin kernels and through XNNPACK): on a profile with XNNPACK a combination fails
  only when both refuse it (XNNPACK leaves what it cannot take to the builtin kernels).
  The same for asymmetric quantization: int8 conv weights with a non-zero zero point, int16
  activations with one.
- TFLM's 8-bit SVDF (int8 time weights and state, ``keyword_scrambled_8bit``): LiteRT's
  integer SVDF reads both as int16 without checking their type and writes past the state
  buffer (valgrind: "Invalid write of size 2" in ``reference_ops::EvalIntegerSVDF``).
  XNNPACK does not take SVDF, so the profile's XNNPACK path runs the same builtin kernel:
  invoke may even return, and the process dies on the damaged heap then or later.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Operator, Subgraph, Tensor
from devicefit.simulator.target import accelerator_op
from devicefit.simulator.types import UnsupportedOp

SUPPORT_FILE = Path(__file__).with_name("litert_support.json")

#: Custom op codes registered by LiteRT's builtin op resolver.
LITERT_CUSTOM_OPS = frozenset({
    "TFLite_Detection_PostProcess", "Mfcc", "AudioSpectrogram", "NumericVerify",
})
#: Custom op codes the XNNPACK delegate implements itself (MediaPipe's).
XNNPACK_CUSTOM_OPS = frozenset({
    "Convolution2DTransposeBias", "MaxPoolingWithArgmax2D", "MaxUnpooling2D",
})


@cache
def support() -> dict:
    """The probed table (see the module docstring)."""
    return json.loads(SUPPORT_FILE.read_text())


def refusal(sg: Subgraph, op: Operator, xnnpack: bool) -> str | None:
    """Why LiteRT's kernels refuse this op's type combination, or None."""
    from devicefit.simulator.targets.tflm.ops import signature

    sig = signature(sg, op)
    table = support()
    builtin = table["builtin"].get(op.op_name, {}).get(sig)
    if builtin in (None, "ok"):
        return None
    if xnnpack and table["xnnpack"].get(op.op_name, {}).get(sig) == "ok":
        return None
    stage, _, message = builtin.partition(": ")
    return f"{sig} at {stage}: {message}"


def svdf_refusal(sg: Subgraph, op: Operator) -> str | None:
    """Why LiteRT cannot run this SVDF (TFLM's 8-bit kind, see the module docstring)."""
    if op.op_name != "SVDF" or len(op.inputs) < 5 or min(op.inputs[0], op.inputs[4]) < 0:
        return None
    if (sg.tensors[op.inputs[0]].dtype, sg.tensors[op.inputs[4]].dtype) != ("int8", "int8"):
        return None
    return ("LiteRT's integer SVDF reads its state as int16; with an int8 one (TFLM's 8-bit "
            "SVDF) it writes outside the state buffer and the process dies on the damaged "
            "heap, with XNNPACK or without (XNNPACK does not take SVDF: the builtin kernel "
            "runs either way)")


def version_refusal(op: Operator) -> str | None:
    """LiteRT resolves every op by (code, version) when it loads a file: a builtin it lacks,
    or a version newer than it knows (a newer converter wrote the file), refuses the file."""
    highest = support()["op_versions"].get(op.op_name)
    if highest is None or op.version <= highest:
        return None
    if highest == 0:
        return f"LiteRT {support()['wheel'].split()[-1]} has no kernel for this op"
    return (f"{op.op_name} version {op.version}: LiteRT {support()['wheel'].split()[-1]} runs up "
            f"to version {highest} and refuses the file at load (written by a newer converter)")


def _zero_point_refusal(sg: Subgraph, op: Operator, xnnpack: bool) -> str | None:
    from devicefit.simulator.targets.tflm.ops import zero_point_refusal

    tables = support()["zero_points"]
    why = zero_point_refusal(sg, op, tables["builtin"])
    if why is None or (xnnpack and zero_point_refusal(sg, op, tables["xnnpack"]) is None):
        return None
    return why


def quantization_error(t: Tensor) -> str | None:
    """Why LiteRT's loader refuses ``t``'s quantization parameters, or None."""
    q = t.quantization
    if q is None or not q.scale:
        return None
    rank, dim = len(t.shape), q.quantized_dimension
    if dim < 0 or (rank and dim >= rank):
        return f"quantized_dimension must be in range [0, {rank}), is {dim}"
    if len(q.scale) != 1 and (not rank or len(q.scale) != t.shape[dim]):
        expected = t.shape[dim] if rank else 1
        return (f"{len(q.scale)} scales: 1 for per-tensor or {expected} (dimension {dim}) for "
                f"per-channel quantization")
    return None


def _load_errors(sg: Subgraph) -> list[UnsupportedOp]:
    """Tensors the loader refuses, each named at the first operator that uses it."""
    found = []
    for t in sg.tensors:
        why = quantization_error(t)
        if why is None:
            continue
        op = next((o for o in sg.operators if t.index in o.inputs or t.index in o.outputs),
                  None)
        found.append(UnsupportedOp(
            op.index if op else -1, op.op_name if op else "-",
            f"tensor {t.index} '{t.name}': {why}; LiteRT refuses the file at load "
            f"(\"invalid quantization parameters\")", sg.index))
    return found


def check(model: Model, profile: Profile) -> list[UnsupportedOp]:
    found = []
    xnnpack = "xnnpack" in profile.runtime.delegates
    for sg in model.subgraphs:
        found += _load_errors(sg)
        for op in sg.operators:
            code = op.op_name.removeprefix("CUSTOM:")
            if op.op_name.startswith("UNKNOWN_"):
                reason = "op code unknown to this LiteRT schema"
            elif not op.is_custom:
                if why := version_refusal(op):
                    reason = why
                elif why := svdf_refusal(sg, op):
                    reason = why
                elif why := refusal(sg, op, xnnpack):
                    reason = f"LiteRT's kernel does not run {why}"
                elif why := _zero_point_refusal(sg, op, xnnpack):
                    reason = f"LiteRT's kernel does not take it: {why}"
                else:
                    continue
            elif code in LITERT_CUSTOM_OPS:
                continue
            elif code in XNNPACK_CUSTOM_OPS:
                if xnnpack:
                    continue
                reason = (f"custom op of the XNNPACK delegate: profile '{profile.name}' does not "
                          f"use XNNPACK (runtime.delegates)")
            elif code.startswith("Flex"):
                reason = "TensorFlow (Flex) op: needs the Flex delegate, not in LiteRT"
            else:
                reason = accelerator_op(code) or ("custom op: the application must register "
                                                  "its kernel")
            found.append(UnsupportedOp(op.index, op.op_name, reason, sg.index))
    return found
