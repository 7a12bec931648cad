"""The compression space a profile allows, and one point in it (a :class:`Candidate`).

Dimensions: the quantization scheme (those the profile's runtime takes), the share of
channels removed (when the profile allows channel pruning) for the whole model or per
prunable layer group, N:M sparsity (only when the
runtime has kernels that use it: ``n:m`` in ``profile.sparsity.kinds``) and PTQ vs
quantization-aware training (int8 only: QAT matches the converter's int8 rounding), and
int4 weights for int8 candidates where the profile's runtime takes them on some layer: on
every such layer, or on those the flash budget needs ("auto"; :mod:`sdk.fit.int4`). A QAT
candidate with 4-bit weights trains those layers on the int4 grid.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from devicefit.sdk.convert.sparsity import ChannelRatio, SparsitySpec, parse_nm
from devicefit.sdk.convert.spec import ConversionSpec
from devicefit.simulator.profile_types import Profile

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
    #: Per-group pruning ratios (group = its producer layers joined by "+"); when set, they
    #: replace ``prune`` for those groups.
    layers: tuple[tuple[str, float], ...] = ()
    #: "int4": the int8 candidate's weights at 4 bits where the runtime takes them; "auto":
    #: on as few of those layers as the flash budget needs, least accuracy lost per byte.
    weights: str = "int8"

    @property
    def pruned(self) -> bool:
        return self.prune > 0 or any(r > 0 for _, r in self.layers)

    @property
    def needs_training(self) -> bool:
        return self.pruned or self.nm is not None or self.qat

    def ratio_of(self, group: str) -> float:
        return dict(self.layers).get(group, self.prune)

    def layer_ratios(self) -> dict[str, float] | None:
        """Producer layer name → ratio, as ``sparsity.prune_channels`` takes it."""
        return ChannelRatio(self.prune, self.layers).layer_ratios() if self.layers else None

    def sparsity(self) -> tuple[SparsitySpec, ...]:
        """The sparsity kinds this candidate applies, in the order fit trains them."""
        kinds: list[SparsitySpec] = []
        if self.pruned:
            kinds.append(ChannelRatio(self.prune, self.layers))
        if self.nm:
            kinds.append(parse_nm(self.nm))
        return tuple(kinds)

    def spec(self, base: ConversionSpec) -> ConversionSpec:
        """The conversion this candidate asks for: ``base`` (what every trial shares) with
        its scheme, sparsity and weight bits."""
        return replace(base, scheme=self.scheme, sparsity=self.sparsity(), weights=self.weights)

    @property
    def structure(self) -> tuple[str, str | None, str]:
        """What besides ``prune`` decides the file's size, arena and op set."""
        return self.scheme, self.nm, self.weights

    def label(self) -> str:
        parts = [self.scheme, "QAT" if self.qat else "PTQ"]
        if self.layers:
            parts.append("prune " + ", ".join(f"{g} {r:.3g}" for g, r in self.layers))
        elif self.prune:
            parts.append(f"prune {self.prune:.3g}")
        if self.nm:
            parts.append(self.nm)
        if self.weights != "int8":
            parts.append(f"{self.weights} weights")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(scheme=data["scheme"], prune=float(data["prune"]), nm=data.get("nm"),
                   qat=bool(data.get("qat")),
                   layers=tuple((str(g), float(r)) for g, r in data.get("layers") or ()),
                   weights=str(data.get("weights") or "int8"))


@dataclass(frozen=True)
class SearchSpace:
    schemes: tuple[str, ...]
    prune_ratios: tuple[float, ...]
    nm_patterns: tuple[str | None, ...]
    qat: bool
    #: Prunable layer groups (producers joined by "+"); two or more allow per-layer ratios.
    groups: tuple[str, ...] = ()
    #: Weight bits of int8 candidates: ("int8", "int4"[, "auto"]) when the profile's runtime
    #: takes int4 on some layer of the model (auto with a flash budget); ``weights_note``
    #: says why not.
    weights: tuple[str, ...] = ("int8",)
    weights_note: str = ""

    def int4_for(self, scheme: str) -> bool:
        """Whether a candidate of ``scheme`` may have 4-bit weights (int4 keeps int8
        activations; QAT or not: QAT then trains the 4-bit layers on the int4 grid)."""
        return "int4" in self.weights and scheme == "int8"

    @property
    def per_layer(self) -> bool:
        return len(self.groups) > 1 and len(self.prune_ratios) > 1

    def suggest(self, trial: Any) -> Candidate:
        """One candidate from an optuna trial (QAT is asked only where it applies)."""
        scheme = trial.suggest_categorical("scheme", list(self.schemes))
        prune = float(trial.suggest_categorical("prune", list(self.prune_ratios)))
        nm = trial.suggest_categorical("nm", list(self.nm_patterns))
        qat = False
        if self.qat and scheme == "int8" and nm is None:
            qat = trial.suggest_categorical("qat", [False, True])
        layers: tuple[tuple[str, float], ...] = ()
        if self.per_layer and trial.suggest_categorical("per_layer", [False, True]):
            layers = tuple((g, float(trial.suggest_categorical(f"prune[{g}]",
                                                                list(self.prune_ratios))))
                           for g in self.groups)
            if len({r for _, r in layers}) == 1:  # one ratio everywhere: the uniform one
                prune, layers = layers[0][1], ()
            else:
                prune = 0.0
        weights = "int8"
        if self.int4_for(scheme):
            weights = trial.suggest_categorical("weights", list(self.weights))
        return Candidate(scheme, prune, nm, bool(qat), layers, weights)

    @property
    def size(self) -> int:
        """Distinct candidates: uniform ratios, plus per-layer mixes of them."""
        uniform = len(self.candidates())
        if not self.per_layer:
            return uniform
        mixes = len(self.prune_ratios) ** len(self.groups) - len(self.prune_ratios)
        return uniform + mixes * (uniform // len(self.prune_ratios))

    def candidates(self) -> list[Candidate]:
        out = []
        for scheme in self.schemes:
            for prune in self.prune_ratios:
                for nm in self.nm_patterns:
                    widths = self.weights if self.int4_for(scheme) else ("int8",)
                    qat = (False, True) if self.qat and scheme == "int8" and nm is None \
                        else (False,)
                    out += [Candidate(scheme, prune, nm, q, weights=w) for q in qat
                            for w in widths]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"schemes": list(self.schemes), "prune_ratios": list(self.prune_ratios),
                "nm_patterns": list(self.nm_patterns), "qat": self.qat,
                "groups": list(self.groups), "weights": list(self.weights),
                "weights_note": self.weights_note, "size": self.size}


def space_for(profile: Profile, *, can_train: bool, can_prune: bool,
              groups: tuple[str, ...] = ()) -> SearchSpace:
    """What ``profile`` lets fit try; without training data only post-training schemes.
    ``groups`` are the model's prunable layer groups (for per-layer ratios)."""
    # The profile loader keeps its schemes within the target's (``Target.quant_schemes``).
    schemes = tuple(s for s in SCHEMES if s in profile.quantization.schemes)
    kinds = profile.sparsity.kinds
    prune = PRUNE_RATIOS if can_train and can_prune and "channel" in kinds else (0.0,)
    nm: tuple[str | None, ...] = (None,)
    if can_train and can_prune and "n:m" in kinds and profile.sparsity.n_m:
        nm = (None, profile.sparsity.n_m)
    return SearchSpace(schemes, prune, nm, qat=can_train and "int8" in schemes,
                       groups=groups if len(prune) > 1 else ())
