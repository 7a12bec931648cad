"""An estimate of TFLM's arena tail: the persistent allocations made while a model loads.

The tail holds, allocated downward from the end of the arena: the allocator's own objects,
one ``TfLiteEvalTensor`` per tensor, one ``NodeAndRegistration`` per operator, a persistent
``TfLiteTensor`` (plus its quantization arrays) per graph input/output, the interpreter's
input/output pointer arrays, variable tensors, resource variables, the scratch-buffer
handles, each operator's parsed builtin options and what its kernel keeps: the OpData its
``Init`` allocates and the buffers its ``Prepare`` adds (per-channel multipliers and shifts,
the transposed constant operand of BATCH_MATMUL, int16 softmax tables, resource-variable
storage). Every kernel allocation is 16-byte aligned (``MicroArenaBufferAlignment``).

Two pointer widths, each with its own sizes:

- 64-bit: the pinned ``tflite-micro`` wheel's (reference kernels), read from
  ``tensorflow/lite/micro/kernels/*`` and checked op by op against the wheel's
  RecordingMicroAllocator on one-operator models cut from the public corpus
  (``benchmarks/bench_corpus.py``); its allocator objects are the recording ones the wheel
  creates.
- 32-bit: ``sizeof`` of each struct and OpData as ``arm-none-eabi-g++ -mcpu=cortex-m4``
  compiles TFLM 90b983c2 and its CMSIS-NN 4ab83cc3 (``benchmarks/probe_tflm_sizes.py``
  prints them from a checkout); the allocator objects are an application's plain
  ``MicroAllocator``. CMSIS-NN's own persistent buffers (LSTM and FC/SVDF kernel sums)
  follow :mod:`simulator.targets.tflm.cmsis_nn` for the core's feature (none / DSP / MVE).
  The parsed builtin options depend on the compiler's enums too: a Cortex-M's
  arm-none-eabi-gcc gives an enum the smallest type that holds it, Xtensa and RISC-V
  compilers an int (:func:`params_layout`), so ``TfLiteFullyConnectedParams`` is 5 B on one
  and 16 B on the other.

TFLM's Signal library ops (``Signal*`` custom ops of audio front ends) keep their
configuration and state in the tail too. Ops not in the tables get a generous default, so
the tail errs high, never low. What each figure was checked against is
:func:`simulator.targets.tflm.scratch.verified_against`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devicefit.simulator.plan.lifetimes import align_up, tflm_tensor_bytes
from devicefit.simulator.read.model import Model, Operator, Subgraph, Tensor
from devicefit.simulator.targets.tflm import cmsis_nn
from devicefit.simulator.targets.tflm.cmsis_nn import FEATURES, Feature
from devicefit.simulator.targets.tflm.ops import DECODE
from devicefit.simulator.targets.tflm.scratch import (
    KERNEL_ALIASES,
    cmsis_fc_kernel_sums,
    cmsis_lstm_integer,
    fc_sums_persistent,
    signal_fft_length,
    verified_against,
)

#: Allocator objects (MicroAllocator, its arena allocators, the planner, the graph) for a
#: model with one subgraph, and what each further subgraph adds (64-bit wheel, measured).
_BASE_64 = 488
_PER_SUBGRAPH_64 = 32
#: 32-bit, an application's ``MicroAllocator::Create(arena, size)`` (micro_allocator.cc):
#: SingleArenaBufferAllocator 36 + GreedyMemoryPlanner 44 + MicroAllocator 36, then
#: StartModelAllocation's MicroBuiltinDataAllocator 8 and one SubgraphAllocations (8) per
#: subgraph (sizeof as arm-none-eabi-g++ 12.2 -mcpu=cortex-m4 compiles them). The
#: RecordingMicroAllocator a measuring harness uses is 104 B larger (52 + 124 for the two
#: recording classes).
_BASE_32 = 36 + 44 + 36 + 8 + 8
_PER_SUBGRAPH_32 = 8
#: sizeof the OpData each reference kernel's Init allocates (64-bit); 0 = no Init data.
_OPDATA_64 = {
    "CONV_2D": 80, "DEPTHWISE_CONV_2D": 80, "TRANSPOSE_CONV": 88, "FULLY_CONNECTED": 72,
    "BATCH_MATMUL": 52, "ADD": 60, "SUB": 52, "MUL": 36, "DIV": 28, "SQUARED_DIFFERENCE": 60,
    "CONCATENATION": 80, "MEAN": 44, "SUM": 44, "REDUCE_MAX": 44, "REDUCE_MIN": 44,
    "REDUCE_PROD": 44, "SOFTMAX": 80, "LOG_SOFTMAX": 24, "STRIDED_SLICE": 84,
    "DEQUANTIZE": 32, "QUANTIZE": 32, "LOGISTIC": 16, "TANH": 16, "LEAKY_RELU": 24,
    "PRELU": 28, "RSQRT": 28, "ABS": 28, "RELU": 28, "RELU6": 8, "HARD_SWISH": 56,
    "MAX_POOL_2D": 32, "AVERAGE_POOL_2D": 32, "L2_POOL_2D": 32, "PAD": 56, "PADV2": 56,
    "MIRROR_PAD": 24, "GREATER": 32, "GREATER_EQUAL": 32, "LESS": 32, "LESS_EQUAL": 32,
    "EQUAL": 32, "NOT_EQUAL": 32, "SELECT_V2": 16, "SPACE_TO_BATCH_ND": 16, "ELU": 256,
    "L2_NORMALIZATION": 12, "VAR_HANDLE": 4, "ASSIGN_VARIABLE": 4, "CALL_ONCE": 8, "IF": 8,
    "WHILE": 8, "ADD_N": 8, "CUMSUM": 8, "SVDF": 36, "UNIDIRECTIONAL_SEQUENCE_LSTM": 688,
    "EMBEDDING_LOOKUP": 8, "DETECTION_POSTPROCESS": 256,
    # kernels/decode.cc registers no Init: its state is allocated in Prepare.
    f"CUSTOM:{DECODE}": 0,
    # TFLM's Signal ops (signal/micro/kernels/*.cc), the params struct their Init keeps
    # (sizeof on x86-64); SignalFftAutoScale and SignalFilterBankSquareRoot have no Init.
    **{f"CUSTOM:Signal{name}": size for name, size in (
        ("Window", 8), ("Energy", 8), ("FilterBank", 64), ("FilterBankLog", 8),
        ("FilterBankSpectralSubtraction", 56), ("PCAN", 4), ("Rfft", 48),
        ("FftAutoScale", 0), ("FilterBankSquareRoot", 0))},
    **{name: 0 for name in (
        "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "SHAPE", "PACK", "UNPACK", "SPLIT", "SPLIT_V",
        "TRANSPOSE", "MAXIMUM", "MINIMUM", "LOG", "EXP", "SQRT", "SIN", "COS", "NEG",
        "SQUARE", "FLOOR", "CEIL", "ROUND", "READ_VARIABLE", "GATHER", "GATHER_ND", "SLICE",
        "CAST", "FILL", "ZEROS_LIKE", "ARG_MAX", "ARG_MIN", "LOGICAL_AND", "LOGICAL_OR",
        "LOGICAL_NOT", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "DEPTH_TO_SPACE",
        "SPACE_TO_DEPTH", "BATCH_TO_SPACE_ND", "BROADCAST_TO", "BROADCAST_ARGS", "FLOOR_DIV",
        "FLOOR_MOD", "REVERSE_V2")},
}
#: OpData of an op missing from the table: above most measured ones.
_OPDATA_DEFAULT_64 = 96
#: 32-bit sizeof of the OpData the reference kernels' Init allocates (arm-none-eabi-g++ 12.2,
#: -mcpu=cortex-m4, TFLM 90b983c2; the file:line of each AllocatePersistentBuffer call).
#: Ops missing here keep their 64-bit size: a struct never grows when its pointers shrink.
_OPDATA_32: dict[str, int] = {
    "CONV_2D": 56,  # conv_common.cc:77 OpDataConv
    "DEPTHWISE_CONV_2D": 56,  # depthwise_conv.cc:33 OpDataConv
    "FULLY_CONNECTED": 48,  # fully_connected.cc:32 OpDataFullyConnected
    "CONCATENATION": 24,  # concatenation.cc:125
    "SOFTMAX": 56,  # softmax_common.cc:142 SoftmaxParams
    "PAD": 56, "PADV2": 56,  # pad_common.cc:27
    "MAX_POOL_2D": 32, "AVERAGE_POOL_2D": 32, "L2_POOL_2D": 32,  # pooling.cc:96
    "DEQUANTIZE": 32,  # dequantize.cc:34
    "QUANTIZE": 32,  # quantize.cc:31 OpDataQuantizeReference
    "ADD": 60,  # add.cc:165 OpDataAdd
    "MUL": 36,  # mul_common.cc:35 OpDataMul
    "DIV": 28,  # div.cc:70 OpDataDiv
    "LOGISTIC": 16,  # logistic.cc:35
    "RELU": 28, "RELU6": 8,  # activations.cc:35, :82
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 688,  # unidirectional_sequence_lstm.cc:40 OpDataLSTM
    "VAR_HANDLE": 4, "CALL_ONCE": 8,  # var_handle.cc:41, call_once.cc:41
    "LEAKY_RELU": 24, "HARD_SWISH": 20,  # leaky_relu.cc:50, hard_swish.cc:35
    "ABS": 28, "RSQRT": 28,  # elementwise.cc:230 OpDataAbsRsqrt
    "BATCH_MATMUL": 16,  # batch_matmul.cc:176 OpDataBatchMatmul
    "TRANSPOSE_CONV": 72,  # transpose_conv.cc:149
    # signal/micro/kernels: filter_bank.cc:54, filter_bank_spectral_subtraction.cc:65,
    # rfft.cc:62 (each holds pointers).
    "CUSTOM:SignalFilterBank": 36, "CUSTOM:SignalFilterBankSpectralSubtraction": 44,
    "CUSTOM:SignalRfft": 32,
}
#: 32-bit sizeof of the OpData of TFLM's kernels/cmsis_nn/*.cc (same compiler); their
#: float paths run the reference code but keep this OpData.
_OPDATA_32_CMSIS_NN: dict[str, int] = {
    "CONV_2D": 60,  # cmsis_nn/conv.cc:42
    "DEPTHWISE_CONV_2D": 60,  # cmsis_nn/depthwise_conv.cc:55
    "FULLY_CONNECTED": 72,  # cmsis_nn/fully_connected.cc:51
    "MAX_POOL_2D": 36, "AVERAGE_POOL_2D": 36,  # cmsis_nn/pooling.cc:150
    "SOFTMAX": 64,  # cmsis_nn/softmax.cc:40 CMSISNNSoftmaxParams
    "SVDF": 40,  # cmsis_nn/svdf.cc:56 CmsisNnOpDataSvdf
    "TRANSPOSE_CONV": 76,  # cmsis_nn/transpose_conv.cc:154
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 912,  # cmsis_nn/unidirectional_sequence_lstm.cc:332
    "ADD": 60,  # cmsis_nn/add.cc:285
    "BATCH_MATMUL": 36,  # cmsis_nn/batch_matmul.cc:186
}
#: The builtin options TFLM parses: when the model loads, before any kernel's Init,
#: ``PrepareNodeAndRegistrationDataFromFlatbuffer`` (micro_interpreter.cc) calls each
#: operator's ``Parse*`` function (the one micro_mutable_op_resolver.h registers, in
#: flatbuffer_conversions.cc), which allocates its ``TfLite<Name>Params`` struct through
#: ``MicroBuiltinDataAllocator`` at ``alignof`` that struct: packed one after the other in the
#: tail, subgraph by subgraph. Ops whose parser allocates nothing are in ``_NOT_PARSED``;
#: custom ops keep their options in the flatbuffer. sizeof and alignof by data layout, from
#: ``benchmarks/probe_tflm_sizes.py --tflm DIR --params --python`` on TFLM 90b983c2:
#: "arm-eabi" is Debian's arm-none-eabi-gcc 12.2.1 ``-mcpu=cortex-m4 -mthumb``, bare-metal
#: AAPCS, whose enums take the smallest type that holds their values (the same with
#: -mcpu=cortex-m0plus, m3, m7, m23, m33, m55); "ilp32", enums the size of an int: the same
#: compiler with ``-fno-short-enums``, and Debian's xtensa-lx106-elf-gcc 12.2 and
#: riscv64-unknown-elf-gcc 12.2 (rv32imac/ilp32, rv32imafc/ilp32f) give the same; "lp64",
#: a 64-bit host's (Debian's gcc 12.2 for x86-64: int-sized enums, 8-byte pointers), with
#: ``_WHEEL_PARAMS`` where the pinned wheel's later TFLM differs from 90b983c2.
_PARSED_INTO = {
    "ADD": "Add", "ARG_MAX": "ArgMax", "ARG_MIN": "ArgMin", "AVERAGE_POOL_2D": "Pool",
    "BATCH_MATMUL": "BatchMatMul", "CALL_ONCE": "CallOnce", "CAST": "Cast",
    "CONCATENATION": "Concatenation", "CONV_2D": "Conv", "CUMSUM": "Cumsum",
    "DEPTHWISE_CONV_2D": "DepthwiseConv", "DEPTH_TO_SPACE": "DepthToSpace", "DIV": "Div",
    "FULLY_CONNECTED": "FullyConnected", "GATHER": "Gather", "IF": "If",
    "L2_NORMALIZATION": "L2Norm", "L2_POOL_2D": "Pool", "LEAKY_RELU": "LeakyRelu",
    "MAX_POOL_2D": "Pool", "MEAN": "Reducer", "MIRROR_PAD": "MirrorPadding", "MUL": "Mul",
    "PACK": "Pack", "REDUCE_ALL": "Reducer", "REDUCE_MAX": "Reducer", "REDUCE_MIN": "Reducer",
    "RESHAPE": "Reshape", "RESIZE_BILINEAR": "ResizeBilinear",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighbor", "SHAPE": "Shape", "SOFTMAX": "Softmax",
    "SPACE_TO_DEPTH": "SpaceToDepth", "SPLIT": "Split", "SPLIT_V": "SplitV",
    "SQUEEZE": "Squeeze", "STRIDED_SLICE": "StridedSlice", "SUB": "Sub", "SUM": "Reducer",
    "SVDF": "SVDF", "TRANSPOSE_CONV": "TransposeConv",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTM", "UNPACK": "Unpack",
    "VAR_HANDLE": "VarHandle", "WHILE": "While",
}
_NOT_PARSED = frozenset({
    "ABS", "ADD_N", "ASSIGN_VARIABLE", "BATCH_TO_SPACE_ND", "BROADCAST_ARGS", "BROADCAST_TO",
    "CEIL", "COS", "DEQUANTIZE", "DYNAMIC_UPDATE_SLICE", "ELU", "EMBEDDING_LOOKUP", "EQUAL",
    "EXP", "EXPAND_DIMS", "FILL", "FLOOR", "FLOOR_DIV", "FLOOR_MOD", "GATHER_ND", "GREATER",
    "GREATER_EQUAL", "HARD_SWISH", "LESS", "LESS_EQUAL", "LOG", "LOGICAL_AND", "LOGICAL_NOT",
    "LOGICAL_OR", "LOGISTIC", "LOG_SOFTMAX", "MAXIMUM", "MINIMUM", "NEG", "NOT_EQUAL", "PAD",
    "PADV2", "PRELU", "QUANTIZE", "READ_VARIABLE", "RELU", "RELU6", "REVERSE_V2", "ROUND",
    "RSQRT", "SELECT_V2", "SIN", "SLICE", "SPACE_TO_BATCH_ND", "SQRT", "SQUARE",
    "SQUARED_DIFFERENCE", "TANH", "TRANSPOSE", "ZEROS_LIKE",
})
_PARAMS: dict[str, dict[str, tuple[int, int]]] = {
    "arm-eabi": {
        "Add": (2, 1), "ArgMax": (1, 1), "ArgMin": (1, 1), "BatchMatMul": (3, 1),
        "CallOnce": (4, 4), "Cast": (2, 1), "Concatenation": (8, 4), "Conv": (28, 4),
        "Cumsum": (2, 1), "DepthToSpace": (4, 4), "DepthwiseConv": (28, 4), "Div": (1, 1),
        "FullyConnected": (5, 1), "Gather": (8, 4), "If": (8, 4), "L2Norm": (1, 1),
        "LeakyRelu": (4, 4), "MirrorPadding": (1, 1), "Mul": (1, 1), "Pack": (8, 4),
        "Pool": (40, 4), "Reducer": (1, 1), "Reshape": (36, 4), "ResizeBilinear": (2, 1),
        "ResizeNearestNeighbor": (2, 1), "SVDF": (8, 4), "Shape": (1, 1), "Softmax": (4, 4),
        "SpaceToDepth": (4, 4), "Split": (4, 4), "SplitV": (4, 4), "Squeeze": (36, 4),
        "StridedSlice": (24, 4), "Sub": (2, 1), "TransposeConv": (16, 4),
        "UnidirectionalSequenceLSTM": (16, 4), "Unpack": (8, 4), "VarHandle": (8, 4),
        "While": (8, 4),
    },
    "ilp32": {
        "Add": (8, 4), "ArgMax": (4, 4), "ArgMin": (4, 4), "BatchMatMul": (3, 1),
        "CallOnce": (4, 4), "Cast": (8, 4), "Concatenation": (8, 4), "Conv": (28, 4),
        "Cumsum": (2, 1), "DepthToSpace": (4, 4), "DepthwiseConv": (28, 4), "Div": (4, 4),
        "FullyConnected": (16, 4), "Gather": (8, 4), "If": (8, 4), "L2Norm": (4, 4),
        "LeakyRelu": (4, 4), "MirrorPadding": (4, 4), "Mul": (4, 4), "Pack": (8, 4),
        "Pool": (40, 4), "Reducer": (1, 1), "Reshape": (36, 4), "ResizeBilinear": (2, 1),
        "ResizeNearestNeighbor": (2, 1), "SVDF": (12, 4), "Shape": (4, 4), "Softmax": (4, 4),
        "SpaceToDepth": (4, 4), "Split": (4, 4), "SplitV": (4, 4), "Squeeze": (36, 4),
        "StridedSlice": (24, 4), "Sub": (8, 4), "TransposeConv": (20, 4),
        "UnidirectionalSequenceLSTM": (16, 4), "Unpack": (8, 4), "VarHandle": (8, 4),
        "While": (8, 4),
    },
    "lp64": {
        "Add": (8, 4), "ArgMax": (4, 4), "ArgMin": (4, 4), "BatchMatMul": (3, 1),
        "CallOnce": (4, 4), "Cast": (8, 4), "Concatenation": (8, 4), "Conv": (28, 4),
        "Cumsum": (2, 1), "DepthToSpace": (4, 4), "DepthwiseConv": (28, 4), "Div": (4, 4),
        "FullyConnected": (16, 4), "Gather": (8, 4), "If": (8, 4), "L2Norm": (4, 4),
        "LeakyRelu": (4, 4), "MirrorPadding": (4, 4), "Mul": (4, 4), "Pack": (8, 4),
        "Pool": (40, 4), "Reducer": (1, 1), "Reshape": (36, 4), "ResizeBilinear": (2, 1),
        "ResizeNearestNeighbor": (2, 1), "SVDF": (12, 4), "Shape": (4, 4), "Softmax": (4, 4),
        "SpaceToDepth": (4, 4), "Split": (4, 4), "SplitV": (4, 4), "Squeeze": (36, 4),
        "StridedSlice": (24, 4), "Sub": (8, 4), "TransposeConv": (20, 4),
        "UnidirectionalSequenceLSTM": (16, 4), "Unpack": (8, 4), "VarHandle": (16, 8),
        "While": (8, 4),
    },
}
#: The pinned ``tflite-micro`` wheel (0.dev20261023, TFLM 8f6596d) lays out
#: TfLiteFullyConnectedParams as 32 B at alignment 8 (90b983c2's: 16 at 4), the one
#: struct known to differ, measured on the wheel's RecordingMicroAllocator tail of operators
#: cut from TFLM's keyword_scrambled.tflite, 1 to 15 at a time: at 4-byte alignment the
#: options after an SVDF's 12 B come out 4 B short (tests/simulator/targets/tflm/
#: test_svdf_truth.py).
_WHEEL_PARAMS = {"FullyConnected": (32, 8)}
_PARAMS["lp64"] = {**_PARAMS["lp64"], **_WHEEL_PARAMS}

#: Per-channel multiplier and shift arrays (2 × int32 × channels) that Prepare allocates,
#: by the filter dimension holding the output channels; FULLY_CONNECTED only when its
#: filter is quantized per channel (fully_connected_common.cc), the others always.
_PER_CHANNEL = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}
_ALIGN = 16
#: ``MicroResourceVariables`` and one ``MicroResourceVariable`` entry (micro_resource_variable.h:
#: three pointers, a size_t and an int8 default), by pointer width.
_RESOURCE_VARIABLES = {8: 16, 4: 12}
_RESOURCE_ENTRY = {8: 40, 4: 20}
#: int16 SOFTMAX keeps two 513-entry int16 lookup tables (softmax_common.cc).
_SOFTMAX_INT16_LUTS = 2 * 513 * 2


@dataclass(frozen=True)
class TailEstimate:
    total: int
    breakdown: dict[str, int] = field(default_factory=dict)
    note: str = ""


#: sizeof the structs the tail holds under ``TF_LITE_STATIC_MEMORY`` (common.h,
#: micro_allocator.h), by pointer width: TfLiteEvalTensor, NodeAndRegistration (TfLiteNode
#: + registration pointer), TfLiteTensor, TfLiteAffineQuantization, and the head-side
#: internal::ScratchBufferRequest {size_t, int, int}. 64-bit: the x86-64 wheel; 32-bit:
#: arm-none-eabi-g++ -mcpu=cortex-m4.
_STRUCTS = {
    8: {"eval_tensor": 24, "node": 64, "tensor": 64, "affine_quant": 24, "scratch_request": 16},
    4: {"eval_tensor": 12, "node": 32, "tensor": 32, "affine_quant": 12, "scratch_request": 12},
}


def struct_sizes(ptr: int) -> dict[str, int]:
    """sizeof the TFLM structs the tail holds, for a pointer width of ``ptr`` bytes."""
    return _STRUCTS[8 if ptr >= 8 else 4]


def _input(sg: Subgraph, op: Operator, i: int) -> Tensor | None:
    return sg.tensors[op.inputs[i]] if i < len(op.inputs) and op.inputs[i] >= 0 else None


def _transposed_operand(t: Tensor | None, ptr: int) -> list[int]:
    """BATCH_MATMUL's persistent transposed copy: eval tensor, dims array, data."""
    if t is None:
        return []
    return [3 * ptr, 4 + 4 * len(t.shape), tflm_tensor_bytes(t)]


def _cmsis_feature(flavour: str) -> Feature | None:
    """The core feature of a ``cmsis-nn:<feature>`` flavour; None for other libraries."""
    if not flavour.startswith("cmsis-nn"):
        return None
    feature = KERNEL_ALIASES.get(flavour, flavour).partition(":")[2]
    return feature if feature in FEATURES else "dsp"


def _signal_allocations(sg: Subgraph, op: Operator, ptr: int) -> list[int]:
    """What TFLM's Signal ops keep beyond their params struct (signal/micro/kernels/*.cc),
    sized from the tensor shapes (the counts also sit in the op's flexbuffer options)."""
    name = op.op_name.removeprefix("CUSTOM:")
    inp, out = _input(sg, op, 0), (sg.tensors[op.outputs[0]] if op.outputs else None)
    if name == "SignalFilterBank" and out is not None and out.shape:
        # filter_bank.cc:64 work_area: (num_channels + 1) uint64.
        return [(out.shape[-1] + 1) * 8]
    if name == "SignalFilterBankSpectralSubtraction" and inp is not None and inp.shape:
        # filter_bank_spectral_subtraction.cc:91 noise_estimate: num_channels uint32.
        return [inp.shape[-1] * 4]
    if name == "SignalRfft" and out is not None and out.shape and inp is not None:
        return [rfft_state_bytes(signal_fft_length(out), inp.dtype, ptr)]
    return []


def rfft_state_bytes(fft_length: int, dtype: str, ptr: int) -> int:
    """kissfft's ``kiss_fftr_alloc`` memory for ``fft_length`` (signal/src/rfft_*.cc):
    kiss_fftr_state (3 pointers) + the half-length complex FFT's kiss_fft_state (nfft,
    inverse, 2 × MAXFACTORS=32 factors, nfft twiddles) + 3/2 nfft complex values."""
    cpx = 2 * (2 if dtype == "int16" else 4)
    nfft = fft_length // 2
    sub = 4 + 4 + 4 * 2 * 32 + cpx * nfft
    return 3 * ptr + sub + cpx * (nfft * 3 // 2)


#: sizeof(DecodeStateLut) (kernels/decode_state_lut.h), by pointer width: x86-64 g++ 12 and
#: arm-none-eabi-g++ 12.2 -mcpu=cortex-m4, TFLM 90b983c2.
_DECODE_STATE_LUT = {8: 72, 4: 36}


def prepare_allocations(sg: Subgraph, op: Operator, pointer_bytes: int = 8,
                        flavour: str = "reference") -> list[int]:
    """Sizes of the persistent buffers ``op``'s kernel allocates in Prepare (or, for the
    Signal ops, in Init beyond their params struct)."""
    name = op.op_name
    feature = _cmsis_feature(flavour)
    sizes: list[int] = []
    if name.startswith("CUSTOM:Signal"):
        return _signal_allocations(sg, op, pointer_bytes)
    if name == f"CUSTOM:{DECODE}":
        # decode.cc Prepare: an array of DecodeState pointers, one per output, then each
        # output's state (decode_state.cc; look-up tables, what devicefit's convert and
        # TFLM's tool write).
        width = 8 if pointer_bytes >= 8 else 4
        outputs = sum(1 for t in op.outputs if t >= 0)
        return [width * outputs] + [_DECODE_STATE_LUT[width]] * outputs
    if name in _PER_CHANNEL:
        f, inp = _input(sg, op, 1), _input(sg, op, 2 if name == "TRANSPOSE_CONV" else 0)
        per_channel = f is not None and f.quantization is not None and f.quantization.per_channel
        # cmsis_nn/conv.cc:121 and depthwise_conv.cc:100 keep per-channel arrays for
        # int8/int16 inputs only; the reference kernels (conv_common.cc:175) always.
        integer_only = feature is not None and name in ("CONV_2D", "DEPTHWISE_CONV_2D")
        if f is not None and len(f.shape) > _PER_CHANNEL[name] and (
                name != "FULLY_CONNECTED" or per_channel) and not (
                integer_only and (inp is None or inp.dtype not in ("int8", "int16"))):
            sizes += [4 * f.shape[_PER_CHANNEL[name]]] * 2
        if name == "FULLY_CONNECTED" and feature is not None \
                and fc_sums_persistent(sg, op):
            sizes += [s for s in [cmsis_fc_kernel_sums(sg, op, feature)] if s]
    elif name == "BATCH_MATMUL":
        lhs, rhs = _input(sg, op, 0), _input(sg, op, 1)
        if lhs is not None and lhs.dtype in ("int8", "int16"):
            sizes.append(28)  # OpDataBatchMatmul::quantization (7 int32, batch_matmul.cc:144)
        if op.options.get("adj_x"):
            sizes += _transposed_operand(lhs, pointer_bytes)
        if not op.options.get("adj_y"):
            sizes += _transposed_operand(rhs, pointer_bytes)
    elif name == "SOFTMAX":
        t = _input(sg, op, 0)
        if t is not None and t.dtype == "int16":
            sizes.append(_SOFTMAX_INT16_LUTS)
    elif name == "UNIDIRECTIONAL_SEQUENCE_LSTM" and feature is not None:
        act = cmsis_lstm_integer(sg, op)
        hidden = _input(sg, op, 18)
        if act is not None and hidden is not None and hidden.shape:
            # cmsis_nn/unidirectional_sequence_lstm.cc:120-144: 8 kernel sums of the state
            # size, int32 (int8 activations) or int64 (int16 activations).
            sizes += [hidden.shape[-1] * (4 if act == "int8" else 8)] * 8
    elif name == "SVDF" and feature is not None:
        inp, wf = _input(sg, op, 0), _input(sg, op, 1)
        if inp is not None and wf is not None and inp.dtype == "int8" and wf.shape:
            # cmsis_nn/svdf.cc:192 kernel sums (KERNELS_OPTIMIZED_FOR_SPEED).
            sizes += [s for s in [cmsis_nn.svdf_s8(wf.shape[0], feature)] if s]
    return sizes


def _opdata(op: Operator, pointer_bytes: int, flavour: str) -> int:
    """sizeof the OpData ``op``'s Init allocates for this pointer width and library."""
    name = op.op_name
    if pointer_bytes >= 8:
        return _OPDATA_64.get(name, _OPDATA_DEFAULT_64)
    if flavour.startswith("cmsis-nn") and name in _OPDATA_32_CMSIS_NN:
        return _OPDATA_32_CMSIS_NN[name]
    # An op not probed on 32-bit takes its 64-bit size: a struct never grows when its
    # pointers shrink.
    return _OPDATA_32.get(name, _OPDATA_64.get(name, _OPDATA_DEFAULT_64))


def params_layout(pointer_bytes: int, core_family: str | None) -> str:
    """How a build lays out the builtin options (a ``_PARAMS`` key): "lp64" on a 64-bit
    host (the wheel), "arm-eabi" on a Cortex-M (arm-none-eabi-gcc's short enums) and
    "ilp32" on any other 32-bit core (Xtensa, RISC-V) and on one devicefit does not know,
    whose int-sized enums take more room."""
    if pointer_bytes >= 8:
        return "lp64"
    return "arm-eabi" if core_family == "cortex-m" else "ilp32"


def options_struct(op: Operator, layout: str) -> tuple[int, int]:
    """(sizeof, alignof) of the options struct ``op``'s parser allocates in ``layout``."""
    name = op.op_name
    if op.is_custom or name in _NOT_PARSED:
        return 0, 1
    if name in _PARSED_INTO:
        return _PARAMS[layout][_PARSED_INTO[name]]
    # TFLM registers no parser for it (the model will not load): a guess by its options.
    return align_up(8 * len(op.options), 4), 4


def builtin_options_bytes(model: Model, pointer_bytes: int = 8, layout: str | None = None) -> int:
    """Bytes the operators' parsed builtin options take in the tail: packed at each struct's
    alignment, in operator order, from the end of the node array (aligned to the largest of
    them: 4 on 32-bit builds, 8 on the 64-bit host); ``layout`` as :func:`params_layout`
    gives it (None: "lp64" for 8-byte pointers, else "ilp32", the larger 32-bit one). The
    16-byte alignment of the first Init after them is the tail's ``alignment`` share."""
    layout = layout or ("lp64" if pointer_bytes >= 8 else "ilp32")
    used = 0
    for op in (op for sg in model.subgraphs for op in sg.operators):
        size, alignment = options_struct(op, layout)
        if size:
            used = align_up(used + size, alignment)
    return used


def kernel_allocations(sg: Subgraph, op: Operator, pointer_bytes: int = 8,
                       flavour: str = "reference") -> tuple[int, list[int]]:
    """What ``op``'s kernel asks the arena's tail for, as requested (before alignment): the
    OpData its Init keeps (0: none) and the buffers its Prepare adds."""
    return _opdata(op, pointer_bytes, flavour), prepare_allocations(sg, op, pointer_bytes,
                                                                      flavour)


def _kernel_bytes(sg: Subgraph, op: Operator, pointer_bytes: int,
                  flavour: str = "reference") -> tuple[int, int]:
    """(bytes Init keeps, bytes Prepare adds) for ``op``, each allocation 16-byte aligned."""
    opdata, prepare = kernel_allocations(sg, op, pointer_bytes, flavour)
    return (align_up(opdata, _ALIGN) if opdata else 0,
            sum(align_up(s, _ALIGN) for s in prepare))


def _resource_variables(model: Model, pointer_bytes: int) -> int:
    """``MicroResourceVariables`` (one entry per distinct VAR_HANDLE name, as the wheel
    counts them) plus each variable's buffer, which the first ASSIGN_VARIABLE's Prepare
    allocates at the assigned value's size (micro_resource_variable.cc)."""
    names: set[tuple[object, object]] = set()
    buffers: dict[tuple[object, object], int] = {}
    for sg in model.subgraphs:
        handle: dict[int, tuple[object, object]] = {}
        for op in sg.operators:
            if op.op_name == "VAR_HANDLE" and op.outputs:
                name = (op.options.get("container"), op.options.get("shared_name"))
                names.add(name)
                handle[op.outputs[0]] = name
            elif op.op_name == "ASSIGN_VARIABLE" and len(op.inputs) > 1:
                value = _input(sg, op, 1)
                name = handle.get(op.inputs[0], ("?", op.inputs[0]))
                if value is not None:
                    buffers.setdefault(name, tflm_tensor_bytes(value))
    if not names:
        return 0
    width = 8 if pointer_bytes >= 8 else 4
    return (align_up(_RESOURCE_VARIABLES[width], _ALIGN)
            + align_up(_RESOURCE_ENTRY[width] * len(names), _ALIGN)
            + sum(align_up(b, _ALIGN) for b in buffers.values()))


def prepare_peak(model: Model, tail_bytes: int, *, pointer_bytes: int = 8,
                 n_scratch: int = 0, kernels: str = "reference") -> int:
    """Arena TFLM needs while kernels run ``Prepare`` (an estimate, tail included).

    Each kernel reads its tensors as temporary ``TfLiteTensor`` structs, each with a copy of
    its zero points (one int per channel), on the head side, while the tail already holds
    everything Init kept and the earlier kernels' Prepare buffers. A big per-channel weight
    late in the graph (a wide dense layer) can need more than the final head + tail.
    """
    sizes = struct_sizes(pointer_bytes)
    ops = [(sg, op) for sg in model.subgraphs for op in sg.operators]  # Prepare order
    later = sum(_kernel_bytes(sg, op, pointer_bytes, kernels)[1] for sg, op in ops)
    requests = align_up((n_scratch + 12) * sizes["scratch_request"])  # kMaxScratchBuffersPerOp
    peak = 0
    for sg, op in ops:
        later -= _kernel_bytes(sg, op, pointer_bytes, kernels)[1]
        temp = requests
        for t in (*op.inputs, *op.outputs):
            if t < 0:
                continue
            temp += sizes["tensor"]
            q = sg.tensors[t].quantization
            if q is not None and q.scale:
                temp += sizes["affine_quant"] + align_up(4 + 4 * len(q.scale), pointer_bytes)
        peak = max(peak, tail_bytes - later + temp)
    return peak


def estimate_tail(model: Model, *, pointer_bytes: int = 8, kernels: str = "reference",
                  n_scratch: int = 0, layout: str | None = None) -> TailEstimate:
    """Estimated tail bytes of ``model`` for this pointer width and kernel flavour
    (``reference``, ``cmsis-nn:<feature>`` … see :func:`simulator.targets.tflm.scratch.flavour`);
    ``n_scratch`` scratch-buffer requests each keep a handle (one pointer) in the tail;
    ``layout`` is how the build lays out the builtin options (:func:`params_layout`)."""
    sizes = struct_sizes(pointer_bytes)
    main = model.main
    io = [main.tensors[t] for t in (*main.inputs, *main.outputs) if t >= 0]
    quant = 0
    for t in io:
        q = t.quantization
        if q is not None and q.scale:
            quant += sizes["affine_quant"] + 4 + 4 * len(q.zero_point or q.scale)
    layout = layout or params_layout(pointer_bytes, None)
    kernel = sum(sum(_kernel_bytes(sg, op, pointer_bytes, kernels)) for sg in model.subgraphs
                 for op in sg.operators) + builtin_options_bytes(model, pointer_bytes, layout)
    variables = sum(align_up(tflm_tensor_bytes(t)) for sg in model.subgraphs
                    for t in sg.tensors if t.is_variable)
    extra_subgraphs = len(model.subgraphs) - 1
    allocator = (_BASE_64 + _PER_SUBGRAPH_64 * extra_subgraphs if pointer_bytes >= 8
                 else align_up(_BASE_32 + _PER_SUBGRAPH_32 * extra_subgraphs, _ALIGN))
    breakdown = {
        "allocator": allocator,
        "eval_tensors": sum(align_up(sizes["eval_tensor"] * len(sg.tensors), _ALIGN)
                            for sg in model.subgraphs),
        "nodes": sum(align_up(sizes["node"] * len(sg.operators), _ALIGN)
                     for sg in model.subgraphs),
        "io_tensors": sizes["tensor"] * len(io),
        # The interpreter's arrays of input and output tensor pointers.
        "io_pointers": (align_up(pointer_bytes * len(main.inputs), _ALIGN)
                        + align_up(pointer_bytes * len(main.outputs), _ALIGN)),
        "io_quantization": quant,
        "kernel_data": kernel,
        "scratch_handles": align_up(pointer_bytes * n_scratch, 8),
        # The packed options end where 16-byte aligned allocations resume.
        "alignment": _ALIGN,
        "variables": variables,
        "resource_variables": _resource_variables(model, pointer_bytes),
    }
    basis = verified_against(kernels, pointer_bytes)
    options = "" if pointer_bytes >= 8 else f", '{layout}' builtin options"
    note = (f"tail: {pointer_bytes * 8}-bit pointers, '{kernels}' kernels{options}, from TFLM's "
            f"struct and OpData sizes; verified against: {basis}")
    return TailEstimate(total=align_up(sum(breakdown.values())), breakdown=breakdown, note=note)
