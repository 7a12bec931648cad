"""The TFLM target's own profile keys: how far the device build's outputs may be from the
host run's (``--target-build``), and whether the device's build runs TFLM's look-up-table
compression (``runtime.compression``).

A device build computes with its own kernels (CMSIS-NN's integer LSTM, soft-float math on a
core without an FPU): its outputs can differ from the 64-bit host wheel's on the same
inputs. The verdict fails when an output differs by more than the profile allows::

    target_build:
      output_steps: 1         # integer outputs: at most this many quantization steps
      output_relative: 1e-5   # float outputs: at most this share of the largest magnitude

A model compressed by TFLM's compression tool (``tensorflow/lite/micro/compression``) keeps
its weights as look-up-table indices and a ``TFLM_DECODE`` custom operator before each
consumer, which decodes them into the arena. Only a TFLM build whose op resolver registers
that kernel (``AddDecode()``; TFLM's tree has it since 2025, older releases and vendor SDKs
do not) runs such a model, so a profile says so, default false::

    runtime:
      compression: true
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devicefit.simulator.infra.schema import Leaf, boolean, integer, number

if TYPE_CHECKING:  # the registry loads this module: it stays light
    from devicefit.simulator.report.report import OutputDiff

SECTION = "target_build"
PROFILE_KEYS: dict[str, dict[str, Leaf]] = {
    SECTION: {"output_steps": integer(0), "output_relative": number(0.0)},
    "runtime": {"compression": boolean()},
}


@dataclass(frozen=True)
class OutputTolerance:
    """How far each output of the device build may be from the host run's."""

    steps: int = 1
    relative: float = 1e-5

    def admits(self, diff: OutputDiff) -> bool:
        if diff.max_steps is not None:
            return 0 <= diff.max_steps <= self.steps
        return diff.relative <= self.relative

    def text(self) -> str:
        return f"{self.steps} step(s) for integer outputs, {self.relative:g} relative for float"


@dataclass(frozen=True)
class TflmSettings:
    """``Profile.target_settings`` of a TFLM profile."""

    tolerance: OutputTolerance = OutputTolerance()
    #: The device's TFLM build registers the DECODE kernel of TFLM's compression.
    compression: bool = False


def settings(values: Mapping[str, Mapping[str, Any]]) -> TflmSettings:
    """The typed settings from the values of the keys the profile sets."""
    own = values.get(SECTION, {})
    base = OutputTolerance()
    return TflmSettings(OutputTolerance(own.get("output_steps", base.steps),
                                        own.get("output_relative", base.relative)),
                        bool(values.get("runtime", {}).get("compression", False)))


def compression(profile_settings: object) -> bool:
    """Whether a profile's TFLM build runs compressed models (False for any other target)."""
    return isinstance(profile_settings, TflmSettings) and profile_settings.compression
