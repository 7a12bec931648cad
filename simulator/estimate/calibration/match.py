"""Is this log the log of this model? Op count and op types in order, sha256 when given."""

from __future__ import annotations

import hashlib
from pathlib import Path

from devicefit.simulator.errors import InputError
from devicefit.simulator.estimate.calibration.logs import OpTime
from devicefit.simulator.read.model import Model


def _name(op: str) -> str:
    # TFLM tags a custom op with its custom name; devicefit's reader writes CUSTOM:<name>.
    return op.removeprefix("CUSTOM:")


def check_run(model: Model, run: tuple[OpTime, ...], source: str) -> None:
    """One clear error at the first op the log and the model disagree on."""
    ops = model.main.operators
    if len(run) != len(ops):
        raise InputError(f"{source}: the log has {len(run)} operators per run, the model "
                         f"{len(ops)}: not the log of this model")
    for op, timed in zip(ops, run, strict=True):
        if _name(op.op_name) != _name(timed.op):
            raise InputError(f"{source}: op {op.index} is {op.op_name} in the model but "
                             f"{timed.op} in the log: not the log of this model")


def check_sha256(path: Path, expected: str) -> None:
    """The model file is the one the board ran (the user says which by its sha256)."""
    found = hashlib.sha256(path.read_bytes()).hexdigest()
    if found != expected.strip().lower():
        raise InputError(f"{path}: sha256 {found} is not the {expected} the log was made with")
