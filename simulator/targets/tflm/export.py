"""The firmware component a user drops into a TFLM project: what devicefit verified, as C++.

:func:`export_files` turns a model, its op resolver bindings and the arena devicefit judged
into the files of one folder (see :data:`LAYOUT`): the model as an ``extern "C"`` array
aligned as TFLM needs it, a ``MicroMutableOpResolver`` registering exactly the model's
operators (the method names of the user's TFLM checkout when one is given, else of the
TFLM version devicefit was checked against: ``resolver_methods.json``), the arena as an
array whose size is the figure the verdict judged, a header with the model's sha256 and
its inputs and outputs, a minimal example, and build files for TFLM's Makefile and CMake.

The target build (``--target-build``) compiles and runs exactly these files, so the files
are a pure function of their inputs: the same model, profile and build give the same bytes
(no dates, no paths), and :func:`export_digest` names that content.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model, Tensor
from devicefit.simulator.report.report import MemoryReport
from devicefit.simulator.targets.tflm.checkout import checkout_methods, op_key
from devicefit.simulator.types import ExportedFile

#: MicroMutableOpResolver methods of the TFLM version devicefit was checked against, written
#: by ``benchmarks/resolver_table.py`` from that checkout's ``micro_mutable_op_resolver.h``.
RESOLVER_TABLE = Path(__file__).with_name("resolver_methods.json")
#: TFLM's arena alignment (``MicroArenaBufferAlignment()``): an arena that starts elsewhere
#: loses up to this many bytes to TFLM aligning it.
ARENA_ALIGNMENT = 16
#: Bytes per line of the model array (the same files on every run: no wrapping by width).
_BYTES_PER_LINE = 12
#: C++ keywords that are not Python keywords, refused as names (a name becomes a namespace).
_CPP_KEYWORDS = frozenset("""alignas alignof and and_eq asm auto bitand bitor bool break case
catch char char8_t char16_t char32_t class compl concept const consteval constexpr constinit
const_cast continue co_await co_return co_yield decltype default delete do double dynamic_cast
else enum explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct
switch template this thread_local throw true try typedef typeid typename union unsigned using
virtual void volatile wchar_t while xor xor_eq main tflite""".split())
#: TfLiteType enumerator of each tensor dtype (``tensorflow/lite/core/c/c_api_types.h``).
_TFLITE_TYPES = {"float32": "kTfLiteFloat32", "int32": "kTfLiteInt32", "uint8": "kTfLiteUInt8",
                 "int64": "kTfLiteInt64", "bool": "kTfLiteBool", "int16": "kTfLiteInt16",
                 "int8": "kTfLiteInt8", "float16": "kTfLiteFloat16", "float64": "kTfLiteFloat64",
                 "uint32": "kTfLiteUInt32", "uint16": "kTfLiteUInt16", "int4": "kTfLiteInt4"}


@dataclass(frozen=True)
class Registration:
    """One operator as the resolver adds it."""

    op: str  # the model's op name ("CONV_2D", "CUSTOM:SignalEnergy")
    method: str  # "AddConv2D"


@dataclass(frozen=True)
class ArenaFigure:
    """The arena constant and what it rests on, said in the header's comment."""

    #: The constant: ``start`` + ``margin``, a multiple of :data:`ARENA_ALIGNMENT`.
    bytes: int
    #: The arena the verdict judged: TFLM's planned head + tail, or its larger room to start.
    start: int
    margin: int
    head: int
    tail: int
    #: "predicted for cortex-m4 cmsis-nn (head exact, tail estimated)" and the like.
    basis: str


@dataclass(frozen=True)
class ExportSpec:
    """Everything the files are made of."""

    name: str
    model: Model
    data: bytes
    profile: str
    core: str | None
    kernels: str
    registrations: tuple[Registration, ...]
    #: Where the resolver's method names come from ("the checkout …", "TFLM 90b983c2…").
    resolver_source: str
    arena: ArenaFigure

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def resource_variables(self) -> int:
        return resource_variables(self.model)


def resource_variables(model: Model) -> int:
    """The resource variables an application creates for the model: one per distinct
    VAR_HANDLE ``shared_name`` (what TFLM's own harnesses and Python interpreter count)."""
    return len({op.options.get("shared_name") for sg in model.subgraphs
                for op in sg.operators if op.op_name == "VAR_HANDLE"})


def c_name(candidate: str) -> str:
    """``candidate`` as a C identifier for the export's names (a file stem:
    ``digits-cnn.v2`` → ``digits_cnn_v2``); :class:`UsageError` when nothing usable is left."""
    name = re.sub(r"\W", "_", candidate.strip(), flags=re.ASCII).strip("_").lower()
    name = re.sub(r"_+", "_", name)
    if name and name[0].isdigit():
        name = f"model_{name}"
    if not name or name in _CPP_KEYWORDS or keyword.iskeyword(name):
        raise UsageError(f"--name: '{candidate}' is no usable C identifier for the export "
                         "(letters, digits and _, not a C++ keyword)")
    return name


@cache
def _table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(RESOLVER_TABLE.read_text())
    return table


def default_methods() -> tuple[dict[str, str], str]:
    """Resolver methods (op key → method) of the TFLM version devicefit ships a table of,
    and that version's name."""
    table = _table()
    return dict(table["methods"]), f"TFLM {table['tflm_commit'][:12]} (devicefit's table)"


def registrations(op_names: Iterable[str], methods: Mapping[str, str]
                  ) -> tuple[tuple[Registration, ...], list[str]]:
    """The resolver's registrations for ``op_names`` (sorted by method: the same file for
    the same ops), and the op names no method registers."""
    found, lacking = [], []
    for name in sorted(set(op_names)):
        method = methods.get(op_key(name))
        if method is None:
            lacking.append(name)
        else:
            found.append(Registration(name, method))
    return tuple(sorted(found, key=lambda r: r.method)), lacking


def arena_figure(head: int, tail: int, start: int, basis: str, margin: int = 0) -> ArenaFigure:
    """The constant for a start arena of ``start`` bytes plus ``margin`` (rounded up to
    TFLM's alignment); a negative margin is refused (the link check exists for a smaller
    array)."""
    if margin < 0:
        raise UsageError("--arena-margin: give 0 or more bytes (a smaller arena than the "
                         "verdict judged does not start)")
    size = -(-(start + margin) // ARENA_ALIGNMENT) * ARENA_ALIGNMENT
    return ArenaFigure(size, start, size - start, head, tail, basis)


def export_spec(model: Model, profile: Profile, memory: MemoryReport,
                methods: Mapping[str, str], resolver_source: str, name: str | None = None,
                margin: int = 0) -> ExportSpec:
    """What the export of ``model`` for ``profile`` is made of: the file's bytes, the
    resolver ``methods`` (op key → method) of the TFLM the user builds with, and the arena
    the verdict judges without a run (:func:`simulator.judge.verdict.static_arena_bytes`: the
    planned head + tail, or TFLM's larger room to start). :class:`UsageError` when the
    TFLM has no method for one of the model's operators (the verdict fails it too)."""
    regs, lacking = registrations(model.op_types, methods)
    if lacking:
        raise UsageError(f"{', '.join(lacking)}: no op resolver method in {resolver_source}; "
                         "a TFLM firmware cannot register "
                         f"{'it' if len(lacking) == 1 else 'them'}")
    start = max(memory.arena_bytes, memory.arena_required_bytes)
    exact = set(memory.exact)
    basis = (f"predicted for {profile.device.cpu or 'the device'} {profile.runtime.kernels}: "
             f"head {'exact' if 'arena_head' in exact else 'estimated'}, "
             f"tail {'exact' if 'arena_tail' in exact else 'estimated'}")
    return ExportSpec(
        name=c_name(Path(model.path).stem if name is None else name), model=model,
        data=Path(model.path).read_bytes(), profile=profile.name, core=profile.device.cpu,
        kernels=profile.runtime.kernels, registrations=regs, resolver_source=resolver_source,
        arena=arena_figure(memory.arena_head_bytes, memory.arena_tail_bytes, start, basis,
                           margin))


def firmware(model: Model, profile: Profile, memory: MemoryReport, checkout: str | None,
             name: str | None, margin: int,
             verification: Mapping[str, Any] | None) -> list[ExportedFile]:
    """The TFLM target's ``export`` hook: the files of ``model``'s export for ``profile``,
    with the resolver method names of the TFLM ``checkout`` (None: devicefit's table)."""
    if checkout is None:
        methods, source = default_methods()
    else:
        methods, source = checkout_methods(Path(checkout).expanduser().resolve())
    return export_files(export_spec(model, profile, memory, methods, source, name, margin),
                        verification)


# --------------------------------------------------------------------------- the files
#: The files of an export of ``NAME``, in the order the README lists them.
LAYOUT = (
    ("{name}_model.h", "what the firmware includes: names, sizes, inputs and outputs"),
    ("{name}_model_data.cc", "the model, an aligned const array (flash)"),
    ("{name}_model_ops.cc", "the op resolver: exactly the model's operators"),
    ("{name}_arena.cc", "the tensor arena, an aligned array of the size devicefit judged"),
    ("example/{name}_example.cc", "one inference, the smallest complete program"),
    ("Makefile", "builds the example with TFLM's own Makefile and flags"),
    ("CMakeLists.txt", "the component as a CMake library (and the example)"),
    ("manifest.json", "what was exported, for `devicefit link-check` and for tools"),
    ("README.md", "how to use it, and what it rests on"),
)


def export_files(spec: ExportSpec, verification: Mapping[str, Any] | None = None
                 ) -> list[ExportedFile]:
    """The export's files (see :data:`LAYOUT`), the manifest last, with ``verification``
    (what a target build measured of these files) when there is one."""
    files = [
        ExportedFile(f"{spec.name}_model.h", _header(spec)),
        ExportedFile(f"{spec.name}_model_data.cc", _model_data(spec)),
        ExportedFile(f"{spec.name}_model_ops.cc", _ops(spec)),
        ExportedFile(f"{spec.name}_arena.cc", _arena(spec)),
        ExportedFile(f"example/{spec.name}_example.cc", _example(spec)),
        ExportedFile("Makefile", _makefile(spec)),
        ExportedFile("CMakeLists.txt", _cmake(spec)),
        ExportedFile("README.md", _readme(spec)),
    ]
    return [*files, ExportedFile("manifest.json", manifest_text(spec, files, verification))]


def export_digest(files: Sequence[ExportedFile]) -> str:
    """sha256 over the exported sources (the manifest, which records this digest, and the
    README left out): what a verification of the export names."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        if f.path not in ("manifest.json", "README.md"):
            h.update(f.path.encode() + b"\0" + hashlib.sha256(f.text.encode()).digest())
    return h.hexdigest()


def manifest(spec: ExportSpec, files: Sequence[ExportedFile],
             verification: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The machine-readable record ``devicefit link-check`` reads."""
    sources = [f for f in files if f.path not in ("manifest.json", "README.md")]
    return {
        "devicefit_export": 1,
        "name": spec.name,
        "profile": spec.profile,
        "model": {"bytes": len(spec.data), "sha256": spec.sha256,
                  "symbol": f"{spec.name}_model_data"},
        "arena": {"bytes": spec.arena.bytes, "start_arena_bytes": spec.arena.start,
                  "margin_bytes": spec.arena.margin, "head_bytes": spec.arena.head,
                  "tail_bytes": spec.arena.tail, "basis": spec.arena.basis,
                  "symbol": f"{spec.name}_tensor_arena", "alignment": ARENA_ALIGNMENT},
        "build": {"core": spec.core, "kernels": spec.kernels},
        "ops": [{"op": r.op, "method": r.method} for r in spec.registrations],
        "resolver_methods_from": spec.resolver_source,
        "inputs": [_tensor_record(t) for t in _io(spec.model, spec.model.main.inputs)],
        "outputs": [_tensor_record(t) for t in _io(spec.model, spec.model.main.outputs)],
        "files": {f.path: hashlib.sha256(f.text.encode()).hexdigest() for f in sources},
        "export_sha256": export_digest(files),
        "verified": None if verification is None else dict(verification),
    }


def manifest_text(spec: ExportSpec, files: Sequence[ExportedFile],
                  verification: Mapping[str, Any] | None = None) -> str:
    return json.dumps(manifest(spec, files, verification), indent=1) + "\n"


def _io(model: Model, indices: Sequence[int]) -> list[Tensor]:
    return [model.main.tensors[i] for i in indices]


def _tensor_record(t: Tensor) -> dict[str, Any]:
    q = t.quantization
    return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
            "scale": list(q.scale) if q and q.scale else None,
            "zero_point": list(q.zero_point) if q and q.zero_point else None}


def _guard(spec: ExportSpec) -> str:
    return f"DEVICEFIT_{spec.name.upper()}_MODEL_H_"


def _c_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)  # a valid C string literal for ASCII escapes


def _tensor_table(kind: str, tensors: Sequence[Tensor]) -> list[str]:
    lines = [f"constexpr int k{kind}Count = {len(tensors)};"]
    for i, t in enumerate(tensors):
        q = t.quantization
        quant = (f"scale {q.scale[0]:.9g}, zero point {q.zero_point[0]}"
                 if q and q.scale and len(q.scale) == 1 and q.zero_point
                 else "per-channel" if q and q.scale else "not quantized")
        shape = "x".join(map(str, t.shape)) or "scalar"
        lines.append(f"// {kind.lower()} {i}: {_c_comment(t.name)}, {t.dtype} {shape}, {quant}")
    rows = []
    for t in tensors:
        q = t.quantization
        scale = q.scale[0] if q and len(q.scale) == 1 else 0.0
        zero = q.zero_point[0] if q and len(q.zero_point) == 1 else 0
        rows.append(f"    {{{_TFLITE_TYPES.get(t.dtype, 'kTfLiteNoType')}, "
                    f"{_bytes_of(t)}, {scale!r}f, {zero}}},")
    if tensors:
        lines += [f"constexpr TensorInfo k{kind}s[] = {{", *rows, "};"]
    return lines


def _bytes_of(t: Tensor) -> int:
    return t.nbytes


def _c_comment(text: str) -> str:
    return text.replace("*/", "* /").replace("\n", " ")[:120]


def _header(spec: ExportSpec) -> str:
    a = spec.arena
    n = spec.name
    inputs, outputs = _io(spec.model, spec.model.main.inputs), _io(spec.model,
                                                                     spec.model.main.outputs)
    lines = [
        f"// {n}_model.h: the model devicefit checked for profile '{spec.profile}'",
        f"// ({spec.core or 'no cpu'}, {spec.kernels} kernels). Generated by `devicefit export`;",
        "// regenerate rather than edit (devicefit link-check compares the firmware with it).",
        f"#ifndef {_guard(spec)}",
        f"#define {_guard(spec)}",
        "",
        "#include <cstddef>",
        "#include <cstdint>",
        "",
        '#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"',
        "",
        "// The model (in flash) and the tensor arena (in RAM): plain C names, so that a",
        "// linker script can place them and a map file names them.",
        f"extern \"C\" const unsigned char {n}_model_data[];",
        f"extern \"C\" uint8_t {n}_tensor_arena[];",
        "",
        f"// The arena size: {a.bytes:,} B. devicefit judged a start arena of {a.start:,} B "
        f"({a.basis}):",
        f"// TFLM's planned head {a.head:,} B + tail {a.tail:,} B"
        + (f" + {a.start - a.head - a.tail:,} B TFLM needs while it plans" if
           a.start > a.head + a.tail else "") + ";",
        f"// margin {a.margin:,} B" + (" (rounded up to TFLM's 16-byte alignment)"
                                        if a.margin else " (none: the start arena itself)")
        + ". A smaller arena than the start arena fails AllocateTensors.",
        f"// Override with -D{n.upper()}_ARENA_SIZE=...; `devicefit link-check` then compares.",
        f"#ifndef {n.upper()}_ARENA_SIZE",
        f"#define {n.upper()}_ARENA_SIZE {a.bytes}",
        "#endif",
        "",
        f"namespace {n} {{",
        "",
        f"constexpr size_t kModelSize = {len(spec.data)};",
        "// sha256 of the .tflite file the array holds",
        f"constexpr char kModelSha256[] = \"{spec.sha256}\";",
        f"constexpr size_t kArenaSize = {n.upper()}_ARENA_SIZE;",
        f"constexpr size_t kArenaAlignment = {ARENA_ALIGNMENT};",
        "",
        f"// The op resolver: exactly the model's {len(spec.registrations)} operator(s) "
        f"(method names: {spec.resolver_source}).",
        f"constexpr int kOpCount = {max(len(spec.registrations), 1)};",
        "using OpResolver = tflite::MicroMutableOpResolver<kOpCount>;",
        "TfLiteStatus RegisterOps(OpResolver& resolver);",
        "// Resource variables the interpreter needs (MicroResourceVariables::Create), 0: none.",
        f"constexpr int kResourceVariables = {spec.resource_variables};",
        "",
        "// Inputs and outputs as the model's main subgraph declares them: type, bytes, and the",
        "// scale and zero point of a per-tensor quantized tensor (0 otherwise).",
        "struct TensorInfo {",
        "  TfLiteType type;",
        "  size_t bytes;",
        "  float scale;",
        "  int32_t zero_point;",
        "};",
        *_tensor_table("Input", inputs),
        *_tensor_table("Output", outputs),
        "",
        f"}}  // namespace {n}",
        "",
        f"#endif  // {_guard(spec)}",
        "",
    ]
    return "\n".join(lines)


def _model_data(spec: ExportSpec) -> str:
    n = spec.name
    rows = []
    data = spec.data
    for at in range(0, len(data), _BYTES_PER_LINE):
        rows.append("    " + ", ".join(f"0x{b:02x}" for b in data[at:at + _BYTES_PER_LINE])
                    + ",")
    return "\n".join([
        f"// {n}_model_data.cc: the .tflite file devicefit checked, byte for byte",
        f"// ({len(data):,} B, sha256 {spec.sha256}). Generated by `devicefit export`.",
        f'#include "{n}_model.h"',
        "",
        "// Aligned for TFLM's flatbuffer reads; const, so that the toolchain places it in",
        "// flash (.rodata). Define DEVICEFIT_MODEL_SECTION to put it in a section of your",
        '// linker script (e.g. -DDEVICEFIT_MODEL_SECTION=\'__attribute__((section(".models")))\').',
        "#ifndef DEVICEFIT_MODEL_SECTION",
        "#define DEVICEFIT_MODEL_SECTION",
        "#endif",
        "",
        f"extern \"C\" alignas(16) const unsigned char {n}_model_data[] DEVICEFIT_MODEL_SECTION "
        "= {",
        *rows,
        "};",
        "",
        f"static_assert(sizeof({n}_model_data) == {n}::kModelSize, "
        "\"the array is the model file\");",
        "",
    ])


def _ops(spec: ExportSpec) -> str:
    n = spec.name
    calls = [f"  if (resolver.{r.method}() != kTfLiteOk) return kTfLiteError;  // {r.op}"
             for r in spec.registrations]
    return "\n".join([
        f"// {n}_model_ops.cc: registers exactly the operators of the model (generated).",
        f'#include "{n}_model.h"',
        "",
        f"namespace {n} {{",
        "",
        "TfLiteStatus RegisterOps(OpResolver& resolver) {",
        *calls,
        "  return kTfLiteOk;",
        "}",
        "",
        f"}}  // namespace {n}",
        "",
    ])


def _arena(spec: ExportSpec) -> str:
    n = spec.name
    return "\n".join([
        f"// {n}_arena.cc: the tensor arena, of the size devicefit judged (see {n}_model.h).",
        f'#include "{n}_model.h"',
        "",
        "// Define DEVICEFIT_ARENA_SECTION to place it in a RAM section of your linker script",
        "// (e.g. a faster SRAM bank); it is zero-initialised (.bss) otherwise.",
        "#ifndef DEVICEFIT_ARENA_SECTION",
        "#define DEVICEFIT_ARENA_SECTION",
        "#endif",
        "",
        "// (In a braced extern \"C\" block: a definition, where `extern \"C\" T x[N];` alone",
        "// would only declare it.)",
        "extern \"C\" {",
        f"alignas(16) uint8_t {n}_tensor_arena[{n}::kArenaSize] DEVICEFIT_ARENA_SECTION;",
        "}",
        "",
    ])


def _example(spec: ExportSpec) -> str:
    n = spec.name
    return "\n".join([
        f"// One inference of {n} with TFLM: the smallest complete program (generated).",
        "// Inputs are zeros as the model sees them (a quantized input's zero point); put your",
        "// data there. It prints the arena TFLM used and the first output values.",
        "#include <cstring>",
        "",
        f'#include "{n}_model.h"',
        '#include "tensorflow/lite/micro/micro_interpreter.h"',
        '#include "tensorflow/lite/micro/micro_log.h"',
        *(['#include "tensorflow/lite/micro/micro_resource_variable.h"']
          if spec.resource_variables else []),
        '#include "tensorflow/lite/schema/schema_generated.h"',
        "",
        "int main() {",
        f"  const tflite::Model* model = tflite::GetModel({n}_model_data);",
        "  if (model->version() != TFLITE_SCHEMA_VERSION) {",
        '    MicroPrintf("model schema %d, TFLM reads %d", static_cast<int>(model->version()),',
        "                TFLITE_SCHEMA_VERSION);",
        "    return 1;",
        "  }",
        f"  static {n}::OpResolver resolver;",
        f"  if ({n}::RegisterOps(resolver) != kTfLiteOk) return 1;",
        *_interpreter(spec),
        "  if (interpreter.AllocateTensors() != kTfLiteOk) {",
        '    MicroPrintf("AllocateTensors failed");',
        "    return 1;",
        "  }",
        "  for (size_t i = 0; i < interpreter.inputs_size(); ++i) {",
        "    TfLiteTensor* input = interpreter.input(i);",
        "    const int zero = (input->type == kTfLiteInt8 || input->type == kTfLiteUInt8 ||",
        "                      input->type == kTfLiteInt16) ? input->params.zero_point : 0;",
        "    if (input->type == kTfLiteInt8) {",
        "      memset(input->data.raw, static_cast<int8_t>(zero), input->bytes);",
        "    } else if (input->type == kTfLiteUInt8) {",
        "      memset(input->data.raw, static_cast<uint8_t>(zero), input->bytes);",
        "    } else if (input->type == kTfLiteInt16) {",
        "      for (size_t k = 0; k < input->bytes / 2; ++k) {",
        "        input->data.i16[k] = static_cast<int16_t>(zero);",
        "      }",
        "    } else {",
        "      memset(input->data.raw, 0, input->bytes);",
        "    }",
        "  }",
        "  if (interpreter.Invoke() != kTfLiteOk) {",
        '    MicroPrintf("Invoke failed");',
        "    return 1;",
        "  }",
        f'  MicroPrintf("{n}: ok, arena used %u of %u bytes",',
        "              static_cast<unsigned>(interpreter.arena_used_bytes()),",
        f"              static_cast<unsigned>({n}::kArenaSize));",
        "  const TfLiteTensor* output = interpreter.output(0);",
        "  for (size_t k = 0; k < output->bytes && k < 8; ++k) {",
        '    MicroPrintf("output byte %u: %d", static_cast<unsigned>(k),',
        "                static_cast<int>(output->data.int8[k]));",
        "  }",
        "  return 0;",
        "}",
        "",
    ])


def _interpreter(spec: ExportSpec) -> list[str]:
    """The interpreter on the exported arena, with the model's resource variables."""
    n = spec.name
    if not spec.resource_variables:
        return [f"  tflite::MicroInterpreter interpreter(model, resolver, {n}_tensor_arena,",
                f"                                       {n}::kArenaSize);"]
    return ["  tflite::MicroAllocator* allocator =",
            f"      tflite::MicroAllocator::Create({n}_tensor_arena, {n}::kArenaSize);",
            "  if (allocator == nullptr) return 1;",
            "  tflite::MicroResourceVariables* variables =",
            f"      tflite::MicroResourceVariables::Create(allocator, {n}::kResourceVariables);",
            "  if (variables == nullptr) return 1;",
            "  tflite::MicroInterpreter interpreter(model, resolver, allocator, variables);"]


def _sources(spec: ExportSpec) -> list[str]:
    n = spec.name
    return [f"{n}_model_data.cc", f"{n}_model_ops.cc", f"{n}_arena.cc"]


def _kernel_dir(kernels: str) -> str:
    return {"cmsis-nn": "cmsis_nn", "esp-nn": "esp_nn"}.get(kernels, "")


def _makefile(spec: ExportSpec) -> str:
    n = spec.name
    kdir = _kernel_dir(spec.kernels)
    return "\n".join([
        f"# Builds {n}'s example with TFLM's own Makefile: TFLM's library and flags for the",
        "# profile's core and kernels, then this folder's sources with the same flags.",
        "#   make TFLM_DIR=/path/to/tflite-micro            # build/example (TFLM's cortex_m_qemu)",
        "#   make TFLM_DIR=... TARGET=cortex_m_generic       # another of TFLM's targets",
        "# TFLM's objects go to build/tflm (BASE_GENDIR), not into the checkout; TFLM's Makefile",
        "# fetches third-party trees it lacks, as it does for any build of yours.",
        "# Only the sources are needed in another build system: see README.md.",
        "TFLM_DIR ?= $(error set TFLM_DIR to a TFLite-Micro checkout)",
        "TARGET ?= cortex_m_qemu",
        f"TARGET_ARCH ?= {spec.core or 'cortex-m4'}",
        f"OPTIMIZED_KERNEL_DIR ?= {kdir}",
        "HERE := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))",
        "BUILD ?= $(HERE)/build",
        "TFLM_GENDIR ?= $(BUILD)/tflm/",
        "TFLM_MAKE = $(MAKE) --no-print-directory -C $(TFLM_DIR) \\",
        "  -f tensorflow/lite/micro/tools/make/Makefile TARGET=$(TARGET) \\",
        "  TARGET_ARCH=$(TARGET_ARCH) OPTIMIZED_KERNEL_DIR=$(OPTIMIZED_KERNEL_DIR) \\",
        "  BASE_GENDIR=$(TFLM_GENDIR) $(TFLM_MAKE_ARGS)",
        "tflm_var = $(shell $(TFLM_MAKE) print-$(1) 2>/dev/null | sed -n 's/^$(1)=//p')",
        "",
        f"SRCS := {' '.join(f'$(HERE)/{s}' for s in _sources(spec))} \\",
        f"        $(HERE)/example/{n}_example.cc",
        "",
        ".PHONY: all tflm clean",
        "all: $(BUILD)/example",
        "",
        "tflm:",
        "\t$(TFLM_MAKE) microlite",
        "",
        "$(BUILD)/example: tflm $(SRCS) $(HERE)/" + n + "_model.h",
        "\t@mkdir -p $(BUILD)",
        "\t$(eval CXX := $(call tflm_var,CXX))",
        "\t$(eval LIB := $(call tflm_var,MICROLITE_LIB_PATH))",
        "\tcd $(TFLM_DIR) && $(CXX) $(call tflm_var,CXXFLAGS) $(call tflm_var,INCLUDES) \\",
        "\t  $(call tflm_var,CORE_OPTIMIZATION_LEVEL) -I$(HERE) -o $@ $(SRCS) $(LIB) \\",
        "\t  $(call tflm_var,LDFLAGS) $(call tflm_var,MICROLITE_LIBS)",
        "",
        "clean:",
        "\trm -rf $(BUILD)",
        "",
    ])


def _cmake(spec: ExportSpec) -> str:
    n = spec.name
    srcs = " ".join(_sources(spec))
    return "\n".join([
        f"# {n}: the model devicefit checked, as a CMake library. In a project that has",
        "# TFLM as a CMake target already:",
        f"#   set(DEVICEFIT_TFLM_TARGET <your TFLM target>)   add_subdirectory({n})",
        f"#   target_link_libraries(app PRIVATE {n}_model)",
        "# Or with TFLM built elsewhere (its include folders, compile options and library):",
        "#   -DTFLM_INCLUDE_DIRS=... -DTFLM_COMPILE_OPTIONS=... -DTFLM_LIBRARY=...",
        "# TFLM's compile options must be those its library was built with (e.g.",
        "# -DTF_LITE_STATIC_MEMORY changes its structs). -DDEVICEFIT_EXAMPLE=ON adds the example.",
        "cmake_minimum_required(VERSION 3.16)",
        f"project({n}_model CXX)",
        "",
        f"add_library({n}_model STATIC {srcs})",
        f"target_include_directories({n}_model PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}})",
        f"target_compile_features({n}_model PUBLIC cxx_std_17)",
        "if(DEFINED DEVICEFIT_TFLM_TARGET)",
        f"  target_link_libraries({n}_model PUBLIC ${{DEVICEFIT_TFLM_TARGET}})",
        "else()",
        f"  target_include_directories({n}_model PUBLIC ${{TFLM_INCLUDE_DIRS}})",
        f"  target_compile_options({n}_model PUBLIC ${{TFLM_COMPILE_OPTIONS}})",
        f"  target_link_libraries({n}_model PUBLIC ${{TFLM_LIBRARY}})",
        "endif()",
        "",
        "option(DEVICEFIT_EXAMPLE \"build the example program\" OFF)",
        "if(DEVICEFIT_EXAMPLE)",
        f"  add_executable({n}_example example/{n}_example.cc)",
        f"  target_link_libraries({n}_example PRIVATE {n}_model)",
        "endif()",
        "",
    ])


def _readme(spec: ExportSpec) -> str:
    n = spec.name
    a = spec.arena
    rows = "\n".join(f"| `{path.format(name=n)}` | {what} |" for path, what in LAYOUT)
    ops = ", ".join(f"{r.op} (`{r.method}`)" for r in spec.registrations) or "none"
    return "\n".join([
        f"# {n}: the model devicefit checked, as a TFLM firmware component",
        "",
        "Use it in your firmware:",
        "",
        "```cpp",
        f'#include "{n}_model.h"',
        f"static {n}::OpResolver resolver;",
        f"{n}::RegisterOps(resolver);",
        f"tflite::MicroInterpreter interpreter(tflite::GetModel({n}_model_data), resolver,",
        f"                                     {n}_tensor_arena, {n}::kArenaSize);",
        "interpreter.AllocateTensors();",
        "```",
        "",
        f"Compile `{'`, `'.join(_sources(spec))}` with your TFLM build (C++17, TFLM's include "
        "folders and flags). Build the example with TFLM's Makefile: `make TFLM_DIR=/path/to/"
        "tflite-micro`; with CMake: see `CMakeLists.txt`. The files are plain C++ against "
        "TFLM's headers; devicefit builds and runs them with TFLM's Makefile and with CMake "
        "(Arduino, ESP-IDF, Zephyr and STM32Cube projects compile the same sources, which "
        "devicefit does not test).",
        "",
        "After linking, check that the firmware holds what was checked:",
        "`devicefit link-check firmware.map --export .`",
        "",
        "## What it rests on",
        "",
        f"- Profile `{spec.profile}`: {spec.core or 'no cpu'}, {spec.kernels} kernels.",
        f"- Model: {len(spec.data):,} B, sha256 `{spec.sha256}`.",
        f"- Arena: {a.bytes:,} B = start arena {a.start:,} B ({a.basis}) + margin {a.margin:,} B.",
        f"- Operators ({len(spec.registrations)}): {ops}; method names from "
        f"{spec.resolver_source}.",
        "- `manifest.json` records each file's sha256; a verification on a target build "
        "(`devicefit export --target-build`) is recorded there too.",
        "",
        "| file | what |",
        "|---|---|",
        rows,
        "",
    ])
