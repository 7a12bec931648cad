"""The ``devicefit.conversion`` metadata entry: how a ``.tflite`` was made, stored inside it so
``simulate`` can show it next to the numbers."""

from __future__ import annotations

import json
from typing import Any

from devicefit.simulator.read import writer

METADATA_NAME = "devicefit.conversion"
FORMAT_VERSION = 1


def embed(model_bytes: bytes, settings: dict[str, Any]) -> bytes:
    """Return ``model_bytes`` with the conversion settings as a JSON metadata entry."""
    # Unset options are left out: every byte here is flash on the device.
    payload = {"format_version": FORMAT_VERSION,
               **{k: v for k, v in settings.items() if v not in (None, False, 0, [], {})}}
    data = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return writer.add_metadata(model_bytes, METADATA_NAME, data)


def read(model_bytes: bytes) -> dict[str, Any] | None:
    """The settings stored by :func:`embed`, or None for a model devicefit did not convert."""
    raw = writer.read_metadata(model_bytes).get(METADATA_NAME)
    return None if raw is None else json.loads(raw.decode("utf-8"))
