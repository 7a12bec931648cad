"""Op support tables: TFLM's (checked against the real wheel), LiteRT's, ops.allow."""

from __future__ import annotations

import pytest

from devicefit.simulator.plan.compat import CHECKERS, check_ops, table_for
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from tests import zoo
from tests.tflite_builder import custom_model, topk_model


def test_op_tflm_lacks_is_named_with_its_index():
    result = check_ops(parse_model(topk_model(), "topk.tflite"), load_profile("stm32l4r5-cortex-m4"))
    assert not result.supported
    [u] = result.unsupported_ops
    assert (u.op, u.op_index) == ("TOPK_V2", 1)
    assert "TOPK_V2 (op 1: TFLM has no kernel" in result.summary()


def test_litert_runs_every_builtin_op():
    result = check_ops(parse_model(topk_model(), "topk.tflite"), load_profile("android-arm64-cpu"))
    assert result.supported and result.table == "litert"


def test_profile_allow_list(tmp_path):
    (tmp_path / "tiny-resolver.yaml").write_text(
        "extends: stm32l4r5-cortex-m4\nops:\n  allow: [CONV_2D, DEPTHWISE_CONV_2D]\n")
    profile = load_profile(tmp_path / "tiny-resolver.yaml")
    result = check_ops(read_model(zoo.model_path("chain_int8")), profile)
    flagged = {u.op for u in result.unsupported_ops}
    assert flagged == {"AVERAGE_POOL_2D", "FULLY_CONNECTED", "RESHAPE", "SOFTMAX"}
    assert all("ops.allow" in u.reason for u in result.unsupported_ops)


def test_registry_is_keyed_by_op_table():
    assert {"tflm", "litert"} <= set(CHECKERS)
    assert table_for(load_profile("coral-edgetpu")) == "edgetpu"


@pytest.mark.parametrize(("code", "reason"), [
    ("FlexErf", "Flex delegate"),
    ("MyVendorOp", "the application must register"),
    ("TFLite_Detection_PostProcess", None),
])
def test_litert_custom_ops(code, reason):
    model = parse_model(custom_model(code), "custom.tflite")
    litert = check_ops(model, load_profile("android-arm64-cpu"))
    if reason is None:
        assert litert.supported
    else:
        assert reason in litert.unsupported_ops[0].reason
    tflm = check_ops(model, load_profile("stm32l4r5-cortex-m4"))
    # TFLM registers its own detection post-process kernel, not the others.
    assert tflm.supported is (code == "TFLite_Detection_PostProcess")


def _with_zero_scale(path, tmp_path):
    """``path`` with the scale of op 1's output set to 0, as a converter writes it when a
    layer's calibrated range is empty."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(path.read_bytes(), 0))
    sg = m.subgraphs[0]
    out = sg.operators[1].outputs[0]
    sg.tensors[out].quantization.scale = [0.0]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    bad = tmp_path / "zero_scale.tflite"
    bad.write_bytes(bytes(b.Output()))
    return bad, out


@pytest.mark.parametrize("profile,runtime", [("stm32l4r5-cortex-m4", "tflm"),
                                             ("android-arm64-cpu", "litert")])
def test_a_zero_scale_is_a_finding_because_the_runtime_refuses_it(tmp_path, profile, runtime):
    from devicefit.simulator.errors import RuntimeFailure
    from devicefit.simulator.run.runtimes import run_model

    bad, tensor = _with_zero_scale(zoo.model_path("chain_int8"), tmp_path)
    found = check_ops(read_model(bad), load_profile(profile))
    assert not found.supported
    assert {u.op_index for u in found.unsupported_ops} == {1, 2}  # its writer and its reader
    assert all(f"tensor {tensor} " in u.reason and "quantization scale 0" in u.reason
               for u in found.unsupported_ops)
    # The ground truth: the real runtime stops at prepare on exactly this file.
    with pytest.raises(RuntimeFailure, match="allocate"):
        run_model(str(bad), runtime, runs=1)
    # and the untouched model is fine
    assert check_ops(read_model(zoo.model_path("chain_int8")), load_profile(profile)).supported
