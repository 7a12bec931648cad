"""The reader: real models parse into the IR; anything else is one ModelFormatError line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicefit.sdk.cli import main
from devicefit.simulator.errors import DevicefitError, ModelFormatError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.read.writer import add_metadata, offline_plan_bytes, pack, unpack
from devicefit.simulator.simulate import static_report
from tests.zoo import model_path

PROFILE = load_profile("stm32l4r5-cortex-m4")


@pytest.fixture(scope="module")
def chain_bytes() -> bytes:
    return model_path("chain_int8").read_bytes()


def test_reads_a_real_model() -> None:
    m = read_model(model_path("residual_int8"))
    sg = m.main
    assert m.op_types == {"ADD": 2, "CONV_2D": 5, "FULLY_CONNECTED": 1, "MEAN": 1}
    assert sg.tensors[sg.inputs[0]].shape == (1, 24, 24, 4)
    assert sg.tensors[sg.inputs[0]].dtype == "int8"
    conv = sg.operators[0]
    assert conv.op_name == "CONV_2D" and conv.options["padding"] == "SAME"
    weights = sg.tensors[conv.inputs[1]]
    assert weights.has_data and weights.quantization is not None
    assert weights.quantization.per_channel
    assert m.size_bytes == model_path("residual_int8").stat().st_size and len(m.sha256) == 64


def test_reads_control_flow_subgraphs_and_dynamic_shapes() -> None:
    m = read_model(model_path("if_float32"))
    if_op = next(op for op in m.main.operators if op.op_name == "IF")
    assert {if_op.options["then_subgraph_index"], if_op.options["else_subgraph_index"]} == {1, 2}
    dyn = read_model(model_path("dynamic_float32"))
    assert dyn.main.tensors[dyn.main.inputs[0]].is_dynamic


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _bad_inputs(tmp_path: Path, chain: bytes) -> dict[str, Path]:
    return {
        "empty": _write(tmp_path, "empty.tflite", b""),
        "random": _write(tmp_path, "random.tflite", os.urandom(4096)),
        "truncated": _write(tmp_path, "truncated.tflite", chain[: len(chain) // 3]),
        "text": _write(tmp_path, "notes.tflite", b"this is not a model\n" * 20),
        "directory": tmp_path,
        "missing": tmp_path / "missing.tflite",
    }


@pytest.mark.parametrize("case", ["empty", "random", "truncated", "text", "directory", "missing"])
def test_bad_input_is_one_clear_error(case: str, tmp_path: Path, chain_bytes: bytes,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = _bad_inputs(tmp_path, chain_bytes)[case]
    with pytest.raises(ModelFormatError) as err:
        read_model(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    assert main(["simulate", str(path), "--profile", "stm32l4r5-cortex-m4"]) == 2
    out, errtext = capsys.readouterr()
    assert out == ""
    assert errtext.count("\n") == 1 and errtext.startswith("devicefit: error: ")


def test_truncation_is_named(chain_bytes: bytes) -> None:
    with pytest.raises(ModelFormatError, match="corrupt or truncated|invalid .tflite"):
        parse_model(chain_bytes[:2000], "cut.tflite")
    with pytest.raises(ModelFormatError, match=r"points past its end \(byte [\d,]+ of a "
                                               r"2,000-byte file\): the file is truncated"):
        parse_model(chain_bytes[:2000], "cut.tflite")


def test_a_missing_file_names_the_one_beside_it(tmp_path: Path, chain_bytes: bytes) -> None:
    (tmp_path / "digits.tflite").write_bytes(chain_bytes)
    with pytest.raises(ModelFormatError,
                       match=r"digit.tflite: file not found; did you mean 'digits.tflite'\?$"):
        read_model(tmp_path / "digit.tflite")
    with pytest.raises(ModelFormatError, match=r"file not found$"):
        read_model(tmp_path / "nothing-near.tflite")


def test_a_renamed_zip_says_what_it_holds(tmp_path: Path) -> None:
    """A .keras or an .npz renamed .tflite: what the archive holds and what to do, not the
    four bytes of a zip header."""
    import zipfile

    import numpy as np

    keras = tmp_path / "model.tflite"
    with zipfile.ZipFile(keras, "w") as z:  # the members Keras 3 writes in a .keras
        for name in ("metadata.json", "config.json", "model.weights.h5"):
            z.writestr(name, "{}")
    with pytest.raises(ModelFormatError, match=r"a zip archive of a Keras model \(.keras\), "
                                               r"not a .tflite; convert it first: devicefit"):
        read_model(keras)
    data = tmp_path / "train.tflite"
    with data.open("wb") as f:
        np.savez(f, x=np.zeros(3), y=np.ones(2))
    with pytest.raises(ModelFormatError, match=r"NumPy arrays \(.npz: data, not a model\)"):
        read_model(data)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_mutated_models_never_crash_the_reader(chain_bytes: bytes, data: st.DataObject
                                                    ) -> None:
    """Flip, cut and overwrite bytes of a real model: the reader returns a model or raises
    ModelFormatError, nothing else (no IndexError, no MemoryError, no hang); a model that
    parses goes through the whole static simulation with at most a DevicefitError."""
    buf = bytearray(chain_bytes)
    for _ in range(data.draw(st.integers(1, 8), label="edits")):
        pos = data.draw(st.integers(0, len(buf) - 1), label="pos")
        buf[pos] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="cut"):
        buf = buf[: data.draw(st.integers(0, len(buf)), label="length")]
    try:
        model = parse_model(bytes(buf), "fuzz.tflite")
    except ModelFormatError:
        return
    try:
        static_report(model, PROFILE)
    except DevicefitError:
        pass


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.binary(min_size=0, max_size=512))
def test_fuzz_random_bytes_with_identifier(blob: bytes) -> None:
    data = blob[:4] + b"TFL3" + blob[4:]
    try:
        parse_model(data, "random.tflite")
    except ModelFormatError:
        pass


def _edited(chain: bytes, edit) -> bytes:
    model = unpack(chain)
    edit(model)
    return pack(model)


@pytest.mark.parametrize(("what", "edit", "message"), [
    ("buffer index", lambda m: setattr(m.subgraphs[0].tensors[0], "buffer", 9999),
     "points to buffer 9999"),
    ("dtype", lambda m: setattr(m.subgraphs[0].tensors[0], "type", 99), "unknown dtype 99"),
    ("tensor index", lambda m: setattr(m.subgraphs[0].operators[0], "inputs", [0, 500]),
     "refers to tensor 500"),
    ("opcode index", lambda m: setattr(m.subgraphs[0].operators[0], "opcodeIndex", 77),
     "uses opcode 77"),
    ("no subgraph", lambda m: setattr(m, "subgraphs", []), "no subgraph"),
])
def test_structurally_invalid_models_are_named(chain_bytes: bytes, what: str, edit,
                                               message: str) -> None:
    with pytest.raises(ModelFormatError, match=message):
        parse_model(_edited(chain_bytes, edit), f"bad-{what}.tflite")


def test_bad_offline_plans_are_rejected(chain_bytes: bytes) -> None:
    data = add_metadata(chain_bytes, "OfflineMemoryAllocation", offline_plan_bytes([0, 16, -1]))
    with pytest.raises(ModelFormatError, match="lists 3 offsets"):
        static_report(parse_model(data, "offline.tflite"), PROFILE)
    n = len(parse_model(chain_bytes).main.tensors)
    data = add_metadata(chain_bytes, "OfflineMemoryAllocation",
                        offline_plan_bytes([-1] * (n - 1) + [-7]))
    with pytest.raises(ModelFormatError, match="negative offset -7"):
        static_report(parse_model(data, "offline.tflite"), PROFILE)
