"""The flash a TFLM firmware needs beside the model, estimated without building it.

``code_sizes.json`` holds, per core and kernel library, what TFLM's core with the C runtime
it pulls in takes in a linked image (the base), and for each kernel the input sections
(functions and data) it adds to that image, with their bytes — measured once by
``benchmarks/kernel_code_sizes.py`` from images linked as ``--target-build`` links them
(:mod:`.firmware`): the bytes no other kernel pulls in, and the sections it shares with
others, named. The estimate for a model is the base plus the union of the sections of the
kernels its op resolver registers: code two kernels share counts once. How far it is
from the measured image of real models is in docs/benchmarks.md "Exported and verified as
exported". A build the table does not hold has no estimate here (the profile's
``runtime.code_size`` is used).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.targets.tflm.export import op_key

CODE_SIZES = Path(__file__).with_name("code_sizes.json")


@cache
def _table() -> dict[str, Any]:
    if not CODE_SIZES.is_file():
        return {"builds": {}}
    table: dict[str, Any] = json.loads(CODE_SIZES.read_text())
    return table


def code_size(model: Model, profile: Profile) -> tuple[int, str] | None:
    """TFLM's code for ``model`` on ``profile``'s core and kernels, and what it rests on;
    None when the table has no such build."""
    table = _table()
    name = f"{profile.device.cpu}-{profile.runtime.kernels}"
    build = table["builds"].get(name)
    if build is None:
        return None
    shared = [size for _, size in build["shared"]]
    ops: dict[str, dict[str, Any]] = build["ops"]
    keys = sorted({op_key(op) for op in model.op_types})
    unknown = [k for k in keys if k not in ops]
    union = set().union(*(ops[k]["shared"] for k in keys if k in ops))
    # an operator without measured sections (a custom op, a kernel this build lacks)
    # counts as the largest kernel measured, alone: an estimate must not come out under
    largest = max((op["own"] + sum(shared[i] for i in op["shared"]) for op in ops.values()),
                  default=0)
    total = (build["base_bytes"] + sum(ops[k]["own"] for k in keys if k in ops)
             + sum(shared[i] for i in union) + largest * len(unknown))
    basis = f"TFLM core + {len(keys)} kernel(s) as linked for {name}"
    if unknown:
        basis += f"; {', '.join(unknown)} unmeasured: {largest:,} B each"
    return total, basis
