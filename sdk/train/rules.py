"""What each kind of layer keeps alive for the backward pass: a registry by Keras class.

TensorFlow's gradient of an op reads some of the op's forward tensors; those stay alive from
the forward pass until that gradient has run. The rules below encode, per Keras layer, the
tensors its TF gradient functions read (e.g. ``MatMul``/``Conv2D`` read their input for the
kernel gradient, ``Relu``/``Sigmoid``/``Tanh`` read their *output*, ``MaxPool`` reads both,
``Mean``/``AvgPool`` read neither) and the transient buffers its forward and backward
allocate. Sizes are in units of the layer's output, per sample. A layer that is not listed
is assumed to keep its inputs and output (the safe side) and is named in a warning.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rule:
    saves_inputs: bool = False  # the gradient reads the layer's inputs
    saves_output: bool = False  # the gradient reads the layer's output
    extra_saved: float = 0.0  # private tensors kept until the backward (x output size)
    forward_temp: float = 0.0  # transient buffers while the forward runs (x output size)
    backward_temp: float = 0.0  # transient buffers while the backward runs (x output size)
    alias: bool = False  # the output is a view of the input buffer (reshape): no new memory
    im2col: bool = False  # the kernel gradient unfolds input patches into a scratch buffer
    inplace_grad: bool = False  # element-wise: the input gradient reuses the output's buffer


# TensorFlow's CPU kernel-gradient of a convolution (Conv2DCustomBackpropFilterOp) unfolds
# the input of ``shard`` images at a time into a column buffer, with ``shard`` chosen so
# that one shard's matmul fits a 30 MiB "L3 cache" working set.
_IM2COL_WORKING_SET = 30 * 1024**2


def im2col_bytes(layer: Any, output_elements: int, batch_size: int, itemsize: int) -> int:
    """Bytes of the column buffer a convolution's kernel gradient touches at this batch."""
    kernel = getattr(layer, "kernel", None)
    if kernel is None:
        return 0
    shape = tuple(kernel.shape)
    filter_total, filters = math.prod(shape[:-1]), shape[-1]
    out_spatial = max(output_elements // max(filters, 1), 1)
    work_unit = out_spatial * filter_total + out_spatial * filters + filter_total * filters
    shard = -(-(_IM2COL_WORKING_SET // itemsize) // work_unit)
    return min(batch_size, shard) * out_spatial * filter_total * itemsize


# Activation functions whose TF gradient reads the activation's output; those share the
# buffer with the next layer's input. The others read the pre-activation, a private tensor
# (composite ones such as gelu keep more than one).
_READS_OUTPUT = {"relu", "relu6", "sigmoid", "tanh", "elu", "selu", "softmax", "exponential"}
_PRIVATE = {"leaky_relu": 1.0, "silu": 1.0, "swish": 1.0, "gelu": 2.0,
            "softplus": 2.0, "softsign": 2.0, "mish": 2.0, "hard_sigmoid": 1.0,
            "hard_silu": 1.0, "hard_swish": 1.0, "log_softmax": 2.0}

_WEIGHTED = {"Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose",
             "Conv2DTranspose", "Conv3DTranspose", "DepthwiseConv1D", "DepthwiseConv2D",
             "SeparableConv1D", "SeparableConv2D", "Embedding"}

RULES: dict[str, Rule] = {
    **{k: Rule(saves_inputs=True) for k in _WEIGHTED},
    **{k: Rule(saves_inputs=True, im2col=True) for k in ("Conv1D", "Conv2D", "Conv3D")},
    **{f"MaxPooling{d}D": Rule(saves_inputs=True, saves_output=True) for d in (1, 2, 3)},
    **{f"GlobalMaxPooling{d}D": Rule(saves_inputs=True, saves_output=True) for d in (1, 2, 3)},
    **{f"AveragePooling{d}D": Rule() for d in (1, 2, 3)},
    **{f"GlobalAveragePooling{d}D": Rule() for d in (1, 2, 3)},
    **{f"{k}{d}D": Rule() for k in ("ZeroPadding", "Cropping", "UpSampling") for d in (1, 2, 3)},
    # Keras 3 batch norm on TF is composite (tf.nn.moments, then x * inv + shift); its
    # gradient sums three contributions to the input gradient. What stays alive beyond the
    # input differs between graphs (measured: ~1.5 outputs in conv-BN-ReLU-conv, ~0 in
    # inverted-residual blocks); 0.75 kept + 0.75 transient is the fit that keeps the error
    # within about -15 %/+24 % over the blocks in docs/benchmarks-log.md "Training memory".
    "BatchNormalization": Rule(saves_inputs=True, extra_saved=0.75, forward_temp=1.0,
                               backward_temp=0.75),
    "LayerNormalization": Rule(saves_inputs=True, extra_saved=1.0, forward_temp=1.0,
                               backward_temp=1.0),
    "GroupNormalization": Rule(saves_inputs=True, extra_saved=1.0, forward_temp=1.0,
                               backward_temp=1.0),
    # The dropout mask is multiplied in as a float tensor that its gradient reads.
    **{k: Rule(extra_saved=1.0, forward_temp=1.0, inplace_grad=True) for k in
       ("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D",
        "GaussianDropout", "GaussianNoise", "AlphaDropout")},
    **{k: Rule(inplace_grad=True) for k in ("Add", "Subtract", "Rescaling", "Normalization")},
    **{k: Rule() for k in ("Average", "Concatenate", "Permute", "RepeatVector", "InputLayer")},
    **{k: Rule(saves_inputs=True) for k in ("Multiply", "Maximum", "Minimum", "Dot", "PReLU")},
    **{k: Rule(alias=True) for k in ("Reshape", "Flatten", "Identity")},
    # TF runs element-wise gradients (ReluGrad...) in the incoming gradient's buffer.
    "ReLU": Rule(saves_output=True, inplace_grad=True),
    "ELU": Rule(saves_output=True, inplace_grad=True),
    "Softmax": Rule(saves_output=True, inplace_grad=True),
    "LeakyReLU": Rule(saves_inputs=True, inplace_grad=True),
    # sdk.convert.qat's fake quantization: the clip's gradient reads the input; the rounding
    # chain allocates a few output-sized temporaries on the forward.
    "FakeQuant": Rule(saves_inputs=True, forward_temp=2.0, inplace_grad=True),
}


def activation_name(layer: Any) -> str | None:
    fn = getattr(layer, "activation", None)
    if fn is None:
        return None
    return str(getattr(fn, "__name__", type(fn).__name__)).lower()


def rule_for(layer: Any, kind: str) -> Rule:
    """The rule for one layer, with its fused ``activation=`` folded in."""
    act = activation_name(layer)
    if kind == "Activation":
        base = Rule(inplace_grad=True)
    elif kind == "ReLU" and (bool(getattr(layer, "negative_slope", 0.0)) or
                             bool(getattr(layer, "threshold", 0.0)) or
                             getattr(layer, "max_value", None) not in (None, 6, 6.0)):
        # Not a native Relu/Relu6: Keras composes it (where, clip, subtract).
        base = Rule(saves_inputs=True, saves_output=True, extra_saved=1.0, forward_temp=1.0)
    elif kind in RULES:
        base = RULES[kind]
    else:
        log.warning("no training-memory rule for layer type %s; assuming it keeps its inputs "
                    "and output for the backward pass", kind)
        base = Rule(saves_inputs=True, saves_output=True)
    if act is None or act == "linear":
        return base
    if act in _READS_OUTPUT:
        return replace(base, saves_output=True, forward_temp=base.forward_temp + 1.0)
    private = _PRIVATE.get(act, 2.0)
    return replace(base, extra_saved=base.extra_saved + private,
                   forward_temp=base.forward_temp + 1.0)
