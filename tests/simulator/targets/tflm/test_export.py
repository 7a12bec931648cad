"""``devicefit export``: the firmware component's files, as a user's TFLM project gets them.

These run everywhere (no toolchain, no TFLM checkout): the files' content against the model
and the verdict they come from. Building and running them is test_target_build.py's (it
needs a checkout and the Arm toolchain).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from devicefit.simulator.targets.tflm import export as ex
from devicefit.simulator.targets.tflm.checkout import resolver_methods
from tests.tflite_builder import custom_model

PROFILE = "stm32l4r5-cortex-m4"


@pytest.fixture(scope="module")
def chain(model_zoo) -> Path:
    return model_zoo("chain_int8")


def _export(model: Path, out: Path, *extra: str) -> int:
    return main(["export", str(model), "--profile", PROFILE, "-o", str(out), *extra])


def _array_bytes(source: str) -> bytes:
    body = source[source.index("= {") + 3:source.index("};")]
    return bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", body))


def test_the_export_is_the_model_its_ops_and_the_judged_arena(chain, tmp_path, capsys):
    out = tmp_path / "fw"
    assert _export(chain, out) == 0
    assert "wrote" in capsys.readouterr().out
    name = "chain_int8"
    expected = {p.format(name=name) for p, _ in ex.LAYOUT}
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == expected
    data = chain.read_bytes()
    # the array is the file, byte for byte, and the header names its sha256
    assert _array_bytes((out / f"{name}_model_data.cc").read_text()) == data
    sha = hashlib.sha256(data).hexdigest()
    header = (out / f"{name}_model.h").read_text()
    assert f'kModelSha256[] = "{sha}"' in header
    assert f"kModelSize = {len(data)};" in header
    # exactly the model's operators, each registered once
    model = read_model(chain)
    ops = (out / f"{name}_model_ops.cc").read_text()
    registered = re.findall(r"resolver\.(Add\w+)\(\)", ops)
    assert len(registered) == len(set(registered)) == len(model.op_types)
    methods, _ = ex.default_methods()
    assert set(registered) == {methods[ex.op_key(op)] for op in model.op_types}
    assert f"kOpCount = {len(registered)};" in header
    # the arena constant: the start arena the verdict judges, rounded up to 16 bytes
    mem = simulate(chain, PROFILE).memory
    start = max(mem.arena_bytes, mem.arena_required_bytes)
    manifest = json.loads((out / "manifest.json").read_text())
    arena = manifest["arena"]
    assert arena["start_arena_bytes"] == start
    assert arena["bytes"] % 16 == 0 and 0 <= arena["bytes"] - start < 16
    assert f"#define CHAIN_INT8_ARENA_SIZE {arena['bytes']}" in header
    assert manifest["model"] == {"bytes": len(data), "sha256": sha,
                                 "symbol": "chain_int8_model_data"}
    assert arena["symbol"] == "chain_int8_tensor_arena"
    assert manifest["verified"] is None
    # each source file's sha256, and the digest a target build names
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == digest
    # inputs and outputs with their quantization, as the file declares them
    t = model.main.tensors[model.main.inputs[0]]
    assert manifest["inputs"][0]["shape"] == list(t.shape)
    assert manifest["inputs"][0]["zero_point"] == [t.quantization.zero_point[0]]
    assert "{kTfLiteInt8, " in header


def test_the_same_inputs_give_the_same_files(chain, tmp_path, capsys):
    assert _export(chain, tmp_path / "a") == 0
    assert _export(chain, tmp_path / "b") == 0
    for f in (tmp_path / "a").rglob("*"):
        if f.is_file():
            assert f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes()
    # an earlier export is replaced whole, under its new name
    assert _export(chain, tmp_path / "a", "--name", "kws", "--arena-margin", "100") == 0
    files = {p.name for p in (tmp_path / "a").iterdir()}
    assert "kws_model.h" in files and "chain_int8_model.h" not in files
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["arena"]["margin_bytes"] >= 100 and manifest["name"] == "kws"


def test_json_prints_the_manifest(chain, tmp_path, capsys):
    assert _export(chain, tmp_path / "fw", "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "fw" / "manifest.json").read_text())


def test_a_failing_verdict_writes_nothing(chain, tmp_path, capsys):
    tight = tmp_path / "tight.yaml"
    tight.write_text(f"name: tight\nextends: {PROFILE}\nbudgets:\n  arena: 1KiB\n")
    out = tmp_path / "fw"
    code = main(["export", str(chain), "--profile", str(tight), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    assert "not exported" in err and "arena" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".fw*"))


def test_an_operator_tflm_lacks_is_not_exported(tmp_path, capsys):
    model = tmp_path / "custom.tflite"
    model.write_bytes(custom_model("DevicefitNoSuchOp"))
    code = _export(model, tmp_path / "fw")
    assert code == 1
    assert "DevicefitNoSuchOp" in capsys.readouterr().err
    assert not (tmp_path / "fw").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--name", "class"], "no usable C identifier"),
    (["--name", "+"], "no usable C identifier"),
    (["--name="], "no usable C identifier"),
    (["--arena-margin", "-16"], "0 or more bytes"),
    (["--tflm", "/nonexistent/tflm"], "cannot read"),
])
def test_bad_options_are_one_line(chain, tmp_path, capsys, args, message):
    assert _export(chain, tmp_path / "fw", *args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "fw").exists()


def test_the_output_folder_is_devicefits_own(chain, tmp_path, capsys):
    foreign = tmp_path / "src"
    foreign.mkdir()
    (foreign / "main.c").write_text("int main(void) { return 0; }\n")
    assert _export(chain, foreign) == 2
    assert "did not write" in capsys.readouterr().err
    assert (foreign / "main.c").is_file() and len(list(foreign.iterdir())) == 1
    # the model inside the folder to write: refused (it would be replaced)
    holder = tmp_path / "holder"
    holder.mkdir()
    inside = holder / "m.tflite"
    inside.write_bytes(chain.read_bytes())
    assert _export(inside, holder) == 2
    assert "input" in capsys.readouterr().err


def test_a_profile_of_another_runtime_is_refused(chain, tmp_path, capsys):
    code = main(["export", str(chain), "--profile", "android-arm64-cpu", "-o",
                 str(tmp_path / "fw")])
    assert code == 2
    assert "writes a firmware component for TensorFlow Lite Micro" in capsys.readouterr().err


def test_names_become_c_identifiers():
    assert ex.c_name("digits-cnn.v2") == "digits_cnn_v2"
    assert ex.c_name("2stage") == "model_2stage"
    for bad in ("", "__", "int", "while", "tflite"):
        with pytest.raises(ex.UsageError):
            ex.c_name(bad)


def test_the_resolver_table_names_every_builtin_the_support_table_knows():
    # devicefit's table was read from TFLM's header (benchmarks/resolver_table.py); every
    # builtin the tflite-micro wheel registers has a method in it.
    from devicefit.simulator.targets.tflm.ops import SUPPORT_FILE

    methods, source = ex.default_methods()
    support = json.loads(Path(SUPPORT_FILE).read_text())
    builtins = set(support["builtin_ops"])
    assert source.startswith("TFLM ") and methods["CONV_2D"] == "AddConv2D"
    missing = sorted(op for op in builtins if op not in methods)
    assert not missing, missing


def test_resolver_methods_name_ethos_u():
    header = ("  TfLiteStatus AddAbs() {\n    return AddBuiltin(BuiltinOperator_ABS, "
              "Register_ABS(), ParseAbs);\n  }\n  TfLiteStatus AddEthosU() {\n"
              "    TFLMRegistration* registration = tflite::Register_ETHOSU();\n"
              "    return AddCustom(tflite::GetString_ETHOSU(), registration);\n  }\n")
    assert resolver_methods(header) == {"ABS": "AddAbs", "ethos-u": "AddEthosU"}


# --------------------------------------------------------------------------- a real link
# The map of hello_world_int8's export linked for the Cortex-M4 with CMSIS-NN by
# `simulate --run --target-build` (TFLM 90b983c2, Debian's arm-none-eabi-gcc 12.2.1), and
# the export's manifest: tests/fixtures/firmware/hello_world_export/.
REAL = Path(__file__).parents[3] / "fixtures" / "firmware" / "hello_world_export"


@pytest.fixture
def real_link(tmp_path) -> Path:
    import gzip

    (tmp_path / "firmware.map").write_bytes(gzip.decompress(
        (REAL / "firmware.map.gz").read_bytes()))
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "manifest.json").write_bytes((REAL / "manifest.json").read_bytes())
    return tmp_path


def test_flash_of_the_real_image_by_part(real_link):
    from devicefit.simulator.targets.tflm.firmware import PARTS, firmware_flash

    text = (real_link / "firmware.map").read_text()
    flash = firmware_flash(text, {"hello_world_int8_model_data.o": "model",
                                  "hello_world_int8_example.o": "export"}, "the image")
    # what arm-none-eabi-size printed for this image: text 56952 + data 104 + ...
    assert flash.total_bytes == 57060
    assert flash.part("model") == 2704  # the model file, whole
    assert flash.part("export") > 0
    assert [p.name for p in flash.parts] == list(PARTS)
    assert sum(p.bytes for p in flash.parts) == flash.total_bytes


def test_link_check_passes_on_the_real_link(real_link, capsys):
    code = main(["link-check", str(real_link / "firmware.map"), "--export",
                 str(real_link / "export"), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    status = {c["name"]: c["outcome"] for c in result["checks"]}
    assert status["arena size"] == "ok" and status["model in flash"] == "ok"
    assert status["arena in RAM"] == "ok" and status["RAM reserve"] == "ok"
    assert status["model content"] == "NOT CHECKED"  # a map holds no bytes
    assert result["status"] == "pass"


def test_optimize_firmware_exports_the_model_it_wrote(chain, tmp_path, capsys):
    """``--firmware DIR`` on a command that writes a model (here ``optimize``): the export
    of that output, not of its input."""
    out, fw = tmp_path / "opt.tflite", tmp_path / "fw"
    assert main(["optimize", str(chain), "--profile", PROFILE, "-o", str(out),
                 "--firmware", str(fw)]) == 0
    assert f"firmware: wrote {fw}/" in capsys.readouterr().out
    manifest = json.loads((fw / "manifest.json").read_text())
    assert manifest["model"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert (fw / "opt_model_data.cc").is_file()
    # --tflm without --firmware is a usage error, before any work
    assert main(["optimize", str(chain), "--profile", PROFILE, "-o", str(tmp_path / "b.tflite"),
                 "--tflm", str(tmp_path)]) == 2
    assert "add --firmware" in capsys.readouterr().err
    assert not (tmp_path / "b.tflite").exists()
