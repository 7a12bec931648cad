"""``simulate --run --target-build TFLM_DIR``: the TFLM target build and its measurement.

The parser tests read output the harness really printed (``tests/fixtures/tflm_target``);
the builder tests check the make command, the cache key and the checkout checks on folders
made here; the end-to-end test builds TFLM and runs a model under QEMU, and skips unless
``DEVICEFIT_TFLM_DIR`` names a checkout with its third-party trees and the Arm GNU
toolchain and qemu-arm are installed (CI has neither).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.targets.tflm import build as tb
from devicefit.simulator.targets.tflm import checkout as co
from devicefit.simulator.targets.tflm.qemu import parse_probe, parse_report, search_min_arena
from tests.paths import TESTS
from tests.tflite_builder import slice_model

FIXTURES = TESTS / "fixtures" / "tflm_target"


# --------------------------------------------------------------------------- harness output
def test_report_parser_reads_a_real_run():
    run = parse_report((FIXTURES / "report_ok.txt").read_text())
    assert run.ok and run.failed_stage is None
    assert (run.head, run.tail, run.total) == (49152, 548, 49700)
    assert run.head + run.tail == run.total
    assert run.tail_breakdown["persistent_buffers"].used == 86
    assert run.tail_breakdown["persistent_buffers"].requested == 72
    assert sum(c.used for c in run.tail_breakdown.values()) <= run.tail
    assert [b.size for b in run.buffers] == [16384, 16384, 16384]
    assert run.planned_tensors == 3 and run.scratch == ()
    assert [(o.index, o.bytes, o.fnv1a) for o in run.outputs] == [(0, 16384, "4847ddc5")]


def test_report_parser_names_the_failed_stage():
    run = parse_report((FIXTURES / "report_fail.txt").read_text())
    assert not run.ok and run.failed_stage == "allocate" and run.head is None


def test_probe_parser():
    assert parse_probe((FIXTURES / "probe_fail.txt").read_text()) == "fail allocate"
    assert parse_probe("DF harness 1 build x pointer 4\nDF probe 49616 ok\n") == "ok"
    assert parse_probe("DF harness 1 build x pointer 4\n") is None  # died before answering


@pytest.mark.parametrize("threshold", [16, 48, 49616, 49712, 123_456 // 16 * 16])
@pytest.mark.parametrize("start", [1, 49700, 200_000])
def test_min_arena_search_finds_the_threshold(threshold, start):
    asked = []

    def works(n: int) -> bool:
        assert n % 16 == 0 and n > 0
        asked.append(n)
        return n >= threshold

    found, probes = search_min_arena(works, start)
    assert found == threshold and probes == len(asked)


def test_min_arena_search_is_short_near_the_start():
    _, probes = search_min_arena(lambda n: n >= 49616, 49700)
    assert probes <= 8


# --------------------------------------------------------------------------- the builder
def _checkout(root: Path, kernels: str = "cmsis-nn") -> Path:
    """A folder shaped like a TFLM checkout (Makefile, resolver header and third-party
    trees with the file each must hold; no sources)."""
    (root / tb.MAKEFILE).parent.mkdir(parents=True)
    (root / tb.MAKEFILE).write_text("# TFLM's Makefile would be here\n")
    (root / co.RESOLVER_HEADER).write_text(
        "  TfLiteStatus AddAbs() {\n    return AddBuiltin(BuiltinOperator_ABS, Register_ABS(), "
        "ParseAbs);\n  }\n")
    for tree, marker in tb.BuildSpec(root, "cortex-m4", kernels).trees.items():
        (root / tb.DOWNLOADS / tree / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / tb.DOWNLOADS / tree / marker).write_text("// a header\n")
    return root


TOOLCHAIN = tb.Toolchain(Path("/opt/arm/bin"), "arm-none-eabi-gcc 12.2.1")


def test_make_command_builds_outside_the_checkout_with_one_compiler(tmp_path):
    spec = tb.BuildSpec(tmp_path / "tflm", "cortex-m4", "cmsis-nn")
    gendir, downloads = tmp_path / "cache" / "gen", tmp_path / "cache" / "downloads"
    cmd = tb.make_command(spec, gendir, downloads, TOOLCHAIN)
    assert cmd[:3] == ["make", "-f", tb.MAKEFILE]
    assert {"TARGET=cortex_m_qemu", "TARGET_ARCH=cortex-m4", "OPTIMIZED_KERNEL_DIR=cmsis_nn",
            f"BASE_GENDIR={gendir}", f"DOWNLOADS_DIR={downloads}",
            "TARGET_TOOLCHAIN_ROOT=/opt/arm/bin/"} <= set(cmd)
    ref = tb.make_command(tb.BuildSpec(spec.tflm_dir, "cortex-m0plus", "reference"), gendir,
                          downloads, TOOLCHAIN)
    assert "TARGET_ARCH=cortex-m0plus" in ref
    assert not any(a.startswith("OPTIMIZED_KERNEL_DIR") for a in ref)


def test_make_reads_the_trees_through_the_caches_downloads_folder(tmp_path):
    root = _checkout(tmp_path / "tflm")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    spec = tb.BuildSpec(root, "cortex-m4", "cmsis-nn")
    folder = tb.shadow_downloads(spec, tmp_path / "cache" / "downloads")
    for tree in spec.trees:
        assert (folder / tree).is_symlink()
        assert (folder / tree).resolve() == (root / tb.DOWNLOADS / tree).resolve()
    # what stops TFLM's scripts from cloning pigweed and fetching Arm's GCC
    assert (folder / "pigweed").is_dir() and (folder / "gcc_embedded" / "bin").is_dir()
    assert not any((folder / "gcc_embedded" / "bin").iterdir())
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    assert tb.shadow_downloads(spec, folder) == folder  # again: nothing changes


def test_download_tools_are_stubs_that_fail_loudly(tmp_path):
    folder = tb.shims(tmp_path, "/usr/bin/python3")
    assert (folder / "python3").resolve() == Path("/usr/bin/python3").resolve()
    for tool in tb.BLOCKED:
        done = subprocess.run([str(folder / tool), "clone", "https://example.org/x"],
                              capture_output=True, text=True)
        assert done.returncode != 0
        assert "devicefit downloads nothing" in done.stderr and tool in done.stderr


def test_the_first_compiler_error_is_named():
    log = ("make: foo\n"
           "tensorflow/lite/micro/kernels/conv.cc: In function 'x':\n"
           "tensorflow/lite/micro/kernels/conv.cc:42:7: error: 'Foo' was not declared\n"
           "tensorflow/lite/micro/kernels/add.cc:9:1: error: second\n"
           "make: *** [Makefile:1: conv.o] Error 1\n")
    assert tb.first_error(log) == ("tensorflow/lite/micro/kernels/conv.cc:42:7: error: 'Foo' "
                                   "was not declared")
    assert "undefined reference to `g_x'" in tb.first_error(
        "ld: a.o: in function `main':\nx.cc:(.text+0x4): undefined reference to `g_x'\n")
    assert tb.first_error("") == "no output"


def test_cache_is_per_checkout_core_and_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path / "c"))
    a = tb.BuildSpec(tmp_path, "cortex-m4", "cmsis-nn")
    dirs = {tb.build_dir(a, "k1"), tb.build_dir(a, "k2"),
            tb.build_dir(tb.BuildSpec(tmp_path, "cortex-m7", "cmsis-nn"), "k1"),
            tb.build_dir(tb.BuildSpec(tmp_path, "cortex-m4", "reference"), "k1")}
    assert len(dirs) == 4
    assert all(d.parent == tmp_path / "c" / "tflm-builds" for d in dirs)


def test_tree_hash_follows_the_sources_not_the_build_output(tmp_path):
    root = _checkout(tmp_path / "tflm")
    first = co.source_key(root)
    assert first.startswith("tree-")
    (root / "gen" / "obj").mkdir(parents=True)  # an in-tree build by the user
    (root / "gen" / "obj" / "x.o").write_bytes(b"\0")
    assert co.source_key(root) == first
    (root / tb.MAKEFILE).write_text("# changed\n")
    assert co.source_key(root) != first


def test_git_checkout_is_keyed_by_its_commit_and_local_changes(tmp_path):
    root = _checkout(tmp_path / "tflm")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    index = (root / ".git" / "index").stat().st_mtime_ns
    assert co.source_key(root) == head[:12]
    (root / tb.MAKEFILE).write_text("# a local change\n")
    changed = co.source_key(root)
    assert changed.startswith(head[:12] + "+")  # never the commit's objects
    (root / tb.MAKEFILE).write_text("# another local change\n")
    assert co.source_key(root) not in (changed, head[:12])
    (root / "untracked.cc").write_text("int x;\n")
    assert co.source_key(root) != changed
    # asking git wrote nothing into the checkout (git status refreshes the index otherwise)
    assert (root / ".git" / "index").stat().st_mtime_ns == index


def test_a_touched_file_does_not_make_git_rewrite_the_users_index(tmp_path):
    """A tracked file touched but unchanged (a build's hard link, an editor's save): git
    diff rewrites the index it reads to refresh the stale stat, whatever
    GIT_OPTIONAL_LOCKS says; devicefit lets it rewrite a copy."""
    root = _checkout(tmp_path / "tflm")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run([*git, *args], check=True)
    clean = co.source_key(root)
    index = root / ".git" / "index"
    before = index.read_bytes(), index.stat().st_mtime_ns
    later = before[1] / 1e9 + 5  # past git's racy window, whatever the clock's resolution
    os.utime(root / tb.MAKEFILE, (later, later))
    assert co.source_key(root) == clean  # the same content: the same key
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before


def test_the_cache_key_covers_trees_compiler_and_core(tmp_path):
    root = _checkout(tmp_path / "tflm")
    spec = tb.BuildSpec(root, "cortex-m4", "cmsis-nn")
    cache = tmp_path / "cache"
    first = tb.build_key(spec, TOOLCHAIN, cache)
    assert tb.build_key(spec, TOOLCHAIN, cache) == first
    other_gcc = tb.Toolchain(Path("/usr/bin"), TOOLCHAIN.version)
    newer_gcc = tb.Toolchain(TOOLCHAIN.root, "arm-none-eabi-gcc 14.3.1")
    m7 = tb.BuildSpec(root, "cortex-m7", "cmsis-nn")
    assert len({first, tb.build_key(spec, other_gcc, cache), tb.build_key(spec, newer_gcc, cache),
                tb.build_key(m7, TOOLCHAIN, cache)}) == 4
    # a changed file in a third-party tree (same size, same name) is a new build
    marker = root / tb.DOWNLOADS / "cmsis_nn" / tb.LIBRARY_TREES["cmsis_nn"]
    marker.write_text("// a HEADER\n")
    assert tb.build_key(spec, TOOLCHAIN, cache) != first


def test_resolver_methods_are_read_from_the_header():
    # The layout of micro_mutable_op_resolver.h's methods, written here (not TFLM's text).
    header = '''
  TfLiteStatus AddCustom(const char* name, const TFLMRegistration* registration) {}
  TfLiteStatus AddConv2D(
      const TFLMRegistration& registration = Register_CONV_2D()) {
    return AddBuiltin(BuiltinOperator_CONV_2D, registration, ParseConv2D);
  }
  TfLiteStatus AddEnergy() {
    // TODO(b/286250473): change back name to "Energy" and remove namespace
    return AddCustom("SignalEnergy", tflite::tflm_signal::Register_ENERGY());
  }
  TfLiteStatus AddRelu6() {
    return AddBuiltin(BuiltinOperator_RELU6, Register_RELU6(), ParseRelu6);
  }
'''
    found = co.parse_resolver(header)
    assert found["CONV_2D"] == co.OpBinding("CONV_2D", "AddConv2D", "Register_CONV_2D")
    assert found["SignalEnergy"] == co.OpBinding("SignalEnergy", "AddEnergy", "Register_ENERGY")
    assert found["RELU6"].method == "AddRelu6"
    assert co.op_key("CUSTOM:SignalEnergy") == "SignalEnergy" and co.op_key("ADD") == "ADD"


def test_kernel_sources_follow_registrations_headers_and_companions():
    # Sources shaped like TFLM's kernels (written here): a CMSIS-NN conv with the reference
    # conv_common, a Signal kernel whose Prepare lives in a *_common file, an unrelated op.
    inc = '#include "tensorflow/lite/micro/kernels/{}.h"\n'
    texts = {
        "tensorflow/lite/micro/kernels/cmsis_nn/conv.cc":
            inc.format("conv") + inc.format("kernel_util")
            + "TFLMRegistration Register_CONV_2D() {\n  return {};\n}\n",
        "tensorflow/lite/micro/kernels/conv_common.cc": inc.format("conv"),
        "tensorflow/lite/micro/kernels/kernel_util.cc": inc.format("kernel_util"),
        "tensorflow/lite/micro/kernels/add.cc":
            inc.format("kernel_util") + "TFLMRegistration Register_ADD() {\n}\n",
        "signal/micro/kernels/fft_auto_scale_kernel.cc":
            '#include "signal/micro/kernels/fft_auto_scale_kernel.h"\n'
            "TFLMRegistration* Register_FFT_AUTO_SCALE() {\n}\n",
        "signal/micro/kernels/fft_auto_scale_common.cc":
            '#include "signal/micro/kernels/fft_auto_scale_kernel.h"\n',
    }
    picked, missing = tb.kernel_sources(texts, ["Register_CONV_2D", "Register_FFT_AUTO_SCALE",
                                                "Register_NOPE"])
    assert picked == set(texts) - {"tensorflow/lite/micro/kernels/add.cc"}
    assert missing == ["Register_NOPE"]


def test_a_source_that_defines_what_the_linker_misses_is_found():
    # The reference DEPTHWISE_CONV_2D uses kConvBiasTensor & co., defined in conv_common.cc
    # (it once did not link on the reference builds: constants were not looked for).
    common = "namespace tflite {\n\nconst int kConvBiasTensor = 2;\n}\n"
    kernel = ("TfLiteStatus FftAutoScalePrepare(TfLiteContext* context) {\n"
              "  return Use(kConvBiasTensor);\n}\n")
    assert tb.defines(common, ["kConvBiasTensor"])
    assert tb.defines(kernel, ["FftAutoScalePrepare"])
    assert not tb.defines(kernel, ["kConvBiasTensor"])  # used, not defined
    assert not tb.defines(common, ["kConvWeightsTensor"])


def test_checkout_problems_are_one_line_each(tmp_path, monkeypatch):
    with pytest.raises(tb.TargetBuildError, match="not a TFLite-Micro checkout"):
        tb.check_checkout(tb.BuildSpec(tmp_path, "cortex-m4", "cmsis-nn"))
    root = _checkout(tmp_path / "ref", kernels="reference")
    with pytest.raises(tb.TargetBuildError, match="lacks cmsis_nn, cmsis .*downloads nothing"):
        tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "cmsis-nn"))
    # an empty tree (a download that was interrupted) is refused before anything is built
    marker = root / tb.DOWNLOADS / "ruy" / tb.THIRD_PARTY["ruy"]
    marker.unlink()
    with pytest.raises(tb.TargetBuildError, match=r"incomplete trees: ruy \(no ruy/"):
        tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "reference"))
    marker.write_text("// back\n")
    with pytest.raises(tb.TargetBuildError, match="kernels 'esp-nn'"):
        tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "esp-nn"))
    with pytest.raises(tb.TargetBuildError, match="cpu 'xtensa-lx7'"):
        tb.check_checkout(tb.BuildSpec(root, "xtensa-lx7", "reference"))
    # No Arm toolchain on PATH (shutil.which replaced: this machine may have one).
    with monkeypatch.context() as m:
        m.setattr(tb.shutil, "which", lambda name, path=None: "/usr/bin/python3"
                  if name == "python3" else None)
        with pytest.raises(tb.TargetBuildError, match="needs make, arm-none-eabi-gcc.*qemu-arm"):
            tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "reference"))


def test_a_python3_without_pil_is_a_missing_prerequisite(tmp_path, monkeypatch):
    """TFLM's Makefile runs its generators with python3 at every start: without PIL it
    fails, so the build is refused before it starts (it once ran and said PASS)."""
    root = _checkout(tmp_path / "tflm", kernels="reference")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\necho 'No module named PIL' >&2\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(tb, "SYSTEM_PYTHON", str(tmp_path / "no-python3"))
    with pytest.raises(tb.TargetBuildError, match="need numpy and PIL"):
        tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "reference"))


# --------------------------------------------------------------------------- the CLI
@pytest.fixture
def small_model(tmp_path) -> Path:
    path = tmp_path / "slice.tflite"
    path.write_bytes(slice_model(1))
    return path


def test_cli_needs_run(small_model, tmp_path, capsys):
    code = main(["simulate", str(small_model), "--profile", "stm32l4r5-cortex-m4",
                 "--target-build", str(tmp_path)])
    assert code == 2
    assert "add --run" in capsys.readouterr().err


def test_cli_missing_checkout_is_one_line_exit_2(small_model, tmp_path, capsys):
    code = main(["simulate", str(small_model), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert code == 2
    assert "not a TFLite-Micro checkout" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_cli_refuses_a_profile_that_is_not_tflm(small_model, tmp_path, capsys):
    code = main(["simulate", str(small_model), "--profile", "android-arm64-cpu", "--run",
                 "--target-build", str(_checkout(tmp_path / "tflm"))])
    assert code == 2
    assert ("builds TensorFlow Lite Micro; profile 'android-arm64-cpu' runs"
            in capsys.readouterr().err)


# --------------------------------------------------------------------------- end to end
# These build TFLM from a real checkout and run under QEMU: set DEVICEFIT_TFLM_DIR (and
# DEVICEFIT_CACHE to a lasting folder: a first build of TFLM's core and a model's kernels
# takes 5-20 minutes on two cores, a cached one seconds).
def real_checkout() -> Path:
    where = os.environ.get("DEVICEFIT_TFLM_DIR")
    if not where:
        pytest.skip("set DEVICEFIT_TFLM_DIR to a TFLM checkout (third-party trees downloaded) "
                    "to build TFLM for Cortex-M and run under QEMU")
    if lacking := tb.missing_tools():
        pytest.skip(f"the target build needs {', '.join(lacking)} (Debian: "
                    f"{tb.DEBIAN_PACKAGES})")
    return Path(where).resolve()


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` (its .git too) with its size and time."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def hello_world(tmp_path) -> Path:
    """TFLM's own hello_world_int8 (a public model: the checkout's example)."""
    tflm = real_checkout()
    path = tmp_path / "hello_world_int8.tflite"
    path.write_bytes((tflm / "tensorflow/lite/micro/examples/hello_world/models/"
                              "hello_world_int8.tflite").read_bytes())
    return path


def test_the_export_is_built_and_verified_as_exported(hello_world, tmp_path, capsys):
    tflm = real_checkout()
    before = _snapshot(tflm)
    code = main(["simulate", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(tflm), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report["notes"]
    t = report["measured"]["target_build"]
    assert t["status"] == "ok" and "cortex-m4 cmsis-nn (qemu)" in t["build"]
    assert t["head"] + t["tail"] == t["total"]
    assert t["min_arena_bytes"] % 16 == 0 and t["min_arena_invokes"] is True
    # the planner's head is exact on the device build too
    assert t["head"] == report["memory"]["arena_head_bytes"]
    # the export's own arena array, at its constant, started and ran the model
    assert t["arena_constant_starts"] is True and t["example_ok"] is True
    assert t["min_arena_bytes"] <= t["arena_constant"] <= t["min_arena_bytes"] + 256
    assert t["outputs_agree"] is True and t["outputs_within_tolerance"] is True
    assert report["measured"]["arena_bytes"] == t["min_arena_bytes"]
    # flash measured in the linked image, the model's bytes in it whole
    flash = {p["name"]: p["bytes"] for p in t["flash"]["parts"]}
    assert flash["model"] == hello_world.stat().st_size
    assert sum(flash.values()) == t["flash"]["total_bytes"]
    budget = next(b for b in report["budgets"] if b["name"] == "flash")
    assert budget["value"] == t["flash"]["total_bytes"] and budget["basis"] == "measured"
    # what `devicefit export` writes is what ran: the same digest
    out = tmp_path / "fw"
    assert main(["export", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "-o",
                 str(out), "--target-build", str(tflm), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["export_sha256"] == t["export_sha256"]
    assert manifest["verified"]["export_sha256"] == t["export_sha256"]
    # nothing was written into the checkout, nothing downloaded (it has no pigweed here)
    assert _snapshot(tflm) == before


def test_one_compiler_and_no_downloads_however_the_checkout_looks(hello_world, tmp_path,
                                                                 capsys):
    """A checkout without pigweed (TFLM's Makefile would clone it) and with a gcc_embedded
    folder (TFLM would compile with that GCC): the build uses the toolchain on PATH, writes
    nothing into the checkout and downloads nothing."""
    tflm = real_checkout()
    copy = tmp_path / "tflm"
    subprocess.run(["git", "clone", "-q", "--shared", str(tflm), str(copy)], check=True)
    subprocess.run(["git", "-C", str(copy), "checkout", "-q",
                    subprocess.run(["git", "-C", str(tflm), "rev-parse", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()], check=True)
    downloads = copy / tb.DOWNLOADS
    downloads.mkdir(parents=True, exist_ok=True)
    for tree in tb.BuildSpec(tflm, "cortex-m4", "cmsis-nn").trees:
        subprocess.run(["cp", "-al", str(tflm / tb.DOWNLOADS / tree), str(downloads / tree)],
                       check=True)
    shutil.rmtree(downloads / "pigweed", ignore_errors=True)
    fake = downloads / "gcc_embedded" / "bin"
    fake.mkdir(parents=True)
    for tool in ("gcc", "g++", "ar"):
        (fake / f"arm-none-eabi-{tool}").write_text("#!/bin/sh\necho 'the wrong compiler' >&2\n"
                                                     "exit 99\n")
        (fake / f"arm-none-eabi-{tool}").chmod(0o755)
    before = _snapshot(copy)
    code = main(["simulate", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(copy), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["measured"]["target_build"]["status"] == "ok"
    assert _snapshot(copy) == before
    build = tb.TflmBuild(tb.BuildSpec(copy, "cortex-m4", "cmsis-nn"))
    log = build.log_path.read_text()
    assert "gcc_embedded" not in "".join(ln for ln in log.splitlines() if ln.startswith("$"))
    assert "the wrong compiler" not in log


def test_a_compile_error_is_never_a_pass(hello_world, tmp_path, capsys):
    """A checkout whose TFLM does not compile: the report says not measured, names the
    first compiler error and the log, the verdict fails, exit 2; the checkout is only read."""
    tflm = real_checkout()
    copy = tmp_path / "tflm"
    subprocess.run(["cp", "-al", str(tflm), str(copy)], check=True)
    shutil.rmtree(copy / ".git")  # keyed by its files: a new build folder
    build = tb.TflmBuild(tb.BuildSpec(copy, "cortex-m4", "cmsis-nn"))
    first = build.variables["MICROLITE_LIB_OBJS"][0]
    source = copy / first.split("/obj/core/", 1)[1].removesuffix(".o")
    source = next(source.with_suffix(x) for x in (".cc", ".c") if source.with_suffix(x).is_file())
    source.unlink()  # a new file, not the hard link's shared content
    source.write_text("this is not C++;\n")
    before = _snapshot(copy)
    code = main(["simulate", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(copy)])
    out = capsys.readouterr().out
    assert code == 2
    assert "Verdict: FAIL" in out and "Verdict: PASS" not in out
    assert "NOT MEASURED" in out and f"{source.name}:1:1: error:" in out
    assert "make.log" in out
    assert _snapshot(copy) == before


def test_timeout_reaches_qemu(hello_world, capsys):
    tflm = real_checkout()
    main(["simulate", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "--run",
          "--target-build", str(tflm)])  # built and cached
    capsys.readouterr()
    code = main(["simulate", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(tflm), "--timeout", "0.001", "--json"])
    report = json.loads(capsys.readouterr().out)
    t = report["measured"]["target_build"]
    assert code == 1 and report["verdict"] == "fail"
    assert t["status"] == "timed out" and "0.001 s" in t["message"]


def test_link_check_on_the_exports_own_firmware_link(hello_world, tmp_path, capsys):
    """The firmware image the target build linked (the profile's FLASH and RAM regions):
    link-check passes with its map and ELF, and fails (exit 1) once the arena array is
    linked 16 B smaller than the start arena (the export's -DNAME_ARENA_SIZE override)."""
    tflm = real_checkout()
    out = tmp_path / "fw"
    assert main(["export", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "-o",
                 str(out), "--target-build", str(tflm), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    build = tb.TflmBuild(tb.BuildSpec(tflm, "cortex-m4", "cmsis-nn"))
    (folder,) = build.dir.glob(f"exports/{manifest['export_sha256'][:16]}-*[!w]")
    made = tb.Binaries(folder)
    assert main(["link-check", str(made.firmware), str(made.firmware_map), "--export",
                 str(out)]) == 0
    assert "Verdict: PASS (7 checks, all ok)" in capsys.readouterr().out
    # the same firmware with the arena 16 B under the start arena the verdict assumed
    name, start = manifest["name"], manifest["arena"]["start_arena_bytes"]
    small = tb.Binaries(tmp_path / "small")
    small.folder.mkdir()
    arena = build._compile_cc(folder / "export" / f"{name}_arena.cc", small.folder,
                              [f"-D{name.upper()}_ARENA_SIZE={start - 16}"])
    objs = [folder / "obj" / f"{name}_example.o", folder / "obj" / f"{name}_model_data.o",
            folder / "obj" / f"{name}_model_ops.o", arena]
    memory = tb.MemoryMap(2 * 1024 * 1024, 640 * 1024)
    assert build._link_firmware(objs, folder / "libtflm.a", memory, small) == []
    code = main(["link-check", str(small.firmware), str(small.firmware_map), "--export",
                 str(out)])
    text = capsys.readouterr().out
    assert code == 1
    assert "16 B smaller than the start arena" in text and "Verdict: FAIL" in text


def _tflm_flags(build: tb.TflmBuild) -> tuple[list[str], list[str]]:
    v = build.variables
    includes = [i.removeprefix("-I") for i in v["INCLUDES"]]
    return ([str(build.spec.tflm_dir / i) if not Path(i).is_absolute() else i
             for i in includes], [*v["CXXFLAGS"], *v["CORE_OPTIMIZATION_LEVEL"]])


def test_the_export_builds_with_cmake_and_runs(hello_world, tmp_path, capsys):
    """The export's CMakeLists.txt with TFLM built elsewhere (include folders, its compile
    options, its library): the example builds for the core and runs under QEMU."""
    tflm = real_checkout()
    out = tmp_path / "fw"
    assert main(["export", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "-o",
                 str(out), "--tflm", str(tflm)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(tflm)]) == 0  # builds the library this test links
    build = tb.TflmBuild(tb.BuildSpec(tflm, "cortex-m4", "cmsis-nn"))
    library = next(build.dir.glob("exports/*/libtflm.a"))
    includes, options = _tflm_flags(build)
    toolchain = tmp_path / "arm.cmake"
    toolchain.write_text(
        "set(CMAKE_SYSTEM_NAME Generic)\nset(CMAKE_SYSTEM_PROCESSOR arm)\n"
        f"set(CMAKE_CXX_COMPILER {build.toolchain.tool('g++')})\n"
        "set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)\n"
        # linked as devicefit links for qemu-arm (its semihosting needs the A-profile libc)
        "set(CMAKE_EXE_LINKER_FLAGS \"-march=armv7 -mthumb -mfloat-abi=soft "
        "--specs=rdimon.specs\")\n")
    work = tmp_path / "cmake-build"
    subprocess.run(["cmake", "-S", str(out), "-B", str(work), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
                    f"-DTFLM_INCLUDE_DIRS={';'.join(includes)}",
                    f"-DTFLM_COMPILE_OPTIONS={';'.join(options)}",
                    f"-DTFLM_LIBRARY={library}", "-DDEVICEFIT_EXAMPLE=ON"],
                   check=True, capture_output=True, cwd=tflm)
    done = subprocess.run(["cmake", "--build", str(work)], capture_output=True, text=True,
                          cwd=tflm)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = subprocess.run(["qemu-arm", "-cpu", "cortex-a15",
                          str(work / "hello_world_int8_example")], capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0 and "hello_world_int8: ok, arena used" in ran.stderr


def test_the_export_builds_with_tflms_makefile(hello_world, tmp_path, capsys):
    """The export's Makefile drives TFLM's own (its library and flags for the core)."""
    tflm = real_checkout()
    out = tmp_path / "fw"
    assert main(["export", str(hello_world), "--profile", "stm32l4r5-cortex-m4", "-o",
                 str(out), "--tflm", str(tflm)]) == 0
    build = tb.TflmBuild(tb.BuildSpec(tflm, "cortex-m4", "cmsis-nn"))
    v = build.variables
    # TFLM's whole library, compiled as devicefit compiles it (this reuses its objects)
    build.compile([*v["MICROLITE_LIB_OBJS"], *v["MICROLITE_KERNEL_OBJS"],
                   *v["MICROLITE_THIRD_PARTY_KERNEL_OBJS"]])
    before = _snapshot(tflm)
    # This checkout has no pigweed (TFLM's Makefile would clone it): the build reads
    # devicefit's downloads folder and compiler, as a user's TFLM_MAKE_ARGS can.
    done = subprocess.run(
        ["make", "-C", str(out), f"TFLM_DIR={tflm}", f"TFLM_GENDIR={build.gendir}/",
         f"TFLM_MAKE_ARGS=DOWNLOADS_DIR={build.dir / 'downloads'} "
         f"TARGET_TOOLCHAIN_ROOT={build.toolchain.root}/", f"BUILD={tmp_path / 'build'}"],
        capture_output=True, text=True, env=build.env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "build" / "example").is_file()
    assert _snapshot(tflm) == before


# --------------------------------------------------------------------------- the report
def _measurement(**kw):
    from devicefit.simulator.report.report import PlannerBuffer, TailCategory, TargetMeasurement

    base = dict(build="TFLM abc cortex-m4 cmsis-nn (qemu)", core="cortex-m4", kernels="cmsis-nn",
                tflm="abc", status="ok", head=5488, tail=3780, total=9268, min_arena_bytes=9184,
                min_arena_invokes=True, probes=5,
                tail_breakdown={"op_data": TailCategory(700, 688, 1)},
                planner_buffers=(PlannerBuffer(1960, 0, 0), PlannerBuffer(128, 0, 0)),
                planned_tensors=1, output_hash="0" * 64, outputs_agree=False,
                max_abs_difference=145.0, compared_with="tflm on this host, same inputs")
    return TargetMeasurement(**(base | kw))


def test_target_measurement_survives_the_json_report(small_model):
    import dataclasses

    from devicefit.simulator.report.report import MeasuredReport, Report
    from devicefit.simulator.simulate import simulate
    from devicefit.simulator.target import read_report

    report = simulate(small_model, "stm32l4r5-cortex-m4")
    report = dataclasses.replace(report, measured=MeasuredReport(
        "tflm", "seed 0", target_build=_measurement()))
    back = read_report(json.loads(json.dumps(report.to_dict())))
    assert isinstance(back, Report)
    assert back.measured.target_build == report.measured.target_build
    assert back.measured.target_build.scratch_buffers[0].size == 128


def test_text_names_the_build_and_compares_with_the_prediction(small_model):
    import dataclasses

    from devicefit.simulator.report.report import FirmwareFlash, FlashPart, OutputDiff
    from devicefit.simulator.report.views.text import target_build_lines
    from devicefit.simulator.simulate import simulate

    mem = simulate(small_model, "stm32l4r5-cortex-m4").memory
    text = "\n".join(target_build_lines(_measurement(), mem))
    assert "target build TFLM abc cortex-m4 cmsis-nn (qemu): ok" in text
    assert "smallest arena  9,184 B" in text and "scratch buffers 1: 128 B" in text
    assert "differ (max difference 145)" in text
    exported = _measurement(
        export_sha256="ab" * 32, arena_constant=9280, arena_constant_starts=True,
        example_ok=True, tolerance="1 step(s)", outputs_within_tolerance=False,
        output_diffs=(OutputDiff(0, "int8", 3, 10, 145, 1.1, 0.5),),
        flash=FirmwareFlash(60000, (FlashPart("model", 10000), FlashPart("kernels", 0)), "x"))
    text = "\n".join(target_build_lines(exported, mem))
    assert "(qemu): FAILED" not in text and "verified as exported" not in text
    assert "arena constant" in text and "started and ran, +96 B over the smallest" in text
    assert "BEYOND the tolerance (1 step(s))" in text
    assert "output 0 (int8): 3 of 10 elements differ, by at most 145 step(s)" in text
    assert "flash        60,000 B (58.6 KiB) measured: model 10,000 B" in text
    assert "kernels 0 B" not in text  # parts of no size are left out
    verified = dataclasses.replace(exported, outputs_within_tolerance=True)
    assert "(qemu): verified as exported (export abababababab)" in "\n".join(
        target_build_lines(verified, mem))
    lacking = "\n".join(target_build_lines(_measurement(
        status="unsupported", unsupported_ops=("ethos-u",), head=None), mem))
    assert "the build lacks ethos-u: a finding" in lacking and "smallest" not in lacking


@pytest.mark.parametrize(("status", "fails"), [("ok", False), ("unsupported", True),
                                               ("failed at allocate", True), ("error", True),
                                               ("timed out", True),
                                               ("not runnable here", True)])
def test_a_build_that_cannot_run_the_model_fails_the_verdict(small_model, status, fails):
    """Never PASS for what was not measured: a build that errs (a compile error, a missing
    tree) or cannot run here fails the verdict too, and exits 2 (the set-up's fault)."""
    import dataclasses

    from devicefit.simulator.judge.verdict import judge
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.report.report import MeasuredReport
    from devicefit.simulator.simulate import static_report
    from devicefit.simulator.types import Status

    profile = load_profile("stm32l4r5-cortex-m4")
    report = static_report(read_model(small_model), profile)
    assert judge(report, profile).verdict == Status.PASS  # the static half alone passes
    report = dataclasses.replace(report, measured=MeasuredReport(
        "tflm", "seed 0", target_build=_measurement(status=status)))
    judged = judge(report, profile)
    assert (judged.verdict == Status.FAIL) == fails
    assert judged.exit_code == (0 if not fails else 2 if status in ("error", "not runnable here")
                                else 1)
    if status == "ok":  # the build's smallest arena is the measured figure judged
        arena = next(c for c in judged.budgets if c.name == "arena")
        assert arena.value == 9184 and arena.basis.value == "measured"
