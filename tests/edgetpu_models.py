"""Hand-built int8 models of each Edge TPU partition rule's kind, and a compiled Edge TPU file.

The partition rules come from public compiled/uncompiled pairs (edgetpu_ops.yaml cites them);
these small graphs have the same structure, so the tests check the rule and not one file:

- :func:`branch_model`: a TPU result goes to a CPU op, and two ops read on — one from that
  CPU op (it cannot map: a second subgraph), one straight from the TPU (it maps, although it
  comes after the CPU ops in execution order), as movenet_single_pose_lightning does;
- :func:`resize_model`: one RESIZE_BILINEAR with the given options and sizes;
- :func:`tile_model`: TILE 1x1 → 33x33, as deeplab_mobilenet_edgetpu_slim has;
- :func:`compiled_model`: what ``edgetpu_compiler`` writes — an ``edgetpu-custom-op`` whose
  ``custom_options`` is a FlexBuffer map holding a DarwiNN package (executable.fbs of
  libedgetpu) with a parameter-caching and an execution-only executable — and ops left
  on the CPU after it. No real compiler output is copied: the executables carry zero bytes
  of the sizes the test asks for.
"""

from __future__ import annotations

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as fb
from flatbuffers import flexbuffers

from tests.tflite_builder import _buffer, _model, _opcode, _operator, _tensor

I8, I32, F32 = fb.TensorType.INT8, fb.TensorType.INT32, fb.TensorType.FLOAT32


def _conv(c: int) -> fb.Conv2DOptionsT:
    o = fb.Conv2DOptionsT()
    o.padding, o.strideW, o.strideH = fb.Padding.SAME, 1, 1
    o.dilationWFactor = o.dilationHFactor = 1
    return o


def branch_model(c: int = 8, hw: int = 8) -> bytes:
    """x → CONV(0) → {LEAKY_RELU(1) → ADD(2, reads 1 and 0), CONV(3, reads 0)}; the ADD
    cannot map (it reads a CPU result of the TPU), the second CONV maps."""
    w = np.ones((c, 1, 1, c), np.int8)
    b = np.zeros(c, np.int32)
    shape = (1, hw, hw, c)
    tensors = [_tensor("x", shape, I8, 0), _tensor("w0", w.shape, I8, 1),
               _tensor("b0", b.shape, I32, 2), _tensor("conv0", shape, I8, 0),
               _tensor("leaky", shape, I8, 0), _tensor("add", shape, I8, 0),
               _tensor("w3", w.shape, I8, 3), _tensor("b3", b.shape, I32, 4),
               _tensor("conv3", shape, I8, 0)]
    codes = [_opcode(fb.BuiltinOperator.CONV_2D), _opcode(fb.BuiltinOperator.LEAKY_RELU),
             _opcode(fb.BuiltinOperator.ADD)]
    ops = [_operator(0, [0, 1, 2], [3], fb.BuiltinOptions.Conv2DOptions, _conv(c)),
           _operator(1, [3], [4], fb.BuiltinOptions.LeakyReluOptions, fb.LeakyReluOptionsT()),
           _operator(2, [4, 3], [5], fb.BuiltinOptions.AddOptions, fb.AddOptionsT()),
           _operator(0, [3, 6, 7], [8], fb.BuiltinOptions.Conv2DOptions, _conv(c))]
    return _model(codes, tensors, [_buffer(w), _buffer(b), _buffer(w + 1), _buffer(b)], ops,
                  [0], [5, 8])


def resize_model(before: int, after: int, *, align_corners: bool = False,
                 half_pixel_centers: bool = False, c: int = 4) -> bytes:
    """x[1, before, before, c] int8 → RESIZE_BILINEAR → [1, after, after, c]. The converter
    writes v3 for half_pixel_centers, v1 otherwise (op_version.cc)."""
    code = _opcode(fb.BuiltinOperator.RESIZE_BILINEAR)
    code.version = 3 if half_pixel_centers else 1
    o = fb.ResizeBilinearOptionsT()
    o.alignCorners, o.halfPixelCenters = align_corners, half_pixel_centers
    return _model(
        [code],
        [_tensor("x", (1, before, before, c), I8, 0), _tensor("size", (2,), I32, 1),
         _tensor("y", (1, after, after, c), I8, 0)],
        [_buffer(np.array([after, after], np.int32))],
        [_operator(0, [0, 1], [2], fb.BuiltinOptions.ResizeBilinearOptions, o)], [0], [2])


def tile_model(hw: int = 33, c: int = 8) -> bytes:
    """x[1, 1, 1, c] int8 → TILE([1, hw, hw, 1]) → [1, hw, hw, c]."""
    return _model(
        [_opcode(fb.BuiltinOperator.TILE)],
        [_tensor("x", (1, 1, 1, c), I8, 0), _tensor("multiples", (4,), I32, 1),
         _tensor("y", (1, hw, hw, c), I8, 0)],
        [_buffer(np.array([1, hw, hw, 1], np.int32))],
        [_operator(0, [0, 1], [2], fb.BuiltinOptions.TileOptions, fb.TileOptionsT())], [0], [2])


# --------------------------------------------------------------------------- compiled file


def _executable(kind: int, param_bytes: int, instruction_bytes: int) -> bytes:
    """A DarwiNN ``Executable`` table (executable.fbs): parameters, one bitstream, type."""
    b = flatbuffers.Builder(1024)
    bits = b.CreateByteVector(bytes(instruction_bytes))
    b.StartObject(2)  # InstructionBitstream
    b.PrependUOffsetTRelativeSlot(0, bits, 0)
    bitstream = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(bitstream)
    bitstreams = b.EndVector()
    params = b.CreateByteVector(bytes(param_bytes))
    b.StartObject(17)
    b.PrependUOffsetTRelativeSlot(5, bitstreams, 0)
    b.PrependUOffsetTRelativeSlot(6, params, 0)
    b.PrependInt16Slot(13, kind, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def package(cached_bytes: int, streamed_bytes: int, instruction_bytes: int = 256,
            compiler_version: str = "cl/test") -> bytes:
    """A DarwiNN ``Package`` (file identifier DWN1) with an execution-only executable whose
    parameters are streamed and a parameter-caching one whose parameters are cached."""
    exes = [_executable(2, streamed_bytes, instruction_bytes), _executable(1, cached_bytes, 0)]
    multi = flatbuffers.Builder(1024)
    strings = [multi.CreateByteVector(e) for e in exes]
    multi.StartVector(4, len(strings), 4)
    for s in reversed(strings):
        multi.PrependUOffsetTRelative(s)
    vec = multi.EndVector()
    multi.StartObject(1)
    multi.PrependUOffsetTRelativeSlot(0, vec, 0)
    multi.Finish(multi.EndObject())
    b = flatbuffers.Builder(1024)
    serialized = b.CreateByteVector(bytes(multi.Output()))
    version = b.CreateString(compiler_version)
    b.StartObject(8)
    b.PrependInt32Slot(0, 12, 0)
    b.PrependUOffsetTRelativeSlot(1, serialized, 0)
    b.PrependUOffsetTRelativeSlot(4, version, 0)
    b.Finish(b.EndObject(), file_identifier=b"DWN1")
    return bytes(b.Output())


def custom_options(pkg: bytes) -> bytes:
    """The FlexBuffer map the compiler writes as the op's custom_options; key "4" holds the
    package (the other keys' values are what compiled files hold)."""
    fbb = flexbuffers.Builder()
    with fbb.Map():
        fbb.Key("1")
        fbb.Int(0)
        fbb.Key("4")
        fbb.Blob(pkg)
        fbb.Key("5")
        fbb.Int(-1)
    return bytes(fbb.Finish())


def compiled_model(cached_bytes: int = 40_000, streamed_bytes: int = 600,
                   units: int = 4, features: int = 8) -> bytes:
    """uint8 x[1, features] → edgetpu-custom-op → int8 → DEQUANTIZE → FULLY_CONNECTED float
    (units × features MACs on the CPU) → y."""
    w = np.ones((units, features), np.float32)
    op = _operator(0, [0], [1])
    op.customOptions = list(custom_options(package(cached_bytes, streamed_bytes)))
    return _model(
        [_opcode(fb.BuiltinOperator.CUSTOM, "edgetpu-custom-op"),
         _opcode(fb.BuiltinOperator.DEQUANTIZE), _opcode(fb.BuiltinOperator.FULLY_CONNECTED)],
        [_tensor("x", (1, features), fb.TensorType.UINT8, 0),
         _tensor("tpu_out", (1, features), I8, 0), _tensor("deq", (1, features), F32, 0),
         _tensor("w", (units, features), F32, 1), _tensor("y", (1, units), F32, 0)],
        [_buffer(w)],
        [op, _operator(1, [1], [2]),
         _operator(2, [2, 3, -1], [4], fb.BuiltinOptions.FullyConnectedOptions,
                   fb.FullyConnectedOptionsT())],
        [0], [4])


# --------------------------------------------------------------------------- parameter layout


def _weights(name: str, shape: tuple[int, ...], buffer: int, channels: int,
             per_channel: bool, equal: bool = False) -> fb.TensorT:
    """An int8 weight tensor with one scale per output channel (all ``equal`` or each its
    own) or one for all."""
    t = _tensor(name, shape, I8, buffer)
    q = fb.QuantizationParametersT()
    n = channels if per_channel else 1
    scales = [0.01 if equal else 0.01 * (1 + k / 100) for k in range(n)]
    q.scale, q.zeroPoint, q.quantizedDimension = scales, [0] * n, 0
    t.quantization = q
    return t


def layer_model(kind: str, out_channels: int, in_channels: int, kernel: int = 1, *,
                per_channel: bool = False, hw: int = 8, shared: bool = False,
                bias: bool = True, equal_scales: bool = False) -> bytes:
    """One int8 CONV_2D [O, k, k, I], DEPTHWISE_CONV_2D [1, k, k, O] (O = I, or over one
    input channel with a channel multiplier of O) or FULLY_CONNECTED [O, I], with its int32
    bias unless ``bias`` is False; ``shared``: a second op of the same kind reads the same
    weight and bias buffers (CONV_2D/DEPTHWISE with O = I only)."""
    o, i, k = out_channels, in_channels, kernel
    if kind == "FULLY_CONNECTED":
        wshape, xshape, yshape = (o, i), (1, i), (1, o)
        code, opt_type, opts = (fb.BuiltinOperator.FULLY_CONNECTED,
                                fb.BuiltinOptions.FullyConnectedOptions,
                                fb.FullyConnectedOptionsT())
    elif kind == "DEPTHWISE_CONV_2D":
        o = o if i == 1 else i
        wshape, xshape, yshape = (1, k, k, o), (1, hw, hw, i), (1, hw, hw, o)
        opts = fb.DepthwiseConv2DOptionsT()
        opts.padding, opts.strideW, opts.strideH = fb.Padding.SAME, 1, 1
        opts.depthMultiplier = o // i
        opts.dilationWFactor = opts.dilationHFactor = 1
        code, opt_type = (fb.BuiltinOperator.DEPTHWISE_CONV_2D,
                          fb.BuiltinOptions.DepthwiseConv2DOptions)
    else:
        wshape, xshape, yshape = (o, k, k, i), (1, hw, hw, i), (1, hw, hw, o)
        code, opt_type, opts = (fb.BuiltinOperator.CONV_2D, fb.BuiltinOptions.Conv2DOptions,
                                _conv(o))
    w = np.ones(wshape, np.int8)
    b = np.zeros(o, np.int32)
    tensors = [_tensor("x", xshape, I8, 0),
               _weights("w", wshape, 1, o, per_channel, equal_scales),
               _tensor("b", (o,), I32, 2), _tensor("y", yshape, I8, 0)]
    ops = [_operator(0, [0, 1, 2 if bias else -1], [3], opt_type, opts)]
    if shared:
        tensors.append(_tensor("y2", yshape, I8, 0))
        ops.append(_operator(0, [3, 1, 2], [4], opt_type, opts))
    return _model([_opcode(code)], tensors, [_buffer(w), _buffer(b)], ops, [0],
                  [len(tensors) - 1])


def mul_const_model(const_shape: tuple[int, ...], shape: tuple[int, ...] = (1, 48, 48, 1)
                    ) -> bytes:
    """x[shape] int8 × a constant int8 tensor of ``const_shape`` (MUL broadcasts it)."""
    c = np.ones(const_shape, np.int8)
    return _model(
        [_opcode(fb.BuiltinOperator.MUL)],
        [_tensor("x", shape, I8, 0), _tensor("c", const_shape, I8, 1),
         _tensor("y", shape, I8, 0)],
        [_buffer(c)],
        [_operator(0, [0, 1], [2], fb.BuiltinOptions.MulOptions, fb.MulOptionsT())], [0], [2])


def softmax_model(classes: int) -> bytes:
    """x[1, classes] int8 → SOFTMAX."""
    o = fb.SoftmaxOptionsT()
    o.beta = 1.0
    return _model(
        [_opcode(fb.BuiltinOperator.SOFTMAX)],
        [_tensor("x", (1, classes), I8, 0), _tensor("y", (1, classes), I8, 0)], [],
        [_operator(0, [0], [1], fb.BuiltinOptions.SoftmaxOptions, o)], [0], [1])


def _concat(axis: int = -1) -> fb.ConcatenationOptionsT:
    o = fb.ConcatenationOptionsT()
    o.axis = axis
    return o


def split_concat_model() -> bytes:
    """google-coral/test_data tools/split_concat's graph, int8: a[3], b[1], c[2] channels →
    CONCATENATION → SPLIT into 6 → CONCATENATION(3, 5); the graph outputs channels 0, 1, 2
    and 4 and the last concatenation: ``a[0]``, ``a[1]``, ``a[2]``, ``c[0]``, ``[b[0], c[1]]``."""
    hw = (1, 8, 8)
    tensors = [_tensor("a", (*hw, 3), I8, 0), _tensor("b", (*hw, 1), I8, 0),
               _tensor("c", (*hw, 2), I8, 0), _tensor("concat", (*hw, 6), I8, 0),
               _tensor("axis", (), I32, 1),
               *(_tensor(f"split{k}", (*hw, 1), I8, 0) for k in range(6)),
               _tensor("out", (*hw, 2), I8, 0)]
    split = fb.SplitOptionsT()
    split.numSplits = 6
    codes = [_opcode(fb.BuiltinOperator.CONCATENATION), _opcode(fb.BuiltinOperator.SPLIT)]
    ops = [_operator(0, [0, 1, 2], [3], fb.BuiltinOptions.ConcatenationOptions, _concat(3)),
           _operator(1, [4, 3], list(range(5, 11)), fb.BuiltinOptions.SplitOptions, split),
           _operator(0, [8, 10], [11], fb.BuiltinOptions.ConcatenationOptions, _concat())]
    return _model(codes, tensors, [_buffer(np.array(3, np.int32))], ops, [0, 1, 2],
                  [5, 7, 9, 6, 11])


def concat_conv_model(first: int, second: int) -> bytes:
    """x[first] and y[second] channels → CONCATENATION → a 1x1 CONV_2D of 4 channels (so
    the concatenation is read by an op, not only by the graph's outputs)."""
    c, hw = first + second, (1, 8, 8)
    w = np.ones((4, 1, 1, c), np.int8)
    tensors = [_tensor("x", (*hw, first), I8, 0), _tensor("y", (*hw, second), I8, 0),
               _tensor("xy", (*hw, c), I8, 0), _tensor("w", w.shape, I8, 1),
               _tensor("b", (4,), I32, 2), _tensor("z", (*hw, 4), I8, 0)]
    codes = [_opcode(fb.BuiltinOperator.CONCATENATION), _opcode(fb.BuiltinOperator.CONV_2D)]
    ops = [_operator(0, [0, 1], [2], fb.BuiltinOptions.ConcatenationOptions, _concat()),
           _operator(1, [2, 3, 4], [5], fb.BuiltinOptions.Conv2DOptions, _conv(4))]
    return _model(codes, tensors, [_buffer(w), _buffer(np.zeros(4, np.int32))], ops, [0, 1],
                  [5])


def tracker_model(hw: int, channels: int = 1) -> bytes:
    """The graph of ricardodeazambuja/LibrEdgeTPU's tracker templates, int8: x[1, hw, hw, C]
    (C = 3: a 1×1 CONV_2D to one channel first, as its color trackers) → RESHAPE to
    [1, hw·hw] → SOFTMAX → two bias-free FULLY_CONNECTED to one output each (per-tensor
    scales) → CONCATENATION → [1, 2]."""
    n = hw * hw
    codes = [_opcode(fb.BuiltinOperator.RESHAPE), _opcode(fb.BuiltinOperator.SOFTMAX),
             _opcode(fb.BuiltinOperator.FULLY_CONNECTED),
             _opcode(fb.BuiltinOperator.CONCATENATION), _opcode(fb.BuiltinOperator.CONV_2D)]
    tensors = [_tensor("x", (1, hw, hw, channels), I8, 0), _tensor("shape", (2,), I32, 1),
               _tensor("flat", (1, n), I8, 0), _tensor("p", (1, n), I8, 0),
               _weights("wx", (1, n), 2, 1, False), _weights("wy", (1, n), 3, 1, False),
               _tensor("x_at", (1, 1), I8, 0), _tensor("y_at", (1, 1), I8, 0),
               _tensor("xy", (1, 2), I8, 0)]
    buffers = [_buffer(np.array([1, n], np.int32)), _buffer(np.ones((1, n), np.int8)),
               _buffer(np.ones((1, n), np.int8))]
    softmax = fb.SoftmaxOptionsT()
    softmax.beta = 1.0
    image = 0
    ops = []
    if channels != 1:
        tensors += [_weights("wc", (1, 1, 1, channels), 4, 1, False), _tensor("bc", (1,), I32, 5),
                    _tensor("mask", (1, hw, hw, 1), I8, 0)]
        buffers += [_buffer(np.ones((1, 1, 1, channels), np.int8)),
                    _buffer(np.zeros(1, np.int32))]
        ops.append(_operator(4, [0, 9, 10], [11], fb.BuiltinOptions.Conv2DOptions, _conv(1)))
        image = 11
    fc = fb.FullyConnectedOptionsT()
    ops += [_operator(0, [image, 1], [2], fb.BuiltinOptions.ReshapeOptions,
                      fb.ReshapeOptionsT()),
            _operator(1, [2], [3], fb.BuiltinOptions.SoftmaxOptions, softmax),
            _operator(2, [3, 4, -1], [6], fb.BuiltinOptions.FullyConnectedOptions, fc),
            _operator(2, [3, 5, -1], [7], fb.BuiltinOptions.FullyConnectedOptions, fc),
            _operator(3, [6, 7], [8], fb.BuiltinOptions.ConcatenationOptions, _concat())]
    return _model(codes, tensors, buffers, ops, [0], [8])
