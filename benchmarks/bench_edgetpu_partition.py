"""Edge TPU partition: devicefit's prediction vs what the real compiler did.

Every public model whose uncompiled ``X.tflite`` and compiled ``X_edgetpu.tflite`` are both
in google-coral/test_data (release Grouper, compiler 16.0, and the older Frogfish, compiler
15.0) or in ricardodeazambuja/LibrEdgeTPU (its driver's templates, compiler 16.0), read from
the local snapshots (``fetch github:OWNER/NAME`` puts them in /work/.mirror; without one its
pairs are skipped with a message). The compiled file states
the partition exactly — the ops left beside its ``edgetpu-custom-op`` are the compiler's
CPU part, matched to the uncompiled model by output tensor name — and the parameter split
its package chose (``simulator.targets.edgetpu.compiled``). Per model: ops on the TPU / CPU
predicted and real, CPU share of the MACs, the verdict on ``coral-edgetpu`` (more than
``ops.max_cpu_share`` of the MACs on the CPU fails) and the parameter bytes.

    .venv/bin/python benchmarks/bench_edgetpu_partition.py
    .venv/bin/python benchmarks/bench_edgetpu_partition.py --mirrors PATH/TO/SNAPSHOTS
    .venv/bin/python benchmarks/bench_edgetpu_partition.py --fixture tests/fixtures/edgetpu/package_params.json

Parameters: devicefit's layout model (``simulator.targets.edgetpu.layout``) against the
package's cached (PARAMETER_CACHING) and streamed (EXECUTION_ONLY) bytes, and the same
leave-one-model-out: for each model, the layout rules that no other model uses are left
out (``--write-fixture`` records what the layout reads of every pair, with the package's
figures, as tests/fixtures/edgetpu/package_params.json; ``--fixture`` reruns this check
from it without the snapshot). It passes when every pair whose mapped ops are all modelled
is within 1 % (leave-one-out) and the others are predicted low, as the report's note says.

Blobs of 4 MiB or more are missing from the snapshot, so larger pairs (Inception,
EfficientDet, SSD ...) are not run. The recorded compiler logs of tests/fixtures/edgetpu
(no model beside them) are parsed and their cache figures printed, and the usable cache
(used + remaining) of the public logs in cache_logs.json is compared with the profile's
``param_cache``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.infra.fileio import write_atomic  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.read.model import Model  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.targets.edgetpu.compiled import COMPILED_OP, compiled_ops  # noqa: E402
from devicefit.simulator.targets.edgetpu.compiler import compiler_size  # noqa: E402
from devicefit.simulator.targets.edgetpu.cost import edgetpu_cost  # noqa: E402
from devicefit.simulator.targets.edgetpu.layout import (  # noqa: E402
    Constant,
    LayoutOp,
    Selection,
    cache_split,
    layout_params,
    stored_ops,
)
from devicefit.simulator.targets.edgetpu.partition import (  # noqa: E402
    cpu_work,
    parse_compiler_log,
    partition,
)

MIRRORS = Path("/work/.mirror")


@dataclass(frozen=True)
class Source:
    """A public repository commit holding compiled/uncompiled pairs, and its compiler."""

    repo: str
    label: str
    commit: str
    compiler: str

    def mirror(self, root: Path) -> Path:
        return root / self.repo.replace("/", "+") / "repo"


SOURCES = (Source("google-coral/test_data", "Grouper",
                  "104342d2d3480b3e66203073dac24f4e2dbb4c41", "16.0"),
           Source("google-coral/test_data", "Frogfish",
                  "c21de4450f88a20ac5968628d375787745932a5a", "15.0"),
           # Templates of a pure-Python Edge TPU driver, compiled by their author with
           # "Edge TPU Compiler version 16.0.384591198" (its docs/HARDWARE_ANALYSIS.md).
           Source("ricardodeazambuja/LibrEdgeTPU", "LibrEdgeTPU",
                  "be71d6de166d9c13bd221117bebb1934446fd10f", "16.0"))
FIXTURES = ROOT / "tests" / "fixtures" / "edgetpu"
PACKAGE_FIXTURE = FIXTURES / "package_params.json"
CACHE_LOGS = FIXTURES / "cache_logs.json"
#: Within this share of the package's bytes a modelled pair agrees.
TOLERANCE = 0.01


@dataclass(frozen=True)
class Params:
    """One pair's parameter figures: what the layout reads of its mapped ops and what the
    compiled package holds (the fixture's unit; no model file needed)."""

    model: str
    compiler: str
    commit: str
    compiled_path: str
    real: tuple[int, int]  # (cached, streamed) bytes of the package
    ops: tuple[LayoutOp, ...]
    repo: str = "google-coral/test_data"

    @property
    def major(self) -> int:
        return int(self.compiler.split(".")[0])

    @property
    def family(self) -> str:
        """The model whatever the release and input size (posenet's three resolutions are
        one network; a LibrEdgeTPU module's templates (sizes, colors, pooling) are one):
        leave-one-model-out leaves out a family."""
        if self.repo != "google-coral/test_data":  # LibrEdgeTPU: one family per module
            return f"{self.repo}:{self.model.split('/')[0]}"
        return re.sub(r"_\d{3,4}_\d{3,4}_", "_", self.model.split(" (")[0])


@dataclass(frozen=True)
class ParamRow:
    model: str
    real: tuple[int, int]
    predicted: tuple[int, int]
    loo: tuple[int, int]
    #: Layout rules only this model uses, left out of its leave-one-out figure.
    left_out: tuple[str, ...]
    unmodelled: tuple[str, ...]

    def _error(self, figure: tuple[int, int]) -> float:
        real = sum(self.real)
        return (sum(figure) - real) / real if real else 0.0

    @property
    def loo_error(self) -> float:
        return self._error(self.loo)

    @property
    def error(self) -> float:
        return self._error(self.predicted)

    @property
    def agrees(self) -> bool:
        """Within 1 % held out, or low where an op is not modelled (the report says so)."""
        if self.unmodelled:
            return sum(self.loo) <= sum(self.real)
        return abs(self.loo_error) <= TOLERANCE

    @property
    def in_sample_only(self) -> bool:
        """Off held out but within 1 % with every rule: a rule this pair alone shows, so
        no other pair tests it."""
        return not self.agrees and bool(self.left_out) and abs(self.error) <= TOLERANCE

    @property
    def verdict(self) -> str:
        return "" if self.agrees else " (in-sample only)" if self.in_sample_only \
            else " (DISAGREES)"


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
    params: Params


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


def run_pair(src: Path, comp: Path, name: str, compiler: str, profile, commit: str = "",
             compiled_path: str = "", repo: str = "google-coral/test_data") -> Row | str:
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
    packages = compiled_ops(compiled)
    real_tpu = [i for i in range(n) if i not in real_cpu]
    stored = stored_ops(model, real_tpu)
    params = Params(name, compiler, commit, compiled_path,
                    (sum(c.cached_param_bytes for c in packages),
                     sum(c.streamed_param_bytes for c in packages)),
                    tuple(stored[i] for i in real_tpu), repo)

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
        params=params)


def _split(p: Params, cache: int | None, without: frozenset[str]) -> tuple[int, int]:
    """(cached, streamed) bytes of ``p``'s ops, placed as ``partition`` places them."""
    params = [layout_params(op, without, p.major) for op in p.ops]
    fits = cache_split(params, cache)
    return (sum(p.cached for p, f in zip(params, fits) if f),
            sum(p.streamed + (0 if f else p.cached) for p, f in zip(params, fits)))


def param_rows(all_params: list[Params], cache: int | None) -> list[ParamRow]:
    """Each pair's layout figures, in full and leave-one-model-out: the rules no other
    family uses are left out of a family's own figure."""
    used = {p.model: {r for op in p.ops for r in layout_params(op, compiler=p.major).uses}
            for p in all_params}
    families: dict[str, set[str]] = {}
    for p in all_params:
        for rule in used[p.model]:
            families.setdefault(rule, set()).add(p.family)
    rows = []
    for p in all_params:
        alone = frozenset(r for r in used[p.model] if families[r] == {p.family})
        unmodelled = sorted({op.kind for op in p.ops if layout_params(
            op, compiler=p.major).rule in ("unmodelled", "tflite")})
        rows.append(ParamRow(p.model, p.real, _split(p, cache, frozenset()),
                             _split(p, cache, alone), tuple(sorted(alone)),
                             tuple(unmodelled)))
    return rows


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def _pair_kib(pair: tuple[int, int]) -> str:
    return f"{_kib(pair[0])}/{_kib(pair[1])}"


def table(rows: list[Row]) -> list[str]:
    lines = ["| model | compiler | TPU/CPU ops predicted | real | same ops | CPU share "
             "predicted | real | verdict predicted | real |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.compiler} | {r.predicted[0]}/{r.predicted[1]} | "
            f"{r.real[0]}/{r.real[1]} | {'yes' if r.same_ops else 'NO'} | "
            f"{r.predicted_share:.1%} | {r.real_share:.1%} | {r.predicted_verdict} | "
            f"{r.real_verdict} |")
    return lines


def param_table(rows: list[ParamRow]) -> list[str]:
    lines = ["| model | params cached/streamed KiB: predicted | leave-one-out | real "
             "(package) | error | leave-one-out error | rules only it uses | not modelled |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {_pair_kib(r.predicted)} | {_pair_kib(r.loo)} | "
                     f"{_pair_kib(r.real)} | {r.error:+.2%} | {r.loo_error:+.2%}{r.verdict} "
                     f"| {', '.join(r.left_out) or '-'} "
                     f"| {', '.join(r.unmodelled) or '-'} |")
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


def usable_cache(logs: list[dict]) -> tuple[list[tuple[dict, int]], int]:
    """Each log with its used + remaining bytes, and the median of the compiler 15/16
    logs of one model in one subgraph (co-compiled models share the cache, several
    subgraphs split it)."""
    sized = [(log, compiler_size(log["used"]) + compiler_size(log["remaining"]))
             for log in logs]
    plain = [n for log, n in sized if log["subgraphs"] == 1 and not log["co_compiled"]
             and int(log["compiler"].split(".")[0]) >= 15]
    return sized, int(statistics.median(plain))


def cache_lines(profile_cache: int | None) -> tuple[list[str], bool]:
    sized, median = usable_cache(json.loads(CACHE_LOGS.read_text())["logs"])
    lines = ["| source | compiler | used | remaining | used + remaining MiB | streamed |",
             "|---|---|---|---|---|---|"]
    for log, n in sized:
        mark = "" if log["subgraphs"] == 1 and not log["co_compiled"] else " (not counted)"
        lines.append(f"| {log['source'].split(' ')[0]} {log['model']}{mark} | "
                     f"{log['compiler']} | {log['used']} | {log['remaining']} | "
                     f"{n / 2**20:.2f} | {log['streamed']} |")
    same = profile_cache is not None and abs(profile_cache - median) <= 1024
    lines += ["", f"median used + remaining (compiler 15/16, one model, one subgraph): "
                  f"{median / 2**20:.2f} MiB; coral-edgetpu cost_model.param_cache "
                  f"{'-' if profile_cache is None else f'{profile_cache / 2**20:.2f} MiB'}"
                  f"{'' if same else ' — DIFFERS'}"]
    return lines, same


def compiler_text(n: int) -> str:
    """Bytes as the compiler prints them (``66.00KiB``)."""
    for unit, factor in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            return f"{n / factor:.2f}{unit}"
    return f"{n:.2f}B"


def log_pair_lines(params: list[Params], cache: int | None) -> tuple[list[str], bool]:
    """The logs printed for a model the benchmark has a pair of: its predicted split,
    printed the compiler's way, against the log's on-chip used and streamed figures."""
    by_model = {p.model: p for p in params}
    lines = ["| log | pair | on-chip used: log | predicted | streamed: log | predicted |",
             "|---|---|---|---|---|---|"]
    ok = True
    for log in json.loads(CACHE_LOGS.read_text())["logs"]:
        p = by_model.get(log.get("pair", ""))
        if p is None:
            continue
        cached, streamed = _split(p, cache, frozenset())
        same = (compiler_text(cached), compiler_text(streamed)) == (log["used"], log["streamed"])
        ok &= same
        lines.append(f"| {log['source'].split(' ')[0]} | {p.model} | {log['used']} | "
                     f"{compiler_text(cached)} | {log['streamed']} | {compiler_text(streamed)}"
                     f"{'' if same else ' (DIFFERS)'} |")
    return lines, ok and len(lines) > 2


def write_fixture(path: Path, params: list[Params]) -> None:
    """What the layout reads of every pair, and the package's bytes: small numbers, no
    model data (the models stay in google-coral/test_data)."""
    def op_json(op: LayoutOp) -> list:
        return [op.kind, [[list(c.shape), c.dtype, c.nbytes, c.per_channel]
                          for c in op.constants], list(op.shape),
                [[s.channels, list(s.sources), s.rank] for s in op.selections],
                list(op.input_shape), op.source]
    head = {"sources": sorted({f"https://github.com/{p.repo}" for p in params}),
            "written_by": "benchmarks/bench_edgetpu_partition.py --write-fixture"}
    pairs = [json.dumps({"model": p.model, "repo": p.repo, "compiler": p.compiler,
                         "commit": p.commit,
                         "compiled_path": p.compiled_path, "real_cached": p.real[0],
                         "real_streamed": p.real[1], "ops": [op_json(op) for op in p.ops]},
                        separators=(",", ":")) for p in params]
    # One pair a line: a diff of a rerun shows which pair changed.
    text = json.dumps(head, indent=1)[:-2] + ',\n "pairs": [\n' + ",\n".join(pairs) + "]}\n"
    write_atomic(path, text)


def read_fixture(path: Path) -> list[Params]:
    pairs = json.loads(path.read_text())["pairs"]
    return [Params(p["model"], p["compiler"], p["commit"], p["compiled_path"],
                   (p["real_cached"], p["real_streamed"]),
                   tuple(LayoutOp(kind, tuple(Constant(tuple(shape), dtype, nbytes, pc)
                                              for shape, dtype, nbytes, pc in consts),
                                  tuple(shape),
                                  tuple(Selection(n, tuple(src), rank) for n, src, rank in sels),
                                  tuple(first), source)
                         for kind, consts, shape, sels, first, source in p["ops"]), p["repo"])
            for p in pairs]


def snapshot_rows(root: Path, profile) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="devicefit-etpu-pairs-") as tmp:
        for source in SOURCES:
            mirror, commit = source.mirror(root), source.commit
            if not mirror.is_dir():
                print(f"skipped: no snapshot of {source.repo} at {mirror}", file=sys.stderr)
                continue
            for src, comp in pairs(mirror, commit):
                a = _blob(mirror, commit, src, Path(tmp))
                b = _blob(mirror, commit, comp, Path(tmp))
                if a is None or b is None:
                    print(f"skipped: {source.label} {comp}: not in the snapshot",
                          file=sys.stderr)
                    continue
                name = f"{src.removeprefix('libredgetpu/')} ({source.label})"
                row = run_pair(a, b, name, source.compiler, profile, commit, comp,
                               source.repo)
                if isinstance(row, str):
                    print(f"skipped: {row}", file=sys.stderr)
                else:
                    rows.append(row)
    return rows


def check_params(params: list[Params], cache: int | None) -> tuple[list[str], bool]:
    """The parameter table and its summary; True when every pair agrees, held out or (for
    a rule it alone shows) in-sample."""
    rows = param_rows(params, cache)
    modelled = [r for r in rows if not r.unmodelled]
    tested = [r for r in modelled if not r.in_sample_only]
    worst = max((abs(r.loo_error) for r in tested), default=0.0)
    exact = sum(r.loo == r.real for r in tested)
    alone = [r for r in modelled if r.in_sample_only]
    low = [r for r in rows if r.unmodelled and r.loo != r.real]

    def named(rs: list[ParamRow], figure: str) -> str:
        return ", ".join(f"{r.model} {getattr(r, figure):+.1%}" for r in rs) or "none"
    lines = param_table(rows) + [
        "", f"{sum(r.agrees for r in rows)} of {len(rows)} parameter splits agree held out "
            f"(within {TOLERANCE:.0%} leave-one-model-out, or low where an op is not "
            f"modelled). Held out, on the {len(tested)} pairs whose mapped ops are all "
            f"modelled by rules another pair shows too: {exact} exact, worst {worst:.2%}. "
            f"In-sample only (a rule no other model shows; held out it falls back to the "
            f"TFLite bytes or the rule it refines): {_by_rules(alone)}. With an op not modelled, "
            f"{len(rows) - len(modelled) - len(low)} exact anyway and {len(low)} low: "
            f"{named(low, 'loo_error')}"]
    return lines, all(r.agrees or r.in_sample_only for r in rows)


def _by_rules(rows: list[ParamRow]) -> str:
    """The in-sample-only pairs counted by the rules they alone show, with their worst
    in-sample error."""
    groups: dict[tuple[str, ...], list[ParamRow]] = {}
    for r in rows:
        groups.setdefault(r.left_out, []).append(r)
    return "; ".join(f"{len(rs)} pair(s) on {', '.join(rules)} (worst in-sample "
                     f"{max(abs(r.error) for r in rs):.2%})"
                     for rules, rs in groups.items()) or "none"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", type=Path, default=MIRRORS,
                    help="folder of the bare git snapshots (OWNER+NAME/repo)")
    ap.add_argument("--fixture", type=Path,
                    help="check the parameter layout on this fixture instead of the snapshot")
    ap.add_argument("--write-fixture", type=Path,
                    help="also write the pairs' layout inputs and package bytes here")
    args = ap.parse_args(argv)
    profile = load_profile("coral-edgetpu")
    cache = edgetpu_cost(profile).param_cache_bytes
    rows: list[Row] = []
    ok = True
    if args.fixture is not None:
        params = read_fixture(args.fixture)
    else:
        rows = snapshot_rows(args.mirrors, profile)
        params = [r.params for r in rows]
        print("\n".join(table(rows)))
        print()
        same = sum(r.same_ops for r in rows)
        verdicts = sum(r.predicted_verdict == r.real_verdict for r in rows)
        print(f"{same} of {len(rows)} partitions and {verdicts} of {len(rows)} verdicts agree")
        print()
        ok = bool(rows) and same == len(rows) and verdicts == len(rows)
        if args.write_fixture is not None:
            write_fixture(args.write_fixture, params)
    lines, params_ok = check_params(params, cache)
    print("\n".join(lines))
    print()
    print("\n".join(log_lines()))
    print()
    lines, cache_ok = cache_lines(cache)
    print("\n".join(lines))
    print()
    lines, logs_ok = log_pair_lines(params, cache)
    print("\n".join(lines))
    return 0 if ok and params and params_ok and cache_ok and logs_ok else 1


if __name__ == "__main__":
    sys.exit(main())
