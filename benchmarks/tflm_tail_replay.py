"""TFLM's arena tail on a 32-bit build, replayed allocation by allocation (issue 47).

devicefit's tail estimate (``simulator/targets/tflm/tail.py``) rounds each group of
persistent allocations up to 16 bytes, so it errs high by a few dozen bytes. This replays
them instead in the order TFLM makes them (micro_allocator.cc, micro_interpreter.cc
``AllocateTensors``), each placed down from the arena's 16-byte aligned end at its own
alignment, with the sizes ``tail.py`` holds: the allocator's objects, the builtin data
allocator and subgraph table, the eval tensors and nodes, the parsed builtin options, every
kernel's Init data, every kernel's Prepare buffers, the scratch-buffer handles, the
variable tensors, then each I/O pointer array followed by its tensors. Models with resource
variables are not replayed.

With the RecordingMicroAllocator's objects it gives the tail the target-build harness
records; with an application's plain MicroAllocator the tail a firmware's arena holds.

    .venv/bin/python benchmarks/tflm_tail_replay.py      # against tests/data/tflm_builds/
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: sizeof the allocator objects ``MicroAllocator::Create(arena, size)`` places first
#: (SingleArenaBufferAllocator, GreedyMemoryPlanner, MicroAllocator), and those of the
#: RecordingMicroAllocator the harness measures with (arm-none-eabi-g++ 12.2 -mcpu=cortex-m4,
#: TFLM 90b983c2; tail.py ``_BASE_32``, target_truth.py ``RECORDING_BYTES``).
PLAIN = (36, 44, 36)
RECORDING = (52, 44, 124)
#: MicroArenaBufferAlignment(): every kernel allocation, variable and I/O pointer array.
ALIGN = 16


def replayed_tail(model: Any, *, kernels: str, n_scratch: int, layout: str,
                  allocator_objects: tuple[int, ...] = PLAIN) -> int | None:
    """The tail of ``model`` on a 32-bit build (None: resource variables, not replayed)."""
    from devicefit.simulator.plan.lifetimes import align_up, tflm_tensor_bytes
    from devicefit.simulator.targets.tflm.tail import (
        kernel_allocations,
        options_struct,
        struct_sizes,
    )

    sizes = struct_sizes(4)
    sgs = model.subgraphs
    ops = [(sg, op) for sg in sgs for op in sg.operators]
    if any(op.op_name == "VAR_HANDLE" for _, op in ops):
        return None
    steps: list[tuple[int, int]] = [(n, 4) for n in allocator_objects]
    steps += [(8, 4), (8 * len(sgs), 4)]
    steps += [(sizes["eval_tensor"] * len(sg.tensors), 4) for sg in sgs]
    steps += [(sizes["node"] * len(sg.operators), 4) for sg in sgs]
    steps += [p for _, op in ops if (p := options_struct(op, layout))[0]]
    asked = [kernel_allocations(sg, op, 4, kernels) for sg, op in ops]
    steps += [(opdata, ALIGN) for opdata, _ in asked if opdata]
    steps += [(n, ALIGN) for _, prepare in asked for n in prepare]
    steps += [(4 * n_scratch, 4)] if n_scratch else []
    steps += [(tflm_tensor_bytes(t), ALIGN) for sg in sgs for t in sg.tensors if t.is_variable]
    main = model.main
    for refs in (main.inputs, main.outputs):
        steps.append((4 * len(refs), ALIGN))
        for t in (main.tensors[r] for r in refs if r >= 0):
            steps.append((sizes["tensor"], 4))
            q = t.quantization
            if q is not None and q.scale:
                steps += [(sizes["affine_quant"], 4), (4 + 4 * len(q.zero_point or q.scale), 4)]
    used = 0
    for size, alignment in steps:
        used = align_up(used + size, alignment)
    return used


def replay(path: Path, profile: Any, allocator_objects: tuple[int, ...] = PLAIN) -> int | None:
    """:func:`replayed_tail` of the model at ``path`` on ``profile``'s 32-bit build."""
    from devicefit.simulator.plan.planners import plan_memory
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.targets.tflm.planner import kernel_flavour, options_layout

    model = read_model(path)
    plan = plan_memory(model, profile)
    return replayed_tail(model, kernels=kernel_flavour(profile),
                         n_scratch=sum(1 for b in plan.buffers if b.kind == "scratch"),
                         layout=options_layout(profile), allocator_objects=allocator_objects)


def main() -> int:
    from benchmarks.target_truth import build_config, build_profile, load_records, loader

    load = loader()
    for build, record in load_records(ROOT / "tests" / "data" / "tflm_builds").items():
        profile = build_profile(build_config(build))
        off: Counter[int | None] = Counter()
        for entry in record["models"]:
            data = load(entry) if entry.get("status") == "ok" else None
            if data is None or hashlib.sha256(data).hexdigest() != entry["sha256"]:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / entry["name"]
                path.write_bytes(data)
                tail = replay(path, profile, RECORDING)
            off[None if tail is None else tail - entry["tail"]] += 1
            if tail != entry["tail"]:
                print(f"  {build} {entry['name']}: replayed {tail} B, recorded {entry['tail']} B")
        others = [f"{'not replayed' if k is None else f'{k:+} B'}: {n}"
                  for k, n in off.items() if k != 0]
        print(f"{build}: {off[0]} of {sum(off.values())} recorded tails replayed exactly"
              + (f" ({', '.join(others)})" if others else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
