"""``devicefit export MODEL --profile P -o DIR``: the firmware component of what was checked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from devicefit.sdk.options import positive_seconds, profile_inputs
from devicefit.simulator.errors import UsageError
from devicefit.simulator.infra.units import format_bytes

EXAMPLE = "example: devicefit export digits.tflite --profile stm32l4r5-cortex-m4 -o digits_fw"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        description="Judge a .tflite on a TFLite-Micro profile as simulate does and, when it "
                    "passes, write the firmware component a TFLM project compiles: the model "
                    "as an aligned const array, an op resolver registering exactly its "
                    "operators, the tensor arena sized as devicefit judged it, a header with "
                    "the model's sha256 and its inputs and outputs, a one-inference example, "
                    "a Makefile (TFLM's) and a CMakeLists.txt. With --target-build the files "
                    "are also compiled for the profile's core and kernels and run under QEMU "
                    "as exported. Exit 0 written, 1 the verdict fails (nothing written), 2 "
                    "bad input.",
        epilog=EXAMPLE)
    p.add_argument("model", help="the .tflite model file")
    p.add_argument("--profile", required=True, metavar="NAME",
                   help="a TFLite-Micro device profile name or .yaml")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="the folder to write (new, empty, or an earlier export to replace)")
    p.add_argument("--name", default=None,
                   help="C name of the model in the files (default: the model file's name)")
    p.add_argument("--arena-margin", type=int, default=0, metavar="BYTES",
                   help="bytes added to the arena devicefit judged (default 0)")
    p.add_argument("--tflm", default=None, metavar="TFLM_DIR",
                   help="your TFLM checkout: its op resolver's method names (default: those "
                        "of the TFLM version devicefit is checked against)")
    p.add_argument("--target-build", default=None, metavar="TFLM_DIR",
                   help="also compile the export with this TFLM checkout for the profile's "
                        "core and kernels and run it under qemu-arm: the arena constant must "
                        "start, the outputs must agree with the host wheel's, flash is "
                        "measured from the linked image (see simulate --target-build)")
    p.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="S",
                   help="seconds before a hanging run is killed (default 60)")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="answer op support from devicefit's tables only")
    p.add_argument("--json", action="store_true", help="print the export's manifest as JSON")
    p.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from devicefit.sdk.export import export_model
    from devicefit.simulator.infra.fileio import check_output_folder
    from devicefit.simulator.profiles import load_profile

    if args.tflm and args.target_build and \
            Path(args.tflm).resolve() != Path(args.target_build).resolve():
        raise UsageError("--tflm and --target-build name two checkouts; give one")
    profile = load_profile(args.profile, args.profiles_dir)
    out = Path(args.output)
    check_output_folder("-o", out, [("model", args.model), *profile_inputs(profile),
                                    ("TFLM checkout", args.tflm or args.target_build)])
    done = export_model(args.model, profile, out, name=args.name, margin=args.arena_margin,
                        tflm=args.tflm, target_build=args.target_build,
                        timeout_s=args.timeout, probe=args.probe)
    manifest = done.manifest
    if args.json:
        print(json.dumps(manifest, indent=1))
        return 0
    model, arena, build = manifest["model"], manifest["arena"], manifest["build"]
    verified = manifest["verified"]
    print(f"wrote {out}/: {len(done.files)} files for {manifest['profile']} "
          f"({build['core']}, {build['kernels']} kernels)")
    print(f"  model   {format_bytes(model['bytes'])} as {model['symbol']} "
          f"(sha256 {model['sha256'][:12]})")
    print(f"  arena   {format_bytes(arena['bytes'])} as {arena['symbol']} = start arena "
          f"{format_bytes(arena['start_arena_bytes'])} ({arena['basis']}) + margin "
          f"{format_bytes(arena['margin_bytes'])}")
    print(f"  ops     {len(manifest['ops'])}: " + ", ".join(o["op"] for o in manifest["ops"])
          + f" (method names: {manifest['resolver_methods_from']})")
    if verified is None:
        print("  target  not built here: add --target-build TFLM_DIR to compile and run it "
              "as exported under QEMU")
    else:
        flash = verified["flash"]
        print(f"  target  verified as exported on {verified['build']}: arena constant "
              f"started (smallest working {format_bytes(verified['smallest_arena_bytes'])})"
              + (f", flash {format_bytes(flash['total_bytes'])} measured" if flash else ""))
    print(f"next: link your firmware, then devicefit link-check firmware.map --export {out}")
    return 0
