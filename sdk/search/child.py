"""The screen's TensorFlow child: ``python -m devicefit.sdk.search.child WORK`` builds and
converts every candidate of ``WORK/request.json`` (:mod:`sdk.search.screen` starts it and
judges what it writes). A module of its own, which the package does not import: ``-m``
runs it fresh."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.search.candidate import ArchCandidate
from devicefit.sdk.search.screen import ERROR_FILE, RESULTS_FILE
from devicefit.simulator import errors


def main(work_dir: str) -> int:
    """Build and convert every candidate of ``WORK/request.json``; a candidate that fails
    is a line with its error, a family that cannot be imported ends the batch."""
    from devicefit.sdk.convert import loading, quantize
    from devicefit.sdk.search.families import builder, built

    work = Path(work_dir)
    request = json.loads((work / "request.json").read_text())
    # float32 for the candidates the parent writes with int4 weights (AI Edge Quantizer
    # quantizes the float model), int8 for the others.
    settings = quantize.QuantSettings("float32", "float32", True) if request.get("float") \
        else quantize.QuantSettings("int8", request["io_type"], request["per_channel"])
    rng = np.random.default_rng(request["seed"])
    with open(work / RESULTS_FILE, "w", buffering=1) as out:
        for index, entry in enumerate(request["candidates"]):
            started = time.perf_counter()
            try:
                cand = ArchCandidate.from_dict(entry)
                build = builder(cand.family)
            except errors.UsageError as exc:
                (work / ERROR_FILE).write_text(json.dumps({"message": str(exc)}))
                return 2
            try:
                model = built(build, cand.family, cand.params, request["seed"])
                like_trained(model, rng)
                calibration = rng.standard_normal(
                    (request["samples"], *cand.params.input_shape)).astype(np.float32)
                tflite = quantize.to_tflite(loading.load(model), settings,
                                            None if request.get("float") else calibration)
            except Exception as exc:  # noqa: BLE001 - one candidate's failure is its verdict
                traceback.print_exc()
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                out.write(json.dumps({"index": index, "error":
                                      f"{type(exc).__name__}: {message}"[:300]}) + "\n")
                continue
            (work / f"{index:04d}.tflite").write_bytes(tflite)
            out.write(json.dumps({"index": index, "parameters": int(model.count_params()),
                                  "seconds": time.perf_counter() - started}) + "\n")
    return 0


def like_trained(model: Any, rng: Any) -> None:
    """Move every constant weight array off its initial value (biases and BatchNorm's beta
    and mean at 0, gamma and variance at 1) by a little noise, as training does. Untouched,
    the biases folded from them are all zero, which the converter stores once for all
    layers, and BatchNorm's scale by 1 folds away and out of the tensor names: the file
    would be smaller than the trained model's (2.4 KB of 8.3 KB for mbv2 8x8x1 w0.25 d1-1),
    whose structure, buffers and names are otherwise the same."""
    for weight in model.weights:
        value = weight.numpy()
        if value.size and (not value.any() or (value == 1).all()):
            noise = 0.01 * rng.standard_normal(value.shape)
            weight.assign((value + np.abs(noise) if (value == 1).all() else noise)
                          .astype(value.dtype))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
