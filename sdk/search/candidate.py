"""One point of the architecture search: a family and its parameters, and the bits of its
weights (int8, or int4 where the profile's runtime takes them), with a stable label and hash
(the same candidate gets the same key on every machine and run)."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devicefit.sdk.search.families import Params, family, params_for, params_from_dict


@dataclass(frozen=True)
class ArchCandidate:
    family: str
    params: Params
    #: "int4": written with 4-bit weights on the layers the profile's runtime takes them
    #: (:func:`sdk.convert.lowbit.int4_weights`), int8 on the others; "auto": on as few of
    #: them as the flash budget needs (the screen counts bytes; the trained survivor is
    #: converted by :func:`sdk.convert.lowbit.int4_under_budget`).
    weights: str = "int8"

    @property
    def key(self) -> str:
        """12 hex digits of the SHA-256 of the canonical JSON of :meth:`to_dict`."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def label(self) -> str:
        """Family, input, width, depth, and kernel/expansion where the family has them."""
        p, takes = self.params, family(self.family).takes
        parts = [self.family, "x".join(map(str, p.input_shape)), f"w{p.width:g}",
                 "d" + "-".join(map(str, p.depth))]
        parts += [f"k{p.kernel}"] * ("kernel" in takes) + [f"e{p.expansion}"] * (
            "expansion" in takes)
        parts += [f"{self.weights} weights"] * (self.weights != "int8")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        # An int8 candidate's dict (and key) is the one it had before weights were chosen.
        return {"family": self.family, "params": self.params.to_dict(),
                **({"weights": self.weights} if self.weights != "int8" else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArchCandidate:
        return cls(data["family"], params_from_dict(data["family"], data["params"]),
                   str(data.get("weights") or "int8"))


def candidate(family: str, **params: Any) -> ArchCandidate:
    """``family`` with ``params`` over its defaults (a UsageError for a bad one)."""
    return ArchCandidate(family, params_for(family, params))


def grid(family: str, axes: Mapping[str, Sequence[Any]], **fixed: Any) -> list[ArchCandidate]:
    """Every combination of ``axes`` (parameter → values), with ``fixed`` parameters, in
    the order of the axes (the last one varies fastest)."""
    names = list(axes)
    combos: Iterable[tuple[Any, ...]] = itertools.product(*(axes[n] for n in names))
    return [candidate(family, **fixed, **dict(zip(names, combo, strict=True)))
            for combo in combos]
