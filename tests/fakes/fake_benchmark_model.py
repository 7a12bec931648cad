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

``--use_gpu=true``: the GPU delegate's log lines, as LiteRT's sources word them
(``tflite/delegates/gpu/delegate.cc``, ``common/model_builder.cc``, ``tflite/core/
subgraph.cc``, ``tools/benchmark/benchmark_tflite_model.cc``), for the partition that
``gpu`` (in ``FAKE_BENCH``) says this phone's delegate makes: ``"rules"`` (the default)
devicefit's partition from the delegate's cited rules, with the tool's
``--max_delegated_partitions`` and ``--gpu_precision_loss_allowed``; ``"litert"`` the
partition LiteRT's own GPU accelerator makes on this machine (ML Drift on the SwiftShader
software Vulkan adapter, ``simulator/targets/gpu/delegate.py``), a runtime that decides
some operators otherwise than those rules; ``"none"`` a phone with neither OpenCL nor
OpenGL ES 3.1, where the delegate fails as it does there. The timings stay this host's CPU
(there is no phone GPU here).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

# The checkout this fake belongs to, whatever devicefit the venv has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

#: The GPU delegate's kernel name (``delegate.cc``: kRegistrationCustomName).
GPU_KERNEL = "TfLiteGpuDelegateV2"


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


def err(msg: str) -> None:
    print(f"ERROR: {msg}", file=sys.stderr, flush=True)


def gpu_partition(graph: str, args: dict[str, str], how: str
                  ) -> tuple[int, int, int, int | None, list[str]]:
    """(ops on the GPU, ops in all, GPU partitions, the subsets TFLite cuts the graph into
    or None when not known, the delegate's "OP: reason" lines) for this phone's delegate."""
    from devicefit.simulator.read.reader import read_model

    model = read_model(graph)
    total = len(model.main.operators)
    if how == "litert":
        from devicefit.simulator.targets.gpu.delegate import ICDS, ask_delegate

        answer = ask_delegate(Path(graph), ICDS["swiftshader"])
        if not answer.ok:
            raise SystemExit(f"fake device: LiteRT's GPU accelerator failed: {answer.error}")
        # Its own "OP: reason tensor" lines, kept whole; the cut is known only when whole.
        on_gpu = total if answer.gpu_ops is None else answer.gpu_ops
        # One partition when any: the delegate's default max_delegated_partitions.
        return (on_gpu, total, min(1, on_gpu), 1 if on_gpu == total else None,
                sorted(answer.unsupported))
    import dataclasses

    from devicefit.sdk.bench.compare import FP16_DEQUANTIZE, NOT_REFUSED
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.targets.gpu.partition import partition, subsets
    from devicefit.simulator.targets.gpu.settings import GpuSettings

    # The delegate clamps max_delegated_partitions <= 0 (the tool's default) to 1.
    settings = GpuSettings(max(1, int(flag(args, "max_delegated_partitions", "0"))),
                           "fp16" if flag(args, "gpu_precision_loss_allowed", "true") == "true"
                           else "fp32")
    profile = dataclasses.replace(load_profile("android-gpu-adreno", []),
                                  target_settings=settings)
    cut = partition(model, profile)
    on = {op.index for op in cut.ops if op.device == "gpu"}
    # The delegate's words: an fp16 weights' DEQUANTIZE it leaves has no reason.
    refused = sorted({f"{op.op.replace(':', ' ', 1)}: "
                      f"{'' if op.rule.startswith(FP16_DEQUANTIZE) else op.reason}"
                      for op in cut.ops
                      if op.device == "cpu" and not op.rule.startswith(NOT_REFUSED)})
    pieces = len(subsets(model.main, [i in on for i in range(total)]))
    return len(on), total, len(cut.partitions), pieces, refused


def gpu_log(graph: str, args: dict[str, str], how: str) -> int | None:
    """The GPU delegate's lines in the order it logs them; the exit status when it fails
    (None: it ran)."""
    log("Created TensorFlow Lite delegate for GPU.")
    if how == "none":
        for line in ('Can not open OpenCL library on this device - dlopen failed: library '
                     '"libOpenCL.so" not found', "Falling back to OpenGL",
                     "TfLiteGpuDelegate Init: OpenGL ES 3.1 or above is required to use "
                     "OpenGL inference."):
            err(line)
        log("Created 0 GPU delegate kernels.")
        err("TfLiteGpuDelegate Prepare: delegate is not initialized")
        err(f"Node number 0 ({GPU_KERNEL}) failed to prepare.")
        err("Restored original execution plan after delegate application failure.")
        err("Failed to apply GPU delegate.")
        err("Benchmarking failed.")
        return 1
    on_gpu, total, kernels, pieces, refused = gpu_partition(graph, args, how)
    if refused and on_gpu < total:
        tail = (f"{on_gpu} operations will run on the GPU, and the remaining {total - on_gpu}"
                if on_gpu else f"No operations will run on the GPU, and all {total}")
        # One message over several lines (TF_LITE_KERNEL_LOG): the prefix on its first only.
        err("Following operations are not supported by GPU delegate:\n" + "\n".join(refused)
            + f"\n{tail} operations will run on the CPU.")
    if on_gpu == 0:
        log("Created 0 GPU delegate kernels.")
        log("Though GPU delegate is explicitly applied, the model graph will not be executed "
            "by the delegate.")
        return None
    if pieces is not None:  # TFLite logs it at VERBOSE, which Android's logger prints
        print(f"VERBOSE: Replacing {on_gpu} out of {total} node(s) with delegate "
              f"({GPU_KERNEL}) node, yielding {pieces} partitions for subgraph 0 (main).",
              file=sys.stderr)
    log("Initialized OpenCL-based API.")
    log(f"Created {kernels} GPU delegate kernels.")
    how_much = ("completely executed by the delegate." if on_gpu == total else
                f"partially executed by the delegate w/ {kernels} delegate kernels.")
    log(f"Explicitly applied GPU delegate, and the model graph will be {how_much}")
    return None


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
    use_gpu = flag(args, "use_gpu", "false") == "true"
    log(f"Use gpu: [{int(use_gpu)}]")
    if flag(args, "use_nnapi", "false") == "true":
        print("WARNING: fake device: use_nnapi is not emulated, running on the CPU",
              file=sys.stderr)
    log(f"Loaded model {graph}")
    if use_gpu:
        failed = gpu_log(graph, args, behaviour.get("gpu", "rules"))
        if failed is not None:
            return failed
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
