"""The Arm Ethos-U target: models compiled by the real Vela compiler, judged as they ship.

On an Ethos-U profile (``runtime.name: ethos-u``, an ``ethos_u:`` section, see
:mod:`.config`) a plain int8 ``.tflite`` is compiled by Vela in a child process
(:mod:`.vela`) and the report describes the compiled file (:mod:`.analysis`): its TFLM arena
(the ``ethos-u`` op's scratch tensors are tensors of it, placed by Vela's offline plan), its
size as the flash figure, Vela's SRAM/flash/encoded-weight figures and cycles, the latency at
the profile's NPU clock plus devicefit's estimate for the operators left on the Cortex-M,
the user's operators split into NPU and CPU with Vela's reason for each CPU one, and op
support of the CPU part against TFLM's table (:mod:`.section`). A file Vela already compiled
is taken as it is. ``convert`` writes ``<out>_vela.tflite`` beside the int8 file
(:func:`.target.after_convert`). The functions live in :mod:`.target`.
"""

from __future__ import annotations

from devicefit.simulator.target import (
    AfterConvert,
    OpTable,
    Planner,
    Prepare,
    SectionMaker,
    Target,
    lazy,
    lazy_class,
)
from devicefit.simulator.targets.ethos_u.config import PROFILE_KEYS, SECTION, settings

TARGET = Target(
    name="ethos-u",
    title="Arm Ethos-U NPU (Vela) + TensorFlow Lite Micro",
    device_kinds=("mcu",),
    kernels=("cmsis-nn", "reference"),
    delegates=(),
    planner=lazy(Planner, "devicefit.simulator.targets.ethos_u.target:plan"),
    check_ops=lazy(OpTable, "devicefit.simulator.targets.ethos_u.target:check_ops"),
    # Nothing here runs the `ethos-u` op: its command stream needs the NPU (or Arm's FVP).
    runner=None,
    host_runtime=None,
    # The NPU takes int8 and int16 activations; a float model stays on the Cortex-M.
    quant_schemes=("int8", "int16x8"),
    int16_io=True,
    sparse_weights="Vela encodes weights its own way; TFLite's sparse format is not used",
    # Vela writes its own offline plan (the NPU scratch aliases the op's input and output).
    offline_plan=False,
    section=lazy(SectionMaker, "devicefit.simulator.targets.ethos_u.target:section"),
    section_type=lazy_class("devicefit.simulator.targets.ethos_u.section:EthosUSection"),
    profile_keys={SECTION: PROFILE_KEYS},
    settings=settings,
    after_convert=lazy(AfterConvert, "devicefit.simulator.targets.ethos_u.target:after_convert"),
    prepare=lazy(Prepare, "devicefit.simulator.targets.ethos_u.target:prepare"),
    compiled_op="ethos-u",
)
