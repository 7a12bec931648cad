"""Print the sizes devicefit's TFLM tail tables hold, as a compiler lays them out.

For every ``AllocatePersistentBuffer(..., sizeof(X) ...)`` call in the kernel sources given
(reference kernels, ``kernels/cmsis_nn/``, ``signal/micro/kernels/``), prints
``file:line:X size`` for the target the compiler flags describe. It compiles a copy of each
file with ``-fsyntax-only`` in which ``sizeof(X)`` becomes ``sizeof(ShowSize<sizeof(X), line>)``
of an incomplete template, and reads the sizes from the compiler's error messages (fast: no
code is generated). This is how ``simulator/targets/tflm/tail.py``'s 32-bit tables were
made::

    python benchmarks/probe_tflm_sizes.py --tflm ~/tflite-micro \\
        [--cxx arm-none-eabi-g++] [--cmsis-nn] tensorflow/lite/micro/kernels/conv_common.cc ...

``--tflm`` is a checkout whose ``tools/make/downloads`` holds its third-party trees (what
``make third_party_downloads`` fetches); the flags are TFLM's ``cortex_m_qemu`` Cortex-M4
build's (with ``-DCMSIS_NN`` and the CMSIS-NN include paths for ``--cmsis-nn``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
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
    tmp = root / f"{rel}.probe{os.getpid()}.cc"
    tmp.write_text("template <unsigned long long N, int L> struct ShowSize;\n" + "".join(out),
                   encoding="utf-8")
    try:
        done = subprocess.run([cxx, *flags, "-fsyntax-only", "-fmax-errors=1000", str(tmp)],
                              cwd=root, capture_output=True, text=True)
    finally:
        tmp.unlink()
    rows = {(int(m.group(2)), int(m.group(1))) for m in _SHOWN.finditer(done.stderr)}
    return [f"{rel}:{line}:{names.get(line, '?')} {size}" for line, size in sorted(rows)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tflm", type=Path, required=True)
    p.add_argument("--cxx", default="arm-none-eabi-g++")
    p.add_argument("--cmsis-nn", action="store_true")
    p.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    includes = _INCLUDES + (_CMSIS if args.cmsis_nn else [])
    flags = [*_FLAGS, *(_ARM if "arm-none-eabi" in args.cxx else []),
             *(["-DCMSIS_NN"] if args.cmsis_nn else []), *(f"-I{i}" for i in includes)]
    for rel in args.files:
        for row in probe(args.tflm, args.cxx, flags, rel):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
