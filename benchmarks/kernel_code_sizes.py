"""Measure the flash each TFLM kernel adds to a firmware, per core and kernel library; write
``simulator/targets/tflm/code_sizes.json`` (the table behind devicefit's static flash
estimate for TFLM profiles, ``simulator/targets/tflm/code.py``).

For each build:

- the base: TFLM's hello_world_int8 exported (:mod:`simulator.targets.tflm.export`) with an
  empty op resolver and its example linked as a firmware image, as ``--target-build``
  links it (:meth:`TflmBuild.binaries`, ``qemu=False``); the model's bytes taken out;
- each kernel: a small program that sets up an interpreter, linked against an archive of
  every object of the build once registering nothing and once registering that one
  resolver method, with the same flags and script as the image above; what the kernel
  adds is the input sections (functions and data, ``-ffunction-sections``) the second image
  holds and the first does not, each with its bytes.

Kernels share code (CMSIS-NN's matrix routines, the quantization helpers, soft-float
routines): the estimate for a model counts the union of its kernels' sections, so shared
code is counted once.

    .venv/bin/python benchmarks/kernel_code_sizes.py --tflm ~/tflite-micro \\
        [--builds cortex-m4-cmsis-nn,cortex-m7-cmsis-nn,cortex-m4-reference]

Every object of a build must be compiled first (about 10 minutes a build on two cores:
``TflmBuild.compile`` of all of ``variables``' objects, which this does); then a build's
kernels take about 10 minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.infra.fileio import write_atomic  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.targets.tflm.build import (  # noqa: E402
    Binaries,
    BuildFailure,
    BuildSpec,
    MemoryMap,
    TflmBuild,
)
from devicefit.simulator.targets.tflm.checkout import checkout_methods  # noqa: E402
from devicefit.simulator.targets.tflm.code import CODE_SIZES  # noqa: E402
from devicefit.simulator.targets.tflm.export import (  # noqa: E402
    ArenaFigure,
    ExportSpec,
    export_files,
)
from devicefit.simulator.targets.tflm.firmware import firmware_flash, read_image  # noqa: E402

MODEL = "tensorflow/lite/micro/examples/hello_world/models/hello_world_int8.tflite"
BUILDS = {"cortex-m4-cmsis-nn": ("cortex-m4", "cmsis-nn"),
          "cortex-m7-cmsis-nn": ("cortex-m7", "cmsis-nn"),
          "cortex-m4-reference": ("cortex-m4", "reference"),
          "cortex-m0plus-reference": ("cortex-m0plus", "reference")}
#: Any device's memory will do: the image is measured, not judged.
MEMORY = MemoryMap(16 * 1024 * 1024, 16 * 1024 * 1024)


#: The probe program: an interpreter over the model, with the op resolver filled by
#: ``df_register``, which each link binds to one function of :func:`registrations_source`
#: (``--defsym``): the program is compiled once, the kernels only linked.
PROBE = """
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"
extern "C" const unsigned char size_probe_model_data[];
extern "C" void df_register(void* resolver);
alignas(16) static uint8_t arena[4096];
int main() {
  static tflite::MicroMutableOpResolver<1> resolver;
  df_register(&resolver);
  tflite::MicroInterpreter interpreter(tflite::GetModel(size_probe_model_data), resolver,
                                       arena, sizeof(arena));
  if (interpreter.AllocateTensors() != kTfLiteOk) return 1;
  return interpreter.Invoke() == kTfLiteOk ? 0 : 1;
}
"""


def registrations_source(methods: list[str]) -> str:
    """One function per resolver method, each registering it alone (and ``reg_none``)."""
    lines = ['#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"',
             "using R = tflite::MicroMutableOpResolver<1>;",
             'extern "C" void reg_none(void*) {}']
    lines += [f'extern "C" void reg_{m}(void* r) {{ static_cast<R*>(r)->{m}(); }}'
              for m in methods]
    return "\n".join(lines) + "\n"


def base_image(build: TflmBuild, model_path: Path) -> tuple[int, Path]:
    """(flash of the export's example with an empty resolver, without the model's bytes;
    the export's folder, whose model object the probes link)."""
    model = read_model(model_path)
    spec = ExportSpec("size_probe", model, model_path.read_bytes(), "-", build.spec.core,
                      build.spec.kernels, (), "the checkout",
                      ArenaFigure(4096, 4096, 0, 0, 0, "-"))
    made = build.binaries(export_files(spec), [], MEMORY, qemu=False)
    assert not isinstance(made, list)
    flash = firmware_flash(made.firmware_map.read_text(errors="replace"),
                           build.classifier("size_probe"), build.firmware_image)
    return flash.total_bytes - flash.part("model"), made.folder


def probe_pieces(build: TflmBuild, work: Path, objs: list[Path], archive: Path,
                 method: str | None) -> dict[tuple[str, str], int] | None:
    """The input sections (object, section → bytes) in flash of the probe program
    registering ``method`` (None: nothing); None when it does not link (the build has no
    kernel for it)."""
    out = Binaries(work / (method or "none"))
    out.folder.mkdir(parents=True, exist_ok=True)
    bind = [f"-Wl,--defsym=df_register=reg_{method or 'none'}"]
    try:
        if build._link_firmware(objs, archive, MEMORY, out, bind):
            return None
    except BuildFailure:
        return None
    return read_image(out.firmware_map.read_text(errors="replace"))[1]


def measure_build(tflm: Path, name: str) -> dict:
    core, kernels = BUILDS[name]
    build = TflmBuild(BuildSpec(tflm.resolve(), core, kernels))
    v = build.variables
    objects = [*v["MICROLITE_LIB_OBJS"], *v["MICROLITE_KERNEL_OBJS"],
               *v["MICROLITE_THIRD_PARTY_KERNEL_OBJS"]]
    t0 = time.monotonic()
    build.compile(objects)
    base, folder = base_image(build, tflm / MODEL)
    work = folder / "probes"
    work.mkdir(exist_ok=True)
    archive = build._archive(objects, work)
    methods, _ = checkout_methods(build.spec.tflm_dir)
    (work / "probe.cc").write_text(PROBE)
    (work / "regs.cc").write_text(registrations_source(sorted(set(methods.values()))))
    objs = [build._compile_cc(work / "probe.cc", work),
            build._compile_cc(work / "regs.cc", work),
            folder / "obj" / "size_probe_model_data.o"]
    empty = probe_pieces(build, work, objs, archive, None)
    assert empty is not None
    pieces: dict[str, int] = {}
    ops: dict[str, list[str]] = {}
    lacking: list[str] = []
    for key, method in sorted(methods.items()):
        found = probe_pieces(build, work, objs, archive, method)
        if found is None:
            lacking.append(key)
            print(f"  {name} {key}: lacking", flush=True)
            continue
        # what this kernel adds to the image: the input sections the empty probe lacks
        added = {f"{obj} {section}": size for (obj, section), size in found.items()
                 if (obj, section) not in empty}
        pieces.update(added)
        ops[key] = sorted(added)
        print(f"  {name} {key}: {sum(added.values())} B in {len(added)} sections", flush=True)
    print(f"{name}: {len(ops)} kernels in {time.monotonic() - t0:.0f} s", flush=True)
    return {"core": core, "kernels": kernels, "base_bytes": base, **compact(pieces, ops),
            "lacking": lacking}


def compact(pieces: dict[str, int], ops: dict[str, list[str]]) -> dict:
    """The table's form: per kernel the bytes of the sections no other kernel pulls in
    (``own``) and the sections it shares with others, by index into ``shared`` (name,
    bytes): only shared code needs naming for the union."""
    users: dict[str, int] = {}
    for found in ops.values():
        for name in found:
            users[name] = users.get(name, 0) + 1
    shared = sorted(n for n, count in users.items() if count > 1)
    index = {n: i for i, n in enumerate(shared)}
    return {"shared": [[n, pieces[n]] for n in shared],
            "ops": {op: {"own": sum(pieces[n] for n in found if users[n] == 1),
                         "shared": [index[n] for n in found if users[n] > 1]}
                    for op, found in ops.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tflm", type=Path, required=True, help="a TFLM checkout")
    p.add_argument("--builds", default=",".join(list(BUILDS)[:3]))
    args = p.parse_args(argv)
    table = json.loads(CODE_SIZES.read_text()) if CODE_SIZES.is_file() else {"builds": {}}
    for name in args.builds.split(","):
        build = TflmBuild(BuildSpec(args.tflm.resolve(), *BUILDS[name]))
        table["builds"][name] = measure_build(args.tflm, name)
        table["tflm"] = build.source
        table["toolchain"] = build.toolchain.version
        table["image"] = build.firmware_image
        table["how"] = ("benchmarks/kernel_code_sizes.py: the export's example linked with "
                        "an empty op resolver (base, without the model's bytes) and with each "
                        "resolver method alone (the kernel: its image minus the base)")
        write_atomic(CODE_SIZES, json.dumps(table, sort_keys=True, separators=(",", ":"))
                     + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
