"""A file Vela already compiled is read, not judged blind (the real Vela, ethos-u-vela 5.2.0).

The compiled files are made here by Vela itself from the zoo's int8 models (no record
beside them: the case of a file someone else compiled). Public Vela files:
tests/public_models/test_corpus_ethos_u.py.
"""

from __future__ import annotations

import pytest

from devicefit.simulator.errors import UsageError
from devicefit.simulator.estimate.compute import op_work
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.read.writer import pack, unpack
from devicefit.simulator.report.views import render
from devicefit.simulator.simulate import simulate
from devicefit.simulator.targets.ethos_u.analysis import ETHOS_U_OP, config_for
from devicefit.simulator.targets.ethos_u.vela import run_vela

ETHOS_U = "ethos-u55-128"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, request):
    """The zoo's edgetpu_limits_int8 (ends in a MEAN Vela leaves on the Cortex-M) as Vela
    compiles it, without the record devicefit convert would write beside it."""
    from tests import zoo

    src = zoo.model_path("edgetpu_limits_int8")
    path = tmp_path_factory.mktemp("vela") / "limits_vela.tflite"
    path.write_bytes(run_vela(src.read_bytes(), config_for(load_profile(ETHOS_U))).compiled)
    return path


def test_compiled_file_reports_what_is_inside(compiled):
    model = read_model(compiled)
    r = simulate(compiled, ETHOS_U)
    s = r.compatibility.section
    sg = model.main
    npu_ops = [op for op in sg.operators if op.op_name == ETHOS_U_OP]
    assert [(c.op_index, c.command_stream_bytes, c.weights_bytes, c.scratch_bytes)
            for c in s.compiled_ops] == [
        (op.index, sg.tensors[op.inputs[0]].nbytes, sg.tensors[op.inputs[1]].nbytes,
         sg.tensors[op.inputs[2]].nbytes) for op in npu_ops]
    assert all(c.command_stream_bytes > 0 and c.weights_bytes > 0 for c in s.compiled_ops)
    cpu = [op for op in sg.operators if op.op_name != ETHOS_U_OP]
    assert s.cpu_ops == len(cpu) and [op.op_name for op in cpu] == ["MEAN"]
    # MEAN reads every element of its input once.
    assert s.cpu_macs == sg.tensors[cpu[0].inputs[0]].num_elements > 0
    assert s.cpu_ms is not None and s.cpu_ms > 0 and s.npu_ms is None
    # The NPU's cycles are not in the file: no estimate, and never a bare PASS.
    assert r.latency.estimated_device_ms is None
    assert "Cortex-M part alone" in r.latency.no_estimate
    assert "latency" in r.unchecked_budgets
    text = render("text", r)
    assert "latency NOT CHECKED" in text and "command stream" in text


def test_compiled_file_arena_bounds_are_consistent(compiled):
    """Vela places the NPU's input and output inside its scratch area: the bytes live at
    once are the area they cover, never more than the arena that holds them."""
    r = simulate(compiled, ETHOS_U)
    assert 0 < r.memory.lower_bound_bytes <= r.memory.arena_head_bytes


def test_compiled_file_on_a_plain_mcu_profile_is_an_op_finding_naming_vela(compiled):
    r = simulate(compiled, "stm32h743-cortex-m7")
    reasons = [u.reason for u in r.compatibility.unsupported_ops if u.op == ETHOS_U_OP]
    assert reasons and all("Ethos-U NPU (Vela)" in why for why in reasons)
    assert not r.ok
    # Its 0 MACs would be a near-zero estimate: there is none.
    assert r.latency.estimated_device_ms is None and "Ethos-U" in r.latency.no_estimate


def test_int8_file_is_reported_as_the_users_with_its_compilation_beside(model_zoo):
    src = model_zoo("chain_int8")
    source = read_model(src)
    r = simulate(src, ETHOS_U)
    assert r.model.source is not None
    assert (r.model.source.size_bytes, r.model.source.sha256) == (source.size_bytes,
                                                                  source.sha256)
    assert r.model.sha256 != source.sha256 and "CUSTOM:ethos-u" in r.model.op_types
    text = render("text", r)
    assert f"{source.size_bytes:,} B" in text and "compiled for the Arm Ethos-U NPU" in text
    # Every operator on the NPU: Vela's cycles as they are, and no zero-width band that
    # would claim them exact.
    assert r.compatibility.section.cpu_ops == 0 and r.latency.estimated_device_ms > 0
    assert r.latency.band_ms is None and "no band" in r.latency.band_basis


def test_input_shape_on_an_ethos_u_profile_is_a_usage_error(model_zoo):
    with pytest.raises(UsageError, match="compiles the file with the shapes stored"):
        simulate(model_zoo("chain_int8"), ETHOS_U, input_shapes=[(None, (1, 8))])


def test_a_newline_in_a_tensor_name_does_not_break_the_ethos_u_target(tmp_path, model_zoo):
    """Vela prints names unquoted in its CPU-op warnings and its per-layer CSV, and quotes
    them unescaped in its debug database's XML: a newline in one used to crash every
    Ethos-U profile (AttributeError on a short CSV row). Its database, read as the JSON
    devicefit has Vela write, keeps a name with a newline, a comma, quotes and ``]]>``
    whole, and every row still tied to its operator."""
    m = unpack(model_zoo("edgetpu_limits_int8").read_bytes())
    sg = m.subgraphs[0]
    first, last = sg.operators[0].outputs[0], sg.operators[-1].outputs[0]
    hostile = 'first\nout,"put"]]>\n</table>'
    sg.tensors[first].name = hostile.encode()
    sg.tensors[last].name = b"mean\nout"
    path = tmp_path / "newline.tflite"
    path.write_bytes(pack(m))
    s = simulate(path, ETHOS_U).compatibility.section
    assert s.partition[0].name == hostile
    assert s.partition[0].what_vela_did() == "ethos-u op 0: Vela's Conv2D + Relu"
    assert any(r.name.startswith(hostile) for r in s.per_layer)
    assert all(r.op_index is not None for r in s.per_layer)
    assert all(r.unit in ("npu", "cpu") for r in s.per_layer)
    cpu = s.cpu_partition()
    assert [p.op for p in cpu] == ["MEAN"] and cpu[0].reason  # Vela's reason, found
    assert sum(w.macs for w in op_work(read_model(path))) > 0


def test_rows_vela_ties_to_no_operator_of_the_file_are_said_not_guessed(model_zoo):
    """Vela's ``source`` table is trusted only where it lists as many operators as the file
    has in each subgraph. A run whose table lists one operator short (as a newer Vela that
    skipped one might): no row is tied, no operator is given cycles or called compiled
    away, and the text says how many of Vela's cycles went unattributed."""
    import dataclasses

    from devicefit.simulator.read.reader import parse_model
    from devicefit.simulator.targets.ethos_u.analysis import section_from_run

    path = model_zoo("edgetpu_limits_int8")
    profile = load_profile(ETHOS_U)
    run = run_vela(path.read_bytes(), config_for(profile))
    short = dataclasses.replace(run, sources=run.sources[:-1])
    s = section_from_run(read_model(path), parse_model(run.compiled, str(path)), short, "vela",
                         profile)
    assert all(r.op_index is None for r in s.per_layer)
    assert all(p.cycles is None for p in s.partition)
    npu = [p.what_vela_did() for p in s.partition if p.unit == "npu"]
    assert npu and all(d.endswith("not in Vela's per-layer figures") for d in npu)
    lost = sum(r.cycles for r in s.per_layer)
    assert f"  note         {lost:,} of Vela's cycles come from operators its database ties " \
           "to none of this file's" in s.text_lines()
    assert s.display().parts[-2].text.startswith("No per-operator figures: Vela's per-layer "
                                                 "report gives none")
