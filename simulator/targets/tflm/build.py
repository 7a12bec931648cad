"""TFLite-Micro built for the device's core and kernel library, from the user's checkout.

A firmware project has a TFLM checkout (with the third-party trees TFLM's download scripts
leave in ``tensorflow/lite/micro/tools/make/downloads/``: cmsis_nn, cmsis, flatbuffers,
gemmlowp, ruy, kissfft). :class:`TflmBuild` compiles it with TFLM's own Makefile
(``TARGET=cortex_m_qemu TARGET_ARCH=<core> OPTIMIZED_KERNEL_DIR=<library>``) and the Arm
GNU toolchain into a cache folder, never into the checkout (``BASE_GENDIR`` on make's
command line moves all of TFLM's output), one folder per (checkout, core, kernels). Only the
objects a model needs are compiled — TFLM's core, the kernel library's sources, and the
kernels of the model's operators — and make reuses what an earlier model compiled: the
whole library takes about an hour on two cores, one model's kernels a few minutes.

Nothing is downloaded: a checkout whose third-party trees are missing is an input error.
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

from devicefit.simulator.errors import InputError, RuntimeFailure
from devicefit.simulator.fileio import write_atomic

MAKEFILE = "tensorflow/lite/micro/tools/make/Makefile"
DOWNLOADS = "tensorflow/lite/micro/tools/make/downloads"
RESOLVER_HEADER = "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#: Third-party trees the Makefile reads; each is an input error when missing.
THIRD_PARTY = ("flatbuffers", "gemmlowp", "ruy", "kissfft")
#: ``runtime.kernels`` → TFLM's ``OPTIMIZED_KERNEL_DIR`` (None: the reference kernels) and the
#: extra trees it needs.
KERNEL_DIRS: Mapping[str, tuple[str | None, tuple[str, ...]]] = {
    "cmsis-nn": ("cmsis_nn", ("cmsis_nn", "cmsis")),
    "reference": (None, ()),
}
#: ``device.cpu`` values TFLM's cortex_m_qemu target compiles for (``-mcpu=``).
CORES = ("cortex-m0", "cortex-m0plus", "cortex-m3", "cortex-m4", "cortex-m7", "cortex-m33",
         "cortex-m55", "cortex-m85")
#: Tools the build and the run call; found on PATH with /usr/bin first (TFLM's generators
#: need the system python3 with numpy and PIL, not a virtualenv's).
TOOLS = ("make", "arm-none-eabi-gcc", "arm-none-eabi-g++", "arm-none-eabi-ar", "qemu-arm")
#: Kernel sources every model links (shared helpers the kernels call).
_SHARED_KERNEL_STEMS = ("kernel_util", "micro_tensor_utils", "activation_utils")
JOBS = 2
NICE = 5


class TargetBuildError(InputError):
    """The target build cannot be made: a missing tool, checkout or third-party tree."""


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


@dataclass(frozen=True)
class OpBinding:
    """How the op resolver adds one operator: its method and its registration function."""

    key: str  # builtin name ("CONV_2D") or custom code ("SignalEnergy")
    method: str  # MicroMutableOpResolver method ("AddConv2D")
    registration: str | None  # "Register_CONV_2D"; None: the method names none


def spec_for(tflm_dir: str | Path, cpu: str | None, kernels: str, profile: str) -> BuildSpec:
    """The build a TFLM profile's device needs; :class:`TargetBuildError` when there is none
    (a profile of another target is refused by :func:`simulator.measure.device_build`)."""
    if cpu is None:
        raise TargetBuildError(f"--target-build: profile '{profile}' sets no device.cpu to "
                               "build for")
    spec = BuildSpec(Path(tflm_dir).expanduser().resolve(), cpu, kernels)
    check_checkout(spec)
    return spec


def tool_env() -> dict[str, str]:
    """The environment of make and QEMU: /usr/bin before everything else on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(["/usr/bin", env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # TFLM's generators run from the user's checkout
    return env


def missing_tools(env: Mapping[str, str] | None = None) -> list[str]:
    path = (env or tool_env())["PATH"]
    return [t for t in TOOLS if shutil.which(t, path=path) is None]


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
    needed = THIRD_PARTY + KERNEL_DIRS[spec.kernels][1]
    absent = [d for d in needed if not (root / DOWNLOADS / d).is_dir()]
    if absent:
        raise TargetBuildError(
            f"--target-build: {root / DOWNLOADS} lacks {', '.join(absent)} (run TFLM's "
            "download scripts in the checkout once; devicefit downloads nothing)")
    if lacking := missing_tools():
        raise TargetBuildError(
            f"--target-build needs {', '.join(lacking)} on PATH (Debian: gcc-arm-none-eabi "
            "libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib qemu-user make)")


def source_key(tflm_dir: Path) -> str:
    """What the cache is keyed by: the checkout's git commit, or a hash of its files.

    A git checkout with local changes is hashed like an exported tree, so a changed kernel
    never reuses objects compiled from the commit.
    """
    env = tool_env()
    try:
        head = subprocess.run(["git", "-C", str(tflm_dir), "rev-parse", "HEAD"], env=env,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tflm_dir), "status", "--porcelain",
                                "--untracked-files=no"], env=env, capture_output=True,
                               text=True, check=True).stdout.strip()
        if head and not dirty and (tflm_dir / ".git").exists():
            return head[:12]
    except (OSError, subprocess.CalledProcessError):
        pass
    return "tree-" + tree_hash(tflm_dir)


def tree_hash(root: Path) -> str:
    """sha256 over every regular file's path and content (``gen/`` and ``.git`` left out)."""
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (folder == str(root) and d in ("gen", ".git")))
        for name in sorted(files):
            path = Path(folder, name)
            if path.is_symlink() or not path.is_file():
                continue
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:12]


def cache_root() -> Path:
    if env := os.environ.get("DEVICEFIT_CACHE"):
        return Path(env) / "tflm-builds"
    return Path.home() / ".cache" / "devicefit" / "tflm-builds"


def parse_resolver(header: str) -> dict[str, OpBinding]:
    """Operator → resolver method, from ``micro_mutable_op_resolver.h``'s ``Add*`` methods."""
    bindings: dict[str, OpBinding] = {}
    starts = [m for m in re.finditer(r"TfLiteStatus (Add\w+)\(", header)]
    for m, nxt in zip(starts, [*starts[1:], None], strict=True):
        body = header[m.start():nxt.start() if nxt else len(header)]
        method = m.group(1)
        builtin = re.search(r"BuiltinOperator_(\w+)", body)
        custom = re.search(r'AddCustom\(\s*"([^"]+)"', body)
        key = builtin.group(1) if builtin else custom.group(1) if custom else None
        if key is None or method in ("AddBuiltin", "AddCustom"):
            continue
        reg = re.search(r"\b(Register_\w+)\(", body)
        bindings.setdefault(key, OpBinding(key, method, reg.group(1) if reg else None))
    return bindings


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


def _mentions_any(path: Path, names: Iterable[str]) -> bool:
    text = path.read_text(errors="replace") if path.is_file() else ""
    return any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def _family(src: str) -> str:
    """A kernel source's family: ``kernels/cmsis_nn/conv.cc`` and ``conv_common.cc`` → conv."""
    return Path(src).stem.removesuffix("_common")


def op_key(op_name: str) -> str:
    """The resolver's key of a simulator op name ("CUSTOM:SignalEnergy" → "SignalEnergy")."""
    return op_name.split(":", 1)[1] if op_name.startswith("CUSTOM:") else op_name


def build_dir(spec: BuildSpec, key: str, cache: Path | None = None) -> Path:
    """The cache folder of one (checkout, core, kernels) build."""
    return (cache or cache_root()) / f"{key}-{spec.name}"


def make_command(spec: BuildSpec, gendir: Path) -> list[str]:
    """TFLM's Makefile with its cortex_m_qemu target, the core and the kernel library; all
    its output under ``gendir`` (make's command line overrides the Makefile's
    ``BASE_GENDIR``), so the checkout is only read. Run from the checkout's root."""
    args = ["make", "-f", MAKEFILE, "TARGET=cortex_m_qemu", f"TARGET_ARCH={spec.core}",
            f"BASE_GENDIR={gendir}"]
    if spec.optimized_kernel_dir:
        args.append(f"OPTIMIZED_KERNEL_DIR={spec.optimized_kernel_dir}")
    return args


class TflmBuild:
    """One TFLM build in its cache folder; :meth:`harness` gives a runnable harness."""

    def __init__(self, spec: BuildSpec, cache: Path | None = None) -> None:
        check_checkout(spec)
        self.spec = spec
        self.env = tool_env()
        self.key = source_key(spec.tflm_dir)
        self.dir = build_dir(spec, self.key, cache)
        self.gendir = self.dir / "gen"

    @property
    def label(self) -> str:
        return f"TFLM {self.key} {self.spec.core} {self.spec.kernels}"

    def make_args(self) -> list[str]:
        return make_command(self.spec, self.gendir)

    def _make(self, targets: Sequence[str], log: bool = False,
              jobs: int = 1) -> subprocess.CompletedProcess[str]:
        cmd = [*self._nice(), *self.make_args(), f"-j{jobs}", *targets]
        done = subprocess.run(cmd, cwd=self.spec.tflm_dir, env=self.env, capture_output=True,
                              text=True)
        if log:
            self._log(cmd, done)
        return done

    @cached_property
    def variables(self) -> dict[str, list[str]]:
        """The Makefile's source, object and flag lists for this build (cached on disk)."""
        path = self.dir / "make-variables.json"
        if path.is_file():
            return json.loads(path.read_text())
        names = ("MICROLITE_LIB_OBJS", "MICROLITE_CC_KERNEL_SRCS", "MICROLITE_KERNEL_OBJS",
                 "MICROLITE_THIRD_PARTY_KERNEL_OBJS", "KERNEL_OBJDIR",
                 "THIRD_PARTY_KERNEL_OBJDIR", "CXXFLAGS", "INCLUDES",
                 "LDFLAGS", "MICROLITE_LIBS")
        done = self._make([f"print-{n}" for n in names])
        found = {m.group(1): m.group(2).split() for m in
                 re.finditer(r"^(\w+)=(.*)$", done.stdout, re.MULTILINE) if m.group(1) in names}
        if done.returncode != 0 or set(found) != set(names):
            raise RuntimeFailure(f"{self.label}: TFLM's Makefile did not list its sources: "
                                 f"{(done.stderr or done.stdout).strip()[-400:]}")
        self.dir.mkdir(parents=True, exist_ok=True)
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
        """TFLM's core, without debug_log (the harness brings its own log sink)."""
        return [o for o in self.variables["MICROLITE_LIB_OBJS"] if not o.endswith("/debug_log.o")]

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
            raise RuntimeFailure(f"{self.label}: compiling TFLM failed (see "
                                 f"{self.dir / 'make.log'}): {done.stderr.strip()[-400:]}")

    def harness(self, op_names: Iterable[str]) -> tuple[Path, list[str]]:
        """A harness whose op resolver has these operators, and those this build lacks.

        Operators the build has no resolver method or kernel for are left out of the
        resolver (TFLM then fails at init naming them); the caller reports them. A harness
        made for an earlier model is reused when it registers all of this model's
        operators (registering more changes nothing in the arena: the resolver lives
        outside it); a new one registers the union with the largest earlier set, so the
        cache converges on a few binaries (each compile of the harness takes a minute).
        """
        keys = {op_key(n) for n in op_names}
        absent = {k for k in keys if k not in self.bindings}
        self.dir.mkdir(parents=True, exist_ok=True)
        # One build folder, several devicefit processes: make must not compile the same
        # object twice at once, and a harness is looked for again once the lock is held.
        with (self.dir / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._harness(keys - absent, absent)

    def _harness(self, wanted: set[str], absent: set[str]) -> tuple[Path, list[str]]:
        earlier: list[tuple[Path, set[str], set[str]]] = []  # (binary, ops, lacking)
        for info in sorted((self.dir / "harness").glob("*/ops.json")):
            ops = json.loads(info.read_text())
            if (info.parent / "harness").is_file():
                earlier.append((info.parent / "harness", set(ops["ops"]), set(ops["lacking"])))
        for binary, ops, lacking in earlier:
            if wanted <= ops | lacking:
                return binary, sorted(absent | (wanted & lacking))
        largest: set[str] = max((ops for _, ops, _ in earlier), key=len, default=set())
        bindings = [self.bindings[k] for k in sorted(wanted | largest)]
        kernels, undefined = self.kernel_objects(b.registration for b in bindings if b.registration)
        lacking = {b.key for b in bindings if b.registration in undefined}
        have = [b for b in bindings if b.key not in lacking]
        tag = hashlib.sha256(" ".join(b.method for b in have).encode()).hexdigest()[:12]
        out = self.dir / "harness" / tag
        binary = out / "harness"
        library = self.library_objects(kernels)
        objects = self.core_objects() + kernels + library
        self.compile(objects)
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "df_ops.inc", "".join(f"DF_OP({b.method})\n" for b in have))
        source = resources.files("devicefit.simulator.targets.tflm").joinpath("harness.cc")
        v = self.variables
        obj = out / "harness.o"
        self._run([*self._nice(), "arm-none-eabi-g++", "-c", *v["CXXFLAGS"], *v["INCLUDES"],
                   f"-I{out}", f'-DDF_BUILD_NAME="{self.spec.name}"', "-o", str(obj),
                   str(source)], "compiling the harness")
        undefined = self._link(obj, objects, binary)
        if undefined:
            # A symbol the file-name rules missed (CMSIS-NN's lookup tables, a kernel helper
            # in a differently named file): add the sources that define it.
            objects += self._defining(undefined, set(objects))
            self.compile(objects)
            if undefined := self._link(obj, objects, binary):
                raise RuntimeFailure(f"{self.label}: linking the harness failed (undefined: "
                                     f"{', '.join(undefined[:5])}); see {self.dir / 'make.log'}")
        write_atomic(out / "ops.json", json.dumps({"ops": sorted(b.key for b in have),
                                                   "lacking": sorted(lacking)}))
        return binary, sorted(absent | (wanted & lacking))

    def _link(self, obj: Path, objects: Sequence[str], binary: Path) -> list[str]:
        """Link the harness; the symbols left undefined (empty: linked)."""
        archive = binary.parent / "libtflm.a"
        archive.unlink(missing_ok=True)
        self._run(["arm-none-eabi-ar", "rcs", str(archive), *objects], "archiving TFLM")
        # Linked against the profile-neutral ARMv7 Thumb multilib of newlib/rdimon: its
        # semihosting traps are "svc 0xab", which qemu-arm's A-profile model serves.
        # Debian's qemu-arm 7.2 aborts in user mode on every M-profile -cpu, so the M code
        # (all TFLM and kernel objects, built with -mcpu=<core>) runs on cortex-a15; only
        # libc, libstdc++ and crt0 come from that multilib, and the arena depends on none.
        v = self.variables
        cmd = [*self._nice(), "arm-none-eabi-g++", "-march=armv7", "-mthumb",
               "-mfloat-abi=soft", "--specs=rdimon.specs", "-o", f"{binary}.tmp", str(obj),
               str(archive), *v["LDFLAGS"], *v["MICROLITE_LIBS"], "-lm"]
        done = subprocess.run(cmd, cwd=self.spec.tflm_dir, env=self.env, capture_output=True,
                              text=True)
        self._log(cmd, done)
        if done.returncode == 0:
            os.replace(f"{binary}.tmp", binary)
            return []
        undefined = sorted(set(re.findall(r"undefined reference to `([^']+)'", done.stderr)))
        if not undefined:
            raise RuntimeFailure(f"{self.label}: linking the harness failed: "
                                 f"{done.stderr.strip()[-400:]}")
        return undefined

    def _defining(self, symbols: Sequence[str], have: set[str]) -> list[str]:
        """Objects not in ``have`` whose sources define one of the linker's undefined
        ``symbols``: C data or functions of the kernel library, C++ kernel functions (a
        definition starts a line: ``TfLiteStatus FftAutoScalePrepare(...) {``)."""
        names = {re.sub(r"\(.*", "", s).rsplit("::", 1)[-1] for s in symbols}
        v = self.variables
        kernel_dir = v["KERNEL_OBJDIR"][0]
        found = []
        for src in v["MICROLITE_CC_KERNEL_SRCS"]:
            obj = kernel_dir + str(Path(src).with_suffix(".o"))
            if obj in have or obj not in v["MICROLITE_KERNEL_OBJS"]:
                continue
            text = (self.spec.tflm_dir / src).read_text(errors="replace")
            if any(re.search(rf"^\S[^\n;]*\b{re.escape(n)}\(", text, re.MULTILINE)
                   for n in names):
                found.append(obj)
        found += [o for o in v["MICROLITE_THIRD_PARTY_KERNEL_OBJS"]
                  if o not in have and _mentions_any(self._source_of(o), names)]
        return found

    def _source_of(self, obj: str) -> Path:
        base = self.spec.tflm_dir / obj.removeprefix(self.variables["THIRD_PARTY_KERNEL_OBJDIR"][0])
        return next((base.with_suffix(x) for x in (".c", ".cc", ".cpp")
                     if base.with_suffix(x).is_file()), base.with_suffix(".c"))

    def _log(self, cmd: Sequence[str], done: subprocess.CompletedProcess[str]) -> None:
        with (self.dir / "make.log").open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")

    @staticmethod
    def _nice() -> list[str]:
        return ["nice", "-n", str(NICE)]

    def _run(self, cmd: list[str], what: str) -> None:
        done = subprocess.run(cmd, cwd=self.spec.tflm_dir, env=self.env, capture_output=True,
                              text=True)
        self._log(cmd, done)
        if done.returncode != 0:
            raise RuntimeFailure(f"{self.label}: {what} failed "
                                 f"({done.stderr.strip()[-400:]}); see {self.dir / 'make.log'}")


def toolchain_version(env: Mapping[str, str] | None = None) -> str:
    return _first_line(["arm-none-eabi-gcc", "--version"], env)


def qemu_version(env: Mapping[str, str] | None = None) -> str:
    return _first_line(["qemu-arm", "--version"], env)


def _first_line(cmd: list[str], env: Mapping[str, str] | None) -> str:
    try:
        out = subprocess.run(cmd, env=dict(env or tool_env()), capture_output=True, text=True)
    except OSError:
        return "not found"
    return (out.stdout.splitlines() or ["?"])[0].strip()
