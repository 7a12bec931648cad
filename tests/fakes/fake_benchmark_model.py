"""Stand-in for TFLite's benchmark_model on the fake phone (there is no phone here).

It runs the pushed model in LiteRT (ai_edge_litert) on this machine and prints the
*measured* timings and memory in benchmark_model's own format (lines as in
``tensorflow/lite/tools/benchmark/benchmark_model.cc`` and ``stats_calculator.h``, logged
to stderr like the real tool's TFLITE_LOG). Run by ``fake_adb.py`` with the project's
venv Python. ``FAKE_BENCH`` (JSON) selects failure modes: ``crash`` (SIGSEGV after the
warm-up), ``garbage`` (prints no result), ``slow_ms`` (each inference takes that much
longer: a phone slower than this host, so a test knows the measurement exceeds a budget
whatever this machine's speed), ``op_profile_file`` (a real captured profile
table to print for ``--enable_op_profiling``, since LiteRT's Python API has no per-op
timer).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time


def log(msg: str) -> None:
    print(f"INFO: {msg}", file=sys.stderr, flush=True)


def g(value: float) -> str:
    """C++ ostream's default formatting of a double (6 significant digits)."""
    return f"{value:.6g}"


def stat_line(times_us: list[int]) -> str:
    ordered = sorted(times_us)

    def pct(p: int) -> int:
        return ordered[len(ordered) * p // 100]

    if min(times_us) == max(times_us):
        head = f"count={len(times_us)} curr={times_us[-1]}" + ("(all same)" if len(times_us) > 1
                                                               else "")
    else:
        n = len(times_us)
        avg = sum(times_us) / n
        std = int((sum(t * t for t in times_us) / n - avg * avg) ** 0.5)
        head = (f"count={n} first={times_us[0]} curr={times_us[-1]} min={ordered[0]} "
                f"max={ordered[-1]} avg={g(avg)} std={std}")
    return f"{head} p5={pct(5)} median={pct(50)} p95={pct(95)}"


def flag(args: dict[str, str], name: str, default: str) -> str:
    return args.get(name, default)


def main(argv: list[str]) -> int:
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    behaviour = json.loads(os.environ.get("FAKE_BENCH", "{}"))
    args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    graph = args.get("graph")
    log("STARTING!")
    if behaviour.get("garbage"):
        print("benchmark_model: unexpected build, printing nothing useful", file=sys.stderr)
        return 0
    if not graph or not os.path.isfile(graph):
        print(f"ERROR: Could not open '{graph}'.", file=sys.stderr)
        return 1
    threads = int(flag(args, "num_threads", "-1"))
    warmup_runs = int(flag(args, "warmup_runs", "1"))
    num_runs = int(flag(args, "num_runs", "50"))
    use_xnnpack = flag(args, "use_xnnpack", "true") == "true"
    log(f"Num threads: [{threads}]")
    log(f"Graph: [{graph}]")
    for name in ("use_gpu", "use_nnapi"):
        if flag(args, name, "false") == "true":
            print(f"WARNING: fake device: {name} is not emulated, running on the CPU",
                  file=sys.stderr)
    log(f"Loaded model {graph}")
    log(f"The input model file size (MB): {g(os.path.getsize(graph) / 1e6)}")

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    resolver = OpResolverType.AUTO if use_xnnpack else (
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter = Interpreter(model_path=graph, num_threads=threads,
                              experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    init_us = int((time.perf_counter() - start) * 1e6)
    rss_init = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    log(f"Initialized session in {g(init_us / 1000)}ms.")

    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        dtype = detail["dtype"]
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            data = rng.integers(info.min, info.max, size=detail["shape"], endpoint=True)
        else:
            data = rng.random(size=detail["shape"])
        interpreter.set_tensor(detail["index"], data.astype(dtype))

    slow = float(behaviour.get("slow_ms", 0))

    def timed(n: int) -> list[int]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            interpreter.invoke()
            if slow:
                time.sleep(slow / 1e3)
            out.append(max(1, int((time.perf_counter() - t) * 1e6)))
        return out

    log(f"Running benchmark for at least {warmup_runs} iterations and at least 0.5 seconds "
        "but terminate if exceeding 150 seconds.")
    warm = timed(max(1, warmup_runs))
    log(stat_line(warm) + "\n")
    if behaviour.get("crash"):
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    log(f"Running benchmark for at least {num_runs} iterations and at least 1 seconds but "
        "terminate if exceeding 150 seconds.")
    runs = timed(num_runs)
    log(stat_line(runs) + "\n")
    rss_end = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    log(f"Inference timings in us: Init: {init_us}, First inference: {warm[0]}, "
        f"Warmup (avg): {g(sum(warm) / len(warm))}, Inference (avg): {g(sum(runs) / len(runs))}")
    log("Note: as the benchmark tool itself affects memory footprint, the following is only "
        "APPROXIMATE to the actual memory footprint of the model at runtime. Take the "
        "information at your discretion.")
    log(f"Memory footprint delta from the start of the tool (MB): init={g((rss_init - rss0) / 1024)}"
        f" overall={g((rss_end - rss0) / 1024)}")
    if flag(args, "report_peak_memory_footprint", "false") == "true":
        log(f"Overall peak memory footprint (MB) via periodic monitoring: {g(rss_end / 1024)}")
    if flag(args, "enable_op_profiling", "false") == "true" and behaviour.get("op_profile_file"):
        # Only the tables: the capture's own timing summary is another model's.
        with open(behaviour["op_profile_file"]) as f:
            tables = [ln for ln in f if "inference timings" not in ln.lower()]
        sys.stderr.write("Operator-wise Profiling Info for Regular Benchmark Runs:\n"
                         + "".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
