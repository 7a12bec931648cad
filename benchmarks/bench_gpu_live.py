"""LiteRT's GPU delegate asked live, as ``simulate --run`` asks it on a GPU profile: its
partition against devicefit's prediction, fp16 against fp32, and the time per ask.

For each float model — the test zoo's, the digits demo CNN (float32 and float16 weights,
converted here by ``devicefit convert`` for the GPU profile, on its 360 test images with their labels) and, with
``--corpus``, the float public models of ``tests/corpus.py`` — one child
(``simulator/targets/gpu/live.py``) compiles the model for GPU|CPU on Chromium's SwiftShader
Vulkan adapter and runs the same inputs on the CPU in fp32 (XNNPACK, the reference), on the
CPU with XNNPACK's FORCE_FP16 (fp16 tensors) and through the GPU path. Printed: the ops the
delegate put on the GPU and the prediction, then each way's max |diff|, SQNR and top-1
agreement against fp32 (accuracy too where labels exist), and the seconds the child took.
Also the check that the GPU path computes in fp32 on this adapter: a chain whose values
pass fp16's largest (65504) comes out finite through it. On a model whose weights are made
by DENSIFY → DEQUANTIZE the GPU path runs a second time, the CPU's ops on LiteRT's builtin
kernels (``live.ways_for``: LiteRT's XNNPACK leaves such weights unwritten for a GPU op,
``benchmarks/repro_xnnpack_densify.py``): its column, and the report's cause under the row.

    .venv/bin/python benchmarks/bench_gpu_live.py            # zoo + digits (about 3 min)
    .venv/bin/python benchmarks/bench_gpu_live.py --corpus   # + the public float models
    .venv/bin/python benchmarks/bench_gpu_live.py --only if_float32 mp_pose_detection
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.read.model import Model  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.run.runtimes import RunSetup  # noqa: E402
from devicefit.simulator.targets.gpu.live import (  # noqa: E402
    WAYS,
    LiveDelegate,
    OutputAgreement,
    precision_check,
    run_live,
)
from devicefit.simulator.targets.gpu.partition import partition  # noqa: E402
from devicefit.simulator.targets.gpu.runner import answered, eval_precision  # noqa: E402

PROFILE = load_profile(ROOT / "device_profiles" / "android-gpu-adreno.yaml")
ZOO = ("chain_float32", "chain_float16", "gap_float32", "if_float32", "dynamic_float32")


def is_float(model: Model) -> bool:
    """Float activations and no integer weights (a hybrid or quantized model is not)."""
    sg = model.main
    return (all(sg.tensors[i].dtype == "float32" for i in sg.inputs)
            and not any(t.dtype in ("int8", "uint8", "int16") for t in sg.tensors))


def digits_models(folder: Path) -> tuple[list[Path], np.ndarray, np.ndarray]:
    """The demo's digits CNN converted by ``devicefit convert`` for the GPU profile as
    float32 and float16, and its test set."""
    from examples.digits import cached_cnn, load_digits

    keras_model = cached_cnn(ROOT / "tests" / "artifacts" / "convert")
    data = load_digits()
    files = data.save_npz(folder)
    paths = []
    for scheme in ("float32", "float16"):
        path = folder / f"digits_{scheme}.tflite"
        subprocess.run([sys.executable, "-m", "devicefit", "convert", str(keras_model),
                        "--profile", "android-gpu-adreno", "--scheme", scheme,
                        "--calibration", str(files["train"]), "-o", str(path)],
                       check=True, capture_output=True)
        paths.append(path)
    return paths, data.x_test, data.y_test


def _cell(way: OutputAgreement | None) -> str:
    if way is None:
        return f"{'-':>30}"
    if way.error:
        return f"{'failed':>30}"
    top1 = "-" if way.top1_agreement is None else f"{way.top1_agreement:.1%}"
    sqnr = "exact" if way.sqnr_db is None else f"{way.sqnr_db:.1f}"
    return (f"{way.max_abs_diff:>9.2g} {sqnr:>7} {top1:>6}"
            + (f" {way.nonfinite}inf" if way.nonfinite else ""))


def row(name: str, model: Model, live: LiveDelegate) -> str:
    predicted = partition(model, PROFILE)
    asked = (f"{live.total_ops if live.gpu_ops is None else live.gpu_ops:>3}/"
             f"{predicted.total_ops:<3}" if not live.not_asked else "  failed")
    cells = [f"{name[:34]:34}", f"{asked:>8}", f"{predicted.gpu_ops:>3}/{predicted.total_ops:<3}",
             "yes" if not live.disagreements and not live.not_asked else "NO "]
    check = live.precision
    if check is None:
        return "  ".join([*cells, (live.not_asked or live.not_checked)[:70]])
    # A third way only where the weights are made by DENSIFY → DEQUANTIZE: "-" elsewhere.
    cells += [_cell(way) for way in (*check.ways, None)[:3]]
    if check.reference_accuracy is not None:
        cells.append("acc " + " / ".join(f"{a:.1%}" for a in (
            check.reference_accuracy, *(w.accuracy or 0.0 for w in check.ways))))
    cells.append(f"{live.seconds:5.1f} s")
    return "  ".join(cells) + (f"\n    cause: {check.cause}" if check.cause else "")


def one_input(path: Path) -> tuple[Model, LiveDelegate]:
    """The ask ``simulate --run`` makes, on one random input (seed 0)."""
    model = read_model(path)
    run = run_live(model, RunSetup(model).input_request, "fp16", 120)
    check = precision_check(run, model, "random, seed 0", 1)
    return model, answered(partition(model, PROFILE), run, check)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="store_true", help="also the public float models")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="only these zoo or corpus models (no digits, no FC chain)")
    args = parser.parse_args()
    print(f"{'model':34}  {'delegate':>8}  predict  same  "
          f"{WAYS['fp16'][:30]:>30}  {'GPU path (SwiftShader)':>30}  "
          f"{'same, CPU ops builtin kernels':>30}")
    print(f"{'':34}  {'':8}  {'':7}  {'':4}" + f"  {'max|diff|    SQNR   top-1':>30}" * 3)
    from tests.zoo import model_path

    for name in ZOO:
        if not args.only or name in args.only:
            print(row(name, *one_input(model_path(name))), flush=True)
    if not args.only:
        with tempfile.TemporaryDirectory() as tmp:
            paths, x, y = digits_models(Path(tmp))
            for path in paths:
                model = read_model(path)
                live = eval_precision(path, model, x, y, PROFILE, timeout_s=600)
                print(row(f"{path.stem} ({len(x)} test images)", model, live), flush=True)
            from tests.tflite_builder import dense_chain_model

            deep = Path(tmp) / "deep.tflite"
            deep.write_bytes(dense_chain_model(layers=6, width=64))
            print(row("FC chain 6x64 (values ~1e6 > 65504)", *one_input(deep)), flush=True)
    if args.corpus or args.only:
        from tests.corpus import corpus

        for m in corpus():
            if args.only and m.name not in args.only:
                continue
            model = read_model(m.path)
            if is_float(model):
                print(row(m.name, *one_input(m.path)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
