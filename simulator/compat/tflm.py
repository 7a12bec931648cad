"""TFLite-Micro op support: the builtin ops the interpreter's op resolver offers.

Source: the ``PythonOpsResolver`` of tensorflow/tflite-micro
(``python/tflite_micro/python_ops_resolver.cc``, which registers every kernel of
``tensorflow/lite/micro/kernels/micro_ops.h``), checked against the pinned ``tflite-micro``
wheel (0.dev20261023182759) by ``tests/tflm_probe.py``: the probe builds a one-op model per
builtin code and asks the real interpreter whether it finds a registration. The test suite
re-runs the probe, so a wheel upgrade that changes the set fails loudly.
On a device, an application registers a subset with ``MicroMutableOpResolver``; a profile
expresses that subset with ``ops.allow``.
"""

from __future__ import annotations

from simulator.compat import UnsupportedOp
from simulator.model import Model
from simulator.profiles import Profile

#: Builtin ops the TFLM wheel's resolver registers (alphabetical).
TFLM_OPS: frozenset[str] = frozenset("""
ABS ADD ADD_N ARG_MAX ARG_MIN ASSIGN_VARIABLE AVERAGE_POOL_2D BATCH_MATMUL BATCH_TO_SPACE_ND
BROADCAST_ARGS BROADCAST_TO CALL_ONCE CAST CEIL CONCATENATION CONV_2D COS CUMSUM DEPTH_TO_SPACE
DEPTHWISE_CONV_2D DEQUANTIZE DIV DYNAMIC_UPDATE_SLICE ELU EMBEDDING_LOOKUP EQUAL EXP EXPAND_DIMS
FILL FLOOR FLOOR_DIV FLOOR_MOD FULLY_CONNECTED GATHER GATHER_ND GREATER GREATER_EQUAL HARD_SWISH
IF L2_NORMALIZATION L2_POOL_2D LEAKY_RELU LESS LESS_EQUAL LOG LOG_SOFTMAX LOGICAL_AND
LOGICAL_NOT LOGICAL_OR LOGISTIC MAX_POOL_2D MAXIMUM MEAN MINIMUM MIRROR_PAD MUL NEG NOT_EQUAL
PACK PAD PADV2 PRELU QUANTIZE READ_VARIABLE REDUCE_ALL REDUCE_MAX REDUCE_MIN RELU RELU6 RESHAPE
RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR REVERSE_V2 ROUND RSQRT SELECT_V2 SHAPE SIN SLICE SOFTMAX
SPACE_TO_BATCH_ND SPACE_TO_DEPTH SPLIT SPLIT_V SQRT SQUARE SQUARED_DIFFERENCE SQUEEZE
STRIDED_SLICE SUB SUM SVDF TANH TRANSPOSE TRANSPOSE_CONV UNIDIRECTIONAL_SEQUENCE_LSTM UNPACK
VAR_HANDLE WHILE ZEROS_LIKE
""".split())


def check(model: Model, profile: Profile) -> list[UnsupportedOp]:
    found = []
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.is_custom:
                reason = "custom op: TFLM has no kernel registered for it"
            elif op.op_name not in TFLM_OPS:
                reason = "TFLM has no kernel for this op"
            elif any(sg.tensors[i].is_sparse for i in op.inputs if i >= 0):
                reason = "sparse-encoded weights: TFLM cannot densify them"
            else:
                continue
            found.append(UnsupportedOp(op.index, op.op_name, reason, sg.index))
    return found
