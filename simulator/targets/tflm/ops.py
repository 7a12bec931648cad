"""TFLite-Micro op support, as the pinned ``tflite-micro`` wheel's kernels answer it.

The data (``tflm_support.json``) is not a hand list: ``python -m tests.op_probe --write``
asks the wheel itself which builtin ops its resolver registers, which custom ops (TFLM's
Signal audio library, its detection post-process: every identifier of the native library is
tried), and, for the ops models are made of, which **type combinations** its kernels accept
at prepare and invoke — a one-op model per combination (dynamic-range "hybrid" float
activations with int8 weights, int16 activations, int4 or float16 weights, ...), with the
kernel's own message when it refuses — and which shape-like inputs (FILL's dims, SPLIT's
axis, RESIZE's size, PAD's paddings ...) must be constants. The table records the wheel
version; the test suite
checks it against the installed wheel and re-probes a sample, so a wheel upgrade that changes
the answers fails loudly.

Kernel flavours: the wheel runs the reference kernels. TFLM's optimized kernels (CMSIS-NN,
ESP-NN) replace the reference ones per op and hand the type combinations they do not
optimise to the reference code. Read against tflite-micro's ``kernels/cmsis_nn/*.cc``
(add, batch_matmul, conv, depthwise_conv, fully_connected, maximum_minimum, mul, pad,
softmax, transpose_conv, unidirectional_sequence_lstm), CMSIS-NN accepts exactly the
reference kernels' type combinations, with the same "Hybrid models are not supported"
checks, and its float LSTM, like the reference one, reads int8 weights as floats. So the
reference answer is used for every flavour.

On a device, an application registers a subset with ``MicroMutableOpResolver``; a profile
expresses that subset with ``ops.allow``. Ops not in TFLM's tree at all (e.g. MediaPipe's
``Convolution2DTransposeBias``) and ops compiled for an accelerator (``ethos-u``,
``edgetpu-custom-op``) are named as such.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import WEIGHTS_INPUT, Model, Operator, Subgraph
from devicefit.simulator.target import accelerator_op
from devicefit.simulator.targets.tflm.settings import compression
from devicefit.simulator.types import UnsupportedOp

SUPPORT_FILE = Path(__file__).with_name("tflm_support.json")

# The signature of an op with constant weights (WEIGHTS_INPUT, the reader's) includes the
# weights' type, which decides hybrid vs integer.
#: The custom op TFLM's compression tool inserts before each consumer of a compressed tensor.
DECODE = "TFLM_DECODE"
#: Ops whose data input is not input 0.
DATA_INPUT = {"TRANSPOSE_CONV": 2, "EMBEDDING_LOOKUP": 1}

def signature(sg: Subgraph, op: Operator) -> str:
    """``"<data input type>/<weights type or ->/<output type>"``: what TFLM's kernels
    dispatch on (e.g. ``float32/int8/float32`` is a hybrid conv)."""
    def dtype(position: int, indices: tuple[int, ...]) -> str:
        if position < len(indices) and indices[position] >= 0:
            return sg.tensors[indices[position]].dtype
        return "-"

    weights = WEIGHTS_INPUT.get(op.op_name)
    return "/".join((dtype(DATA_INPUT.get(op.op_name, 0), op.inputs),
                     "-" if weights is None else dtype(weights, op.inputs),
                     dtype(0, op.outputs)))


@cache
def support() -> dict:
    """The probed table (see the module docstring)."""
    return json.loads(SUPPORT_FILE.read_text())


def builtin_ops() -> frozenset[str]:
    return frozenset(support()["builtin_ops"])


def custom_ops() -> frozenset[str]:
    return frozenset(support()["custom_ops"])


def refusal(sg: Subgraph, op: Operator) -> str | None:
    """Why TFLM refuses this op's type combination, or None (accepted or not probed)."""
    sig = signature(sg, op)
    answer = support()["combinations"].get(op.op_name, {}).get(sig)
    if answer is None or answer == "ok":
        return None
    stage, _, message = answer.partition(": ")
    return f"{sig} ({_kind(sig)}) at {stage}: {message}"


def constant_input_refusal(sg: Subgraph, op: Operator) -> str | None:
    """Why TFLM refuses this op because a shape-like input (FILL's dims, SPLIT's axis ...)
    is computed at run time instead of stored in the file, or None."""
    for index, answer in support().get("constant_inputs", {}).get(op.op_name, {}).items():
        position = int(index)
        if answer == "ok" or position >= len(op.inputs) or op.inputs[position] < 0:
            continue
        if not sg.tensors[op.inputs[position]].has_data:
            return f"input {position} is computed at run time: {answer.partition(': ')[2]}"
    return None


def zero_point_refusal(sg: Subgraph, op: Operator, table: dict[str, dict[str, str]]
                       ) -> str | None:
    """Why a kernel refuses this op's asymmetric quantization — int8 weights, or int16
    activations of an int16 → int16 op, with a non-zero zero point (the converter writes
    both symmetric) — from a
    probed ``{op: {"weights:int8" | "activations:int16": answer}}`` table, or None."""
    answers = table.get(op.op_name, {})
    weights = WEIGHTS_INPUT.get(op.op_name)
    checks = []
    if weights is not None and weights < len(op.inputs) and op.inputs[weights] >= 0:
        checks.append(("weights:int8", [sg.tensors[op.inputs[weights]]]))
    data_input = DATA_INPUT.get(op.op_name, 0)
    if {sg.tensors[i].dtype for i in (op.inputs[data_input:data_input + 1] + op.outputs[:1])
            if i >= 0} == {"int16"}:
        # The probe's model had int16 in and out; a type-changing op keeps its own rules
        # (an int8 → int16 softmax needs output zero point -32768, not 0).
        checks.append(("activations:int16", [sg.tensors[i] for i in (*op.inputs, *op.outputs)
                                             if i >= 0 and not sg.tensors[i].has_data]))
    for what, tensors in checks:
        dtype = what.partition(":")[2]
        asymmetric = [(t.name, q.zero_point[0]) for t in tensors if t.dtype == dtype
                      and (q := t.quantization) is not None and any(q.zero_point)]
        answer = answers.get(what, "ok")
        if asymmetric and answer != "ok":
            stage, _, message = answer.partition(": ")
            name, zero_point = asymmetric[0]
            return (f"{dtype} tensor '{name}' has zero point {zero_point} at {stage}: "
                    f"{message}")
    return None


def _kind(sig: str) -> str:
    data, weights, _ = sig.split("/")
    if data == "float32" and weights in ("int8", "int4", "uint8", "int16"):
        return "hybrid: float activations, integer weights"
    return "type combination"


def check(model: Model, profile: Profile) -> list[UnsupportedOp]:
    found = []
    builtins, customs = builtin_ops(), custom_ops()
    for sg in model.subgraphs:
        for op in sg.operators:
            code = op.op_name.removeprefix("CUSTOM:")
            if op.is_custom:
                if code == DECODE and not compression(profile.target_settings):
                    reason = ("TFLM's look-up-table compression: this profile's build does not "
                              "say it registers the DECODE kernel (runtime.compression: true "
                              "where the firmware's op resolver calls AddDecode())")
                elif code in customs:
                    continue
                else:
                    reason = accelerator_op(code) or ("custom op: the tflite-micro wheel "
                                                      "registers no kernel for it")
            elif op.op_name not in builtins:
                reason = "TFLM has no kernel for this op"
            elif any(sg.tensors[i].is_sparse for i in op.inputs if i >= 0):
                reason = "sparse-encoded weights: TFLM cannot densify them"
            elif why := refusal(sg, op):
                reason = f"TFLM's kernel does not run {why}"
            elif why := constant_input_refusal(sg, op):
                reason = f"TFLM's kernel refuses it at prepare: {why}"
            elif why := zero_point_refusal(sg, op, support().get("zero_points", {})):
                reason = f"TFLM's kernel does not take it: {why}"
            else:
                continue
            found.append(UnsupportedOp(op.index, op.op_name, reason, sg.index))
    return found
