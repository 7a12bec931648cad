"""Tiny hand-built ``.tflite`` models for runtime tests (no TensorFlow, built in milliseconds).

The converter never writes these on purpose: an op TFLM lacks (TOPK_V2), a SLICE whose
constant ``begin`` points far outside its input (parseable, but TFLM's kernel reads out of
bounds and segfaults), and one-op probe models (``tests/op_probe.py`` asks the TFLM wheel
with them which ops and type combinations it accepts).
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as fb

from devicefit.simulator.read.writer import pack

F32, I32 = fb.TensorType.FLOAT32, fb.TensorType.INT32


def _tensor(name: str, shape: tuple[int, ...], dtype: int, buffer: int) -> fb.TensorT:
    t = fb.TensorT()
    t.name, t.shape, t.type, t.buffer = name, list(shape), dtype, buffer
    return t


def _buffer(data: np.ndarray | None = None) -> fb.BufferT:
    b = fb.BufferT()
    if data is not None:
        b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
    return b


def _opcode(code: int, custom: str | None = None) -> fb.OperatorCodeT:
    oc = fb.OperatorCodeT()
    oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
    oc.customCode = custom
    return oc


def _operator(opcode: int, inputs: list[int], outputs: list[int], options_type: int = 0,
              options=None) -> fb.OperatorT:
    op = fb.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, inputs, outputs
    op.builtinOptionsType, op.builtinOptions = options_type, options
    return op


def _model(codes, tensors, buffers, ops, inputs, outputs) -> bytes:
    sg = fb.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = tensors, ops, inputs, outputs
    m = fb.ModelT()
    m.version, m.operatorCodes, m.subgraphs = 3, codes, [sg]
    m.buffers = [_buffer(), *buffers]  # buffer 0 is the empty sentinel
    return pack(m)


def slice_model(begin: int) -> bytes:
    """x[1, 8] float → SLICE(begin=[0, begin], size=[1, 4]); begin > 4 reads out of bounds."""
    return _model(
        [_opcode(fb.BuiltinOperator.SLICE)],
        [_tensor("x", (1, 8), F32, 0), _tensor("begin", (2,), I32, 1),
         _tensor("size", (2,), I32, 2), _tensor("y", (1, 4), F32, 0)],
        [_buffer(np.array([0, begin], np.int32)), _buffer(np.array([1, 4], np.int32))],
        [_operator(0, [0, 1, 2], [3], fb.BuiltinOptions.SliceOptions, fb.SliceOptionsT())],
        [0], [3])


def topk_model(k: int = 2) -> bytes:
    """x[1, 8] float → RELU → TOPK_V2(k): values and indices. TFLM has no TOPK_V2 kernel."""
    return _model(
        [_opcode(fb.BuiltinOperator.RELU), _opcode(fb.BuiltinOperator.TOPK_V2)],
        [_tensor("x", (1, 8), F32, 0), _tensor("r", (1, 8), F32, 0),
         _tensor("k", (1,), I32, 1), _tensor("values", (1, k), F32, 0),
         _tensor("indices", (1, k), I32, 0)],
        [_buffer(np.array([k], np.int32))],
        [_operator(0, [0], [1]),
         _operator(1, [1, 2], [3, 4], fb.BuiltinOptions.TopKV2Options, fb.TopKV2OptionsT())],
        [0], [3, 4])


def custom_model(custom_code: str) -> bytes:
    """x[1, 8] float → a custom op ``custom_code`` (e.g. a TensorFlow "Flex" op)."""
    return _model(
        [_opcode(fb.BuiltinOperator.CUSTOM, custom_code)],
        [_tensor("x", (1, 8), F32, 0), _tensor("y", (1, 8), F32, 0)], [],
        [_operator(0, [0], [1])], [0], [1])


def hard_swish_model() -> bytes:
    """x[1, 8, 8, 4] float → RELU → HARD_SWISH: Vela (5.2, its Regor core) refuses the
    whole model at the float HARD_SWISH ("IFM has to be 8bit") instead of leaving it to the
    CPU, as it does with the float RELU; TFLM runs both."""
    shape = (1, 8, 8, 4)
    return _model(
        [_opcode(fb.BuiltinOperator.RELU), _opcode(fb.BuiltinOperator.HARD_SWISH)],
        [_tensor("x", shape, F32, 0), _tensor("relu", shape, F32, 0),
         _tensor("hard_swish", shape, F32, 0)], [],
        [_operator(0, [0], [1]),
         _operator(1, [1], [2], *_options("HardSwish"))], [0], [2])


def probe_model(code: int) -> bytes:
    """One op of builtin ``code`` followed by a custom op no resolver has.

    TFLM looks every op's registration up before it initialises any kernel, so the error
    names the probe op when it is missing, else the custom op: no kernel ever runs.
    """
    return _model(
        [_opcode(code), _opcode(fb.BuiltinOperator.CUSTOM, "devicefit_missing")],
        [_tensor("t", (1,), F32, 0)], [],
        [_operator(0, [], []), _operator(1, [], [])], [0], [0])


def _dyn(name: str, shape: tuple[int, ...], signature: tuple[int, ...], dtype: int = F32,
         buffer: int = 0) -> fb.TensorT:
    """A tensor with dynamic dimensions: ``shape`` holds the placeholder sizes (-1 → 1, as
    the converter writes them), ``signature`` the -1s."""
    t = _tensor(name, shape, dtype, buffer)
    t.shapeSignature = list(signature)
    return t


def _options(kind: str, **values):
    """``<kind>OptionsT`` with ``values`` set, and its union type."""
    opts = getattr(fb, f"{kind}OptionsT")()
    for key, value in values.items():
        setattr(opts, key, value)
    return getattr(fb.BuiltinOptions, f"{kind}Options"), opts


def conv_time_model(seed: int = 0, dilation: int = 1) -> bytes:
    """x[batch, time, 8] (both dynamic) float → EXPAND_DIMS → CONV_2D 1×3 VALID, 4 filters
    (``dilation`` along time) → MEAN over time → FULLY_CONNECTED 4 → 3. The stored
    placeholders (time 1) are narrower than the kernel, as a converter writes them: only a
    real time length resolves it."""
    rng = np.random.default_rng(seed)
    B = fb.BuiltinOperator
    conv = _options("Conv2D", padding=fb.Padding.VALID, strideW=1, strideH=1,
                    dilationWFactor=dilation, dilationHFactor=1)
    return _model(
        [_opcode(B.EXPAND_DIMS), _opcode(B.CONV_2D), _opcode(B.MEAN),
         _opcode(B.FULLY_CONNECTED)],
        [_dyn("x", (1, 1, 8), (-1, -1, 8)), _tensor("axis", (), I32, 1),
         _dyn("x4", (1, 1, 1, 8), (-1, 1, -1, 8)), _tensor("filter", (4, 1, 3, 8), F32, 2),
         _tensor("bias", (4,), F32, 3), _dyn("conv", (1, 1, 1, 4), (-1, 1, -1, 4)),
         _tensor("axes", (2,), I32, 4), _dyn("mean", (1, 4), (-1, 4)),
         _tensor("w", (3, 4), F32, 5), _tensor("b", (3,), F32, 6), _dyn("y", (1, 3), (-1, 3))],
        [_buffer(np.array(1, np.int32)),
         _buffer(rng.standard_normal((4, 1, 3, 8)).astype(np.float32)),
         _buffer(np.zeros(4, np.float32)), _buffer(np.array([1, 2], np.int32)),
         _buffer(rng.standard_normal((3, 4)).astype(np.float32)),
         _buffer(np.zeros(3, np.float32))],
        [_operator(0, [0, 1], [2], *_options("ExpandDims")),
         _operator(1, [2, 3, 4], [5], *conv),
         _operator(2, [5, 6], [7], *_options("Reducer", keepDims=False)),
         _operator(3, [7, 8, 9], [10], *_options("FullyConnected"))],
        [0], [10])


def shape_reshape_model(custom: str | None = None) -> bytes:
    """x[batch, 4, 6] (batch dynamic) float → RESHAPE to [batch, 24], the batch read at run
    time (SHAPE → STRIDED_SLICE → PACK, as TensorFlow writes ``reshape(x, [tf.shape(x)[0],
    -1])``) → FULLY_CONNECTED 24 → 5. ``custom``: a custom op of that code between the
    input and the rest (no shape rule knows it: shapes after it cannot be resolved)."""
    B = fb.BuiltinOperator
    codes = [_opcode(B.SHAPE), _opcode(B.STRIDED_SLICE), _opcode(B.PACK), _opcode(B.RESHAPE),
             _opcode(B.FULLY_CONNECTED)]
    tensors = [
        _dyn("x", (1, 4, 6), (-1, 4, 6)), _tensor("shape", (3,), I32, 0),
        _tensor("begin", (1,), I32, 1), _tensor("end", (1,), I32, 2),
        _tensor("strides", (1,), I32, 3), _tensor("batch", (), I32, 0),
        _tensor("rest", (), I32, 4), _tensor("new_shape", (2,), I32, 0),
        _dyn("flat", (1, 24), (-1, 24)), _tensor("w", (5, 24), F32, 5),
        _tensor("b", (5,), F32, 6), _dyn("y", (1, 5), (-1, 5))]
    ops = [_operator(0, [0], [1], *_options("Shape", outType=I32)),
           _operator(1, [1, 2, 3, 4], [5], *_options("StridedSlice", shrinkAxisMask=1)),
           _operator(2, [5, 6], [7], *_options("Pack", valuesCount=2, axis=0)),
           _operator(3, [0, 7], [8], *_options("Reshape")),
           _operator(4, [8, 9, 10], [11], *_options("FullyConnected"))]
    if custom is not None:
        codes.append(_opcode(B.CUSTOM, custom))
        tensors.append(_dyn("x_in", (1, 4, 6), (-1, 4, 6)))
        ops.insert(0, _operator(len(codes) - 1, [12], [0]))
    rng = np.random.default_rng(0)
    return _model(
        codes, tensors,
        [_buffer(np.array([0], np.int32)), _buffer(np.array([1], np.int32)),
         _buffer(np.array([1], np.int32)), _buffer(np.array(-1, np.int32)),
         _buffer(rng.standard_normal((5, 24)).astype(np.float32)),
         _buffer(np.zeros(5, np.float32))],
        ops, [12 if custom is not None else 0], [11])


def sequence_rnn_model(units: int = 6, features: int = 4) -> bytes:
    """x[1, time, features] (time dynamic) float → UNIDIRECTIONAL_SEQUENCE_RNN (tanh,
    ``units``) over every step → FULLY_CONNECTED (keep_num_dims) ``units`` → 2."""
    rng = np.random.default_rng(0)
    B = fb.BuiltinOperator
    hidden = _tensor("hidden", (1, units), F32, 0)
    hidden.isVariable = True
    return _model(
        [_opcode(B.UNIDIRECTIONAL_SEQUENCE_RNN), _opcode(B.FULLY_CONNECTED)],
        [_dyn("x", (1, 1, features), (1, -1, features)),
         _tensor("w", (units, features), F32, 1), _tensor("r", (units, units), F32, 2),
         _tensor("b", (units,), F32, 3), hidden, _dyn("seq", (1, 1, units), (1, -1, units)),
         _tensor("fc_w", (2, units), F32, 4), _tensor("fc_b", (2,), F32, 5),
         _dyn("y", (1, 1, 2), (1, -1, 2))],
        [_buffer(rng.standard_normal((units, features)).astype(np.float32)),
         _buffer(rng.standard_normal((units, units)).astype(np.float32)),
         _buffer(np.zeros(units, np.float32)),
         _buffer(rng.standard_normal((2, units)).astype(np.float32)),
         _buffer(np.zeros(2, np.float32))],
        [_operator(0, [0, 1, 2, 3, 4], [5], *_options(
            "SequenceRNN", fusedActivationFunction=fb.ActivationFunctionType.TANH)),
         _operator(1, [5, 6, 7], [8], *_options("FullyConnected", keepNumDims=True))],
        [0], [8])


def shape_values_model(fft: int = 16) -> bytes:
    """x[1, time] (time dynamic) float → two outputs whose sizes are values computed at run
    time, as BirdNET's spectrogram front end computes its frame count: the time length
    (SHAPE → SPLIT_V → REDUCE_PROD) // 4, at least 2, as a RANGE; and an RFFT2D of
    ``fft`` bins over the time axis (``fft / 2 + 1`` complex outputs)."""
    B = fb.BuiltinOperator
    c64 = fb.TensorType.COMPLEX64
    return _model(
        [_opcode(B.SHAPE), _opcode(B.SPLIT_V), _opcode(B.REDUCE_PROD), _opcode(B.FLOOR_DIV),
         _opcode(B.MAXIMUM), _opcode(B.RANGE), _opcode(B.EXPAND_DIMS), _opcode(B.RFFT2D)],
        [_dyn("x", (1, 1), (1, -1)), _tensor("shape", (2,), I32, 0),
         _tensor("sizes", (2,), I32, 1), _tensor("axis", (), I32, 2),
         _tensor("rows", (1,), I32, 0), _tensor("length", (1,), I32, 0),
         _tensor("axes", (1,), I32, 2), _tensor("n", (), I32, 0), _tensor("four", (), I32, 3),
         _tensor("q", (), I32, 0), _tensor("two", (), I32, 4), _tensor("m", (), I32, 0),
         _tensor("zero", (), I32, 2), _tensor("one", (), I32, 5),
         _dyn("frames", (1,), (-1,), I32), _dyn("x3", (1, 1, 1), (1, 1, -1)),
         _tensor("fft_length", (2,), I32, 6), _tensor("spectrum", (1, 1, fft // 2 + 1), c64, 0)],
        [_buffer(np.array([1, -1], np.int32)), _buffer(np.array(0, np.int32)),
         _buffer(np.array(4, np.int32)), _buffer(np.array(2, np.int32)),
         _buffer(np.array(1, np.int32)), _buffer(np.array([1, fft], np.int32))],
        [_operator(0, [0], [1], *_options("Shape", outType=I32)),
         _operator(1, [1, 2, 3], [4, 5], *_options("SplitV", numSplits=2)),
         _operator(2, [5, 6], [7], *_options("Reducer", keepDims=False)),
         _operator(3, [7, 8], [9], *_options("FloorDiv")),
         _operator(4, [9, 10], [11], *_options("MaximumMinimum")),
         _operator(5, [12, 11, 13], [14], *_options("Range")),
         _operator(6, [0, 13], [15], *_options("ExpandDims")),
         _operator(7, [15, 16], [17], *_options("Rfft2d"))],
        [0], [14, 17])


def dense_chain_model(layers: int = 10, width: int = 8, reshape: bool = False) -> bytes:
    """x[1, width] float → ``layers`` FULLY_CONNECTED width → width (MLPerf Tiny's ad01 is
    such a chain of 10); ``reshape``: a RESHAPE to [1, width] after each."""
    rng = np.random.default_rng(0)
    B = fb.BuiltinOperator
    tensors = [_tensor("x", (1, width), F32, 0), _tensor("shape", (2,), I32, 1)]
    buffers = [_buffer(np.array([1, width], np.int32))]
    ops, prev = [], 0

    def add(t: fb.TensorT) -> int:
        tensors.append(t)
        return len(tensors) - 1

    for i in range(layers):
        buffers.append(_buffer(rng.standard_normal((width, width)).astype(np.float32)))
        w = add(_tensor(f"w{i}", (width, width), F32, len(buffers)))
        out = add(_tensor(f"fc{i}", (1, width), F32, 0))
        ops.append(_operator(0, [prev, w, -1], [out], *_options("FullyConnected")))
        prev = out
        if reshape:
            out = add(_tensor(f"r{i}", (1, width), F32, 0))
            ops.append(_operator(1, [prev, 1], [out], *_options("Reshape", newShape=[1, width])))
            prev = out
    return _model([_opcode(B.FULLY_CONNECTED), _opcode(B.RESHAPE)], tensors, buffers, ops,
                  [0], [prev])


def _csr(dense: np.ndarray) -> tuple[fb.SparsityParametersT, np.ndarray]:
    """``dense`` in TFLite's sparse format: every dimension dense but the last, in CSR (as
    MediaPipe's sparse models store their 1×1 convolutions' filters); and its non-zeros."""
    rows = dense.reshape(-1, dense.shape[-1])
    segments, indices = [0], []
    for row in rows:
        indices += np.nonzero(row)[0].tolist()
        segments.append(len(indices))
    dims = []
    for size in dense.shape[:-1]:
        d = fb.DimensionMetadataT()
        d.format, d.denseSize = fb.DimensionType.DENSE, size
        dims.append(d)
    last = fb.DimensionMetadataT()
    last.format = fb.DimensionType.SPARSE_CSR
    last.arraySegmentsType = last.arrayIndicesType = fb.SparseIndexVector.Int32Vector
    last.arraySegments, last.arrayIndices = fb.Int32VectorT(), fb.Int32VectorT()
    last.arraySegments.values, last.arrayIndices.values = segments, indices
    sparsity = fb.SparsityParametersT()
    sparsity.traversalOrder, sparsity.dimMetadata = list(range(dense.ndim)), [*dims, last]
    return sparsity, dense[dense != 0]


def sparse_weights_model(fp16: bool = True, consumer: str = "conv", channels: int = 8
                         ) -> bytes:
    """Weights stored sparse, made dense by DENSIFY (then DEQUANTIZE when ``fp16``), as
    MediaPipe's sparse models store them. ``consumer`` "conv": x[1, 4, 4, channels] →
    CONV_2D 1×1, 8 filters, reading them (the GPU delegate takes the CONV_2D and leaves the
    DENSIFY and DEQUANTIZE to the CPU); "topk": the weights' two largest per filter
    (TOPK_V2, an op XNNPACK does not take) beside x[1, 8] → RELU."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 1, 1, channels)).astype(np.float32)
    w[np.abs(w) < 0.5] = 0  # about 60 % non-zero, as a pruned layer
    stored = w.astype(np.float16) if fp16 else w
    kind = fb.TensorType.FLOAT16 if fp16 else F32
    sparsity, values = _csr(stored)
    B = fb.BuiltinOperator
    codes = [_opcode(B.DENSIFY), _opcode(B.DEQUANTIZE), _opcode(B.CONV_2D), _opcode(B.TOPK_V2),
             _opcode(B.RELU)]
    packed = _tensor("w_sparse", w.shape, kind, 1)
    packed.sparsity = sparsity
    tensors = [packed, _tensor("w_dense", w.shape, kind, 0)]
    buffers = [_buffer(values)]
    ops = [_operator(0, [0], [1])]
    weights = 1
    if fp16:
        tensors.append(_tensor("w", w.shape, F32, 0))
        ops.append(_operator(1, [1], [2]))
        weights = 2

    def add(t: fb.TensorT) -> int:
        tensors.append(t)
        return len(tensors) - 1

    if consumer == "conv":
        x = add(_tensor("x", (1, 4, 4, channels), F32, 0))
        buffers.append(_buffer(np.zeros(8, np.float32)))
        bias = add(_tensor("bias", (8,), F32, len(buffers)))
        y = add(_tensor("y", (1, 4, 4, 8), F32, 0))
        ops.append(_operator(2, [x, weights, bias], [y], *_options(
            "Conv2D", padding=fb.Padding.VALID, strideW=1, strideH=1)))
        return _model(codes, tensors, buffers, ops, [x], [y])
    buffers.append(_buffer(np.array([2], np.int32)))
    k = add(_tensor("k", (1,), I32, len(buffers)))
    values_out = add(_tensor("top2", (8, 1, 1, 2), F32, 0))
    indices_out = add(_tensor("top2_index", (8, 1, 1, 2), I32, 0))
    x = add(_tensor("x", (1, 8), F32, 0))
    relu = add(_tensor("relu", (1, 8), F32, 0))
    ops += [_operator(3, [weights, k], [values_out, indices_out],
                      fb.BuiltinOptions.TopKV2Options, fb.TopKV2OptionsT()),
            _operator(4, [x], [relu])]
    return _model(codes, tensors, buffers, ops, [x], [values_out, relu])
