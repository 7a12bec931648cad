"""``devicefit link-check``: real links of a Cortex-M4 firmware (``tests/fixtures/firmware``)
held to an export's manifest. Each test runs on the committed links and, where the Arm GNU
toolchain is installed, on links made anew by the fixtures' build.sh; exit 0 when every
check passes, 1 when one fails, 2 on bad input (one line, never a traceback)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from tests import doccheck
from tests.firmware_links import (
    ARENA,
    FIXTURES,
    NO_TOOLCHAIN,
    TOOLCHAIN,
    build,
    manifest,
    write_export,
)
from tests.paths import ROOT


@pytest.fixture(scope="module", params=["committed", "linked here"])
def links(request, tmp_path_factory) -> Path:
    """The folder of the links: the committed ones, or the same linked now by build.sh."""
    if request.param == "committed":
        return FIXTURES
    if TOOLCHAIN is None:
        pytest.skip(NO_TOOLCHAIN)
    return build(tmp_path_factory.mktemp("links"))


@pytest.fixture
def export(tmp_path) -> Path:
    return write_export(tmp_path / "export", manifest())


def _run(capsys, *argv: str | Path) -> tuple[int, dict]:
    code = main(["link-check", *map(str, argv), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _outcomes(result: dict) -> dict[str, str]:
    return {c["name"]: c["outcome"] for c in result["checks"]}


def _one_line_error(capsys, *fragments: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


ALL_OK = {"model size": "ok", "model in flash": "ok", "model content": "ok", "arena in RAM": "ok",
          "arena alignment": "ok", "arena size": "ok", "RAM reserve": "ok"}


def test_the_real_link_passes(capsys, links, export):
    code, result = _run(capsys, links / "regions.elf", links / "regions.map", "--export", export)
    assert code == 0 and result["status"] == "pass"
    assert _outcomes(result) == ALL_OK
    assert result["model"]["memory"]["name"] == "FLASH" and result["arena"]["memory"]["name"] == "RAM"
    assert result["expected"]["reserve_bytes"] == 16 * 1024  # tflm-mcu-base's firmware.reserve
    assert main(["link-check", str(links / "regions.elf"), str(links / "regions.map"),
                 "--export", str(export)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "Verdict: PASS (7 checks, all ok)"
    assert re.search(r"arena size +4,096 B +>= 4,096 B \(start arena\) +ok", out)


def test_an_arena_16_bytes_below_the_start_arena_fails(capsys, links, export):
    code, result = _run(capsys, links / "small_arena.elf", "--export", export)
    assert code == 1 and result["status"] == "fail"
    size = next(c for c in result["checks"] if c["name"] == "arena size")
    assert (size["outcome"], size["found"], size["expected"]) == (
        "FAIL", "4,080 B", ">= 4,096 B (start arena)")
    assert size["why"].startswith("16 B smaller than the start arena")
    assert _outcomes(result) == {**ALL_OK, "arena size": "FAIL", "RAM reserve": "NOT CHECKED"}


def test_a_model_in_ram_fails(capsys, links, export):
    code, result = _run(capsys, links / "model_in_ram.map", "--export", export)
    assert code == 1
    flash = next(c for c in result["checks"] if c["name"] == "model in flash")
    assert flash["outcome"] == "FAIL" and flash["found"] == "0x20000000 in region RAM (xrw)"
    assert "declare the array const" in flash["why"]
    assert _outcomes(result)["model content"] == "NOT CHECKED"  # a map holds no bytes


def test_a_changed_model_of_the_same_size_fails(capsys, links, export):
    code, result = _run(capsys, links / "model_changed.elf", "--export", export)
    assert code == 1
    outcomes = _outcomes(result)
    assert (outcomes["model size"], outcomes["model content"]) == ("ok", "FAIL")
    assert result["model_sha256"] != result["expected"]["model_sha256"]


def test_a_default_linker_script_says_what_was_not_checked(capsys, links, export):
    code, result = _run(capsys, links / "default.map", "--export", export)
    assert code == 0
    assert _outcomes(result) == {**ALL_OK, "model in flash": "NOT CHECKED",
                                 "model content": "NOT CHECKED", "arena in RAM": "NOT CHECKED",
                                 "RAM reserve": "NOT CHECKED"}
    reserve = next(c for c in result["checks"] if c["name"] == "RAM reserve")
    assert "no MEMORY regions (a default linker script)" in reserve["why"]
    assert main(["link-check", str(links / "default.map"), "--export", str(export)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Verdict: PASS (7 checks; 4 NOT CHECKED: model in flash, model content, arena in RAM, "
        "RAM reserve)")


def test_without_data_sections_the_sizes_are_not_checked(capsys, links, export):
    code, result = _run(capsys, links / "nods.map", "--export", export)
    assert code == 0
    outcomes = _outcomes(result)
    assert (outcomes["model size"], outcomes["arena size"]) == ("NOT CHECKED", "NOT CHECKED")
    assert (outcomes["model in flash"], outcomes["arena in RAM"]) == ("ok", "ok")


def test_the_reserve_is_the_profiles(capsys, tmp_path, export):
    board = tmp_path / "board.yaml"
    board.write_text("extends: stm32l4r5-cortex-m4\nfirmware:\n  reserve: 640KiB\n")
    code, result = _run(capsys, FIXTURES / "regions.map", "--export", export, "--profile", board)
    assert code == 1
    reserve = next(c for c in result["checks"] if c["name"] == "RAM reserve")
    assert (reserve["outcome"], reserve["found"]) == ("FAIL", "650,976 B free in RAM")
    assert "4,384 B short" in reserve["why"] and "not the export's stm32l4r5-cortex-m4" \
        in reserve["why"]
    code, result = _run(capsys, FIXTURES / "regions.map", "--export", export,
                        "--profile", "android-arm64-cpu")
    assert code == 0 and "android-arm64-cpu sets no firmware.reserve" in \
        next(c["why"] for c in result["checks"] if c["name"] == "RAM reserve")


def test_without_an_export_the_symbols_and_minimum_come_from_the_options(capsys):
    argv = [FIXTURES / "regions.map", "--arena-symbol", ARENA]
    code, result = _run(capsys, *argv, "--arena-bytes", "4KiB")
    assert code == 0 and result["model"] is None
    assert list(_outcomes(result)) == ["arena in RAM", "arena alignment", "arena size",
                                       "RAM reserve"]
    assert _outcomes(result)["RAM reserve"] == "NOT CHECKED"  # no profile given
    code, result = _run(capsys, *argv, "--arena-bytes", "4097", "--profile", "nrf52840-cortex-m4")
    assert code == 1 and _outcomes(result)["arena size"] == "FAIL"
    assert _outcomes(result)["RAM reserve"] == "ok"


@pytest.mark.parametrize("constant,note", [
    (4000, "the arena array is 4,096 B, larger than the export's 4,000 B: RAM the verified "
           "plan does not need"),
    (4112, "the arena array is 4,096 B, not the export's 4,112 B (still at least the start "
           "arena)"),
])
def test_an_arena_other_than_the_exports_constant_is_a_note(capsys, tmp_path, constant, note):
    export = write_export(tmp_path / "e", manifest(bytes=constant, start_arena_bytes=4000))
    code, result = _run(capsys, FIXTURES / "regions.elf", "--export", export)
    assert code == 0 and result["notes"] == [note]


def test_a_missing_symbol_is_exit_2_with_a_did_you_mean(capsys, export):
    assert main(["link-check", str(FIXTURES / "regions.elf"), "--export", str(export),
                 "--arena-symbol", "tensor_arena"]) == 2
    _one_line_error(capsys, "no symbol 'tensor_arena'; did you mean 'x_tensor_arena'?")
    assert main(["link-check", str(FIXTURES / "regions.map"), "--model-symbol", "x_modle_data"]) == 2
    _one_line_error(capsys, "did you mean 'x_model_data'?")


def test_a_symbol_the_linker_discarded_is_named_so(capsys, tmp_path):
    text = (FIXTURES / "regions.map").read_text()
    discarded = text.replace("Discarded input sections\n\n", "Discarded input sections\n\n"
                             " .bss.x_unused  0x00000000       0x40 regions.o\n")
    (tmp_path / "fw.map").write_text(discarded)
    assert main(["link-check", str(tmp_path / "fw.map"), "--arena-symbol", "x_unused"]) == 2
    _one_line_error(capsys, "the linker discarded x_unused (.bss.x_unused, --gc-sections)")


def _hostile(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """id → (argv after link-check, a fragment of the one error line)."""
    elf = (FIXTURES / "regions.elf").read_bytes()
    files = {"empty": b"", "text": b"not a firmware\n", "cut.elf": elf[:100],
             "random": bytes(range(256)) * 64, "nul": b"\0" * 10_000}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    write_export(tmp_path / "e", manifest())
    (tmp_path / "no-manifest").mkdir()
    export = ["--export", str(tmp_path / "e")]
    return {
        **{name: ([str(tmp_path / name), *export], "neither an ELF nor a GNU ld map file")
           for name in ("empty", "text", "random", "nul")},
        "cut-elf": ([str(tmp_path / "cut.elf"), *export], "past the end of the file (100 bytes)"),
        "folder": ([str(tmp_path), *export], "is a folder"),
        "device": (["/dev/zero", *export], "not a regular file"),
        "missing": ([str(tmp_path / "nope.elf"), *export], "cannot be read"),
        "no-manifest": ([str(FIXTURES / "regions.elf"), "--export", str(tmp_path / "no-manifest")],
                        "export manifest not found"),
        "two-elves": ([str(FIXTURES / "regions.elf"), str(FIXTURES / "small_arena.elf"), *export],
                      "both ELFs"),
        "two-links": ([str(FIXTURES / "model_in_ram.map"), str(FIXTURES / "regions.elf"), *export],
                      "are not of the same link: x_model_data is at 0x20000000 in the map"),
        "nothing-asked": ([str(FIXTURES / "regions.elf")], "nothing to check"),
        "bad-size": ([str(FIXTURES / "regions.elf"), "--arena-symbol", ARENA, "--arena-bytes",
                      "lots"], "expected an integer byte count"),
        "unknown-profile": ([str(FIXTURES / "regions.elf"), *export, "--profile", "stm32l4r5"],
                            "did you mean 'stm32l4r5-cortex-m4'"),
    }


HOSTILE = ["empty", "text", "random", "nul", "cut-elf", "folder", "device", "missing",
           "no-manifest", "two-elves", "two-links", "nothing-asked", "bad-size",
           "unknown-profile"]


@pytest.mark.parametrize("case", HOSTILE)
def test_bad_input_is_exit_2_with_one_line(capsys, tmp_path, case):
    argv, fragment = _hostile(tmp_path)[case]
    try:
        code = main(["link-check", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    _one_line_error(capsys, fragment)


def test_an_export_naming_a_profile_not_found_says_how_to_name_one(capsys, tmp_path):
    export = write_export(tmp_path / "e", {**manifest(), "profile": "our-board"})
    assert main(["link-check", str(FIXTURES / "regions.elf"), "--export", str(export)]) == 2
    _one_line_error(capsys, "unknown profile 'our-board'", "give --profile NAME or a .yaml")


def test_the_transcripts_of_the_docs_are_what_it_prints(tmp_path):
    """docs/firmware.md's examples, skipped by the docs check (which has no firmware), run
    here in a folder holding the committed links under the names the page uses."""
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    for name, fixture in (("firmware.elf", "regions.elf"), ("firmware.map", "regions.map"),
                          ("small_arena.elf", "small_arena.elf")):
        (build_dir / name).write_bytes((FIXTURES / fixture).read_bytes())
    write_export(build_dir / "export", manifest())
    shown = [b for b in doccheck.blocks(ROOT / "docs" / "firmware.md")
             if "tests/sdk/test_link_check.py" in b.markers.get("skip", "")]
    assert len(shown) == 3
    with doccheck.working_dir(tmp_path):
        for block in shown:
            for cmd in block.commands:
                code, printed = doccheck.run_cli(cmd.argv)
                assert code == int(block.markers.get("exit", "0")), (cmd.text, printed)
                assert doccheck.matches(cmd.expected, printed), "\n".join(
                    [cmd.text, *doccheck.updated(cmd.expected, printed)])


# --------------------------------------------------------------------------- the toolchain
CORTEX_M4 = ["-mcpu=cortex-m4", "-mthumb", "-Os", "-ffunction-sections", "-fdata-sections"]
LINK = ["--specs=nosys.specs", "--specs=nano.specs", "-Wl,--gc-sections",
        "-T", str(FIXTURES / "cortex-m.ld")]


def _link(folder: Path, source: str, *options: str, language: str = "c++") -> str:
    """Compile and link ``source`` into folder/app.elf and app.map; ld's stdout."""
    (folder / "app.src").write_text(source)
    subprocess.run(["arm-none-eabi-g++", "-x", language, *CORTEX_M4, *options, "-c", "app.src",
                    "-o", "app.o"], cwd=folder, check=True, capture_output=True)
    return subprocess.run(["arm-none-eabi-g++", *CORTEX_M4, *LINK, *options, "-Wl,-Map=app.map",
                           "app.o", "-o", "app.elf"], cwd=folder, check=True,
                          capture_output=True, text=True).stdout


@pytest.mark.skipif(TOOLCHAIN is None, reason=NO_TOOLCHAIN)
def test_the_ram_used_is_what_ld_prints(capsys, tmp_path):
    """The reserve check counts a region's fill as ld's --print-memory-usage does."""
    source = (FIXTURES / "firmware.cc").read_text() + "unsigned char x_more[777] = {1};\n"
    printed = _link(tmp_path, source, "-Wl,--print-memory-usage")
    used = int(re.search(r"^\s+RAM:\s+(\d+) B", printed, re.MULTILINE).group(1))
    code, result = _run(capsys, tmp_path / "app.map", "--arena-symbol", ARENA)
    assert code == 0 and result["ram"]["used_bytes"] == used


@pytest.mark.skipif(TOOLCHAIN is None, reason=NO_TOOLCHAIN)
def test_an_arena_in_an_anonymous_namespace_as_tflm_examples_keep_it(capsys, tmp_path):
    """A local symbol is in the ELF's table and, with -fdata-sections, the map's sections."""
    _link(tmp_path, "#include <cstdint>\nnamespace {\nalignas(16) uint8_t tensor_arena[2000];\n}\n"
                    "int main() {\n  volatile uint8_t* arena = tensor_arena;\n"
                    "  arena[1999] = 1;\n  return arena[0];\n}\n")
    assert main(["link-check", str(tmp_path / "app.map"), "--arena-symbol", "tensor_arena"]) == 2
    _one_line_error(capsys, "did you mean '_ZN12_GLOBAL__N_112tensor_arenaE'?")
    for firmware in ("app.map", "app.elf"):
        code, result = _run(capsys, tmp_path / firmware, "--arena-bytes", "2000",
                            "--arena-symbol", "_ZN12_GLOBAL__N_112tensor_arenaE")
        assert code == 0 and result["arena"]["size"] == 2000, firmware


@pytest.mark.skipif(TOOLCHAIN is None, reason=NO_TOOLCHAIN)
def test_a_c_common_symbol_takes_its_size_from_the_maps_table(capsys, tmp_path):
    """C's tentative definitions under -fcommon (GCC's default before 10) share the input
    section COMMON; "Allocating common symbols" gives each one's size."""
    _link(tmp_path, "unsigned char tensor_arena[3000] __attribute__((aligned(16)));\n"
                    "unsigned char a_buffer_whose_name_is_too_long_for_its_column[40];\n"
                    "int main(void) {\n  volatile unsigned char *a = tensor_arena;\n"
                    "  a[2999] = a_buffer_whose_name_is_too_long_for_its_column[1];\n"
                    "  return a[0];\n}\n", "-fcommon", language="c")
    assert "COMMON" in (tmp_path / "app.map").read_text()
    for symbol, size in (("tensor_arena", 3000),
                         ("a_buffer_whose_name_is_too_long_for_its_column", 40)):
        _, result = _run(capsys, tmp_path / "app.map", "--arena-symbol", symbol)
        assert result["arena"]["size"] == size and result["arena"]["section"] == "COMMON"
