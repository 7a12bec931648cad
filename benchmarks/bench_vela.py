"""Ethos-U: the same public models through Vela's own CLI and through devicefit.

For each public int8 model of the corpus (tests/corpus.py: MLTK's MLPerf-Tiny-style models,
microWakeWord's streaming model) and each Ethos-U profile, it runs

* **Vela's CLI** (``vela`` of ethos-u-vela 5.2.0, the console script beside this Python), fed
  the ``.ini`` devicefit writes from the profile's ``ethos_u:`` section, and reads Vela's
  summary CSV and compiled file with nothing of devicefit's (``csv``, ``hashlib``);
* **devicefit** (``simulator.simulate``), which runs Vela in a child process itself;

and prints both side by side: SRAM, off-chip flash, encoded weights, total cycles, the NPU
time at the profile's clock, the partition (CPU operators in the compiled file) and whether
the compiled files are byte-identical. Then what devicefit adds: the TFLM arena of the
compiled model (the NPU scratch plus the Cortex-M side), flash with the runtime's code, the
Cortex-M part's latency, the verdict on the profile's budgets.

With ``--mlia PATH`` (Arm's ML Inference Advisor, ``mlia`` 0.12.2 + ``mlia-ethos-u`` 0.1.0
installed in a venv of their own: it brings its own Vela) it also runs ``mlia check
--target-profile ethos-u55-128 --performance --backend vela`` and compares it with devicefit
on a profile whose ``ethos_u:`` section is MLIA's (Vela's "Ethos_U55_High_End_Embedded" +
"Shared_Sram").

    .venv/bin/python benchmarks/bench_vela.py                       # Markdown tables
    .venv/bin/python benchmarks/bench_vela.py --mlia /path/to/venv/bin/mlia

Exit status 1 when a devicefit figure differs from Vela's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.simulate import simulate  # noqa: E402
from tests.corpus import corpus  # noqa: E402
from tests.vela_anchor import HIGH_END_PROFILE, vela_cli_for  # noqa: E402

MODELS = ("mltk_image_classification", "mltk_image_example1", "mltk_tflite_micro_speech",
          "mltk_anomaly_detection", "mww_okay_nabu")
PROFILES = ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u85-256")
@dataclass(frozen=True)
class Figures:
    sram: int
    flash: int
    weights: int
    cycles: int
    npu_ms: float
    cpu_ops: int
    sha: str


def kib(text: str) -> int:
    return round(float(text) * 1024)


def vela_figures(model: Path, profile: str, work: Path) -> tuple[Figures, list[dict[str, str]]]:
    """Vela's own command line on ``model`` with the profile's generated ``.ini``: its
    figures, and its per-layer CSV's rows."""
    out = vela_cli_for(model, profile, work, "--verbose-performance")
    row = out.summary
    cpu = sum(1 for sg in read_model(out.compiled).subgraphs for op in sg.operators
              if op.op_name != "CUSTOM:ethos-u")
    return Figures(kib(row["sram_memory_used"]), kib(row["off_chip_flash_memory_used"])
                   + kib(row["on_chip_flash_memory_used"]), int(row["total_npu_encoded_weights"]),
                   int(row["cycles_total"]), float(row["inference_time"]) * 1e3, cpu,
                   hashlib.sha256(out.compiled.read_bytes()).hexdigest()), out.per_layer


def layer_names(model: Path, s: dict, theirs: list[dict[str, str]]) -> tuple[list[int], bool]:
    """How devicefit names the user's layers, checked against the file and Vela's CLI:
    operators, those with an output tensor, those devicefit names by it, Vela's rows, those
    tied to an operator, rows whose output the file names, those tied to the operator
    writing it; and whether the rows are Vela's CLI's per-layer CSV, in order."""
    graphs = read_model(model).subgraphs
    file_names = [(sg.index, op.index, next((sg.tensors[t].name for t in op.outputs if t >= 0),
                                            "")) for sg in graphs for op in sg.operators]
    named = sum(p["name"] == n and bool(n) for p, (_, _, n) in
                zip(s["partition"], file_names, strict=True))
    writer = {n: (g, i) for g, i, n in file_names if n}
    rows = s["per_layer"]
    checkable = [r for r in rows if r["name"] in writer]
    agree = sum(writer[r["name"]] == (r["subgraph"], r["op_index"]) for r in checkable)
    same = [(r["NNG Operator"], r["Name"], int(r["Op Cycles"])) for r in theirs] == \
        [(r["vela_op"], r["name"], r["cycles"]) for r in rows]
    tied = sum(r["op_index"] is not None for r in rows)
    return [len(file_names), sum(bool(n) for _, _, n in file_names), named, len(rows), tied,
            len(checkable), agree], same


def devicefit(model: Path, profile: str, dirs: list[Path] | None = None):
    report = simulate(model, profile, profiles_dirs=dirs or []).to_dict()
    s = report["compatibility"]["ethos-u"]
    f = s["figures"]
    ours = Figures(f["sram_used_bytes"], f["off_chip_flash_used_bytes"]
                   + f["on_chip_flash_used_bytes"], f["encoded_weights_bytes"],
                   f["total_cycles"], s["latency"]["npu_ms"] if s["latency"] else s["npu_ms"],
                   sum(1 for sg in read_model(model).subgraphs for _ in sg.operators)
                   - s["npu_ops"], report["model"]["sha256"])
    return ours, report, s


def mlia(exe: Path, model: Path, work: Path) -> dict[str, float]:
    out = subprocess.run([str(exe), "check", str(model), "--target-profile", "ethos-u55-128",
                          "--performance", "--backend", "vela", "--json"], cwd=work,
                         capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(out.stdout)
    perf = next(r for r in result["results"] if r["kind"] == "performance")
    return {m["name"]: m.get("value") for m in perf["metrics"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlia", type=Path, help="an mlia executable (with mlia-ethos-u)")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--profiles", nargs="*", default=list(PROFILES))
    args = ap.parse_args()
    paths = {m.name: m.path for m in corpus(names=set(args.models))}
    mismatches = 0
    print("| model | profile | SRAM B (Vela / devicefit) | flash B | encoded weights B | "
          "cycles | NPU ms | CPU ops | same file |")
    print("|---|---|---|---|---|---|---|---|---|")
    added = []
    names: list[tuple[str, list[int], bool]] = []
    for name in args.models:
        for profile in args.profiles:
            with tempfile.TemporaryDirectory() as tmp:
                theirs, their_layers = vela_figures(paths[name], profile, Path(tmp))
            ours, report, s = devicefit(paths[name], profile)
            if profile == args.profiles[0]:
                names.append((name, *layer_names(paths[name], s, their_layers)))
            # devicefit's report is of the compiled model: its sha is the compiled file's.
            same = [theirs.sram == ours.sram, theirs.flash == ours.flash,
                    theirs.weights == ours.weights, theirs.cycles == ours.cycles,
                    abs(theirs.npu_ms - ours.npu_ms) <= 1e-6 * max(1.0, theirs.npu_ms),
                    theirs.cpu_ops == ours.cpu_ops, theirs.sha == ours.sha]
            mismatches += not all(same)
            print(f"| {name} | {profile} | {theirs.sram:,} / {ours.sram:,} | {theirs.flash:,} / "
                  f"{ours.flash:,} | {theirs.weights:,} / {ours.weights:,} | {theirs.cycles:,} / "
                  f"{ours.cycles:,} | {theirs.npu_ms:.3f} / {ours.npu_ms:.3f} | "
                  f"{theirs.cpu_ops} / {ours.cpu_ops} | {'yes' if same[-1] else 'NO'} |")
            budgets = {b["name"]: b["status"] for b in report["budgets"]}
            added.append((name, profile, report["memory"]["arena_bytes"],
                          report["memory"]["flash_bytes"], s["latency"], budgets,
                          report["verdict"], s["notes"]))
    print(f"\nrows where a devicefit figure differs from Vela's: {mismatches} of "
          f"{len(args.models) * len(args.profiles)}\n")
    print("| model | profile | TFLM arena B | flash B (+code) | NPU ms + Cortex-M ms = latency"
          " | budgets | verdict |")
    print("|---|---|---|---|---|---|---|")
    for name, profile, arena, flash, lat, budgets, verdict, _ in added:
        split = (f"{lat['npu_ms']:.3f} + {lat['cpu_ms']:.3f} = {lat['total_ms']:.3f}" if lat
                 else "no estimate")
        judged = ", ".join(f"{k} {v}" for k, v in budgets.items())
        print(f"| {name} | {profile} | {arena:,} | {flash:,} | {split} | {judged} | {verdict} |")
    print(f"\nYour layers ({args.profiles[0]}): each operator of the file by its output "
          "tensor, each of Vela's per-layer rows tied to one (Vela's operator database); where "
          "a row's output is a tensor the file names, the operator writing it is the one it is "
          "tied to; the rows equal Vela's CLI's per-layer CSV\n")
    print("| model | operators | with an output tensor | named by it | Vela's rows | "
          "tied to an operator | rows whose output the file names | tied to its writer | "
          "= Vela CLI's CSV |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (ops, outputs, named, rows, tied, checkable, agree), same in names:
        mismatches += named != outputs or tied != rows or agree != checkable or not same
        print(f"| {name} | {ops} | {outputs} | {named} | {rows} | {tied} | {checkable} | "
              f"{agree} | {'yes' if same else 'NO'} |")
    if args.mlia:
        print("\n| model | MLIA total cycles / devicefit | MLIA SRAM B / devicefit | "
              "MLIA off-chip flash B / devicefit | MLIA encoded weights B / devicefit |")
        print("|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "mlia-ethos-u55-128.yaml").write_text(HIGH_END_PROFILE)
            for name in args.models:
                m = mlia(args.mlia, paths[name], Path(tmp))
                ours, _, _ = devicefit(paths[name], "mlia-ethos-u55-128", [Path(tmp)])
                row = [(int(m["total_cycles"]), ours.cycles), (int(m["sram_memory_used"]), ours.sram),
                       (int(m["off_chip_flash_memory_used"]), ours.flash),
                       (int(m["total_npu_encoded_weights"]), ours.weights)]
                mismatches += any(a != b for a, b in row)
                print(f"| {name} | " + " | ".join(f"{a:,} / {b:,}" for a, b in row) + " |")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
