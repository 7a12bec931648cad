"""Structured sparsity for Keras 3 models, without tensorflow-model-optimization.

One module per kind, each defining ``KIND`` (a :class:`SparsityKind`) and its spec
dataclass; :data:`KINDS` holds every module of this package that defines one, keyed by the
name profiles use in ``sparsity.kinds`` — a new kind is one module here:

* ``n:m`` (:mod:`.nm`) — N of every M input-channel weights kept;
* ``channel`` (:mod:`.channel`) — filters/units removed, the model rebuilt smaller.

Neither is ever written in TFLite's sparse tensor encoding (``Optimize.EXPERIMENTAL_SPARSITY``):
TFLM has no DENSIFY kernel and the Edge TPU compiler rejects it, and XNNPACK runs it only for
a narrow pattern; the zeros stay in a dense tensor, where they buy a smaller compressed
download. :mod:`.readback` reads the written file's weights back for the report.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from devicefit.sdk.convert.sparsity.base import (
    PrunedLayer,
    SparsityKind,
    SparsityOutcome,
    SparsitySpec,
    Training,
)
from devicefit.sdk.convert.sparsity.channel import (
    ChannelPruneResult,
    ChannelPruning,
    ChannelRatio,
    prunable_groups,
    prune_channels,
    prune_in_stages,
)
from devicefit.sdk.convert.sparsity.nm import (
    NMPattern,
    apply_masks,
    keep_masks,
    nm_mask,
    nm_masks,
    parse_nm,
)
from devicefit.sdk.convert.sparsity.readback import WeightSparsity, tflite_weight_sparsity
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.target import target_for

__all__ = [
    "KINDS", "ChannelPruneResult", "ChannelPruning", "ChannelRatio", "NMPattern", "PrunedLayer",
    "SparsityKind", "SparsityOutcome", "SparsitySpec", "Training", "WeightSparsity",
    "apply_masks", "check_allowed", "from_mapping", "from_options", "keep_masks", "nm_mask",
    "nm_masks", "parse_nm", "prunable_groups", "prune_channels", "prune_in_stages",
    "tflite_weight_sparsity",
]


def _discover() -> dict[str, SparsityKind]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        kind = getattr(module, "KIND", None)
        if isinstance(kind, SparsityKind):
            found.append(kind)
    return {k.name: k for k in sorted(found, key=lambda k: (k.order, k.name))}


#: Every sparsity kind, keyed by the name profiles list in ``sparsity.kinds``.
KINDS: dict[str, SparsityKind] = _discover()


def check_allowed(profile: Profile, kind: str, spec: SparsitySpec | None = None) -> None:
    """Refuse a sparsity kind the profile's runtime cannot use; never apply it silently."""
    kinds = profile.sparsity.kinds
    if kind not in kinds:
        why = target_for(profile).sparse_weights or \
            f"runtime {profile.runtime.name} cannot use it"
        raise UsageError(f"profile {profile.name} does not allow {kind} sparsity ({why}; "
                         f"it allows: {', '.join(k for k in kinds if k != 'none') or 'none'})")
    if spec is not None:
        spec.fits(profile)


def from_options(options: Mapping[str, Any]) -> SparsitySpec | None:
    """The spec of the one kind whose option (``convert()`` keyword / CLI dest) is set."""
    given = [(k, options[k.option]) for k in KINDS.values() if options.get(k.option) is not None]
    if len(given) > 1:
        raise UsageError("choose one of " + " and ".join(f"{k.flag} {k.metavar}" for k, _ in given)
                         + ", not both")
    if not given:
        return None
    kind, value = given[0]
    return kind.parse(value)


def from_mapping(data: Any) -> SparsitySpec:
    """The spec a YAML ``sparsity:`` mapping describes; ValueError naming the bad key."""
    if not isinstance(data, Mapping):
        raise ValueError("expected a mapping with 'kind' (" + ", ".join(KINDS) + ")")
    # Only a name can be one (a YAML list or mapping is unhashable: no dict lookup).
    kind = KINDS.get(data["kind"]) if isinstance(data.get("kind"), str) else None
    if kind is None:
        raise ValueError(f"'kind' must be one of {', '.join(KINDS)}, not {data.get('kind')!r}")
    unknown = sorted(set(data) - {"kind", *kind.keys})
    if unknown:
        raise ValueError(f"unknown key '{unknown[0]}' for kind {kind.name} (allowed: "
                         + ", ".join(["kind", *kind.keys]) + ")")
    return kind.from_mapping(data)
