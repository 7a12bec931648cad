"""Which GPU path of LiteRT runs on this machine, and devicefit's GPU partition against it.

ai-edge-litert 2.3 ships a WebGPU accelerator (``libLiteRtWebGpuAccelerator.so``, Dawn
inside) that its CompiledModel API loads for ``HardwareAccelerator.GPU``. Dawn needs a
Vulkan adapter; on a machine without a GPU a software one may do. This script tries, each in
a child process of its own (a crash or hang is one line, not the script's end):

- ``default``: the Vulkan loader's own choice of driver;
- ``lavapipe``: Mesa's software Vulkan (``VK_ICD_FILENAMES`` = Debian's lvp ICD);
- ``swiftshader``: Chromium's SwiftShader Vulkan ICD (``/usr/lib/chromium``);
- ``analyzer``: TFLite's model analyzer in GPU compatibility mode
  (``_pywrap_analyzer_wrapper.ModelAnalyzer(path, True, True)``), which is not the delegate.

Then, on the first adapter that works, each model (the test zoo, and with ``--corpus`` the
public models of ``tests/corpus.py``) is compiled for GPU|CPU; the delegate prints its own
partition ("Following operations are not supported by GPU delegate: ... N operations will
run on the GPU, and the remaining M operations will run on the CPU.") or none when it takes
the whole graph. devicefit's prediction (``simulator.targets.gpu``) is set beside it: ops on
the GPU and the set of "OP: reason" lines, equal or not.

    .venv/bin/python benchmarks/probe_gpu_paths.py            # paths + the zoo
    .venv/bin/python benchmarks/probe_gpu_paths.py --corpus   # + the public models
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.targets.gpu.delegate import ICDS, ask_delegate  # noqa: E402
from devicefit.simulator.targets.gpu.partition import partition  # noqa: E402

ANALYZER = """
import sys
from ai_edge_litert import _pywrap_analyzer_wrapper as w
print(w.ModelAnalyzer(sys.argv[1], True, True))
"""

def analyzer_says(model: Path) -> str:
    done = subprocess.run([sys.executable, "-c", ANALYZER, str(model)], capture_output=True,
                          text=True, timeout=120)
    lines = (done.stdout + done.stderr).splitlines()
    gpu = [line for line in lines if "GPU" in line]
    return (gpu[-1] if gpu else (lines[-1] if lines else f"exit {done.returncode}")).strip()


def zoo_models() -> list[Path]:
    found = sorted((ROOT / "tests" / "artifacts" / "zoo").glob("*/*.tflite"))
    seen: dict[str, Path] = {}
    for p in found:  # one build of each zoo model
        seen.setdefault(p.name, p)
    return list(seen.values())


def corpus_models() -> list[Path]:
    from tests.corpus import corpus  # the pinned public models

    return [m.path for m in corpus()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="store_true", help="also the public models")
    args = parser.parse_args()
    models = zoo_models()
    print("GPU paths of ai-edge-litert here (model: " + models[0].name + ")")
    working = None
    for name, icd in ICDS.items():
        answer = ask_delegate(models[0], icd)
        print(f"  {name:12} {'RUNS on ' + answer.adapter if answer.ok else 'FAILS: ' + answer.error}")
        if answer.ok and working is None:
            working = icd
    print(f"  {'analyzer':12} {analyzer_says(models[0])}")
    if working is None:
        print("no GPU path runs here: nothing to compare")
        return 1
    if args.corpus:
        models += corpus_models()
    agree = 0
    print(f"\n{'model':52} {'delegate':>9} {'devicefit':>9}  same")
    for path in models:
        real = ask_delegate(path, working)
        report = partition(read_model(path))
        if not real.ok:
            print(f"{path.name[:52]:52} delegate failed: {real.error[:60]}")
            continue
        real_gpu = report.total_ops if real.gpu_ops is None else real.gpu_ops
        # The wheel's delegate (ML Drift) words some refusals its own way: compare the
        # refused operator types, and print both wordings where they differ.
        ours = frozenset(f"{o.op}: {o.reason}" for o in report.ops
                         if o.device == "cpu" and not o.reason.startswith("supported,"))
        same = (real_gpu == report.gpu_ops
                and {x.split(":")[0] for x in ours} == {x.split(":")[0] for x in real.unsupported})
        agree += same
        print(f"{path.name[:52]:52} {real_gpu:>5}/{report.total_ops:<3} "
              f"{report.gpu_ops:>5}/{report.total_ops:<3}  {'yes' if same else 'NO'}")
        if ours != real.unsupported:
            for line in sorted(real.unsupported - ours):
                print(f"    delegate only:  {line}")
            for line in sorted(ours - real.unsupported):
                print(f"    devicefit only: {line}")
    print(f"\n{agree} of {len(models)} models: the same number of ops on the GPU and the same "
          "refused operator types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
