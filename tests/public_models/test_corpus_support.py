"""Op support on the real public corpus (issue 16, 30): for every model, the static answer of
the TFLM table (MCU profile) and of the LiteRT checks (phone profile, XNNPACK), alone and
corrected by the per-operator probe, is what the real interpreter does with the file — load, prepare and one invoke, in a child process.
A model the check passes but the runtime refuses is a false pass; the reverse a false fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.run.runtimes import run_model
from tests.corpus import INPUT_SHAPES, MODELS, corpus

PROFILES = {"tflm": "stm32l4r5-cortex-m4", "litert": "android-arm64-cpu"}


@pytest.mark.parametrize("runtime", sorted(PROFILES))
@pytest.mark.parametrize("name", [m.name for m in MODELS])
def test_static_op_support_matches_the_runtime(name, runtime):
    [m] = corpus(names=[name])
    model = read_model(m.path)
    profile = load_profile(PROFILES[runtime])
    # The op tables alone, and devicefit's default answer: the tables corrected by the
    # runtime asked per operator signature (simulator/run/probe.py). Both must hold.
    answers = {"table": check_ops(model, profile), "probe": check_ops(model, profile, probe=True)}
    shape = INPUT_SHAPES.get((name, runtime))
    inputs = [np.zeros(shape, np.float32)] if shape else None
    try:
        run_model(m.path, runtime, inputs=inputs, runs=1, warmup=0, timeout_s=120)
        refused = None
    except RuntimeFailure as exc:
        refused = str(exc)
    for how, static in answers.items():
        assert not (static.supported and refused), (
            f"false pass ({how}): {runtime} refuses it: {refused}")
        assert not (refused is None and not static.supported), (
            f"false fail ({how}): {runtime} runs it, the check says {static.summary()}")
