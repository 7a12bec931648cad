"""How big a graph devicefit analyses before it stops with a message instead of working on.

A model file from anywhere can be small and still describe an enormous amount of work: a few
KB of IF/WHILE subgraphs that call each other twice per level execute 2**depth operators,
and a file of millions of one-line operators parses for minutes. Every analysis is near
linear in operators and tensors, so one bound on operators (in the file and as executed,
control flow expanded) keeps every command's time and memory bounded; tensors get ten per
operator. Raise it with ``devicefit --max-ops N`` (or ``$DEVICEFIT_MAX_OPS``; the variable also
reaches the worker processes of ``check --jobs``).
"""

from __future__ import annotations

import os

from devicefit.simulator.errors import InputError, UsageError

DEFAULT_MAX_OPS = 100_000
ENV_MAX_OPS = "DEVICEFIT_MAX_OPS"
TENSORS_PER_OP = 10


def max_ops() -> int:
    """The operator bound now in force."""
    raw = os.environ.get(ENV_MAX_OPS)
    if not raw:
        return DEFAULT_MAX_OPS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"${ENV_MAX_OPS}={raw!r}: expected a number of operators >= 1")
    return value


def check_ops(what: str, count: int, kind: str = "operators") -> None:
    """Refuse ``count`` operators (or, with ``kind="tensors"``, tensors) over the bound."""
    limit = max_ops() * (TENSORS_PER_OP if kind == "tensors" else 1)
    if count > limit:
        raise InputError(f"{what}: {count:,} {kind}, more than devicefit analyses "
                         f"({limit:,}); raise the bound with 'devicefit --max-ops N' if the "
                         f"model is real")
