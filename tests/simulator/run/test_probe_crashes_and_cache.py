"""The op probe (simulator/run/probe.py) when a kernel damages memory, and its cache when an
entry is hostile (issue 50).

LiteRT 2.3's SVDF reads TFLM's 8-bit SVDF (int8 time weights and int8 state, as in
``keyword_scrambled_8bit``) as the int16 kind and writes outside its state buffer: the
process dies then or later, at a free. Asked after other ops in one child, the damage
used to be blamed on a later op, or the child died after the SVDF's answer "runs" was
written, and that answer was cached. Every answer must now be the runtime's, the same on
every fresh-cache run, with every operator asked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat

import numpy as np
import pytest

from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.read.writer import pack
from devicefit.simulator.run.probe import MAX_ENTRY_BYTES, NO_ANSWER, probe_ops, probe_runtime
from tests.op_probe import OPT, QUANTIZED, TYPES, B, T, _opts, const, fb, single_op
from tests.simulator.run.test_op_probe import MODELS
from tests.tflite_builder import _buffer, _opcode, _operator

TFLM, LITERT = "stm32h743-cortex-m7", "android-arm64-cpu"


def _chain(ops: list[tuple[int, list[T], list[T], int, object]]) -> bytes:
    """A model of ``ops`` in order; a tensor shared by two ops is the same ``T`` object."""
    tensors: list = []
    buffers: list = []
    index: dict[int, int] = {}

    def tensor(t: T) -> int:
        if id(t) not in index:
            ft = fb.TensorT()
            ft.name, ft.shape, ft.type = f"t{len(tensors)}", list(t.shape), TYPES[t.dtype]
            ft.buffer, ft.isVariable = 0, t.variable
            if t.data is not None:
                buffers.append(_buffer(t.data))
                ft.buffer = len(buffers)
            if t.dtype in QUANTIZED or (t.dtype == "int32" and t.data is not None):
                q = fb.QuantizationParametersT()
                q.scale, q.zeroPoint = [t.scale], [t.zero_point]
                ft.quantization = q
            index[id(t)] = len(tensors)
            tensors.append(ft)
        return index[id(t)]

    codes = list(dict.fromkeys(code for code, *_ in ops))
    operators = [_operator(codes.index(code), [tensor(t) for t in ins],
                           [tensor(t) for t in outs], kind, options)
                 for code, ins, outs, kind, options in ops]
    produced = {i for op in operators for i in op.outputs}
    sg = fb.SubGraphT()
    sg.tensors, sg.operators = tensors, operators
    sg.inputs = [i for op in operators for i in op.inputs
                 if i not in produced and tensors[i].buffer == 0 and not tensors[i].isVariable]
    sg.outputs = [operators[-1].outputs[0]]
    m = fb.ModelT()
    m.version, m.operatorCodes, m.subgraphs = 3, [_opcode(c) for c in codes], [sg]
    m.buffers = [_buffer(), *buffers]
    return pack(m)


def _svdf8(x: T, units: int, memory: int, out_scale: float
           ) -> tuple[int, list[T], list[T], int, object]:
    """keyword_scrambled_8bit's SVDF: int8 everything, state int8 too."""
    rng = np.random.default_rng(units + memory)
    weights = T((units, x.shape[1]), "int8",
                rng.integers(-127, 127, (units, x.shape[1]), dtype=np.int8), 0.009)
    time = T((units, memory), "int8", rng.integers(-127, 127, (units, memory), dtype=np.int8),
             0.015)
    state = T((1, units * memory), "int8", scale=0.8, variable=True)
    out = T((1, units), "int8", scale=out_scale, zero_point=-128)
    return (B.SVDF, [x, weights, time, const((units,), "int32", 1e-4), state], [out],
            OPT.SVDFOptions, _opts(fb.SVDFOptionsT, rank=1,
                                   fusedActivationFunction=fb.ActivationFunctionType.RELU))


def _keyword_like() -> bytes:
    """keyword_scrambled_8bit's layers: QUANTIZE int16 → int8, four SVDF + FULLY_CONNECTED
    pairs, three SVDF of 32 units, a last FULLY_CONNECTED; output scales 2× apart, so
    every op is its own signature and the damaging SVDFs are asked after ops that run,
    in one child."""
    x = T((1, 96), "int8", scale=0.06, zero_point=-128)
    ops: list = [(B.QUANTIZE, [T((1, 96), "int16", scale=0.000625)], [x], 0, None)]
    scale = 0.25

    def fc(x: T, units: int) -> T:
        nonlocal scale
        scale /= 2
        out = T((1, units), "int8", scale=scale)
        ops.append((B.FULLY_CONNECTED, [x, const((units, x.shape[1]), "int8", 0.01),
                                        const((units,), "int32", 6e-4)], [out], 0, None))
        return out

    def svdf(x: T, units: int, memory: int) -> T:
        nonlocal scale
        scale /= 2
        ops.append(_svdf8(x, units, memory, scale))
        return ops[-1][2][0]

    for _ in range(4):
        x = fc(svdf(x, 64, 8), 16)
    for _ in range(3):
        x = svdf(x, 32, 32)
    fc(x, 2)
    return _chain(ops)


@pytest.fixture(scope="module")
def keyword_like(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe-crash") / "keyword_like.tflite"
    path.write_bytes(_keyword_like())
    return path


def test_a_kernel_that_damages_memory_gets_the_same_answer_on_every_fresh_cache_run(
        keyword_like, tmp_path, monkeypatch):
    model, profile = read_model(keyword_like), load_profile(LITERT)
    runtime = probe_runtime("litert", profile)
    assert runtime is not None and runtime.xnnpack and runtime.threads == 4, "the profile's"
    svdfs = {(0, i) for i in (1, 3, 5, 7, 9, 10, 11)}
    seen = []
    for run in range(4):  # the old probe blamed a FULLY_CONNECTED on about 1 run in 5
        monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path / f"cache{run}"))
        outcome = probe_ops(model, runtime)
        assert not [w for w in outcome.summary.not_probed if NO_ANSWER in w], "every op asked"
        assert outcome.summary.signatures == outcome.summary.probed == 13
        seen.append({where: a.ok for where, a in outcome.answers.items()})
        # Where the profile's path (XNNPACK) refuses, the builtin path was asked too.
        assert set(outcome.elsewhere) == svdfs and "builtin kernels" in outcome.other_label
        assert not any(a.ok for a in outcome.elsewhere.values())
    assert seen == [{(0, i): (0, i) not in svdfs for i in range(13)}] * 4


def test_the_litert_table_refuses_the_8bit_svdf_on_both_paths(keyword_like):
    model = read_model(keyword_like)
    for profile in (load_profile(LITERT), dataclasses.replace(
            load_profile(LITERT), runtime=dataclasses.replace(
                load_profile(LITERT).runtime, delegates=()))):
        found = check_ops(model, profile)
        assert [u.op_index for u in found.unsupported_ops] == [1, 3, 5, 7, 9, 10, 11]
        assert "writes outside the state buffer" in found.unsupported_ops[0].reason
    # The int16-state SVDF LiteRT runs stays supported.
    int16_state = keyword_like.parent / "svdf_int16_state.tflite"
    int16_state.write_bytes(MODELS["svdf_int16_state"])
    assert check_ops(read_model(int16_state), load_profile(LITERT)).supported


def _entry(cache, profile: str, model) -> tuple[os.PathLike, dict]:
    """The cache entry the probe wrote for the one op of ``model``, and its content."""
    check_ops(model, load_profile(profile), probe=True)
    [entry] = (cache / "op-probe").glob("*.json")
    return entry, json.loads(entry.read_text())


@pytest.fixture
def refused_cast(tmp_path, monkeypatch):
    """A uint8 CAST TFLM refuses at invoke, its answer cached in a fresh cache."""
    path = tmp_path / "cast.tflite"
    path.write_bytes(single_op(B.CAST, [T((1, 4), "uint8")], [T((1, 4), "int8")]))
    monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path / "cache"))
    model = read_model(path)
    entry, data = _entry(tmp_path / "cache", TFLM, model)
    assert data["ok"] is False and data["stage"] == "invoke"
    return model, entry, data


def _hostile(kind: str, entry, data: dict) -> None:
    entry.unlink()
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "symlink to /dev/zero":
        entry.symlink_to("/dev/zero")
    elif kind == 'ok is the string "false"':
        entry.write_text(json.dumps({**data, "ok": "false", "stage": "done"}))
    elif kind == "truncated json":
        entry.write_text(json.dumps({**data, "ok": True, "stage": "done"})[:-9])
    elif kind == "huge file":
        with open(entry, "wb") as f:
            f.truncate(64 * 1024**3)  # sparse: costs no disk
    elif kind == "another key's answer":
        entry.write_text(json.dumps({**data, "key": "0" * 32, "ok": True, "stage": "done"}))


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", 'ok is the string "false"',
                                  "truncated json", "huge file", "another key's answer"])
def test_a_hostile_cache_entry_is_ignored_asked_again_and_replaced(refused_cast, kind):
    model, entry, data = refused_cast
    _hostile(kind, entry, data)
    # A FIFO would block a plain open() until a writer came: the probe must not.
    found = check_ops(model, load_profile(TFLM), probe=True)
    assert not found.supported, "read as supported"
    [u] = found.unsupported_ops
    assert u.op == "CAST" and "UINT8" in u.reason
    assert (found.probe.cached, found.probe.probed, found.probe.children) == (0, 1, 1)
    st = os.lstat(entry)
    assert stat.S_ISREG(st.st_mode) and st.st_size < MAX_ENTRY_BYTES
    assert json.loads(entry.read_text()) == data


def test_a_valid_entry_is_trusted_and_starts_no_child(refused_cast):
    model, _, _ = refused_cast
    found = check_ops(model, load_profile(TFLM), probe=True)
    assert not found.supported
    assert (found.probe.cached, found.probe.probed, found.probe.children) == (1, 0, 0)
