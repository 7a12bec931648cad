"""TFLite-Micro built for the device's core and kernel library, from the user's checkout.

A firmware project has a TFLM checkout (with the third-party trees TFLM's download scripts
leave in ``tensorflow/lite/micro/tools/make/downloads/``: cmsis_nn, cmsis, flatbuffers,
gemmlowp, ruy, kissfft). :class:`TflmBuild` compiles it with TFLM's own Makefile
(``TARGET=cortex_m_qemu TARGET_ARCH=<core> OPTIMIZED_KERNEL_DIR=<library>``) and the Arm
GNU toolchain into a cache folder, one folder per build key (:func:`build_key`). Only the
objects a model needs are compiled — TFLM's core, the kernel library's sources, and the
kernels of the model's operators — and make reuses what an earlier model compiled: the
whole library takes about an hour on two cores, one model's kernels a few minutes.

The checkout is only read, and nothing is downloaded:

- make's output goes to the cache (``BASE_GENDIR`` on make's command line);
- make reads the third-party trees through a downloads folder of the cache's own
  (``DOWNLOADS_DIR``): links to the checkout's trees, and empty ``pigweed`` and
  ``gcc_embedded`` folders, whose presence is what stops TFLM's download scripts from
  cloning pigweed and fetching Arm's GCC (both unused by the library);
- ``git``, ``curl`` and ``wget`` are replaced, for make and its scripts, by a stub that fails
  naming what was asked (a script this version of devicefit does not know about fails
  loudly instead of downloading);
- one compiler builds TFLM and devicefit's files alike: the ``arm-none-eabi-`` toolchain
  first on PATH, handed to make as ``TARGET_TOOLCHAIN_ROOT`` (a GCC that TFLM's own script
  downloaded into the checkout is not used);
- ``git`` asks about the checkout with ``GIT_OPTIONAL_LOCKS=0`` (``git status`` would
  otherwise refresh the checkout's index file).

A checkout whose third-party trees are missing or empty, a missing tool, or a python3
without numpy and PIL (TFLM's Makefile runs its generators at every start) is an input
error before anything is built; a compile or link error is :class:`BuildFailure`, one line
naming the first error and the log.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from devicefit.simulator.errors import InputError
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.targets.tflm.checkout import (
    RESOLVER_HEADER,
    OpBinding,
    files,
    parse_resolver,
    source_key,
    tree_hash,
    user_env,
)
from devicefit.simulator.targets.tflm.export import export_digest
from devicefit.simulator.targets.tflm.firmware import classifier
from devicefit.simulator.types import ExportedFile

MAKEFILE = "tensorflow/lite/micro/tools/make/Makefile"
DOWNLOADS = "tensorflow/lite/micro/tools/make/downloads"
#: Third-party trees the Makefile reads, each with a file that must be in it (an empty or
#: half-unpacked tree is an input error, not a compile error an hour later).
THIRD_PARTY: Mapping[str, str] = {
    "flatbuffers": "include/flatbuffers/flatbuffers.h",
    "gemmlowp": "fixedpoint/fixedpoint.h",
    "ruy": "ruy/profiler/instrumentation.h",
    "kissfft": "kiss_fft.h",
}
#: The kernel libraries' own trees, likewise.
LIBRARY_TREES: Mapping[str, str] = {
    "cmsis_nn": "Include/arm_nnfunctions.h",
    "cmsis": "CMSIS/Core/Include/cmsis_compiler.h",
}
#: Download folders whose mere presence stops TFLM's scripts from fetching them; the
#: library needs neither (pigweed serves TFLM's tests, gcc_embedded is Arm's GCC).
SKIPPED_DOWNLOADS = ("pigweed", "gcc_embedded/bin")
#: ``runtime.kernels`` → TFLM's ``OPTIMIZED_KERNEL_DIR`` (None: the reference kernels) and the
#: extra trees it needs.
KERNEL_DIRS: Mapping[str, tuple[str | None, tuple[str, ...]]] = {
    "cmsis-nn": ("cmsis_nn", ("cmsis_nn", "cmsis")),
    "reference": (None, ()),
}
#: ``device.cpu`` values TFLM's cortex_m_qemu target compiles for (``-mcpu=``).
CORES = ("cortex-m0", "cortex-m0plus", "cortex-m3", "cortex-m4", "cortex-m7", "cortex-m33",
         "cortex-m55", "cortex-m85")
#: The toolchain's prefix for every Cortex-M core (TFLM's ``TARGET_TOOLCHAIN_PREFIX``).
TOOLCHAIN_PREFIX = "arm-none-eabi-"
#: Tools the build and the run call, found on PATH.
TOOLS = ("make", f"{TOOLCHAIN_PREFIX}gcc", f"{TOOLCHAIN_PREFIX}g++", f"{TOOLCHAIN_PREFIX}ar",
         "qemu-arm")
DEBIAN_PACKAGES = ("gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib "
                   "qemu-user make python3-numpy python3-pil")
#: What make's scripts may not run: each would download into the checkout.
BLOCKED = ("git", "curl", "wget")
#: Bumped when what devicefit passes to make or links changes: older caches are not reused.
RECIPE = 2
#: Kernel sources every model links (shared helpers the kernels call).
_SHARED_KERNEL_STEMS = ("kernel_util", "micro_tensor_utils", "activation_utils")
JOBS = 2
NICE = 5


class TargetBuildError(InputError):
    """The target build cannot be made: a missing tool, checkout or third-party tree."""


class BuildFailure(TargetBuildError):
    """Compiling or linking failed: the checkout, its trees or the toolchain (exit 2)."""


@dataclass(frozen=True)
class BuildSpec:
    """Which TFLM build: the checkout, the core (``-mcpu``) and the kernel library."""

    tflm_dir: Path
    core: str
    kernels: str

    @property
    def name(self) -> str:
        return f"{self.core}-{self.kernels}"

    @property
    def optimized_kernel_dir(self) -> str | None:
        return KERNEL_DIRS[self.kernels][0]

    @property
    def trees(self) -> dict[str, str]:
        """The third-party trees this build reads (name → a file that must be in it)."""
        return {**THIRD_PARTY, **{t: LIBRARY_TREES[t] for t in KERNEL_DIRS[self.kernels][1]}}


@dataclass(frozen=True)
class Toolchain:
    """The one Arm GNU toolchain that compiles and links everything of a build."""

    root: Path  # the folder of its binaries
    version: str  # ``arm-none-eabi-gcc --version``'s first line

    def tool(self, name: str) -> str:
        return str(self.root / f"{TOOLCHAIN_PREFIX}{name}")


def spec_for(tflm_dir: str | Path, cpu: str | None, kernels: str, profile: str) -> BuildSpec:
    """The build a TFLM profile's device needs; :class:`TargetBuildError` when there is none
    (a profile of another target is refused by :func:`simulator.run.measure.device_build`)."""
    if cpu is None:
        raise TargetBuildError(f"--target-build: profile '{profile}' sets no device.cpu to "
                               "build for")
    spec = BuildSpec(Path(tflm_dir).expanduser().resolve(), cpu, kernels)
    check_checkout(spec)
    return spec


def missing_tools(env: Mapping[str, str] | None = None) -> list[str]:
    path = (env or os.environ).get("PATH", "")
    return [t for t in TOOLS if shutil.which(t, path=path) is None]


def find_toolchain(env: Mapping[str, str] | None = None) -> Toolchain:
    """The toolchain first on PATH (:class:`TargetBuildError` when there is none)."""
    found = shutil.which(f"{TOOLCHAIN_PREFIX}gcc", path=(env or os.environ).get("PATH", ""))
    if found is None:
        raise TargetBuildError(f"--target-build needs {TOOLCHAIN_PREFIX}gcc on PATH (Debian: "
                               f"{DEBIAN_PACKAGES})")
    root = Path(found).resolve().parent
    return Toolchain(root, _first_line([str(root / f"{TOOLCHAIN_PREFIX}gcc"), "--version"],
                                       env))


_GENERATOR_MODULES = "import numpy, PIL"
#: Where Debian's python3 (with python3-numpy and python3-pil) is.
SYSTEM_PYTHON = "/usr/bin/python3"


def generator_python(env: Mapping[str, str] | None = None) -> str | None:
    """A python3 that runs TFLM's generators (numpy and PIL): the first on PATH, else the
    system's; None when neither has both."""
    path = (env or os.environ).get("PATH", "")
    seen: list[str] = []
    for candidate in (shutil.which("python3", path=path), SYSTEM_PYTHON):
        if candidate is None or candidate in seen or not os.access(candidate, os.X_OK):
            continue
        seen.append(candidate)
        try:
            ok = subprocess.run([candidate, "-c", _GENERATOR_MODULES], capture_output=True,
                                timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return candidate
    return None


def check_checkout(spec: BuildSpec) -> None:
    """Raise :class:`TargetBuildError` (one line) unless ``spec`` can be built here."""
    if spec.kernels not in KERNEL_DIRS:
        raise TargetBuildError(f"--target-build: no TFLM build for kernels '{spec.kernels}' "
                               f"(known: {', '.join(KERNEL_DIRS)})")
    if spec.core not in CORES:
        raise TargetBuildError(f"--target-build: TFLM's cortex_m_qemu target does not build "
                               f"for cpu '{spec.core}' (known: {', '.join(CORES)})")
    root = spec.tflm_dir
    if not (root / MAKEFILE).is_file():
        raise TargetBuildError(f"--target-build: {root} is not a TFLite-Micro checkout "
                               f"(no {MAKEFILE})")
    downloads = root / DOWNLOADS
    absent = [d for d in spec.trees if not (downloads / d).is_dir()]
    if absent:
        raise TargetBuildError(
            f"--target-build: {downloads} lacks {', '.join(absent)} (run TFLM's "
            "download scripts in the checkout once; devicefit downloads nothing)")
    empty = [f"{d} (no {marker})" for d, marker in spec.trees.items()
             if not (downloads / d / marker).is_file()]
    if empty:
        raise TargetBuildError(
            f"--target-build: {downloads} has incomplete trees: {', '.join(empty)}; run "
            "TFLM's download scripts in the checkout again (devicefit downloads nothing)")
    if generator_python() is None:
        raise TargetBuildError(
            "--target-build: TFLM's Makefile runs python3 scripts that need numpy and PIL, "
            f"and neither the python3 on PATH nor {SYSTEM_PYTHON} has both (Debian: "
            "python3-numpy python3-pil)")
    if lacking := missing_tools():
        raise TargetBuildError(f"--target-build needs {', '.join(lacking)} on PATH (Debian: "
                               f"{DEBIAN_PACKAGES})")


def trees_key(spec: BuildSpec, cache: Path) -> str:
    """The content of the third-party trees the build reads, hashed; the hash is kept in
    the cache by the trees' file names, sizes and times, so that an unchanged tree is
    not read again (reading them all takes a second; a cached rerun takes two)."""
    downloads = spec.tflm_dir / DOWNLOADS
    stats = hashlib.sha256()
    for tree in sorted(spec.trees):
        for rel, path in files(downloads / tree, set()):
            st = path.stat()
            stats.update(f"{tree}/{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    memo = cache / "tree-keys" / stats.hexdigest()[:24]
    if memo.is_file():
        return memo.read_text().strip()
    key = hashlib.sha256(" ".join(f"{t}:{tree_hash(downloads / t, ())}"
                                  for t in sorted(spec.trees)).encode()).hexdigest()[:12]
    memo.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(memo, key + "\n")
    return key


def build_key(spec: BuildSpec, toolchain: Toolchain, cache: Path) -> str:
    """Everything the build's objects depend on: the checkout's sources and local changes,
    the third-party trees' content, the core and kernels, the compiler (its path and
    version) and devicefit's recipe (what it passes to make)."""
    parts = [source_key(spec.tflm_dir), trees_key(spec, cache), spec.name,
             str(toolchain.root), toolchain.version, f"recipe {RECIPE}"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cache_root() -> Path:
    if env := os.environ.get("DEVICEFIT_CACHE"):
        return Path(env) / "tflm-builds"
    return Path.home() / ".cache" / "devicefit" / "tflm-builds"


def shims(cache: Path, python: str) -> Path:
    """A folder put first on make's PATH: ``python3`` (the one with numpy and PIL) and a
    failing stub for every download tool."""
    folder = cache / "shims" / hashlib.sha256(python.encode()).hexdigest()[:12]
    if (folder / "ready").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "python3"
    if not link.is_symlink():
        tmp = folder / f".python3.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(python)
        os.replace(tmp, link)
    for tool in BLOCKED:
        stub = ("#!/bin/sh\n"
                f'echo "devicefit: TFLM\'s build ran {tool} $*: devicefit downloads nothing; '
                'run TFLM\'s download scripts in the checkout once" >&2\nexit 97\n')
        write_atomic(folder / tool, stub)
        (folder / tool).chmod(0o755)
    write_atomic(folder / "ready", "")
    return folder


def shadow_downloads(spec: BuildSpec, folder: Path) -> Path:
    """The downloads folder make reads (``DOWNLOADS_DIR``): links to the checkout's trees
    and the empty folders that stop TFLM's other downloads."""
    folder.mkdir(parents=True, exist_ok=True)
    for tree in spec.trees:
        link = folder / tree
        target = spec.tflm_dir / DOWNLOADS / tree
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        tmp = folder / f".{tree}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, link)
    for skipped in SKIPPED_DOWNLOADS:
        (folder / skipped).mkdir(parents=True, exist_ok=True)
    return folder


#: A compiler's or linker's error line: ``file:line:col: error: ...``, ``... fatal error:``,
#: ld's ``undefined reference`` and make's ``*** ... Stop.``.
_ERROR = re.compile(r"^(?:\S+:\d+(?::\d+)?: (?:fatal )?error: .*|.*undefined reference to .*"
                    r"|.*\*\*\* .*|devicefit: .*)$", re.MULTILINE)


def first_error(output: str) -> str:
    """The first error line of a compiler's, linker's or make's output (else its last
    non-empty line), as one line."""
    m = _ERROR.search(output)
    line = m.group(0) if m else next((ln for ln in reversed(output.splitlines())
                                      if ln.strip()), "no output")
    return " ".join(line.split())[:300]


def kernel_sources(texts: Mapping[str, str],
                   registrations: Iterable[str]) -> tuple[set[str], list[str]]:
    """The kernel sources (path → text, the build's list) that define ``registrations``,
    with the sources of every kernel header they include (``conv.h`` → ``conv_common.cc``)
    and the sources that include theirs, to a fixed point, and the shared kernel helpers;
    and the registrations no source defines."""
    stems: set[str] = set(_SHARED_KERNEL_STEMS)
    missing = set(registrations)
    for src, text in texts.items():
        if defined := {r for r in missing if re.search(rf"\b{r}\(\)\s*\{{", text)}:
            stems.add(_family(src))
            missing -= defined
    includes = {s: set(re.findall(r'#include "(?:tensorflow/lite/micro|signal/micro)/kernels/'
                                  r'(?:\w+/)?(\w+)\.h"', t)) for s, t in texts.items()}
    while True:
        picked = {s for s in texts if _family(s) in stems}
        own = {Path(s).stem for s in picked} - set(_SHARED_KERNEL_STEMS)
        # the headers the picked sources include, and the sources that include a picked
        # source's own header (fft_auto_scale_common.cc includes fft_auto_scale_kernel.h)
        grown = stems | {h for s in picked for h in includes[s]} | {
            _family(s) for s in texts if includes[s] & own}
        if grown == stems:
            return picked, sorted(missing)
        stems = grown


def defines(text: str, names: Iterable[str]) -> bool:
    """Whether C++ source ``text`` defines one of ``names`` at the start of a line: a
    function (``TfLiteStatus FftAutoScalePrepare(...) {``) or a constant (``const int
    kConvBiasTensor = 2;``)."""
    return any(re.search(rf"^\S[^\n;]*\b{re.escape(n)}(?:\(|\s*=)", text, re.MULTILINE)
               for n in names)


def _mentions_any(path: Path, names: Iterable[str]) -> bool:
    text = path.read_text(errors="replace") if path.is_file() else ""
    return any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def _family(src: str) -> str:
    """A kernel source's family: ``kernels/cmsis_nn/conv.cc`` and ``conv_common.cc`` → conv."""
    return Path(src).stem.removesuffix("_common")


def build_dir(spec: BuildSpec, key: str, cache: Path | None = None) -> Path:
    """The cache folder of one build (see :func:`build_key`)."""
    return (cache or cache_root()) / f"{spec.name}-{key}"


def make_command(spec: BuildSpec, gendir: Path, downloads: Path,
                 toolchain: Toolchain) -> list[str]:
    """TFLM's Makefile with its cortex_m_qemu target, the core and the kernel library; all
    its output under ``gendir`` (make's command line overrides the Makefile's
    ``BASE_GENDIR``), its third-party trees read through ``downloads``
    (:func:`shadow_downloads`), compiled by ``toolchain``. Run from the checkout's root."""
    args = ["make", "-f", MAKEFILE, "TARGET=cortex_m_qemu", f"TARGET_ARCH={spec.core}",
            f"BASE_GENDIR={gendir}", f"DOWNLOADS_DIR={downloads}",
            f"TARGET_TOOLCHAIN_ROOT={toolchain.root}/"]
    if spec.optimized_kernel_dir:
        args.append(f"OPTIMIZED_KERNEL_DIR={spec.optimized_kernel_dir}")
    return args


class TflmBuild:
    """One TFLM build in its cache folder; :meth:`harness` gives a runnable harness."""

    def __init__(self, spec: BuildSpec, cache: Path | None = None) -> None:
        check_checkout(spec)
        self.spec = spec
        self.cache = cache or cache_root()
        env = user_env()
        self.toolchain = find_toolchain(env)
        python = generator_python(env)
        assert python is not None  # check_checkout refused the build otherwise
        self.env = {**env, "PATH": os.pathsep.join([str(shims(self.cache, python)),
                                                    env.get("PATH", "")]),
                    # TFLM's generators run from the user's checkout: no __pycache__ there
                    "PYTHONDONTWRITEBYTECODE": "1"}
        self.source = source_key(spec.tflm_dir)
        self.key = build_key(spec, self.toolchain, self.cache)
        self.dir = build_dir(spec, self.key, self.cache)
        self.gendir = self.dir / "gen"

    @property
    def label(self) -> str:
        return f"TFLM {self.source} {self.spec.core} {self.spec.kernels}"

    @property
    def log_path(self) -> Path:
        return self.dir / "make.log"

    def make_args(self) -> list[str]:
        return make_command(self.spec, self.gendir, self.dir / "downloads", self.toolchain)

    def _make(self, targets: Sequence[str], log: bool = False,
              jobs: int = 1) -> subprocess.CompletedProcess[str]:
        shadow_downloads(self.spec, self.dir / "downloads")
        cmd = [*self._nice(), *self.make_args(), f"-j{jobs}", *targets]
        done = subprocess.run(cmd, cwd=self.spec.tflm_dir, env=self.env, capture_output=True,
                              text=True, errors="replace")
        if log:
            self._log(cmd, done)
        return done

    def _failed(self, what: str, output: str) -> BuildFailure:
        return BuildFailure(f"{self.label}: {what} failed: {first_error(output)} (log: "
                            f"{self.log_path})")

    @cached_property
    def variables(self) -> dict[str, list[str]]:
        """The Makefile's source, object and flag lists for this build (cached on disk)."""
        names = ("MICROLITE_LIB_OBJS", "MICROLITE_CC_KERNEL_SRCS", "MICROLITE_KERNEL_OBJS",
                 "MICROLITE_THIRD_PARTY_KERNEL_OBJS", "KERNEL_OBJDIR",
                 "THIRD_PARTY_KERNEL_OBJDIR", "CXXFLAGS", "INCLUDES",
                 "LDFLAGS", "MICROLITE_LIBS", "CORE_OPTIMIZATION_LEVEL")
        path = self.dir / "make-variables.json"
        if path.is_file():
            cached: dict[str, list[str]] = json.loads(path.read_text())
            if set(names) <= set(cached):
                return cached
        self.dir.mkdir(parents=True, exist_ok=True)
        done = self._make([f"print-{n}" for n in names], log=True)
        found = {m.group(1): m.group(2).split() for m in
                 re.finditer(r"^(\w+)=(.*)$", done.stdout, re.MULTILINE) if m.group(1) in names}
        if done.returncode != 0 or set(found) != set(names):
            raise self._failed("reading TFLM's Makefile", done.stderr or done.stdout)
        write_atomic(path, json.dumps(found, indent=1))
        return found

    @cached_property
    def bindings(self) -> dict[str, OpBinding]:
        return parse_resolver((self.spec.tflm_dir / RESOLVER_HEADER).read_text())

    def kernel_objects(self, registrations: Iterable[str]) -> tuple[list[str], list[str]]:
        """The objects of :func:`kernel_sources` for ``registrations`` (with the Signal
        ops' own library, small and always linked), and the registrations no source of
        this build defines."""
        srcs = self.variables["MICROLITE_CC_KERNEL_SRCS"]
        texts = {s: (self.spec.tflm_dir / s).read_text(errors="replace") for s in srcs}
        picked, missing = kernel_sources(texts, registrations)
        objdir = self.variables["KERNEL_OBJDIR"][0]
        known = set(self.variables["MICROLITE_KERNEL_OBJS"])
        objects = [objdir + str(Path(s).with_suffix(".o")) for s in srcs
                   if s in picked or s.startswith("signal/src/")]
        return [o for o in objects if o in known], missing

    def core_objects(self) -> list[str]:
        """TFLM's core (its debug_log too: the example logs through it; the measuring
        wrapper brings its own, so the linker leaves TFLM's out of the wrapper)."""
        return list(self.variables["MICROLITE_LIB_OBJS"])

    def library_objects(self, kernel_objects: Sequence[str]) -> list[str]:
        """The kernel library's own C files (CMSIS-NN's) the kernels call: those named
        after an ``arm_*`` function the kernels or an already picked file mention, to a
        fixed point (CMSIS-NN keeps one public function per file, named after it)."""
        objs = self.variables["MICROLITE_THIRD_PARTY_KERNEL_OBJS"]
        if not objs:
            return []
        kernel_dir = self.variables["KERNEL_OBJDIR"][0]
        root = self.spec.tflm_dir

        def mentions(path: Path) -> set[str]:
            return set(re.findall(r"\barm_\w+", path.read_text(errors="replace"))) \
                if path.is_file() else set()

        by_stem = {Path(o).stem: o for o in objs}
        names = set().union(*(mentions((root / o.removeprefix(kernel_dir)).with_suffix(".cc"))
                              for o in kernel_objects))
        picked: set[str] = set()
        while new := {by_stem[n] for n in names if n in by_stem} - picked:
            picked |= new
            names |= set().union(*(mentions(self._source_of(o)) for o in new))
        return [o for o in objs if o in picked]

    def compile(self, objects: Sequence[str]) -> None:
        """Compile ``objects`` with TFLM's rules (make skips those already up to date)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        done = self._make(list(objects), log=True, jobs=JOBS)
        if done.returncode != 0:
            raise self._failed("compiling TFLM", done.stderr + done.stdout)

    def binaries(self, files: Sequence[ExportedFile], methods: Sequence[str],
                 memory: MemoryMap, qemu: bool = True) -> Binaries | list[str]:
        """The export (``files``, as :func:`.export.export_files` wrote them) built for this
        core and kernel library: the measuring wrapper and the example for QEMU, and the
        example linked as firmware for ``memory`` (measured flash; ``qemu`` False: that
        image alone). The list of the resolver methods this build has no kernel for
        instead, when there are any (the export cannot link: a finding about the model on
        this build).

        One folder per export (its digest): a rerun of the same export reuses it.
        """
        digest = export_digest(files)
        folder = self.dir / "exports" / f"{digest[:16]}-{memory.tag}{'' if qemu else '-fw'}"
        self.dir.mkdir(parents=True, exist_ok=True)
        # One build folder, several devicefit processes: make must not compile the same
        # object twice at once, and the folder is looked for again once the lock is held.
        with (self.dir / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = Binaries.at(folder)
            if done is not None:
                return done
            return self._binaries(files, methods, memory, folder, qemu)

    def _binaries(self, files: Sequence[ExportedFile], methods: Sequence[str],
                  memory: MemoryMap, folder: Path, qemu: bool) -> Binaries | list[str]:
        by_method = {b.method: b for b in self.bindings.values()}
        lacking = [m for m in methods if m not in by_method]
        bindings = [by_method[m] for m in methods if m in by_method]
        kernels, undefined = self.kernel_objects(b.registration for b in bindings
                                                 if b.registration)
        lacking += [b.method for b in bindings if b.registration in undefined]
        if lacking:
            return sorted(lacking)
        objects = self.core_objects() + kernels + self.library_objects(kernels)
        self.compile(objects)
        shutil.rmtree(folder, ignore_errors=True)
        source = folder / "export"
        for f in files:
            (source / f.path).parent.mkdir(parents=True, exist_ok=True)
            (source / f.path).write_text(f.text)
        name = json.loads(next(f.text for f in files if f.path == "manifest.json"))["name"]
        write_atomic(folder / "df_export.h", "\n".join([
            "// devicefit's measuring wrapper names the export it measures (generated).",
            f'#include "{name}_model.h"',
            f"namespace df = {name};",
            f"#define DF_MODEL_DATA {name}_model_data",
            f"#define DF_ARENA {name}_tensor_arena", ""]))
        wrapper = resources.files("devicefit.simulator.targets.tflm").joinpath("harness.cc")
        example = self._compile_cc(source / "example" / f"{name}_example.cc", folder)
        exported = [self._compile_cc(source / f.path, folder) for f in files
                    if f.path.endswith(".cc") and "/" not in f.path]
        measuring = (self._compile_cc(Path(str(wrapper)), folder,
                                      [f'-DDF_BUILD_NAME="{self.spec.name}"']) if qemu else None)
        out = Binaries(folder)
        while True:
            archive = self._archive(objects, folder)
            undefined = self._link_firmware([example, *exported], archive, memory, out)
            if measuring is not None:
                undefined += (self._link_qemu([measuring, *exported], archive, out.harness)
                              + self._link_qemu([example, *exported], archive, out.example))
            if not undefined:
                break
            # A symbol the file-name rules missed (CMSIS-NN's lookup tables, a kernel helper
            # in a differently named file): add the sources that define it, once.
            more = self._defining(undefined, set(objects))
            if not more:
                raise BuildFailure(f"{self.label}: linking the export failed (undefined: "
                                   f"{', '.join(sorted(set(undefined))[:5])}) (log: "
                                   f"{self.log_path})")
            objects += more
            self.compile(objects)
        write_atomic(folder / "ok.json", json.dumps({"objects": len(objects)}))
        return out

    def classifier(self, name: str) -> dict[str, str]:
        """Object base name → flash part (:mod:`.firmware`) for this build's objects and
        the export ``name``'s."""
        v = self.variables
        return classifier(v["MICROLITE_LIB_OBJS"], v["MICROLITE_KERNEL_OBJS"],
                          v["MICROLITE_THIRD_PARTY_KERNEL_OBJS"], f"{name}_model_data.o",
                          [f"{name}_model_ops.o", f"{name}_arena.o", f"{name}_example.o"])

    @property
    def firmware_image(self) -> str:
        return (f"the export's example linked for {self.spec.core} ({self.toolchain.version}; "
                "newlib-nano, soft float, --gc-sections; no vector table or board code)")

    def _compile_cc(self, source: Path, folder: Path, defines: Sequence[str] = ()) -> Path:
        """One C++ file of devicefit's or of the export, with TFLM's flags for the core."""
        v = self.variables
        obj = folder / "obj" / f"{source.stem}.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        self._run([*self._nice(), self.toolchain.tool("g++"), "-c", *v["CXXFLAGS"],
                   *v["CORE_OPTIMIZATION_LEVEL"], *v["INCLUDES"], f"-I{folder}",
                   f"-I{folder / 'export'}", *defines, "-o", str(obj), str(source)],
                  f"compiling {source.name}")
        return obj

    def _archive(self, objects: Sequence[str], folder: Path) -> Path:
        archive = folder / "libtflm.a"
        archive.unlink(missing_ok=True)
        self._run([self.toolchain.tool("ar"), "rcs", str(archive), *objects], "archiving TFLM")
        return archive

    def _link_qemu(self, objs: Sequence[Path], archive: Path, binary: Path) -> list[str]:
        """Link for qemu-arm; the symbols left undefined (empty: linked).

        Linked against the profile-neutral ARMv7 Thumb multilib of newlib/rdimon: its
        semihosting traps are "svc 0xab", which qemu-arm's A-profile model serves. Debian's
        qemu-arm 7.2 aborts in user mode on every M-profile -cpu, so the M code (every TFLM,
        kernel and export object, built with -mcpu=<core>) runs on cortex-a15; only libc,
        libstdc++ and crt0 come from that multilib, and the arena depends on none of them.
        """
        v = self.variables
        return self._link([self.toolchain.tool("g++"), "-march=armv7", "-mthumb",
                           "-mfloat-abi=soft", "--specs=rdimon.specs", "-o", f"{binary}.tmp",
                           *map(str, objs), str(archive), *v["LDFLAGS"],
                           *v["MICROLITE_LIBS"], "-lm"], binary)

    def _link_firmware(self, objs: Sequence[Path], archive: Path, memory: MemoryMap,
                       out: Binaries, extra: Sequence[str] = ()) -> list[str]:
        """Link the example as a firmware image of the core: newlib-nano without an OS,
        unused sections dropped, the memory of the profile's device (``memory``); the map
        file beside it. Not run: what it measures is flash."""
        script = out.folder / "memory.ld"
        write_atomic(script, memory.linker_script())
        return self._link([self.toolchain.tool("g++"), f"-mcpu={self.spec.core}", "-mthumb",
                           "-mfloat-abi=soft", "--specs=nano.specs", "--specs=nosys.specs",
                           "-Wl,--gc-sections", f"-Wl,-T,{script}",
                           f"-Wl,-Map={out.firmware_map}", *extra, "-o",
                           f"{out.firmware}.tmp", *map(str, objs), str(archive), "-lm"],
                          out.firmware)

    def _link(self, cmd: list[str], binary: Path) -> list[str]:
        done = subprocess.run([*self._nice(), *cmd], cwd=self.spec.tflm_dir, env=self.env,
                              capture_output=True, text=True, errors="replace")
        self._log(cmd, done)
        if done.returncode == 0:
            os.replace(f"{binary}.tmp", binary)
            return []
        undefined = sorted(set(re.findall(r"undefined reference to `([^']+)'", done.stderr)))
        if not undefined:
            raise self._failed(f"linking {binary.name}", done.stderr)
        return undefined

    def _defining(self, symbols: Sequence[str], have: set[str]) -> list[str]:
        """Objects not in ``have`` whose sources define one of the linker's undefined
        ``symbols``: C data or functions of the kernel library, C++ kernel functions (a
        definition starts a line: ``TfLiteStatus FftAutoScalePrepare(...) {``) and
        constants (``const int kConvBiasTensor = 2;``, which the reference depthwise
        kernel takes from conv_common.cc)."""
        names = {re.sub(r"\(.*", "", s).rsplit("::", 1)[-1] for s in symbols}
        v = self.variables
        kernel_dir = v["KERNEL_OBJDIR"][0]
        found = []
        for src in v["MICROLITE_CC_KERNEL_SRCS"]:
            obj = kernel_dir + str(Path(src).with_suffix(".o"))
            if obj in have or obj not in v["MICROLITE_KERNEL_OBJS"]:
                continue
            if defines((self.spec.tflm_dir / src).read_text(errors="replace"), names):
                found.append(obj)
        found += [o for o in v["MICROLITE_THIRD_PARTY_KERNEL_OBJS"]
                  if o not in have and _mentions_any(self._source_of(o), names)]
        return found

    def _source_of(self, obj: str) -> Path:
        base = self.spec.tflm_dir / obj.removeprefix(self.variables["THIRD_PARTY_KERNEL_OBJDIR"][0])
        return next((base.with_suffix(x) for x in (".c", ".cc", ".cpp")
                     if base.with_suffix(x).is_file()), base.with_suffix(".c"))

    def _log(self, cmd: Sequence[str], done: subprocess.CompletedProcess[str]) -> None:
        with self.log_path.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")

    @staticmethod
    def _nice() -> list[str]:
        return ["nice", "-n", str(NICE)]

    def _run(self, cmd: list[str], what: str) -> None:
        done = subprocess.run(cmd, cwd=self.spec.tflm_dir, env=self.env, capture_output=True,
                              text=True, errors="replace")
        self._log(cmd, done)
        if done.returncode != 0:
            raise self._failed(what, done.stderr + done.stdout)


@dataclass(frozen=True)
class Binaries:
    """What :meth:`TflmBuild.binaries` made of one export, in its folder."""

    folder: Path

    @property
    def harness(self) -> Path:
        return self.folder / "harness"

    @property
    def example(self) -> Path:
        return self.folder / "example"

    @property
    def firmware(self) -> Path:
        return self.folder / "firmware.elf"

    @property
    def firmware_map(self) -> Path:
        return self.folder / "firmware.map"

    @property
    def export(self) -> Path:
        """The export's files as they were compiled."""
        return self.folder / "export"

    @classmethod
    def at(cls, folder: Path) -> Binaries | None:
        """The binaries of a finished earlier build of this export, or None."""
        return cls(folder) if (folder / "ok.json").is_file() else None


@dataclass(frozen=True)
class MemoryMap:
    """The device's memory as a firmware link sees it: flash and RAM sizes (the profile's
    ``device.flash`` and ``device.sram``; a generous default where it sets none)."""

    flash_bytes: int
    ram_bytes: int
    flash_origin: int = 0x0800_0000
    ram_origin: int = 0x2000_0000
    #: Stack the linker script keeps above the static data (newlib's crt0 starts it there).
    stack_bytes: int = 8 * 1024

    @property
    def tag(self) -> str:
        return f"f{self.flash_bytes:x}r{self.ram_bytes:x}"

    def linker_script(self) -> str:
        """A minimal Cortex-M script: code and constants in FLASH, data copied to RAM,
        zeroed data and the stack in RAM (what a vendor's script does, without a vector
        table: the board's start-up code is not the model's)."""
        return "\n".join([
            "/* devicefit's firmware link of an export (generated): the profile's memory. */",
            "MEMORY",
            "{",
            f"  FLASH (rx) : ORIGIN = 0x{self.flash_origin:08x}, LENGTH = {self.flash_bytes}",
            f"  RAM (rwx) : ORIGIN = 0x{self.ram_origin:08x}, LENGTH = {self.ram_bytes}",
            "}",
            "ENTRY(_start)",
            "SECTIONS",
            "{",
            "  .text : { KEEP(*(.init)) KEEP(*(.fini)) *(.text .text.*) } > FLASH",
            "  .rodata : { . = ALIGN(16); *(.rodata .rodata.*) } > FLASH",
            "  .ARM.extab : { *(.ARM.extab* .gnu.linkonce.armextab.*) } > FLASH",
            "  .ARM.exidx : { __exidx_start = .; *(.ARM.exidx* .gnu.linkonce.armexidx.*)"
            " __exidx_end = .; } > FLASH",
            "  .preinit_array : { PROVIDE_HIDDEN(__preinit_array_start = .);"
            " KEEP(*(.preinit_array)) PROVIDE_HIDDEN(__preinit_array_end = .); } > FLASH",
            "  .init_array : { PROVIDE_HIDDEN(__init_array_start = .);"
            " KEEP(*(SORT(.init_array.*))) KEEP(*(.init_array))"
            " PROVIDE_HIDDEN(__init_array_end = .); } > FLASH",
            "  .fini_array : { PROVIDE_HIDDEN(__fini_array_start = .);"
            " KEEP(*(.fini_array)) PROVIDE_HIDDEN(__fini_array_end = .); } > FLASH",
            "  .data : { . = ALIGN(4); __data_start__ = .; *(.data .data.*) . = ALIGN(4);"
            " __data_end__ = .; } > RAM AT > FLASH",
            "  .bss (NOLOAD) : { . = ALIGN(4); __bss_start__ = .; *(.bss .bss.*) *(COMMON)"
            " . = ALIGN(4); __bss_end__ = .; } > RAM",
            "  . = ALIGN(8);",
            "  end = .; PROVIDE(_end = .);",
            "  __stack = ORIGIN(RAM) + LENGTH(RAM); _stack = __stack;",
            f"  ASSERT(end + {self.stack_bytes} <= __stack, \"RAM: no room for the stack\")",
            "}",
            "",
        ])


def toolchain_version(env: Mapping[str, str] | None = None) -> str:
    try:
        return find_toolchain(env).version
    except TargetBuildError:
        return "not found"


def qemu_version(env: Mapping[str, str] | None = None) -> str:
    return _first_line(["qemu-arm", "--version"], env)


def _first_line(cmd: list[str], env: Mapping[str, str] | None) -> str:
    try:
        out = subprocess.run(cmd, env=dict(env or os.environ), capture_output=True, text=True)
    except OSError:
        return "not found"
    return (out.stdout.splitlines() or ["?"])[0].strip()
