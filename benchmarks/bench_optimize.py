"""Benchmark the arena optimizer (``devicefit optimize``) over chains and branched models.

For each model: TFLM's arena head before and after (predicted, and measured with the real
TFLM interpreter from the tflite-micro wheel, reference kernels), the lower bound (max live
bytes over steps, scratch included) for the file's operator order and for the best order,
the reduction, the gap of the measured head to the best-order bound (target: ≤ 2 %), the
time to optimize (order search + packing + rewrite, without the runtime checks) and the
time of the runtime checks (both files in TFLM and LiteRT, outputs bit-identical).

Models: the zoo's (built in code with the real converter: chains, residual, inception,
U-Net, interleaved branches, MobileNet v1/v2 at 96×96), three public MLPerf Tiny
architectures built by ``bench_latency.py`` (DS-CNN KWS, ResNet-8, FC auto-encoder; random
weights) and the public sine model that ships in the tflite-micro wheel. Last, the packer
alone on random DAGs, wider and more irregular than converted CNNs, against TFLM's greedy.

    .venv/bin/python benchmarks/bench_optimize.py [--profile NAME] [--json out.json]
        [--extra FILE_OR_DIR ...]   # more .tflite files, e.g. TFLM's example models
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.optimize import optimize_model_bytes  # noqa: E402
from devicefit.simulator.optimize.graph import OpGraph  # noqa: E402
from devicefit.simulator.optimize.packing import pack  # noqa: E402
from devicefit.simulator.optimize.reorder import best_order  # noqa: E402
from devicefit.simulator.plan.lifetimes import lower_bound  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.run.runtimes import run_model  # noqa: E402
from devicefit.simulator.targets.tflm.planner import greedy_plan  # noqa: E402
from tests.zoo import model_path  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_latency  # noqa: E402  (its MLPerf Tiny builders and cache)

ZOO = ["chain_int8", "chain_float32", "residual_int8", "branches_int8", "inception_int8",
       "unet_tconv_int8", "two_heads_int8", "mobilenet_v1_96_int8",
       "mobilenet_v2_96_int8"]
MLPERF_TINY = ["kws_dscnn", "ic_resnet8", "ad_autoencoder"]
TARGET_GAP_PCT = 2.0


def sine_model() -> Path:
    """The hello-world sine model shipped inside the tflite-micro wheel (found, not imported:
    the parent process never loads a native interpreter)."""
    spec = importlib.util.find_spec("tflite_micro")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("tflite-micro is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "python/tflite_micro/sine_float.tflite"


def bench_one(name: str, path: Path, profile) -> dict:
    data = path.read_bytes()
    started = time.perf_counter()
    _, r = optimize_model_bytes(data, profile, name=name)
    total = time.perf_counter() - started
    before = r.measured_head_before_bytes
    if before is None:  # unchanged: nothing ran yet; measure the file as it is
        before = run_model(path, "tflm", reference_kernels=True).arena_head_bytes
    after = r.measured_head_after_bytes if r.changed else before
    bound = r.bound_best_order_bytes
    return {
        "model": name, "operators": r.operators,
        "head_before": before, "head_after": after,
        "predicted_before": r.head_before_bytes, "predicted_after": r.head_after_bytes,
        "bound_file_order": r.bound_file_order_bytes, "bound_best_order": bound,
        "bound_exact": r.bound_exact,
        "reduction_pct": round(100.0 * (before - after) / before, 1) if before else 0.0,
        "gap_pct": round(100.0 * (after - bound) / bound, 2) if bound else 0.0,
        "what": " + ".join(w for w, on in (("reorder", r.order_changed),
                                           (f"offline plan ({r.plan_method})", r.offline_plan))
                           if on) or "unchanged",
        "optimize_ms": round(r.seconds * 1000, 1),
        "verify_s": round(total - r.seconds, 2),
        "identical": all(r.outputs_identical.values()) if r.outputs_identical else None,
    }


def random_dag(seed: int, ops: int = 30, window: int = 4) -> OpGraph:
    """A random single-output-per-op DAG: each op reads 1-2 of the last ``window`` tensors;
    tensor sizes 16 B-4.8 KB. Wider and more irregular than converted CNNs."""
    rng = random.Random(seed)
    sizes = {0: 16 * rng.randint(1, 300)}
    ins: list[tuple[int, ...]] = []
    for _ in range(ops):
        pool = list(sizes)[-window:]
        ins.append(tuple(rng.sample(pool, min(rng.choice([1, 1, 1, 2]), len(pool)))))
        sizes[len(sizes)] = 16 * rng.randint(1, 300)
    read = {t for i in ins for t in i}
    outs = tuple((t,) for t in range(1, ops + 1))
    return OpGraph(sizes, tuple(ins), outs, (0,) * ops, (0,),
                   tuple(t for t in range(1, ops + 1) if t not in read))


def random_dag_summary(n: int) -> str:
    """Packing alone (best order given): TFLM's greedy vs the optimizer, over ``n`` DAGs."""
    greedy = packed = bound = at_bound = 0
    started = time.perf_counter()
    for seed in range(n):
        g = random_dag(seed)
        buffers = g.buffers(best_order(g).order)
        b = lower_bound(buffers)
        g_head = max(o + x.size for o, x in zip(greedy_plan(buffers), buffers))
        p_head = min(pack(buffers)[0].head, g_head)
        greedy, packed, bound, at_bound = greedy + g_head, packed + p_head, bound + b, \
            at_bound + (p_head == b)
    per = (time.perf_counter() - started) / n
    return (f"{n} random 30-op DAGs (best order): TFLM greedy head {100 * (greedy / bound - 1):.1f} "
            f"% above the bound in total, optimizer {100 * (packed / bound - 1):.2f} %; at the "
            f"bound: {at_bound}/{n}; {per * 1000:.0f} ms per DAG")


def markdown(rows: list[dict]) -> str:
    head = ("| model | ops | head before (B) | head after (B) | bound, file order | "
            "bound, best order | reduction | gap to bound | what changed | optimize | "
            "run checks |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
    lines = []
    for r in rows:
        exact = "" if r["bound_exact"] else " (floor)"
        lines.append(
            f"| {r['model']} | {r['operators']} | {r['head_before']:,} | {r['head_after']:,} | "
            f"{r['bound_file_order']:,} | {r['bound_best_order']:,}{exact} | "
            f"{r['reduction_pct']:.1f} % | {r['gap_pct']:.2f} % | {r['what']} | "
            f"{r['optimize_ms']:.0f} ms | {r['verify_s']:.1f} s |")
    return head + "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="stm32l4r5-cortex-m4")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    ap.add_argument("--extra", type=Path, nargs="*", default=[],
                    help="more .tflite files or folders of them")
    ap.add_argument("--random-dags", type=int, default=40, metavar="N",
                    help="also pack N random DAGs (0: skip)")
    args = ap.parse_args()
    profile = load_profile(args.profile, [])
    models = [(n, model_path(n)) for n in ZOO]
    models += [(f"{n} (MLPerf Tiny)", bench_latency.model_path(n)) for n in MLPERF_TINY]
    models.append(("sine_float (tflite-micro wheel)", sine_model()))
    for extra in args.extra:
        files = sorted(extra.glob("*.tflite")) if extra.is_dir() else [extra]
        models += [(f.name, f) for f in files]
    rows = [bench_one(n, p, profile) for n, p in models]
    print(markdown(rows))
    misses = [r["model"] for r in rows if r["gap_pct"] > TARGET_GAP_PCT]
    changed = [r for r in rows if r["what"] != "unchanged"]
    print(f"models: {len(rows)}, rewritten: {len(changed)}, outputs bit-identical in TFLM and "
          f"LiteRT: {all(r['identical'] for r in changed)}; measured head within "
          f"{TARGET_GAP_PCT:g} % of the best-order bound: {len(rows) - len(misses)}/{len(rows)}"
          + (f" (missed: {', '.join(misses)})" if misses else ""))
    if args.random_dags:
        print(random_dag_summary(args.random_dags))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
