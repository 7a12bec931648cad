"""Instructions the int4 and DECODE kernel paths execute on TFLM's Cortex-M4 builds (issue 47).

What grounds the cost model's int4 and DECODE figures (``simulator/estimate/latency_data/
kernels.yaml``, ``int4`` and ``decode``): ``make demo``'s digits CNN converted three times for
``stm32l4r5-cortex-m4`` (int8 weights, ``--weights int4``, ``--weights lut4``), each exported
and built for the Cortex-M4 with CMSIS-NN and with TFLM's reference kernels
(``simulator/targets/tflm/build.py``), then run once through its export (AllocateTensors and
one Invoke) under ``qemu-arm`` with a TCG plugin that counts the guest instructions of every
translation block (``benchmarks/qemu_insn_count.c``, built here with the host's ``cc``). Each
block is charged to the function its start address lies in (the ELF's symbols), and the
functions to the kernel they belong to (:data:`GROUPS`).

The figures are **instruction counts under QEMU, not cycles**: the M4 issues one instruction
a cycle at best; loads, multiplies with accumulate and taken branches take more, and flash
wait states are not modelled. Ratios between two paths on one build are what the cost model
takes from them.

    .venv/bin/python benchmarks/bench_int4_insns.py --tflm DIR [--out DIR] [--json FILE] \
        [--weights int8,int4,lut4] [--kernels cmsis-nn,reference] [--demo build/demo]

``--out`` keeps the converted models (default: a temporary folder; a model already there is
reused); the builds are cached as ``simulate --target-build`` caches them
(``DEVICEFIT_CACHE``); ``--demo`` is where ``make demo`` wrote the Keras model and data.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLUGIN_SOURCE = Path(__file__).with_name("qemu_insn_count.c")
PROFILE = "stm32l4r5-cortex-m4"
#: ``convert --weights`` values (lut4 needs a build that registers DECODE).
VARIANTS = ("int8", "int4", "lut4")
KERNELS = ("cmsis-nn", "reference")
#: Kernel groups, by the functions each runs (first match wins; the rest is "other":
#: the interpreter, AllocateTensors, the C library).
GROUPS = (
    ("unpack int4", r"UnpackDenseInt4IntoInt8"),
    ("decode", r"DecodeState|DecompressToBuffer"),
    ("conv", r"convolve|mat_mult_kernel|q7_to_q15|s8_to_s16|ConvPerChannel"),
    ("fully_connected", r"vec_mat_mult|fully_connected|FullyConnected"),
    ("other kernels", r"^arm_|reference_ops|reference_integer_ops"),
)


@dataclass(frozen=True)
class Symbol:
    start: int
    size: int
    name: str


def symbols(elf: Path) -> list[Symbol]:
    """The ELF's function symbols, sorted by address (``arm-none-eabi-nm``, demangled)."""
    out = subprocess.run(["arm-none-eabi-nm", "-S", "-C", "--defined-only", str(elf)],
                         capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[2] in "tTwW":
            found.append(Symbol(int(parts[0], 16) & ~1, int(parts[1], 16), parts[3]))
    return sorted(found, key=lambda s: s.start)


def per_function(counts: str, syms: list[Symbol]) -> Counter[str]:
    """Instructions executed per function from the plugin's "start insns executions" lines."""
    starts = [s.start for s in syms]
    total: Counter[str] = Counter()
    for line in counts.splitlines():
        start, insns, runs = line.split()
        address = int(start, 16)
        i = bisect.bisect_right(starts, address) - 1
        inside = i >= 0 and address < syms[i].start + max(syms[i].size, 1)
        total[syms[i].name if inside else "?"] += int(insns) * int(runs)
    return total


def grouped(functions: Counter[str]) -> dict[str, int]:
    out = {name: 0 for name, _ in GROUPS} | {"other": 0}
    for fn, n in functions.items():
        group = next((g for g, pattern in GROUPS if re.search(pattern, fn)), "other")
        out[group] += n
    return out


def plugin(folder: Path) -> Path:
    lib = folder / "qemu_insn_count.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(PLUGIN_SOURCE)],
                   check=True)
    return lib


def profile_file(folder: Path, weights: str, kernels: str) -> Path:
    """:data:`PROFILE` with ``kernels``, registering DECODE for the lut4 model."""
    path = folder / f"{weights}-{kernels}.yaml"
    decode = ", compression: true" if weights == "lut4" else ""
    path.write_text(f"extends: {PROFILE}\nruntime: {{kernels: {kernels}{decode}}}\n")
    return path


def convert(weights: str, folder: Path, demo: Path) -> Path:
    """``make demo``'s digits CNN converted for :data:`PROFILE` with ``--weights weights``."""
    out = folder / f"digits_{weights}.tflite"
    if out.is_file():
        return out
    profile = profile_file(folder, weights, "cmsis-nn")
    cmd = [sys.executable, "-m", "devicefit", "convert", str(demo / "digits_cnn.keras"),
           "--profile", str(profile), "--io-type", "int8", "--weights", weights,
           "--calibration", str(demo / "digits_train.npz"), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench_int4_insns: convert --weights {weights} failed: "
                         f"{done.stderr.strip()[-300:]}")
    return out


def count(model_path: Path, weights: str, kernels: str, tflm: Path, lib: Path,
          work: Path) -> dict[str, Any]:
    """One model exported for the M4 with ``kernels``, built, and counted through one Invoke."""
    import numpy as np

    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.run.runtimes import input_specs, random_inputs
    from devicefit.simulator.simulate import static_report
    from devicefit.simulator.targets.tflm.build import TflmBuild, spec_for
    from devicefit.simulator.targets.tflm.checkout import checkout_methods
    from devicefit.simulator.targets.tflm.export import export_files, export_spec
    from devicefit.simulator.targets.tflm.measured import memory_map

    profile = load_profile(profile_file(work, weights, kernels))
    model = read_model(model_path)
    build = TflmBuild(spec_for(tflm, profile.device.cpu, kernels, profile.name))
    methods, source = checkout_methods(tflm)
    memory = static_report(model, profile).memory
    assert memory is not None
    spec = export_spec(model, profile, memory, methods, source)
    binaries = build.binaries(tuple(export_files(spec)),
                              tuple(r.method for r in spec.registrations), memory_map(profile))
    if isinstance(binaries, list):
        return {"weights": weights, "kernels": kernels, "error": f"no kernel for {binaries}"}
    inputs = work / "inputs.bin"
    inputs.write_bytes(b"".join(np.ascontiguousarray(a).tobytes()
                                for a in random_inputs(input_specs(model))))
    counts = work / f"counts-{weights}-{kernels}.txt"
    done = subprocess.run(["qemu-arm", "-cpu", "cortex-a15", "-plugin", f"{lib},out={counts}",
                           str(binaries.harness), "export", "-", inputs.name, "outputs.bin"],
                          cwd=work, capture_output=True, text=True, timeout=600)
    if " ok" not in done.stdout:
        return {"weights": weights, "kernels": kernels, "error": done.stdout[-300:]}
    functions = per_function(counts.read_text(), symbols(binaries.harness))
    return {"weights": weights, "kernels": kernels, "groups": grouped(functions),
            "total": sum(functions.values()), "top": functions.most_common(8),
            "macs": macs(model), "decoded_values": decoded_values(model)}


def macs(model: Any) -> dict[str, int]:
    """MACs of the conv and fully-connected layers (the groups' denominators)."""
    from devicefit.simulator.estimate.compute import op_work

    out = {"conv": 0, "fully_connected": 0}
    for work in op_work(model):
        kind = {"CONV_2D": "conv", "FULLY_CONNECTED": "fully_connected"}.get(work.op)
        if kind:
            out[kind] += work.macs
    return out


def decoded_values(model: Any) -> int:
    """Values the DECODE operators write per Invoke."""
    sg = model.main
    return sum(sg.tensors[t].num_elements for op in sg.operators
               if op.op_name == "CUSTOM:TFLM_DECODE" for t in op.outputs if t >= 0)


def unpacked_weights(model: Any) -> int:
    sg = model.main
    return sum(t.num_elements for t in sg.tensors if t.dtype == "int4" and t.has_data)


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| model | kernels | conv | fully connected | unpack int4 | decode | whole run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['weights']} | {r['kernels']} | {r['error']} | | | | |")
            continue
        g, m = r["groups"], r["macs"]
        conv = f"{g['conv']:,} ({g['conv'] / m['conv']:.2f}/MAC)" if m["conv"] else "—"
        fc = (f"{g['fully_connected']:,} ({g['fully_connected'] / m['fully_connected']:.2f}/MAC)"
              if m["fully_connected"] else "—")
        unpack = f"{g['unpack int4']:,}" if g["unpack int4"] else "—"
        decode = (f"{g['decode']:,} ({g['decode'] / r['decoded_values']:.2f}/value)"
                  if g["decode"] else "—")
        lines.append(f"| {r['weights']} | {r['kernels']} | {conv} | {fc} | {unpack} | {decode} "
                     f"| {r['total']:,} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tflm", type=Path, required=True, help="a TFLM checkout")
    ap.add_argument("--out", type=Path, help="keep the converted models here")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    ap.add_argument("--weights", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    ap.add_argument("--kernels", default=",".join(KERNELS), help="of " + ",".join(KERNELS))
    ap.add_argument("--demo", type=Path, default=ROOT / "build" / "demo",
                    help="make demo's folder (digits_cnn.keras, digits_train.npz)")
    args = ap.parse_args(argv)
    weights_list, kernels_list = args.weights.split(","), args.kernels.split(",")
    if not set(weights_list) <= set(VARIANTS) or not set(kernels_list) <= set(KERNELS):
        ap.error(f"--weights takes {', '.join(VARIANTS)}; --kernels {', '.join(KERNELS)}")
    from devicefit.simulator.read.reader import read_model

    with tempfile.TemporaryDirectory(prefix="bench-int4-insns-") as tmp:
        work = Path(tmp)
        models = args.out or work
        models.mkdir(parents=True, exist_ok=True)
        lib = plugin(work)
        rows = []
        for weights in weights_list:
            path = convert(weights, models, args.demo)
            for kernels in kernels_list:
                row = count(path, weights, kernels, args.tflm, lib, work)
                row["unpacked_weights"] = unpacked_weights(read_model(path))
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
    print("\n".join(table(rows)))
    if args.json:
        from devicefit.simulator.infra.fileio import write_atomic

        write_atomic(args.json, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
