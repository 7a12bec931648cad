"""Fuzz benchmark of ``devicefit calibrate``'s readers: thousands of hostile logs, tables,
flags and profile keys, counted by outcome (issue 50).

Every reader calibrate uses gets its own family of mutants, all made from a seed, each run
as ``devicefit calibrate`` (or ``profiles validate`` / ``simulate`` for profile keys) on
the zoo's chain_int8 model:

- ``micro-log``, ``micro-csv``: TFLM MicroProfiler ``Log()`` and ``LogCsv()`` output of the
  model (1-3 runs), mutated: hostile numbers for a tick (5,000 digits, 2**64, ``3²``,
  Arabic-Indic digits, negative), long lines of the kinds that were quadratic (100 KB to
  1 MB), NUL, escapes, byte noise, cut, duplicated or swapped lines, implausible rates;
- ``benchmark-model``: ``benchmark_model --enable_op_profiling`` text of the model, mutated
  the same way plus the lines its parser's patterns backtrack on;
- ``bench-json``: ``devicefit bench --json`` op profiles with a subtree replaced (lists
  where mappings belong, NaN, Infinity, -1, 1e300, 400-digit integers, booleans), nesting
  100,000 deep, byte noise;
- ``latency-table``: ``--latencies`` CSVs with fields over 128 KiB, NUL bytes, impossible
  figures, too many rows, multi-line quotes, non-UTF-8;
- ``profile-keys``: profiles whose ``cost_model.error_band``, ``kernel_scale`` and
  ``calibration`` hold hostile values or misspelt groups, through ``profiles validate``,
  ``calibrate`` and ``simulate``;
- ``special-paths``: FIFO, ``/dev/zero``, ``/dev/null``, a folder, ``/proc`` entries, a
  missing file and a log over the size limit as ``--board-log`` or ``--latencies``;
- ``largest``: a valid log of 190,000 op events, just under the bound (exit 0: the time
  and memory of the largest input calibrate takes).

The cases run in the long-lived workers of :mod:`benchmarks.bench_fuzz` (same outcome
classes: traceback, signal, input modified, leftover, > 60 s, worker RSS > 2 GB; a case not
answered in 150 s is killed and counted as a hang). ``--lines`` also times the MicroProfiler
and benchmark_model readers on one line of 0.1 to 4 MB (they were quadratic: 100 KB took
67 s, 200 KB 270 s).

    .venv/bin/python benchmarks/bench_fuzz_calibrate.py [--seed 0] [--scale 1] [--lines]

``--scale 1`` is the full run (5,200 cases); tests/simulator/estimate/test_fuzz_calibrate.py
runs a seeded ``--scale 0.02`` subset.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_fuzz import (  # noqa: E402 — needs ROOT on the path
    CLASSES,
    HOSTILE_SCALARS,
    Case,
    campaign,
)

FAMILIES = {"micro-log": 1100, "micro-csv": 800, "benchmark-model": 800, "bench-json": 900,
            "latency-table": 700, "profile-keys": 700, "special-paths": 180, "largest": 4}
PROFILE = "stm32l4r5-cortex-m4"
#: chain_int8's operators, in order.
OPS = ("CONV_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "AVERAGE_POOL_2D", "RESHAPE",
       "FULLY_CONNECTED", "SOFTMAX")
HOSTILE_NUMBERS = ("0", "-1", "-0", "9" * 25, "9" * 5000, str(2**64), str(2**63), "1e300",
                   "1e-300", "nan", "inf", "-inf", "NaN", "Infinity", "3\u00b2", "\u0663\u0664",
                   "1_000", "0x10", "", " ", "1.5.5", "1e999", "-5", "00000000000000000001")
RATES = (["--ticks-per-second", "1e6"], ["--clock", "120MHz"], ["--ticks-per-second", "1000"])
HOSTILE_RATES = (["--clock", "1e-300Hz"], ["--clock", "9" * 44 + "GHz"], ["--clock", "0Hz"],
                 ["--clock", "nanMHz"], ["--clock", "120"], ["--ticks-per-second", "nan"],
                 ["--ticks-per-second", "-1"], ["--ticks-per-second", "inf"],
                 ["--ticks-per-second", "1e-9"], ["--ticks-per-second", "1e40"], [])
SPECIALS = ("/dev/zero", "/dev/null", "{d}/pipe", "{d}/dir", "/proc/self/mem",
            "/proc/self/status", "{d}/missing")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
#: A little over the 8 MiB log bound (the readers refuse it before reading).
OVERSIZE = 8 * 1024**2 + 1


def _long_line(rng: random.Random) -> str:
    """A line of the kinds the readers' patterns once backtracked on, 1 KB to 1 MB."""
    n = rng.choice([1000, 100_000, 1_000_000])
    return rng.choice([
        "x" * n, "x" * n + " took 5 ticks (0 ms).", "CONV_2D took " + "9" * n + " ticks (1 ms).",
        "Inference timings in us: " + "a a" * (n // 3), "[node type] [" + "a " * (n // 2),
        "count=1 " + "a" * n, '"' + "x" * n, "0,CONV_2D," + "1" * n, "a " * (n // 2),
        " took " * (n // 6), "(" * n])


def _mutate_text(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(9)
        lines = lines or [""]
        i = rng.randrange(len(lines))
        if kind == 0:
            numbers = list(_NUMBER.finditer(lines[i]))
            if numbers:
                m = rng.choice(numbers)
                lines[i] = lines[i][:m.start()] + rng.choice(HOSTILE_NUMBERS) + lines[i][m.end():]
        elif kind == 1:
            lines.insert(i, _long_line(rng))
        elif kind == 2:
            del lines[i]
        elif kind == 3:
            lines.insert(i, lines[i])
        elif kind == 4:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == 5:
            lines[i] += rng.choice(["\0", "\x1b[2J", "\r", "\u2028", "\ufeff", "\t", "\x85"])
        elif kind == 6:
            lines = lines[:i] or [""]
        elif kind == 7:
            lines.insert(i, rng.choice(['"Event","Tag","Ticks"', "Run Order", "{", "count=5"]))
        else:
            lines[i] = lines[i].upper() if rng.random() < 0.5 else lines[i].replace("_", "")
    return "\n".join(lines)


def _noise(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        if b:
            b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def micro_log(rng: random.Random, runs: int) -> str:
    lines = ["boot", "InitializeKeywordRunner took 120 ticks (0 ms)."]
    for _ in range(runs):
        lines += [f"{op} took {rng.randint(50, 90_000)} ticks ({rng.randint(0, 90)} ms)."
                  for op in OPS]
        lines.append(f"KeywordRunNIerations(1) took {rng.randint(10**5, 10**6)} ticks (1 ms)")
    return "\n".join(lines) + "\n"


def micro_csv(rng: random.Random, runs: int) -> str:
    lines = ["boot"]
    for _ in range(runs):
        lines += ['"Event","Tag","Ticks"', *(f"{i},{op},{rng.randint(50, 90_000)}"
                                              for i, op in enumerate(OPS))]
    return "\n".join(lines) + "\n"


def benchmark_model(rng: random.Random) -> str:
    rows = [f"\t {op:>24}\t {rng.uniform(0.01, 5):.3f}\t {rng.uniform(0.01, 5):.3f}\t"
            f" 10.0%\t 50.0%\t 0.000\t 1\t[layer_{i}/{op.lower()}]" for i, op in enumerate(OPS)]
    avg = rng.randint(1000, 90_000)
    return "\n".join([
        "INFO: Initialized session in 3.2ms.",
        f"INFO: count=5 first={avg} curr={avg} min={avg} max={avg} avg={avg} std=0",
        "INFO: ============================== Run Order ==============================",
        "\t [node type]\t [first]\t [avg ms]\t [%]\t [cdf%]\t [mem KB]\t [times called]\t"
        " [Name]", *rows, "",
        f"INFO: Inference timings in us: Init: 3200, First inference: {avg}, "
        f"Warmup (avg): {avg}, Inference (avg): {avg}", ""])


def bench_json(rng: random.Random) -> dict:
    return {"bench": {"results": {"op_profile": [
        {"node_type": op, "avg_ms": round(rng.uniform(0.01, 5), 4), "name": f"n{i}"}
        for i, op in enumerate(OPS)]}}, "model": "chain.tflite"}


JSON_HOSTILE: tuple[object, ...] = ([], {}, None, "x", True, -1, 0, 1e300, 10**400,
                                    float("nan"), float("inf"), [[[]]], {"get": 1})


def _json_mutant(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        n = rng.choice([1000, 100_000])
        return '{"bench":' * n + "1" + "}" * n
    if kind == 1:
        return '{"bench": ' + "9" * rng.choice([4301, 100_000]) + "}"
    data = bench_json(rng)
    # Replace one subtree on the path to (or inside) an op profile row.
    path = rng.choice([["bench"], ["bench", "results"], ["bench", "results", "op_profile"],
                       ["bench", "results", "op_profile", rng.randrange(8)],
                       ["bench", "results", "op_profile", rng.randrange(8), "avg_ms"],
                       ["bench", "results", "op_profile", rng.randrange(8), "node_type"]])
    node: dict | list = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = rng.choice(JSON_HOSTILE)
    text = json.dumps(data)
    if kind == 5:
        return _noise(rng, text.encode()).decode("utf-8", "replace")
    return text


def latency_table(rng: random.Random) -> str:
    rows = ["model,ms", *(f"chain.tflite,{rng.uniform(1, 200):.2f}"
                          for _ in range(rng.randint(1, 3)))]
    kind = rng.randrange(8)
    if kind == 0:
        rows.append(f"chain.tflite,{'1' * rng.choice([1000, 140_000])}")
    elif kind == 1:
        rows.append(rng.choice(["chain\0.tflite,5", "\0,5", "chain.tflite\0,5"]))
    elif kind == 2:
        rows.append(f"chain.tflite,{rng.choice(HOSTILE_NUMBERS)}")
    elif kind == 3:
        rows += ["chain.tflite,5"] * rng.choice([257, 5000])
    elif kind == 4:
        rows.append('"chain\n.tflite",5' if rng.random() < 0.5 else '"' + "x" * 200_000)
    elif kind == 5:
        rows.append(f"{rng.choice(SPECIALS)},5")
    elif kind == 6:
        rows.append(rng.choice(["a,b,c", ",", "chain.tflite", "#x,1", "\ufeffchain.tflite,5"]))
    else:
        return _mutate_text(rng, "\n".join(rows))
    return "\n".join(rows) + "\n"


def _misspelt_group(rng: random.Random) -> str:
    group = rng.choice(["conv.int8", "depthwise.int8", "fully_connected.float32", "default"])
    i = rng.randrange(len(group))
    return rng.choice([group[:i] + group[i + 1:], group[:i] + "x" + group[i:], group.upper(),
                       group + ".x", "", " ", "conv", "." * 3, "\x1b[2J", "9" * 100])


def profile_yaml(rng: random.Random) -> str:
    band = rng.choice([*HOSTILE_SCALARS, "[null, 2]", "[0.5, null]", "[a, 2]", "[2, 0.5]",
                       "[0, 1]", "[0.5, .inf]", "[0.5]", "[0.5, 2, 3]", "[0.8, 1.3]",
                       "[[0.5], 2]", "{low: 0.5}"])
    key = _misspelt_group(rng) if rng.random() < 0.6 else "conv.int8"
    value = rng.choice([*HOSTILE_SCALARS, "1.2", "2", "0.5"])
    scale = rng.choice([f"{{{json.dumps(key)}: {value}}}", f"{{default: {value}}}",
                        rng.choice(HOSTILE_SCALARS)])
    keys = {"error_band": band, "kernel_scale": scale,
            "calibration": rng.choice([*HOSTILE_SCALARS, "measured on my board"])}
    chosen = rng.sample(sorted(keys), rng.randint(1, 3))
    return (f"extends: {PROFILE}\ncost_model:\n"
            + "".join(f"  {k}: {keys[k]}\n" for k in chosen))


def _model() -> bytes:
    from tests.zoo import model_path

    return model_path("chain_int8").read_bytes()


def generate(seed: int, scale: float) -> Iterator[Case]:
    """Every case, deterministic in ``seed``."""
    rng = random.Random(seed)
    model = _model().hex()
    made = 0

    def case(family: str, argv: list[str], files: dict[str, str | bytes]) -> Case:
        nonlocal made
        made += 1
        hexed = {n: (v.encode() if isinstance(v, str) else v).hex() for n, v in files.items()}
        hexed["chain.tflite"] = model
        return Case(made, family, argv, hexed, inputs=sorted(hexed))

    def calibrate(*flags: str) -> list[str]:
        return ["calibrate", "--profile", PROFILE, *flags, "-o", "{d}/out.yaml"]

    def log_case(family: str, text: str | bytes, rate: list[str]) -> Case:
        return case(family, calibrate("--model", "{d}/chain.tflite", "--board-log", "{d}/log",
                                      *rate), {"log": text})

    def rate() -> list[str]:
        return rng.choice(HOSTILE_RATES) if rng.random() < 0.1 else rng.choice(RATES)

    def text_family(family: str, make: Callable[[], str]) -> Iterator[Case]:
        for _ in range(_count(family, scale)):
            text = make()
            if rng.random() < 0.85:
                text = _mutate_text(rng, text)
            data = text.encode()
            yield log_case(family, _noise(rng, data) if rng.random() < 0.15 else data, rate())

    yield from text_family("micro-log", lambda: micro_log(rng, rng.randint(1, 3)))
    yield from text_family("micro-csv", lambda: micro_csv(rng, rng.randint(1, 3)))
    yield from text_family("benchmark-model", lambda: benchmark_model(rng))
    for _ in range(_count("bench-json", scale)):
        yield log_case("bench-json", _json_mutant(rng), rng.choice(RATES))
    for _ in range(_count("latency-table", scale)):
        yield case("latency-table", calibrate("--latencies", "{d}/board.csv"),
                   {"board.csv": latency_table(rng)})
    for _ in range(_count("profile-keys", scale)):
        command = rng.randrange(3)
        argv = (["profiles", "validate", "{d}/p.yaml"] if command == 0 else
                ["simulate", "{d}/chain.tflite", "--profile", "{d}/p.yaml"] if command == 1 else
                ["calibrate", "--profile", "{d}/p.yaml", "--model", "{d}/chain.tflite",
                 "--board-log", "{d}/log", "--ticks-per-second", "1e6", "-o", "{d}/out.yaml"])
        # simulate may rightly exit 1 (a valid but slow profile fails the budget).
        yield case("profile-keys simulate" if command == 1 else "profile-keys", argv,
                   {"p.yaml": profile_yaml(rng), "log": micro_log(rng, 1)})
    for _ in range(_count("special-paths", scale)):
        where = rng.choice([*SPECIALS, "{d}/big"])
        files: dict[str, str | bytes] = {"big": b"x" * OVERSIZE} if where == "{d}/big" else {}
        if where == "{d}/pipe":
            files["pipe"] = "special"
        if where == "{d}/dir":
            files["dir"] = "special"
        flag = rng.choice(["--board-log", "--latencies"])
        argv = calibrate("--latencies", where) if flag == "--latencies" else \
            calibrate("--model", "{d}/chain.tflite", "--board-log", where, *rng.choice(RATES))
        made_case = case("special-paths", argv, files)
        made_case.inputs = [n for n in made_case.inputs if n not in ("pipe", "dir")]
        yield made_case
    for _ in range(_count("largest", scale)):
        runs = 190_000 // len(OPS)
        yield log_case("largest", micro_log(rng, runs), ["--ticks-per-second", "1e6"])


def _count(family: str, scale: float) -> int:
    return max(1, round(FAMILIES[family] * scale))


def wrong_exit_1(summary: dict) -> int:
    """Cases that exited 1 ("a budget failed") where only 0 or 2 is right: every command
    here but ``simulate``, whose budget a valid slow profile may fail."""
    return sum(row.get("exit 1", 0) for command, row in summary["counts"].items()
               if "simulate" not in command)


def case_count(scale: float) -> int:
    return sum(_count(f, scale) for f in FAMILIES)


def line_scaling() -> list[tuple[str, int, float]]:
    """(reader, line length, seconds) of two hostile lines through each line reader."""
    from devicefit.sdk.commands.calibrate import _benchmark_ops
    from devicefit.simulator.errors import InputError
    from devicefit.simulator.estimate.calibration.logs import parse_micro_csv, parse_micro_log

    readers: dict[str, Callable[[str], object]] = {
        "MicroProfiler log": lambda t: parse_micro_log(t, 1e6, "log"),
        "MicroProfiler CSV": lambda t: parse_micro_csv('"Event","Tag","Ticks"\n' + t, 1e6, "l"),
        "benchmark_model": lambda t: _benchmark_ops("Run Order\n" + t, "log"),
    }
    out = []
    for name, read in readers.items():
        with contextlib.suppress(InputError):  # imports and first calls out of the timing
            read("CONV_2D took 5 ticks (0 ms).\n")
        for n in (100_000, 200_000, 1_000_000, 4_000_000):
            start = time.perf_counter()
            # The two kinds of line the old patterns backtracked on: one run without a
            # space before " took", and a timings line of short words.
            for line in ("x" * n + " took 5 ticks (0 ms).",
                         "Inference timings in us: " + "a a" * (n // 3)):
                with contextlib.suppress(InputError):
                    read(line + "\n")
            out.append((name, n, time.perf_counter() - start))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lines", action="store_true", help="also time long lines per reader")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    summary = campaign(generate(args.seed, args.scale), case_count(args.scale), args.seed,
                       args.scale, args.workers)
    totals: Counter = Counter()
    for row in summary["counts"].values():
        totals.update(row)
    print(f"wall time {summary['seconds']} s with {args.workers} worker(s); slowest case "
          + ", ".join(f"{k} {v:.2f} s" for k, v in summary["slowest_s"].items())
          + f"; worker peak RSS {summary['worker_peak_bytes'] / 1024**2:.0f} MiB")
    print(f"exit 1 outside simulate (a budget failed: never right here): {wrong_exit_1(summary)}")
    for cls, found in summary["examples"].items():
        for e in found[:3]:
            print(f"example {cls} (case {e['id']}): {e['command']} {e['code']}: "
                  f"{e['stderr'][-200:]!r}")
    if args.lines:
        summary["lines"] = line_scaling()
        for name, n, seconds in summary["lines"]:
            print(f"two lines of {n / 1e6:g} MB through the {name} reader: {seconds:.4f} s")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 1 if any(totals[c] for c in CLASSES) or wrong_exit_1(summary) else 0


if __name__ == "__main__":
    sys.exit(main())
