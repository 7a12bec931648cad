"""Edge TPU partition: devicefit's prediction vs what the real compiler did.

Every public model whose uncompiled ``X.tflite`` and compiled ``X_edgetpu.tflite`` are both
in google-coral/test_data (release Grouper, compiler 16.0, and the older Frogfish, compiler
15.0), read from the local snapshot (``fetch github:google-coral/test_data`` puts it in
/work/.mirror; without it each pair is skipped with a message). The compiled file states
the partition exactly — the ops left beside its ``edgetpu-custom-op`` are the compiler's
CPU part, matched to the uncompiled model by output tensor name — and the parameter split
its package chose (``simulator.compat.edgetpu_compiled``). Per model: ops on the TPU / CPU
predicted and real, CPU share of the MACs, the verdict on ``coral-edgetpu`` (more than
``ops.max_cpu_share`` of the MACs on the CPU fails) and the parameter bytes.

    .venv/bin/python benchmarks/bench_edgetpu_partition.py
    .venv/bin/python benchmarks/bench_edgetpu_partition.py --mirror PATH/TO/test_data.git

Blobs of 4 MiB or more are missing from the snapshot, so larger pairs (Inception,
EfficientDet, SSD ...) are not run. The recorded compiler logs of tests/fixtures/edgetpu
(no model beside them) are parsed and their cache figures printed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.compat.edgetpu import (  # noqa: E402
    cpu_work,
    parse_compiler_log,
    partition,
)
from devicefit.simulator.compat.edgetpu_compiled import COMPILED_OP  # noqa: E402
from devicefit.simulator.model import Model  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.reader import read_model  # noqa: E402

MIRROR = Path("/work/.mirror/google-coral+test_data/repo")
#: (release, commit, compiler) of google-coral/test_data.
RELEASES = (("Grouper", "104342d2d3480b3e66203073dac24f4e2dbb4c41", "16.0"),
            ("Frogfish", "c21de4450f88a20ac5968628d375787745932a5a", "15.0"))
FIXTURES = ROOT / "tests" / "fixtures" / "edgetpu"


@dataclass(frozen=True)
class Row:
    model: str
    compiler: str
    predicted: tuple[int, int]
    real: tuple[int, int]
    same_ops: bool
    predicted_share: float
    real_share: float
    predicted_verdict: str
    real_verdict: str
    predicted_params: tuple[int, int]
    real_params: tuple[int, int]


def _git(mirror: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(mirror), *args], capture_output=True,
                          check=True).stdout


def pairs(mirror: Path, commit: str) -> list[tuple[str, str]]:
    """(uncompiled, compiled) paths at ``commit`` whose blobs the snapshot holds."""
    listing = _git(mirror, "ls-tree", "-r", "-l", commit).decode().splitlines()
    sizes = {}
    for line in listing:
        meta, path = line.split("\t", 1)
        size = meta.split()[3]
        sizes[path] = int(size) if size.isdigit() else 0
    out = []
    for path in sorted(sizes):
        if path.endswith("_edgetpu.tflite"):
            src = path.removesuffix("_edgetpu.tflite") + ".tflite"
            if src in sizes:
                out.append((src, path))
    return out


def _blob(mirror: Path, commit: str, path: str, tmp: Path) -> Path | None:
    try:
        data = _git(mirror, "show", f"{commit}:{path}")
    except subprocess.CalledProcessError:
        return None  # a blob of 4 MiB or more: not in the snapshot
    out = tmp / commit[:7] / path
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return out


def real_cpu_ops(model: Model, compiled: Model) -> set[int]:
    """Ops of ``model`` the compiler left on the CPU: those whose outputs ``compiled`` still
    computes outside its edgetpu-custom-op (tensor names survive compilation)."""
    sg = compiled.main
    names = {sg.tensors[t].name for op in sg.operators
             if op.op_name != f"CUSTOM:{COMPILED_OP}" for t in op.outputs}
    return {op.index for op in model.main.operators
            if any(model.main.tensors[t].name in names for t in op.outputs)}


def run_pair(src: Path, comp: Path, name: str, compiler: str, profile) -> Row | str:
    """The row of one pair, or why the files are no pair (the compiled one was made from
    another version of the graph)."""
    model, compiled = read_model(src), read_model(comp)
    real_cpu = real_cpu_ops(model, compiled)
    left = sum(op.op_name != f"CUSTOM:{COMPILED_OP}" for op in compiled.main.operators)
    if len(real_cpu) != left:
        return (f"{name}: not the uncompiled twin of its compiled file ({left} CPU ops in the "
                f"compiled file, {len(real_cpu)} of them found in the uncompiled one)")
    predicted = partition(model, profile)
    pred_cpu = {p.index for p in predicted.ops if p.device == "cpu"}
    n = len(model.main.operators)
    real_placements = [p.__class__(**{**p.__dict__, "device": "cpu" if p.index in real_cpu
                                      else "tpu"}) for p in predicted.ops]
    real_share, _ = cpu_work(model, real_placements)
    limit = profile.ops.max_cpu_share
    real_report = partition(compiled, profile)

    def verdict(share: float, tpu_ops: int) -> str:
        return "FAIL" if tpu_ops == 0 or share > limit else "PASS"

    return Row(
        model=name, compiler=compiler,
        predicted=(predicted.mapped_ops, predicted.cpu_ops), real=(n - len(real_cpu),
                                                                   len(real_cpu)),
        same_ops=pred_cpu == real_cpu,
        predicted_share=predicted.cpu_share or 0.0, real_share=real_share,
        predicted_verdict=verdict(predicted.cpu_share or 0.0, predicted.mapped_ops),
        real_verdict=verdict(real_share, n - len(real_cpu)),
        predicted_params=(predicted.onchip_param_bytes, predicted.offchip_param_bytes),
        real_params=(real_report.onchip_param_bytes, real_report.offchip_param_bytes))


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def table(rows: list[Row]) -> list[str]:
    lines = ["| model | compiler | TPU/CPU ops predicted | real | same ops | CPU share "
             "predicted | real | verdict predicted | real | params cached/streamed KiB "
             "predicted | real (package) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.compiler} | {r.predicted[0]}/{r.predicted[1]} | "
            f"{r.real[0]}/{r.real[1]} | {'yes' if r.same_ops else 'NO'} | "
            f"{r.predicted_share:.1%} | {r.real_share:.1%} | {r.predicted_verdict} | "
            f"{r.real_verdict} | {_kib(r.predicted_params[0])}/{_kib(r.predicted_params[1])} | "
            f"{_kib(r.real_params[0])}/{_kib(r.real_params[1])} |")
    return lines


def log_lines() -> list[str]:
    lines = ["| log | compiler | TPU/CPU ops | on-chip used | on-chip remaining | streamed |",
             "|---|---|---|---|---|---|"]
    for path in sorted(FIXTURES.glob("*.txt")) + sorted(FIXTURES.glob("*.log")):
        log = parse_compiler_log(path.read_text(encoding="utf-8"))

        def kib(n: int | None) -> str:
            return "-" if n is None else _kib(n) + " KiB"
        lines.append(f"| {path.name} | {log.version} | {log.tpu_ops}/{log.cpu_ops} | "
                     f"{kib(log.on_chip_used_bytes)} | {kib(log.on_chip_remaining_bytes)} | "
                     f"{kib(log.off_chip_bytes)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", type=Path, default=MIRROR,
                    help="bare git dir of google-coral/test_data")
    args = ap.parse_args(argv)
    profile = load_profile("coral-edgetpu")
    rows: list[Row] = []
    if not args.mirror.is_dir():
        print(f"skipped: no snapshot of google-coral/test_data at {args.mirror}")
    else:
        with tempfile.TemporaryDirectory(prefix="devicefit-etpu-pairs-") as tmp:
            for release, commit, compiler in RELEASES:
                for src, comp in pairs(args.mirror, commit):
                    a = _blob(args.mirror, commit, src, Path(tmp))
                    b = _blob(args.mirror, commit, comp, Path(tmp))
                    if a is None or b is None:
                        print(f"skipped: {release} {comp}: not in the snapshot (>= 4 MiB)",
                              file=sys.stderr)
                        continue
                    row = run_pair(a, b, f"{src} ({release})", compiler, profile)
                    if isinstance(row, str):
                        print(f"skipped: {row}", file=sys.stderr)
                    else:
                        rows.append(row)
    print("\n".join(table(rows)))
    print()
    same = sum(r.same_ops for r in rows)
    verdicts = sum(r.predicted_verdict == r.real_verdict for r in rows)
    print(f"{same} of {len(rows)} partitions and {verdicts} of {len(rows)} verdicts agree")
    print()
    print("\n".join(log_lines()))
    return 0 if rows and same == len(rows) and verdicts == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
