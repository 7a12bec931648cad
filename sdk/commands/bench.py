"""``devicefit bench``: measure a model on an Android phone and compare with the estimate."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from devicefit.sdk.bench.benchmark_output import brief
from devicefit.sdk.console import make_console, print_json, table
from devicefit.sdk.options import (
    add_layer_options,
    add_picture_options,
    layer_outputs,
    picture_outputs,
    positive_seconds,
    profile_inputs,
    write_layers,
    write_pictures,
)
from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.infra.fileio import check_outputs
from devicefit.simulator.infra.units import format_band, format_size, format_time_ms
from devicefit.simulator.report.benchmark import BenchComparison, BenchResult
from devicefit.simulator.report.report import Report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        description="Benchmark a .tflite model on a phone connected over adb with TFLite's "
                    "benchmark_model (you supply the binary), using the profile's threads and "
                    "delegate, and show the measurement beside the simulator's estimate. The "
                    "profile's budgets are judged with the measured latency (exit 1 when one "
                    "fails).",
        epilog="example: devicefit bench model.tflite --profile android-arm64-cpu "
               "--benchmark-binary ./android_aarch64_benchmark_model --cpu-mask f0")
    p.add_argument("model", help=".tflite model file")
    p.add_argument("--profile", required=True, help="device profile name or .yaml path")
    p.add_argument("--serial", help="device serial (required when several are connected)")
    p.add_argument("--benchmark-binary", metavar="PATH",
                   help="benchmark_model built for the phone (android_aarch64_benchmark_model)")
    p.add_argument("--adb", metavar="PATH", help="adb executable (default: adb on PATH)")
    p.add_argument("--runs", type=int, default=50, help="timed runs (default 50)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up runs (default 1)")
    p.add_argument("--threads", type=int, help="CPU threads (default: the profile's)")
    p.add_argument("--delegate", choices=["xnnpack", "gpu", "nnapi"],
                   help="delegate (default: the profile's)")
    p.add_argument("--gpu", action="store_true",
                   help="run on the phone's GPU (benchmark_model's use_gpu=true) and on its CPU beside it "
                        "(XNNPACK); a GPU profile does both without it")
    p.add_argument("--cpu-mask", metavar="HEX",
                   help="run under 'taskset HEX', e.g. f0 for the big cores")
    p.add_argument("--op-profiling", action="store_true", help="per-operator timings")
    p.add_argument("--keep", action="store_true", help="leave the pushed files on the device")
    p.add_argument("--timeout", type=positive_seconds, default=600.0, metavar="SECONDS",
                   help="limit for the benchmark run itself (default 600)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_picture_options(p)
    add_layer_options(p)
    p.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    import dataclasses

    from devicefit.sdk.bench import bench
    from devicefit.sdk.bench.compare import compare
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.simulate import bench_section, simulate

    profile = load_profile(args.profile, args.profiles_dir)
    check_outputs([*picture_outputs(args), *layer_outputs(args)], [("model", args.model), *profile_inputs(profile),
                                          ("--benchmark-binary", args.benchmark_binary)])
    result = bench(args.model, profile, benchmark_binary=args.benchmark_binary,
                   serial=args.serial, adb=args.adb, runs=args.runs, warmup=args.warmup,
                   threads=args.threads, delegate=args.delegate, cpu_mask=args.cpu_mask,
                   op_profiling=args.op_profiling, keep=args.keep, gpu=args.gpu,
                   timeout_s=args.timeout)
    # The report judges the budgets with the latency the phone measured.
    report: Report | None
    try:
        report = simulate(args.model, profile, bench=result)
        why = ""
    except DevicefitError as exc:
        report, why = None, f"simulate failed: {exc}"
    result = compare(result, report, profile, args.profiles_dir)
    section = dataclasses.replace(report.bench, result=result) \
        if report is not None and report.bench is not None else bench_section(result, None, why)
    if report is not None:
        report = dataclasses.replace(report, bench=section)
    if report is not None:
        write_pictures(args, [(f"{args.model} on {result.serial}", report)], inputs=[args.model])
        write_layers(args, report, inputs=[args.model])
    code = 1 if report is not None and not report.ok else 0
    if args.json:
        print_json(report.to_dict() if report is not None else {"bench": section.to_dict()})
        return code
    _print(args, result, section.vs_estimate, report)
    if args.layers and report is not None:
        from devicefit.simulator.report.views.layertable import text_lines

        make_console(args.no_color).print(escape("\n".join(text_lines(report.layers))))
    _print_verdict(args, report)
    return code


def _print_verdict(args: argparse.Namespace, report: Report | None) -> None:
    from devicefit.simulator.report.views.messages import budget_message

    con = make_console(args.no_color)
    if report is None:
        con.print("Verdict: not judged (no simulate report)")
        return
    for b in report.budgets:
        con.print(f"  {'ok  ' if b.ok else 'OVER'} {escape(budget_message(b))}")
    for note in report.notes:
        con.print(f"  note: {escape(note)}")
    con.print(f"Verdict: {report.verdict.upper()}")


def _print(args: argparse.Namespace, result: BenchResult, comparison: BenchComparison,
           report: Report | None) -> None:
    from devicefit.simulator.report.views.messages import decimal_sizes
    from devicefit.simulator.types import BudgetName

    con = make_console(args.no_color)
    r, s = result.results, result.settings
    # The file in the flash budget's prefixes, as the report's views print it.
    flash = report is not None and decimal_sizes(report, BudgetName.FLASH)
    # serial, device model and ABIs are the device's own words: never rich markup.
    con.print(f"[bold]{escape(result.model)}[/bold] on {escape(result.serial)} "
              f"({escape(result.device_model or '?')}, {escape(', '.join(result.abis))}) "
              f"with profile {escape(result.profile)}")
    con.print(f"threads {s.threads} · delegate {s.delegate or 'none'} · {s.runs} runs after "
              f"{s.warmup_runs} warm-up · cpu mask {s.cpu_mask or 'none'}")
    rows = [("model size", format_size(r.model_size_bytes, flash)),
            ("init", format_time_ms(r.init_ms)),
            ("first inference", format_time_ms(r.first_inference_ms)),
            ("warm-up avg", format_time_ms(r.warmup_avg_ms)),
            ("inference avg", format_time_ms(r.inference_avg_ms))]
    if r.inference is not None:
        i = r.inference
        rows.append(("runs / min / max / std", f"{i.count} / {format_time_ms(i.min_ms)} / "
                     f"{format_time_ms(i.max_ms)} / {format_time_ms(i.std_ms)}"))
        if i.median_ms is not None:
            rows.append(("p5 / median / p95", f"{format_time_ms(i.p5_ms)} / "
                         f"{format_time_ms(i.median_ms)} / {format_time_ms(i.p95_ms)}"))
    rows += [("memory delta init / overall",
              f"{format_size(r.memory_init_bytes)} / {format_size(r.memory_overall_bytes)}"),
             ("memory peak", format_size(r.memory_peak_bytes))]
    for c in r.delegate_coverage if r.gpu is None else ():  # the GPU's: _print_gpu
        nodes = (f"{c.nodes_delegated}/{c.nodes_total or '?'} nodes, {c.partitions} partitions"
                 if c.nodes_delegated is not None else
                 "whole graph" if c.whole_graph else "not used")
        rows.append((f"delegate {c.delegate}", nodes))
    if not r.delegate_coverage and r.delegates_created:
        rows.append(("delegates created", ", ".join(r.delegates_created)))
    con.print(table("Measured on the device", ["figure", "value"], rows))
    if r.op_profile:
        top = sorted(r.op_profile, key=lambda o: o.avg_ms or 0.0, reverse=True)[:10]
        con.print(table("Slowest operators", ["node type", "avg", "%", "name"],
                        [(o.node_type, format_time_ms(o.avg_ms),
                          "-" if o.percent is None else f"{o.percent:g}%", escape(o.name))
                         for o in top]))
    if comparison.ratio is not None:
        con.print(f"measured {format_time_ms(comparison.measured_ms)} vs simulator estimate "
                  f"{format_time_ms(comparison.estimated_ms)}{_band(comparison)}: ratio "
                  f"{comparison.ratio:.2f}x (measured / estimated)")
    else:
        con.print(f"measured {format_time_ms(comparison.measured_ms)}; simulator estimate "
                  f"unavailable ({comparison.estimate_unavailable})")
    # The GPU's partition follows the GPU's run: the profile's own, or the one beside it.
    gpu_first = result.settings.delegate == "gpu"
    if gpu_first:
        _print_gpu(con, result)
    if result.beside is not None:
        _print_beside(con, result)
    if not gpu_first:
        _print_gpu(con, result)
    kept = "kept on the device" if args.keep else "removed from the device"
    if result.pushed:
        con.print(f"pushed {', '.join(result.pushed)} ({kept})")


def _band(vs: BenchComparison) -> str:
    """`` (likely 2.70 ms–4.58 ms: measured inside)``, "" without a band."""
    if vs.band_ms is None:
        return ""
    where = {True: "inside", False: "outside", None: "not compared"}[vs.in_band]
    return f" (likely {format_band(vs.band_ms)}: measured {where})"


#: How many of the delegate's "OP: reason" lines the terminal shows.
SHOWN_REFUSALS = 12


def _partition_text(gpu_ops: int | None, total: int | None, partitions: int | None) -> str:
    return (f"{'?' if gpu_ops is None else gpu_ops} of {'?' if total is None else total} ops "
            f"on the GPU in {'?' if partitions is None else partitions} partition(s)")


def _print_gpu(con: Console, result: BenchResult) -> None:
    """The partition the phone's GPU delegate made (its log), beside devicefit's; nothing
    when no run was on the GPU."""
    gpu, check = result.gpu_log, result.partition
    if gpu is None and check is None:
        return
    backend = f", {gpu.backend}" if gpu is not None and gpu.backend else ""
    measured = ("the delegate logged no partition" if gpu is None else
                _partition_text(gpu.ops_on_gpu, gpu.ops_total, gpu.kernels))
    con.print(f"GPU delegate on the phone (measured{backend}): {measured}")
    if gpu is not None:
        # A device's own lines: each bounded, and not a screenful of them.
        for line in gpu.refused[:SHOWN_REFUSALS]:
            con.print(f"  refused: {escape(brief(line))}")
        if len(gpu.refused) > SHOWN_REFUSALS:
            con.print(f"  refused: … {len(gpu.refused) - SHOWN_REFUSALS} more (--json has all)")
    if check is None:
        con.print("  predicted: none (the profile is not a GPU profile)")
        return
    predicted = _partition_text(check.predicted_gpu_ops, check.total_ops,
                                check.predicted_partitions)
    refuses = f"; refuses {', '.join(check.predicted_refused)}" if check.predicted_refused else ""
    con.print(f"GPU delegate predicted by devicefit: {predicted}{refuses}")
    if check.agree is None:
        con.print("  partition not compared: the phone's log does not say how many ops and "
                  "partitions the GPU took")
    elif check.agree:
        con.print("  the phone's partition agrees with the prediction")
    else:
        differ = [f"{name} {m} on the phone, {p} predicted" for name, m, p in (
            ("ops on the GPU", check.measured_gpu_ops, check.predicted_gpu_ops),
            ("partitions", check.measured_partitions, check.predicted_partitions),
            ("refused op types", ", ".join(check.measured_refused) or "none",
             ", ".join(check.predicted_refused) or "none")) if m != p]
        con.print(f"  [bold]the phone's partition differs from the prediction[/bold]: "
                  f"{escape('; '.join(differ))}")


def _print_beside(con: Console, result: BenchResult) -> None:
    """The run beside the profile's own on the same phone, and its estimate."""
    run = result.beside
    assert run is not None  # the caller checks
    on = "GPU" if run.settings.delegate == "gpu" else f"CPU ({run.settings.delegate})"
    measured = run.results.inference_avg_ms
    con.print(f"beside it on the {on}, {run.settings.threads} threads: inference avg "
              f"{format_time_ms(measured)} (measured)")
    vs = run.vs_estimate
    if vs is not None and vs.ratio is not None:
        con.print(f"  vs estimate {format_time_ms(vs.estimated_ms)}{_band(vs)} on "
                  f"{run.estimate_profile}: ratio {vs.ratio:.2f}x (measured / estimated)")
    elif vs is not None:
        con.print(f"  estimate unavailable ({escape(vs.estimate_unavailable or '')})")
    main = result.results.inference_avg_ms
    if main and measured:
        gpu, cpu = (main, measured) if result.settings.delegate == "gpu" else (measured, main)
        con.print(f"  GPU / CPU on this phone: {gpu / cpu:.2f}x (measured, both runs)")
