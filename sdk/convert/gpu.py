"""The scheme ``convert`` writes for a phone's GPU, and why, in the words of LiteRT's sources.

A profile runs on the GPU when its first delegate is LiteRT's GPU delegate. The delegate
computes in floating point only: fp16 by default (precision loss allowed), fp32 when asked.
It reads fp16 weights in place and gives quantized models a "floating-point view" (int8
constants dequantized once into GPU memory, quantization simulated between operations,
8-bit inputs and outputs converted on the CPU every inference), and takes no int16 tensor.
So float16 is what it runs best, int8 only makes the file smaller, and int16x8 leaves
every operator on the CPU.
"""

from __future__ import annotations

from devicefit.simulator.profile_types import Profile

#: Where each reason below is read (google-ai-edge/LiteRT).
FP16_DOC = "tflite/g3doc/performance/post_training_float16_quant.ipynb"
QUANT_DOC = "tflite/g3doc/performance/gpu.md, 'Using quantized models'"
RULES = "tflite/delegates/gpu/common/model_builder.cc (GetOpsToReplace: IsAllAllowedTensors)"

WHY = {
    "float16": "the GPU computes in fp16 by default, so float16 weights lose nothing it would "
               "not lose anyway, at half the float32 file ("
               f"{FP16_DOC}: 'Some hardware, like GPUs, can compute natively in this reduced "
               "precision arithmetic'); it reads them in place (tflite/delegates/utils.cc, "
               "FP16GraphPartitionHelper)",
    "float32": "weights kept in float32, twice float16's file; the GPU still computes in fp16 "
               "unless the profile sets gpu.precision: fp32",
    "int8": "the smallest file, but not faster on the GPU: it runs floating point only, "
            "dequantizing the int8 weights once into GPU memory and simulating the "
            f"quantization between operations ({QUANT_DOC}); int8's rounding adds to fp16's",
    "dynamic": "int8 weights, dequantized once into GPU memory, with float activations "
               f"({QUANT_DOC}): the file of int8, the compute of float16",
}
#: The delegate's own refusal of a tensor type it does not take.
TYPE_REFUSAL = "OP is supported, but tensor type/shape isn't compatible."


def runs_on_gpu(profile: Profile) -> bool:
    """Whether the profile runs its model on LiteRT's GPU delegate (its first delegate)."""
    return profile.runtime.delegates[:1] == ("gpu",)


def scheme_reason(profile: Profile, scheme: str, asked: bool) -> str | None:
    """Why ``scheme`` for the GPU (None: the profile does not run on one); ``asked``: given
    with --scheme rather than the profile's default."""
    if not runs_on_gpu(profile) or scheme not in WHY:
        return None
    source = "--scheme" if asked else f"{profile.name}'s quantization.default"
    return f"{scheme} ({source}) for the phone's GPU: {WHY[scheme]}"


def io_warning(profile: Profile, io_type: str) -> str | None:
    """The cost of integer inputs and outputs on the GPU (None: float, or not a GPU)."""
    if not runs_on_gpu(profile) or io_type.startswith("float"):
        return None
    return (f"{io_type} inputs and outputs: the GPU delegate converts them to float on the CPU "
            f"every inference; it runs best with float32 I/O ({QUANT_DOC}): --io-type float32")


def refused_scheme(profile: Profile, scheme: str) -> str | None:
    """The delegate's reason it cannot run ``scheme`` (None: it can, or not a GPU)."""
    if not runs_on_gpu(profile) or scheme != "int16x8":
        return None
    return (f"the GPU delegate takes no int16 tensor ('{TYPE_REFUSAL}', {RULES}): every "
            "operator of an int16x8 model would run on the CPU; use float16 (its default) or "
            "int8, or a CPU profile such as android-arm64-cpu")
