"""int4 weights as a dimension of ``fit`` (issue 47): an int8 candidate may have 4-bit
weights on the layers the profile's runtime takes them ("int4",
:func:`sdk.convert.lowbit.int4_weights`), or on as few of those as bring its flash within
the profile's budget, the layers that cost least accuracy per byte first ("auto",
:func:`sdk.convert.lowbit.int4_under_budget`); either quantized from the float32
``.tflite`` of the candidate's own pruned and trained Keras model, on the same calibration
data as its int8 twin. A QAT candidate with int4 or auto weights trains its 4-bit layers on
the int4 grid (:func:`sdk.convert.qat.int4_layers`).

Whether the dimension is searched at all is asked, not assumed: before the search the
user's model is quantized that way for the profile once; when the runtime (or the target's
compiler) refuses int4 on every layer, the dimension is dropped and the report says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from devicefit.sdk.convert import quantize
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.loading import LoadedModel
from devicefit.sdk.convert.lowbit import LowBitReport
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WeightsChoice:
    """The weight widths fit searches for int8 candidates, and why int4 is not among them
    ("" when it is)."""

    widths: tuple[str, ...] = ("int8",)
    note: str = ""


#: The weights fit searches when the runtime takes int4 on some layer: "auto" only where
#: the profile sets a flash budget (it chooses layers under it).
INT4 = ("int8", "int4")
INT4_AUTO = (*INT4, "auto")


def float_tflite(loaded: LoadedModel) -> bytes:
    """The float32 ``.tflite`` of ``loaded``'s Keras model: what AI Edge Quantizer reads."""
    settings = quantize.QuantSettings("float32", "float32", True)
    return quantize.to_tflite(loaded, settings, None)


def int4_weights(loaded: LoadedModel, calibration: np.ndarray, source: str, profile: Profile
                 ) -> tuple[bytes, LowBitReport]:
    """``loaded``'s model with int4 weights where ``profile``'s runtime takes them, int8
    elsewhere (:func:`sdk.convert.lowbit.int4_weights`)."""
    from devicefit.sdk.convert import lowbit

    return lowbit.int4_weights(float_tflite(loaded), Dataset(calibration, None, source), profile,
                               "candidate.tflite")


def auto_weights(loaded: LoadedModel, calibration: np.ndarray, evaluation: Dataset,
                 source: str, profile: Profile) -> tuple[bytes, LowBitReport]:
    """``loaded``'s model with int4 weights on the layers that cost least accuracy per byte
    saved, as few as bring its flash within ``profile``'s budget, measured in LiteRT on
    ``evaluation`` (:func:`sdk.convert.lowbit.int4_under_budget`)."""
    from devicefit.sdk.convert import lowbit

    return lowbit.int4_under_budget(
        float_tflite(loaded), Dataset(calibration, None, source), evaluation,
        loaded.predict(evaluation.x), profile, "candidate.tflite")


def weights_choice(loaded: LoadedModel, calibration: np.ndarray, source: str, profile: Profile,
                   io_type: str | None) -> WeightsChoice:
    """int8, int4 and (with a flash budget) auto when the profile's runtime takes int4
    weights on some layer of this model (asked of it), else int8 alone with the reason."""
    from devicefit.sdk.convert import lowbit

    if "int8" not in profile.quantization.schemes:
        return WeightsChoice(note="int4 weights keep int8 activations, and this profile "
                                  "allows no int8 scheme")
    quant = quantize.resolve(profile, "int8", io_type)
    try:
        lowbit.check_request(quant.scheme, quant.io_type, False)
    except UsageError as exc:
        return WeightsChoice(note=f"no int4 weights: {exc}")
    _, report = int4_weights(loaded, calibration, source, profile)
    if report.int4_layers:
        return WeightsChoice(INT4 if profile.budgets.flash_bytes is None else INT4_AUTO)
    reasons = sorted({layer.why for layer in report.layers if layer.why})
    why = "; ".join(reasons) if reasons else "the model has no layer the quantizer gives int4"
    log.info("int4 weights not searched: %s", why)
    return WeightsChoice(note=f"int4 weights not searched: {profile.runtime.name} takes them "
                              f"on no layer of this model ({why})")
