"""What the user asks ``adapt`` to train, and the request the children work from."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from devicefit.simulator.errors import UsageError

#: ``--update`` kinds. ``sparse`` without a count updates this many weight tensors;
#: ``auto`` lets devicefit choose one of the others under the training-memory budget.
UPDATE_KINDS = ("biases", "last", "sparse", "auto")
SPARSE_DEFAULT = 2
UPDATE_HELP = ("what to train: 'biases' (every bias and BatchNorm shift, TinyTL's bias-only "
               "update), 'last:K' (all weights of the last K layers that have weights), "
               "'sparse[:K]' (the K weight tensors of largest |gradient| x |weight| on the "
               f"adaptation data, MCUNetV3-style sparse update; K={SPARSE_DEFAULT} by default), "
               "'auto' (devicefit plans every choice, keeps those under the training-memory "
               "budget and picks the most accurate on a validation part of --data)")


@dataclass(frozen=True)
class Update:
    """``kind`` one of :data:`UPDATE_KINDS`; ``count`` K for ``last`` and ``sparse``."""

    kind: str
    count: int = 0

    @classmethod
    def parse(cls, text: str) -> Update:
        match = re.fullmatch(r"(biases|last|sparse|auto)(?::(\d+))?", text.strip())
        if match is None:
            raise UsageError(f"--update {text!r}: expected biases, last:K, sparse[:K] or auto")
        kind, count = match.group(1), match.group(2)
        if kind in ("biases", "auto"):
            if count is not None:
                raise UsageError(f"--update {kind} takes no count")
            return cls(kind)
        if kind == "last" and count is None:
            raise UsageError("--update last needs a count: last:K (the last K layers)")
        value = SPARSE_DEFAULT if count is None else int(count)
        if value < 1:
            raise UsageError(f"--update {kind}:{value}: K must be at least 1")
        return cls(kind, value)

    def __str__(self) -> str:
        return self.kind if self.kind in ("biases", "auto") else f"{self.kind}:{self.count}"


@dataclass(frozen=True)
class BuildRequest:
    """What the TensorFlow child needs to write the trainable model (JSON between them)."""

    model: str
    #: One model is written per update (``model-<i>.tflite``), in one TensorFlow process.
    updates: tuple[str, ...]
    batch: int
    learning_rate: float
    #: Store the frozen weights as int8 (dynamic-range quantization); float32 otherwise.
    int8_frozen: bool
    #: ``.npy`` of adaptation samples for the sparse update's ranking (first batches).
    rank_x: str
    rank_y: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
