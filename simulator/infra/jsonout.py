"""JSON that strict parsers accept.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` for non-finite floats, which
no JSON standard allows: ``jq``, JavaScript's ``JSON.parse`` and Go reject the whole file. A
non-finite figure arises from valid but absurd input (``cost_model: {op_overhead: 1e308ms}``
overflows when summed); it is written as ``null``, JSON's "no number", like every other figure
devicefit cannot give.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float inside it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **options: Any) -> str:
    """:func:`json.dumps` of :func:`finite` ``value`` (it can then never write NaN/Infinity)."""
    return json.dumps(finite(value), allow_nan=False, **options)
