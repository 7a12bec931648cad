"""Print the sizes devicefit's TFLM tail tables hold, as a compiler lays them out.

Two probes, both reading a TFLM checkout and never writing into it:

- the kernels' OpData (files given): for every ``AllocatePersistentBuffer(..., sizeof(X) ...)``
  call in the kernel sources (reference kernels, ``kernels/cmsis_nn/``,
  ``signal/micro/kernels/``), prints ``file:line:X size`` for the target the compiler flags
  describe. It compiles a copy of each file (in a temporary folder) with ``-fsyntax-only`` in
  which ``sizeof(X)`` becomes ``sizeof(ShowSize<sizeof(X), line>)`` of an incomplete template,
  and reads the sizes from the compiler's error messages (fast: no code is generated)::

      python benchmarks/probe_tflm_sizes.py --tflm ~/tflite-micro \\
          [--cxx arm-none-eabi-g++] [--cmsis-nn] tensorflow/lite/micro/kernels/conv_common.cc ...

- ``--params``: the parsed builtin options. Which ``TfLite*Params`` struct each builtin's
  parser allocates (the ``Parse*`` function ``micro_mutable_op_resolver.h`` registers for
  it, read from ``flatbuffer_conversions.cc``), and that struct's sizeof and alignof for
  each data layout of :data:`LAYOUTS`, compiled to assembly by every compiler of the layout
  that is installed (the first is the reference; the others must agree)::

      python benchmarks/probe_tflm_sizes.py --tflm ~/tflite-micro --params [--python]

  ``--python`` prints the tables as ``simulator/targets/tflm/tail.py`` holds them.

This is how ``simulator/targets/tflm/tail.py``'s 32-bit tables were made. ``--tflm`` is a
checkout whose ``tools/make/downloads`` holds its third-party trees (what
``make third_party_downloads`` fetches); the OpData flags are TFLM's ``cortex_m_qemu``
Cortex-M4 build's (with ``-DCMSIS_NN`` and the CMSIS-NN include paths for ``--cmsis-nn``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_DL = "tensorflow/lite/micro/tools/make/downloads"
_FLAGS = ["-std=c++17", "-fno-rtti", "-fno-exceptions", "-DTF_LITE_STATIC_MEMORY",
          "-DTF_LITE_DISABLE_X86_NEON", "-DTF_LITE_MCU_DEBUG_LOG",
          "-DKERNELS_OPTIMIZED_FOR_SPEED"]
_ARM = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-funsigned-char"]
_INCLUDES = [".", _DL, f"{_DL}/gemmlowp", f"{_DL}/flatbuffers/include", f"{_DL}/kissfft",
             f"{_DL}/ruy"]
_CMSIS = [f"{_DL}/cmsis", f"{_DL}/cmsis_nn", f"{_DL}/cmsis/CMSIS/Core/Include",
          f"{_DL}/cmsis_nn/Include"]
_CALL = re.compile(r"AllocatePersistentBuffer\s*\(")
_SIZEOF = re.compile(r"sizeof\(([^()]*(?:\([^()]*\))?[^()]*)\)")
_SHOWN = re.compile(r"ShowSize<(\d+)[a-zA-Z]*, (\d+)>")

#: The builtin options' data layouts devicefit tells apart, each with the compilers that
#: have it (the first is the reference, the others are checked against it when installed).
#: Only enums differ between the two 32-bit ones: arm-none-eabi-gcc follows the AAPCS for
#: bare metal and sizes an enum by its values (short enums), the same on every Cortex-M;
#: the Xtensa and RISC-V ``ilp32`` ABIs give every enum an int.
LAYOUTS: dict[str, list[list[str]]] = {
    "arm-eabi": [["arm-none-eabi-gcc", f"-mcpu={cpu}", "-mthumb"] for cpu in (
        "cortex-m4", "cortex-m0plus", "cortex-m3", "cortex-m7", "cortex-m23", "cortex-m33",
        "cortex-m55")],
    "ilp32": [["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-fno-short-enums"],
              ["xtensa-lx106-elf-gcc"],
              ["riscv64-unknown-elf-gcc", "-march=rv32imac", "-mabi=ilp32"],
              ["riscv64-unknown-elf-gcc", "-march=rv32imafc", "-mabi=ilp32f"]],
    "lp64": [["gcc"]],
}
_RESOLVER = "tensorflow/lite/micro/micro_mutable_op_resolver.h"
_PARSERS = "tensorflow/lite/core/api/flatbuffer_conversions.cc"
_PARAMS_HEADER = "tensorflow/compiler/mlir/lite/core/c/builtin_op_data.h"
_ADD_BUILTIN = re.compile(r"AddBuiltin\(\s*BuiltinOperator_(\w+),\s*[^,;]+?,\s*(\w+)\)")
_PARSE_FN = re.compile(r"^TfLiteStatus (Parse\w+)\(", re.M)
_ALLOCATES = re.compile(r"Allocate<(\w+)>")
_DATA = re.compile(r"^\s*\.(?:word|4byte|long)\s+(\d+)\s*$")


# ------------------------------------------------------------------------ OpData probe
def _calls(src: str) -> list[tuple[int, int]]:
    """(start, end) of each AllocatePersistentBuffer call's arguments."""
    spans = []
    for m in _CALL.finditer(src):
        j, depth = m.end(), 1
        while depth and j < len(src):
            depth += {"(": 1, ")": -1}.get(src[j], 0)
            j += 1
        spans.append((m.end(), j - 1))
    return spans


def probe(root: Path, cxx: str, flags: list[str], rel: str) -> list[str]:
    src = (root / rel).read_text(encoding="utf-8")
    out, last, names = [], 0, {}
    for start, end in _calls(src):
        line = src.count("\n", 0, start) + 1

        def shown(m: re.Match[str], line: int = line) -> str:
            names[line] = m.group(1)
            return f"sizeof(ShowSize<sizeof({m.group(1)}), {line}>)"

        out += [src[last:start], _SIZEOF.sub(shown, src[start:end])]
        last = end
    out.append(src[last:])
    with tempfile.TemporaryDirectory() as tmp:
        # The copy's own folder is not the original's: -iquote keeps its "..." includes.
        copy = Path(tmp) / Path(rel).name
        copy.write_text("template <unsigned long long N, int L> struct ShowSize;\n"
                        + "".join(out), encoding="utf-8")
        done = subprocess.run([cxx, *flags, f"-iquote{(root / rel).parent}", "-fsyntax-only",
                               "-fmax-errors=1000", str(copy)],
                              cwd=root, capture_output=True, text=True)
    rows = {(int(m.group(2)), int(m.group(1))) for m in _SHOWN.finditer(done.stderr)}
    return [f"{rel}:{line}:{names.get(line, '?')} {size}" for line, size in sorted(rows)]


# ------------------------------------------------------------------ builtin options probe
def parsed_structs(root: Path) -> dict[str, str | None]:
    """Each builtin op TFLM's resolver registers → the struct its parser allocates (None:
    the parser allocates nothing)."""
    resolver = (root / _RESOLVER).read_text(encoding="utf-8")
    parsers = (root / _PARSERS).read_text(encoding="utf-8")
    starts = {m.group(1): m.start() for m in reversed(list(_PARSE_FN.finditer(parsers)))}
    bounds = sorted(starts.values()) + [len(parsers)]
    out: dict[str, str | None] = {}
    for op, parser in _ADD_BUILTIN.findall(resolver):
        if parser not in starts:
            raise SystemExit(f"{_RESOLVER}: {op}'s parser {parser} is not in {_PARSERS}")
        start = starts[parser]
        body = parsers[start:next(b for b in bounds if b > start)]
        allocated = set(_ALLOCATES.findall(body))
        if len(allocated) > 1:
            raise SystemExit(f"{_PARSERS}: {parser} allocates {sorted(allocated)}")
        out[op] = allocated.pop() if allocated else None
    return out


def layouts(root: Path, compiler: list[str], structs: list[str]) -> dict[str, tuple[int, int]]:
    """sizeof and alignof of each struct as ``compiler`` lays it out: a C file listing them
    in an array, compiled to assembly (no library needed), the array's words read back."""
    values = ", ".join(f"sizeof({s}), _Alignof({s})" for s in structs)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "params.c"
        src.write_text(f'#include "{_PARAMS_HEADER}"\n'
                       f"const unsigned int devicefit_params[] = {{{values}}};\n",
                       encoding="utf-8")
        done = subprocess.run([*compiler, "-std=c11", "-ffreestanding", "-O0", f"-I{root}",
                               "-S", "-o", "-", str(src)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(compiler)}: {done.stderr.strip()[-2000:]}")
    lines = done.stdout.splitlines()
    start = lines.index("devicefit_params:") + 1
    words = []
    for line in lines[start:start + 2 * len(structs)]:
        m = _DATA.match(line)
        if m is None:
            raise SystemExit(f"{' '.join(compiler)}: unexpected assembly line {line!r}")
        words.append(int(m.group(1)))
    return {s: (words[2 * i], words[2 * i + 1]) for i, s in enumerate(structs)}


def params_tables(root: Path) -> tuple[dict[str, str | None], dict[str, dict[str, tuple[int, int]]],
                                       list[str]]:
    """(op → struct, layout → struct → (sizeof, alignof), what was compared or skipped)."""
    ops = parsed_structs(root)
    structs = sorted({s for s in ops.values() if s is not None})
    tables, log = {}, []
    for name, compilers in LAYOUTS.items():
        reference = None
        for compiler in compilers:
            if shutil.which(compiler[0]) is None:
                log.append(f"{name}: {' '.join(compiler)}: not installed, not compared")
                continue
            table = layouts(root, compiler, structs)
            if reference is None:
                reference, tables[name] = compiler, table
                log.append(f"{name}: {' '.join(compiler)}: the table")
                continue
            differ = [f"{s} {table[s]} vs {tables[name][s]}" for s in structs
                      if table[s] != tables[name][s]]
            if differ:
                raise SystemExit(f"{name}: {' '.join(compiler)} differs from "
                                 f"{' '.join(reference)}: {'; '.join(differ)}")
            log.append(f"{name}: {' '.join(compiler)}: same")
    return ops, tables, log


def _short(struct: str) -> str:
    return struct.removeprefix("TfLite").removesuffix("Params")


def _wrapped(items: list[str], indent: str) -> list[str]:
    """``items`` joined into lines of at most 96 characters, none split."""
    lines = [indent]
    for item in items:
        if len(lines[-1]) + 1 + len(item) > 96 and lines[-1].strip():
            lines.append(indent)
        lines[-1] += ("" if not lines[-1].strip() else " ") + item
    return lines


def _python(ops: dict[str, str | None], tables: dict[str, dict[str, tuple[int, int]]]) -> str:
    """The tables as tail.py holds them: structs by their short name (``Conv`` is
    ``TfLiteConvParams``), every layout (tail.py's "lp64" is the pinned wheel's: where its
    TFLM differs from the checkout's, ``_WHEEL_PARAMS`` says)."""
    lines = ["_PARSED_INTO = {"]
    lines += _wrapped([f'"{op}": "{_short(s)}",' for op, s in sorted(ops.items()) if s], "    ")
    lines += ["}", "_NOT_PARSED = frozenset({"]
    lines += _wrapped([f'"{op}",' for op, s in sorted(ops.items()) if not s], "    ")
    lines += ["})", "_PARAMS: dict[str, dict[str, tuple[int, int]]] = {"]
    for name, table in tables.items():
        lines.append(f'    "{name}": {{')
        lines += _wrapped([f'"{_short(s)}": {v},' for s, v in table.items()], " " * 8)
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tflm", type=Path, required=True)
    p.add_argument("--cxx", default="arm-none-eabi-g++")
    p.add_argument("--cmsis-nn", action="store_true")
    p.add_argument("--params", action="store_true",
                   help="the builtin options' structs, per data layout, instead of OpData")
    p.add_argument("--python", action="store_true", help="with --params: as tail.py's tables")
    p.add_argument("files", nargs="*")
    args = p.parse_args(argv)
    if args.params:
        ops, tables, log = params_tables(args.tflm)
        if args.python:
            print(_python(ops, tables))
            return 0
        print("\n".join(log))
        names = list(tables)
        print(f"{'op':32} {'struct':40} " + " ".join(f"{n:>10}" for n in names))
        for op, struct in sorted(ops.items()):
            cells = [f"{'/'.join(map(str, tables[n][struct])) if struct else '-':>10}"
                     for n in names]
            print(f"{op:32} {struct or '(none)':40} " + " ".join(cells))
        print("(sizeof/alignof in bytes; '-': the parser allocates nothing)")
        return 0
    if not args.files:
        p.error("name the kernel sources to probe, or --params")
    includes = _INCLUDES + (_CMSIS if args.cmsis_nn else [])
    flags = [*_FLAGS, *(_ARM if "arm-none-eabi" in args.cxx else []),
             *(["-DCMSIS_NN"] if args.cmsis_nn else []), *(f"-I{i}" for i in includes)]
    for rel in args.files:
        for row in probe(args.tflm, args.cxx, flags, rel):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
