"""``devicefit bench --gpu`` end to end through the tests' stand-in phone, whose GPU delegate
is LiteRT's own GPU accelerator on this machine (ML Drift on Chromium's SwiftShader Vulkan
driver, ``simulator/targets/gpu/delegate.py``): for each test-zoo model, what bench reads
from the delegate's log in benchmark_model's format (ops on the GPU, partitions, refused op
types) beside the partition devicefit predicts, and whether the CPU run beside the GPU got
its estimate. There is no phone here: the partition is a real runtime's, the times are this
host's CPU (LiteRT), so no time is reported.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_gpu_bench.py [--limit N] [--rules]

``--rules``: the stand-in's delegate follows devicefit's own rules instead (a check of the
plumbing: every model must agree).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.probe_gpu_paths import zoo_models  # noqa: E402
from devicefit.sdk.bench import bench  # noqa: E402
from devicefit.sdk.bench.compare import compare  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.simulate import simulate  # noqa: E402

PROFILE = "android-gpu-adreno"
#: The props of the stand-in phone (tests/sdk/bench/test_bench.py's).
PROPS = {"ro.product.cpu.abi": "arm64-v8a", "ro.product.cpu.abilist": "arm64-v8a",
         "ro.product.model": "stand-in phone"}


def stand_in(folder: Path, gpu: str) -> tuple[Path, Path]:
    """The fake adb (a wrapper) and an arm64 ELF header standing for benchmark_model."""
    storage = folder / "device"
    storage.mkdir()
    config = folder / "fake_adb.json"
    config.write_text(json.dumps({"python": sys.executable, "log": "", "devices": [
        {"serial": "STANDIN", "state": "device", "storage": str(storage), "props": PROPS,
         "tools": ["sha256sum", "stat"], "benchmark": {"gpu": gpu}}]}))
    os.environ["FAKE_ADB_CONFIG"] = str(config)
    adb = folder / "adb"
    adb.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                   f"{shlex.quote(str(ROOT / 'tests' / 'fakes' / 'fake_adb.py'))} \"$@\"\n")
    adb.chmod(0o755)
    binary = folder / "android_aarch64_benchmark_model"
    header = bytearray(64)
    header[:6], header[16:18], header[18:20] = b"\x7fELF\x02\x01", b"\x03\x00", b"\xb7\x00"
    binary.write_bytes(bytes(header))
    return adb, binary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="only the first N zoo models")
    parser.add_argument("--rules", action="store_true",
                        help="the stand-in's delegate follows devicefit's rules")
    args = parser.parse_args()
    # Stopped (a CI job cancelled), the temporary folder and the stand-in's files go too.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    profile = load_profile(PROFILE)
    rows, agree, compared, failed = [], 0, 0, []
    with tempfile.TemporaryDirectory(prefix="devicefit-gpubench-") as tmp:
        adb, binary = stand_in(Path(tmp), "rules" if args.rules else "litert")
        for model in zoo_models()[:args.limit]:
            try:
                result = bench(model, profile, benchmark_binary=binary, adb=str(adb), runs=2,
                               warmup=1)
            except Exception as exc:  # noqa: BLE001 - a model the stand-in cannot run: a row
                failed.append(f"{model.stem}: {str(exc).splitlines()[0][:160]}")
                continue
            result = compare(result, simulate(model, profile, bench=result), profile)
            p, beside = result.partition, result.beside
            assert p is not None and beside is not None and beside.vs_estimate is not None
            compared += p.agree is not None
            agree += bool(p.agree)
            types = "=" if p.measured_refused == p.predicted_refused else (
                f"phone {','.join(p.measured_refused) or '-'} / "
                f"predicted {','.join(p.predicted_refused) or '-'}")
            rows.append(f"| {model.stem} | {p.total_ops} | {p.measured_gpu_ops} / "
                        f"{p.predicted_gpu_ops} | {p.measured_partitions} / "
                        f"{p.predicted_partitions} | {types} | "
                        f"{'yes' if p.agree else 'no' if p.agree is False else 'not said'} | "
                        f"{'yes' if beside.vs_estimate.estimated_ms else 'no'} |")
    print("| model | ops | on the GPU: phone / predicted | partitions: phone / predicted | "
          "refused op types | agree | CPU run estimated |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print(f"\n{agree} of {compared} models agree (ops on the GPU, partitions and refused op "
          f"types); {len(rows)} benched, {len(failed)} not run")
    for line in failed:
        print(f"- not run: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
