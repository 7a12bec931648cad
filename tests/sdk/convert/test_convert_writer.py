"""Flatbuffer edits without TensorFlow (simulator/read/writer.py) and the converter's data
loading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from devicefit.sdk.convert import data, metadata
from devicefit.simulator.errors import InputError, ModelFormatError
from devicefit.simulator.read import writer
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.run.runtimes import run_model
from tests.zoo import model_path


@pytest.fixture(scope="module")
def chain() -> bytes:
    return Path(model_path("chain_int8")).read_bytes()


def test_add_metadata_round_trips_and_the_model_still_runs_identically(chain, tmp_path):
    edited = writer.add_metadata(chain, "devicefit.test", b'{"a": 1}')
    path = tmp_path / "edited.tflite"
    path.write_bytes(edited)
    model = read_model(path)
    assert model.metadata["devicefit.test"] == b'{"a": 1}'
    original = read_model(model_path("chain_int8"))
    assert set(original.metadata) < set(model.metadata)
    x = [np.random.default_rng(1).integers(-128, 127, size=(1, 32, 32, 3), dtype=np.int8)]
    a = run_model(model_path("chain_int8"), "litert", inputs=x).outputs
    b = run_model(path, "litert", inputs=x).outputs
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


def test_constant_buffers_stay_16_byte_aligned(chain):
    from ai_edge_litert import schema_py_generated as schema

    edited = writer.add_metadata(chain, "x", b"123")
    raw = schema.Model.GetRootAs(bytearray(edited), 0)
    starts = []
    for i in range(raw.BuffersLength()):
        table = raw.Buffers(i)._tab
        field = table.Offset(4)  # Buffer.data
        if field and table.VectorLen(field):
            starts.append(table.Vector(field))  # where the data begins in the file
    assert len(starts) > 3
    assert all(s % 16 == 0 for s in starts)


def test_replacing_an_entry_does_not_grow_the_file(chain):
    once = writer.add_metadata(chain, "devicefit.conversion", b"x" * 1000)
    twice = writer.add_metadata(once, "devicefit.conversion", b"y" * 1000)
    assert writer.read_metadata(twice)["devicefit.conversion"] == b"y" * 1000
    assert abs(len(twice) - len(once)) < 64


def test_not_a_tflite_is_a_model_format_error():
    with pytest.raises(ModelFormatError, match="TFL3"):
        writer.add_metadata(b"hello world, not a model", "x", b"")


def test_conversion_metadata_is_json_with_a_format_version(chain):
    edited = metadata.embed(chain, {"profile": "p", "scheme": "int8"})
    assert metadata.read(edited) == {"format_version": 1, "profile": "p", "scheme": "int8"}
    assert json.loads(writer.read_metadata(edited)[metadata.METADATA_NAME])["profile"] == "p"
    assert metadata.read(chain) is None


# --------------------------------------------------------------------------- data sources
def test_npz_with_x_and_y_and_npy_and_callable(tmp_path):
    x = np.random.default_rng(0).random((10, 4, 4, 1), dtype=np.float32)
    y = np.arange(10)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    np.save(tmp_path / "d.npy", x)
    ds = data.load_data(tmp_path / "d.npz", (4, 4, 1), what="calibration", limit=6)
    assert ds.x.shape == (6, 4, 4, 1) and list(ds.y) == list(range(6))
    assert data.load_data(tmp_path / "d.npy", (4, 4, 1), what="evaluation").y is None
    from_fn = data.load_data(lambda: (x, y), (4, 4, 1), what="training")
    assert from_fn.x.dtype == np.float32 and len(from_fn) == 10


def test_image_folder_with_class_subfolders_is_resized_and_labelled(tmp_path):
    from PIL import Image

    for label, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(3):
            Image.new("RGB", (20, 10), (label * 200, i * 50, 0)).save(tmp_path / name / f"{i}.png")
    ds = data.load_data(tmp_path, (8, 8, 3), what="calibration")
    assert ds.x.shape == (6, 8, 8, 3)
    assert list(ds.y) == [0, 0, 0, 1, 1, 1]
    assert ds.x[3, 0, 0, 0] == 200.0  # pixels stay 0..255
    gray = data.load_data(tmp_path, (5, 5, 1), what="calibration")
    assert gray.x.shape == (6, 5, 5, 1)


@pytest.mark.parametrize("make, match", [
    (lambda p: np.save(p / "a.npy", np.zeros((3, 4, 4), np.float32)) or p / "a.npy",
     r"shape \(4, 4\) but the model input is \(4, 4, 1\)"),
    (lambda p: np.savez(p / "a.npz", images=np.zeros(3), labels=np.zeros(3)) or p / "a.npz",
     "needs an array named 'x'"),
    (lambda p: np.savez(p / "a.npz", x=np.zeros((3, 4, 4, 1)), y=np.zeros(2)) or p / "a.npz",
     "3 samples but 2 labels"),
    (lambda p: p / "missing.npz", "not found"),
    (lambda p: (p / "a.csv").write_text("1,2") and p / "a.csv", "must be .npy, .npz"),
], ids=["shape", "npz-names", "label-count", "missing", "suffix"])
def test_bad_data_is_an_input_error_naming_the_problem(tmp_path, make, match):
    with pytest.raises(InputError, match=match):
        data.load_data(make(tmp_path), (4, 4, 1), what="calibration")


def test_random_calibration_is_flagged(caplog):
    ds = data.load_data(data.RANDOM, (4, 4, 1), what="calibration", limit=7)
    assert ds.random and ds.x.shape == (7, 4, 4, 1)
    assert "RANDOM" in caplog.text


def test_importing_the_converter_does_not_import_tensorflow():
    """`import sdk.convert` must stay light: TensorFlow loads only inside the stages."""
    import subprocess
    import sys

    code = ("import sys, sdk.convert, sdk.commands.convert; "
            "print([m for m in ('tensorflow', 'keras') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
