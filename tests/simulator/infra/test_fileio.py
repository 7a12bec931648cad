"""``all_or_nothing``: a command's outputs are kept only when it completes."""

from __future__ import annotations

import pytest

from devicefit.simulator.infra.fileio import all_or_nothing, write_atomic


class _Stop(KeyboardInterrupt):
    pass


def test_completed_block_keeps_every_output_and_no_backup(tmp_path):
    old = tmp_path / "report.json"
    old.write_text("old")
    with all_or_nothing():
        write_atomic(tmp_path / "model.tflite", b"new model")
        write_atomic(old, "new")
    assert (tmp_path / "model.tflite").read_bytes() == b"new model"
    assert old.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.tflite", "report.json"]


@pytest.mark.parametrize("stop", [_Stop, RuntimeError], ids=["interrupted", "failed"])
def test_interrupted_or_failed_block_leaves_what_was_there(tmp_path, stop):
    old = tmp_path / "report.json"
    old.write_text("old")
    with pytest.raises(stop), all_or_nothing():
        write_atomic(tmp_path / "model.tflite", b"first")
        # Written twice (convert writes the model, evaluates it, writes it with metadata):
        # the record is of the first write, so the rollback removes the file.
        write_atomic(tmp_path / "model.tflite", b"second")
        write_atomic(old, "new")
        assert old.read_text() == "new"  # readable in place while the command runs
        raise stop()
    assert old.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_outside_a_block_writes_are_final(tmp_path):
    write_atomic(tmp_path / "a.txt", "a")
    with pytest.raises(RuntimeError), all_or_nothing():
        raise RuntimeError
    assert (tmp_path / "a.txt").read_text() == "a"


def test_missing_folders_are_made_and_unmade_with_the_outputs(tmp_path):
    out = tmp_path / "build" / "reports" / "junit.xml"
    with pytest.raises(_Stop), all_or_nothing():
        write_atomic(out, "<testsuites/>")
        assert out.read_text() == "<testsuites/>"
        raise _Stop()
    assert list(tmp_path.iterdir()) == []
    with all_or_nothing():
        write_atomic(out, "<testsuites/>")
    assert out.read_text() == "<testsuites/>"


def test_every_command_makes_the_output_folder(tmp_path, capsys):
    """One rule for every command (optimize refused a missing folder, check made it)."""
    from devicefit.sdk.cli import main
    from tests import hostile

    model = tmp_path / "m.tflite"
    model.write_bytes(hostile.relu_chain(2))
    assert main(["simulate", str(model), "--profile", "esp32-s3",
                 "--html", str(tmp_path / "a" / "r.html")]) == 0
    assert main(["optimize", str(model), "--profile", "esp32-s3",
                 "-o", str(tmp_path / "b" / "c" / "m.tflite")]) == 0
    assert (tmp_path / "a" / "r.html").is_file() and (tmp_path / "b" / "c" / "m.tflite").is_file()
