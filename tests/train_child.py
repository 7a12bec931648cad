"""Run ``sdk.train.fit`` the way ``convert --train`` and ``fit`` do, in a child process, and
report its peak RSS: the check that a plan's batch really fits.

Run as ``python -m tests.train_child '<json>'`` with ``model``, ``batch_size``,
``accumulation_steps``, ``effective_batch``, ``samples`` and ``epochs``; prints JSON with
the process's peak private memory from the moment TensorFlow is loaded (measured like the
plan's figures, ``sdk.train.measure.PeakMeter``) and the bytes of the training data it holds,
which the plan does not count (the plan is for training; the data set is the user's).
"""

from __future__ import annotations

import json
import sys


def main(request: dict) -> dict:
    import keras
    import numpy as np

    from devicefit.sdk.train import BatchPlan, TrainingMemoryModel, fit
    from devicefit.sdk.train.measure import PeakMeter

    meter = PeakMeter()
    meter.reset()
    model = keras.saving.load_model(request["model"], safe_mode=True, compile=False)
    b, steps = request["batch_size"], request["accumulation_steps"]
    plan = BatchPlan(batch_size=b, accumulation_steps=steps,
                     effective_batch=request["effective_batch"], estimated_peak_bytes=0,
                     memory_limit_bytes=0, memory_source="test", optimizer="adam",
                     dtype="float32", estimate=TrainingMemoryModel(model).estimate(b))
    rng = np.random.default_rng(0)
    n = request["samples"]
    x = rng.random((n, *model.inputs[0].shape[1:]), dtype=np.float32)
    y = rng.integers(0, int(model.outputs[0].shape[-1]), n)
    summary = fit(model, x, y, epochs=request["epochs"], plan=plan, optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return {"peak_bytes": meter.peak(), "data_bytes": int(x.nbytes + y.nbytes),
            "updates": summary["updates"], "batch_size": summary["batch_size"]}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
