"""Scale: time and peak memory of ``simulate``, ``optimize`` and ``check`` as the work grows,
and the growth exponent between sizes.

Each run is a fresh ``devicefit`` process, as CI starts it. Its peak memory is that of the
whole process tree (the command, the zygotes and the runtime children it forks): the
proportional set size (PSS, so pages a fork shares are counted once) of every process in
the tree, summed, sampled every 20 ms; beside it the largest single process
(``ru_maxrss`` of the tree). The growth exponent between two sizes is
``log(t2 / t1) / log(n2 / n1)``: 1 is linear, 2 quadratic.

- ``simulate``: a chain of n RELU operators (``tests/hostile.py``), on ``esp32-s3``.
- ``optimize``: n operators in blocks whose file order can be improved (x → TANH, two
  PAD → RELU → SLICE branches of varying widths, their ADD; the file interleaves the
  branches, the best order runs one after the other), on ``esp32-s3``; its report says
  whether the order search finished or stopped at its budget.
- ``check``: a project of n targets (small chains, each on two MCU profiles) with
  ``--jobs 2``, ``--results`` and ``--html``.

Ratios are measured in one run, so the machine's load weighs on both sides alike.

    .venv/bin/python benchmarks/bench_scale.py [--ops 1000,10000] [--targets 100]
        [--commands simulate,optimize,check] [--json out.json]

The figures in docs/benchmarks.md: ``--ops 1000,10000,100000 --targets 100,1000``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEVICEFIT = [sys.executable, "-m", "devicefit"]
PROFILES = ("esp32-s3", "stm32l4r5-cortex-m4")
SAMPLE_SECONDS = 0.02


@dataclass(frozen=True)
class Run:
    seconds: float
    #: Peak of the tree's summed PSS, sampled (bytes).
    tree_peak: int
    #: ru_maxrss of the largest process of the tree (bytes).
    largest: int
    stdout: str
    #: The command's last line of stderr when it ended with a status other than 0 or 1.
    error: str | None = None


def _tree(root: int) -> list[int]:
    """``root`` and every process below it, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # ended while we looked
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(argv: list[str]) -> Run:
    """Seconds and peak memory of one fresh devicefit process running ``argv``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([*DEVICEFIT, *argv], stdout=out, stderr=err, cwd=ROOT)
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, sum(_pss(p) for p in _tree(proc.pid)))
            time.sleep(SAMPLE_SECONDS)
        seconds = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines() or [""]
        error = None if code in (0, 1) else f"status {code}: {lines[-1]}"
        return Run(seconds, peak, usage.ru_maxrss * 1024, out.read().decode(), error)


def block_graph(operators: int) -> bytes:
    """x → [TANH, PAD → RELU → SLICE on x, PAD → RELU → SLICE on the TANH, ADD] repeated (8
    operators a block, about ``operators`` in all), each PAD of its own width; the file
    interleaves the two branches (both padded tensors live at once), which the best order
    avoids."""
    from ai_edge_litert import schema_py_generated as fb

    from devicefit.simulator.read.writer import pack
    from tests.tflite_builder import F32, I32, _buffer, _opcode, _operator, _tensor

    op = fb.BuiltinOperator
    codes = [_opcode(c) for c in (op.PAD, op.RELU, op.SLICE, op.TANH, op.ADD)]
    tensors: list = []
    buffers: list = []
    ops: list = []

    def tensor(name: str, width: int) -> int:
        tensors.append(_tensor(name, (1, width), F32, 0))
        return len(tensors) - 1

    def const(name: str, values: list[int], shape: tuple[int, ...]) -> int:
        buffers.append(_buffer(np.array(values, np.int32).reshape(shape)))
        tensors.append(_tensor(name, shape, I32, len(buffers)))
        return len(tensors) - 1

    width = 16
    x = first = tensor("x", width)
    begin, size = const("begin", [0, 0], (2,)), const("size", [1, width], (2,))
    for k in range(max(1, operators // 8)):
        pad_a, pad_b = 16 * (1 + k % 7), 16 * (1 + 3 * k % 5)
        pads_a = const(f"pads_a{k}", [0, 0, 0, pad_a], (2, 2))
        pads_b = const(f"pads_b{k}", [0, 0, 0, pad_b], (2, 2))
        t = tensor(f"tanh{k}", width)
        a1, b1 = tensor(f"pad_a{k}", width + pad_a), tensor(f"pad_b{k}", width + pad_b)
        a2, b2 = tensor(f"relu_a{k}", width + pad_a), tensor(f"relu_b{k}", width + pad_b)
        a3, b3 = tensor(f"slice_a{k}", width), tensor(f"slice_b{k}", width)
        y = tensor(f"add{k}", width)
        ops += [_operator(3, [x], [t]), _operator(0, [x, pads_a], [a1]),
                _operator(0, [t, pads_b], [b1]), _operator(1, [a1], [a2]),
                _operator(1, [b1], [b2]), _operator(2, [a2, begin, size], [a3]),
                _operator(2, [b2, begin, size], [b3]),
                _operator(4, [a3, b3], [y], fb.BuiltinOptions.AddOptions, fb.AddOptionsT())]
        x = y
    sg = fb.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = tensors, ops, [first], [x]
    model = fb.ModelT()
    model.version, model.operatorCodes, model.subgraphs = 3, codes, [sg]
    model.buffers = [_buffer(), *buffers]
    return pack(model)


def simulate_scale(counts: list[int], folder: Path) -> list[dict]:
    from tests import hostile

    rows = []
    for n in counts:
        path = folder / f"chain{n}.tflite"
        path.write_bytes(hostile.relu_chain(n))
        r = run(["--max-ops", str(2 * n), "simulate", str(path), "--profile", "esp32-s3"])
        rows.append({"size": n, **_figures(r)})
    return rows


#: Seconds each verification run of ``optimize`` may take at the largest size.
VERIFY_TIMEOUT_S = 3600


def optimize_scale(counts: list[int], folder: Path) -> list[dict]:
    rows = []
    for n in counts:
        path = folder / f"blocks{n}.tflite"
        path.write_bytes(block_graph(n))
        # TFLM's own allocation, which verification runs twice, takes minutes at 100 k
        # operators: the timeout is the runtimes', the search keeps its step budget.
        r = run(["--max-ops", str(2 * n), "optimize", str(path), "--profile", "esp32-s3",
                 "--timeout", str(VERIFY_TIMEOUT_S), "--json", "-o",
                 str(folder / f"opt{n}.tflite")])
        if r.error:
            rows.append({"size": n, **_figures(r)})
            continue
        report = json.loads(r.stdout)
        rows.append({"size": report["operators"], **_figures(r),
                     "head_before": report["head_before_bytes"],
                     "head_after": report["head_after_bytes"],
                     "search_states": report["search_states"],
                     "search_steps": report["search_steps"],
                     "search_budget": report["search_step_budget"],
                     "search_stopped": report["search_stopped"],
                     "search_seconds": round(report["seconds"], 2),
                     "verify_seconds": round(report["verify_seconds"], 2)})
    return rows


def check_scale(counts: list[int], folder: Path) -> list[dict]:
    from tests import hostile

    models = folder / "models"
    models.mkdir(exist_ok=True)
    rows = []
    for n in counts:
        lines = ["models:"]
        for i in range(n // len(PROFILES)):
            path = models / f"m{i}.tflite"
            if not path.exists():
                path.write_bytes(hostile.relu_chain(8 + i % 8))
            lines += [f"  - name: m{i}", f"    path: {path}",
                      f"    profiles: [{', '.join(PROFILES)}]"]
        project = folder / f"p{n}.yaml"
        project.write_text("\n".join(lines) + "\n")
        results, page = folder / f"r{n}.json", folder / f"r{n}.html"
        r = run(["check", str(project), "--jobs", "2", "--results", str(results), "--html",
                 str(page)])
        sizes = {} if r.error else {"results_bytes": results.stat().st_size,
                                    "html_bytes": page.stat().st_size}
        rows.append({"size": n, **_figures(r), **sizes})
    return rows


def _figures(r: Run) -> dict:
    return {"seconds": r.seconds, "tree_peak_mb": r.tree_peak / 2**20,
            "largest_mb": r.largest / 2**20, "error": r.error}


def exponent(a: dict, b: dict, key: str) -> float:
    """Growth exponent of ``key`` from row ``a`` to row ``b``: 1 is linear."""
    return math.log(b[key] / a[key]) / math.log(b["size"] / a["size"])


def _print(name: str, unit: str, rows: list[dict]) -> None:
    print(f"{name}:")
    for r in rows:
        extra = ""
        if r["error"]:
            extra = f", FAILED ({r['error']})"
        elif "results_bytes" in r:
            extra = (f", results {r['results_bytes'] / 2**20:.1f} MB, page "
                     f"{r['html_bytes'] / 2**20:.1f} MB")
        if "search_steps" in r:
            stop = "cut by its budget" if r["search_stopped"] else "finished"
            extra = (f", head {r['head_before']:,} → {r['head_after']:,} B, order search "
                     f"{stop} ({r['search_steps']:,} of {r['search_budget']:,} steps) in "
                     f"{r['search_seconds']:.1f} s, verification {r['verify_seconds']:.1f} s")
        print(f"  {r['size']:>7,} {unit}: {r['seconds']:7.2f} s, tree peak "
              f"{r['tree_peak_mb']:7.1f} MB (largest process {r['largest_mb']:6.1f} MB){extra}")
    done = [r for r in rows if not r["error"]]
    for a, b in zip(done, done[1:]):
        print(f"  {a['size']:,} → {b['size']:,}: exponent time "
              f"{exponent(a, b, 'seconds'):.2f}, memory {exponent(a, b, 'tree_peak_mb'):.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="1000,10000")
    ap.add_argument("--targets", default="100")
    ap.add_argument("--commands", default="simulate,optimize,check")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    ops = [int(x) for x in args.ops.split(",") if x]
    targets = [int(x) for x in args.targets.split(",") if x]
    scales = {"simulate": (simulate_scale, ops, "ops"), "optimize": (optimize_scale, ops, "ops"),
              "check": (check_scale, targets, "targets")}
    out: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for name in args.commands.split(","):
            measure, counts, unit = scales[name]
            out[name] = measure(counts, Path(tmp))
            _print(name, unit, out[name])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
