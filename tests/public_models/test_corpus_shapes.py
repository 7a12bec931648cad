"""Dynamic dimensions on public models nobody here wrote (tests/corpus.py): devicefit's own
shape inference against the shapes LiteRT (the pinned wheel, in a child process) uses, at
the input shape each model runs at (benchmarks/bench_shapes.py measures more shapes)."""

from __future__ import annotations

import pytest

from devicefit.simulator.plan.shapes import infer, needs_resolution, resolve_shapes
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from devicefit.simulator.targets.litert.shapes import litert_shapes
from tests.corpus import INPUT_SHAPES, corpus


def dynamic_models():
    # Files LiteRT cannot load (Vela's ethos-u op) have no runtime answer to compare with.
    return [m for m in corpus() if "vela" not in m.kinds and needs_resolution(read_model(m.path))]


@pytest.mark.parametrize("m", dynamic_models(), ids=lambda m: m.name)
def test_shapes_are_litert_s(m):
    model = read_model(m.path)
    sg = model.main
    given = INPUT_SHAPES.get((m.name, "litert"))
    inputs = {i: tuple(max(d, 1) for d in sg.tensors[i].shape) for i in sg.inputs}
    if given is not None:
        inputs = {sg.inputs[0]: tuple(given)}
    ours, unresolved = infer(model, inputs)
    theirs = litert_shapes(m.path, inputs)
    assert theirs.invoked, theirs.problem
    compared = [i for i in ours if i < len(sg.tensors) and not sg.tensors[i].has_data
                and i in theirs.shapes]
    assert compared and not unresolved
    assert {sg.tensors[i].name: ours[i] for i in compared} == {
        sg.tensors[i].name: theirs.shapes[i] for i in compared}


def test_the_mel_spectrogram_is_planned_at_the_shape_litert_runs():
    """Its stored input is one audio sample, its stored convolution output one frame wide:
    at the 1,280 samples it takes, LiteRT computes 5 frames, and so does the report."""
    (m,) = corpus(names=["oww_melspectrogram"])
    given = INPUT_SHAPES[("oww_melspectrogram", "litert")]
    stored = simulate(m.path, "android-arm64-cpu")
    real = simulate(m.path, "android-arm64-cpu", input_shapes=[(None, given)])
    assert not stored.model.shapes.resolved and stored.latency.band_ms is None
    assert real.model.shapes.resolved and real.model.shapes.resolved_by == "LiteRT"
    assert real.latency.band_ms is not None
    model, _ = resolve_shapes(read_model(m.path), [(None, given)], confirm=False)
    convs = [op for op in model.main.operators if op.op_name == "CONV_2D"]
    stride = convs[0].options["stride_w"]
    frames = (given[1] - 512) // stride + 1  # 512-sample windows (the filter's width)
    assert frames > 1 and all(w.macs == frames * 257 * 512 for w in real.compute.per_op
                              if w.op == "CONV_2D")
    assert real.compute.macs > stored.compute.macs
    shapes = {t.name: t.shape for t in model.main.tensors}
    planned = [p for p in real.memory.plan if p.tensor >= 0]
    assert planned and all(tuple(p.shape) == shapes[p.name] for p in planned)
