"""Write ``simulator/targets/tflm/resolver_methods.json``: the op resolver's method of each
operator, read from a TFLM checkout's ``micro_mutable_op_resolver.h``.

``devicefit export`` names these methods when the user gives no checkout of their own
(with ``--tflm DIR`` it reads that checkout's header instead)::

    .venv/bin/python benchmarks/resolver_table.py --tflm ~/tflite-micro [--commit SHA]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.infra.fileio import write_atomic  # noqa: E402
from devicefit.simulator.targets.tflm.checkout import (  # noqa: E402
    RESOLVER_HEADER,
    resolver_methods,
)
from devicefit.simulator.targets.tflm.export import RESOLVER_TABLE  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tflm", type=Path, required=True, help="a TFLM checkout")
    p.add_argument("--commit", default=None, help="its commit (read with git when not given)")
    args = p.parse_args(argv)
    commit = args.commit or subprocess.run(
        ["git", "-C", str(args.tflm), "rev-parse", "HEAD"], capture_output=True, text=True,
        check=True).stdout.strip()
    methods = resolver_methods((args.tflm / RESOLVER_HEADER).read_text())
    write_atomic(RESOLVER_TABLE, json.dumps({"tflm_commit": commit, "methods": methods},
                                            indent=1, sort_keys=True) + "\n")
    print(f"{len(methods)} operators → {RESOLVER_TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
