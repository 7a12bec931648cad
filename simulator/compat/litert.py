"""LiteRT op support: every builtin op, plus the custom ops the builtin resolver registers.

LiteRT's ``BuiltinOpResolver`` covers the whole builtin schema; what it cannot run are
TensorFlow ("Flex") ops, which need the Flex delegate that the ``ai-edge-litert`` wheel does
not ship, and other custom ops the application must register itself. Source: LiteRT
``tensorflow/lite/core/kernels/register.cc`` (AddCustom lines).
"""

from __future__ import annotations

from simulator.compat import UnsupportedOp
from simulator.model import Model
from simulator.profiles import Profile

#: Custom op codes registered by LiteRT's builtin op resolver.
LITERT_CUSTOM_OPS = frozenset({
    "TFLite_Detection_PostProcess", "Mfcc", "AudioSpectrogram", "NumericVerify",
})


def check(model: Model, profile: Profile) -> list[UnsupportedOp]:
    found = []
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.op_name.startswith("UNKNOWN_"):
                reason = "op code unknown to this LiteRT schema"
            elif not op.is_custom:
                continue
            elif op.op_name.removeprefix("CUSTOM:").startswith("Flex"):
                reason = "TensorFlow (Flex) op: needs the Flex delegate, not in LiteRT"
            elif op.op_name.removeprefix("CUSTOM:") in LITERT_CUSTOM_OPS:
                continue
            else:
                reason = "custom op: the application must register its kernel"
            found.append(UnsupportedOp(op.index, op.op_name, reason, sg.index))
    return found
