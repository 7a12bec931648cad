"""The compression space a profile allows, and one point in it (a :class:`Candidate`).

Dimensions: the quantization scheme (those the profile's runtime takes), the share of
channels removed (when the profile allows channel pruning), N:M sparsity (only when the
runtime has kernels that use it: ``n:m`` in ``profile.sparsity.kinds``) and PTQ vs
quantization-aware training (int8 only: QAT matches the converter's int8 rounding).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from simulator.profiles import Profile

#: Schemes fit tries, smallest weights first (the order breaks ties in the report).
SCHEMES = ("int8", "int16x8", "float16", "dynamic", "float32")
#: Channel-pruning ratios tried: eighths, so that a search of a few dozen trials covers them.
PRUNE_RATIOS = (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875)


@dataclass(frozen=True)
class Candidate:
    scheme: str
    prune: float = 0.0
    nm: str | None = None
    qat: bool = False

    @property
    def needs_training(self) -> bool:
        return self.prune > 0 or self.nm is not None or self.qat

    @property
    def structure(self) -> tuple[str, str | None]:
        """What besides ``prune`` decides the file's size, arena and op set."""
        return self.scheme, self.nm

    def label(self) -> str:
        parts = [self.scheme, "QAT" if self.qat else "PTQ"]
        if self.prune:
            parts.append(f"prune {self.prune:.3g}")
        if self.nm:
            parts.append(self.nm)
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(scheme=data["scheme"], prune=float(data["prune"]), nm=data.get("nm"),
                   qat=bool(data.get("qat")))


@dataclass(frozen=True)
class SearchSpace:
    schemes: tuple[str, ...]
    prune_ratios: tuple[float, ...]
    nm_patterns: tuple[str | None, ...]
    qat: bool

    def suggest(self, trial: Any) -> Candidate:
        """One candidate from an optuna trial (QAT is asked only where it applies)."""
        scheme = trial.suggest_categorical("scheme", list(self.schemes))
        prune = trial.suggest_categorical("prune", list(self.prune_ratios))
        nm = trial.suggest_categorical("nm", list(self.nm_patterns))
        qat = False
        if self.qat and scheme == "int8" and nm is None:
            qat = trial.suggest_categorical("qat", [False, True])
        return Candidate(scheme, float(prune), nm, bool(qat))

    def candidates(self) -> list[Candidate]:
        out = []
        for scheme in self.schemes:
            for prune in self.prune_ratios:
                for nm in self.nm_patterns:
                    out.append(Candidate(scheme, prune, nm))
                    if self.qat and scheme == "int8" and nm is None:
                        out.append(Candidate(scheme, prune, nm, True))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"schemes": list(self.schemes), "prune_ratios": list(self.prune_ratios),
                "nm_patterns": list(self.nm_patterns), "qat": self.qat,
                "size": len(self.candidates())}


def space_for(profile: Profile, *, can_train: bool, can_prune: bool) -> SearchSpace:
    """What ``profile`` lets fit try; without training data only post-training schemes."""
    schemes = tuple(s for s in SCHEMES if s in profile.quantization.schemes)
    if profile.runtime.name == "edgetpu":
        schemes = ("int8",)
    kinds = profile.sparsity.kinds
    prune = PRUNE_RATIOS if can_train and can_prune and "channel" in kinds else (0.0,)
    nm: tuple[str | None, ...] = (None,)
    if can_train and can_prune and "n:m" in kinds and profile.sparsity.n_m:
        nm = (None, profile.sparsity.n_m)
    return SearchSpace(schemes, prune, nm, qat=can_train and "int8" in schemes)
