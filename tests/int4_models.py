"""Below-8-bit models built in code from a zoo model: its filters stored as int4, two per
byte (:func:`int4_twin`), or clustered and compressed with TFLM's look-up tables
(:func:`lut_twin`).

AI Edge Quantizer writes int4 models too (tests/sdk/convert/test_int4.py), but calibrates in
LiteRT first; the tests that only need an int4 file and its int8 twin, alike in every other
byte, use :func:`int4_twin`.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from devicefit.simulator.read import writer

#: schema TensorType INT4; BuiltinOperator CONV_2D and FULLY_CONNECTED.
INT4 = 17
CONV_2D, FULLY_CONNECTED = 3, 9


def int4_twin(int8: bytes, ops: Collection[int] = (CONV_2D, FULLY_CONNECTED)) -> bytes:
    """``int8`` with the filters of its ``ops`` (builtin codes) stored as int4: each value
    clipped to [-8, 7], packed low nibble first as TFLite packs int4."""
    model = writer.unpack(int8)
    sg = model.subgraphs[0]
    done: set[int] = set()
    for op in sg.operators:
        if model.operatorCodes[op.opcodeIndex].builtinCode not in ops:
            continue
        t = sg.tensors[op.inputs[1]]
        if t.buffer in done:
            continue
        values = np.clip(np.frombuffer(bytes(model.buffers[t.buffer].data), np.int8), -8, 7)
        nibbles = values.astype(np.uint8) & 0x0F
        if nibbles.size % 2:
            nibbles = np.append(nibbles, np.uint8(0))
        model.buffers[t.buffer].data = nibbles[0::2] | (nibbles[1::2] << 4)
        t.type = INT4
        done.add(t.buffer)
    return writer.pack(model)


def lut_twin(int8: bytes) -> tuple[bytes, bytes]:
    """``int8`` with its filters clustered to 16 values per channel, and the same compressed
    by TFLM's own tool with 4-bit look-up tables (a ``TFLM_DECODE`` per filter)."""
    from devicefit.sdk.convert.lut import compress, edit_filters

    clustered, filters = edit_filters(int8, 4, prune=False)
    return clustered, compress(clustered, filters, 4)
