"""What every sparsity kind provides: its spec (a frozen dataclass), how flags and YAML
build it, and the typed outcome of applying it (:class:`SparsityOutcome`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from devicefit.sdk.types import Progress
from devicefit.simulator.profile_types import Profile

if TYPE_CHECKING:
    from devicefit.sdk.convert.data import Dataset
    from devicefit.sdk.convert.finetune import FineTuneResult
    from devicefit.sdk.convert.sparsity.readback import WeightSparsity


@dataclass
class PrunedLayer:
    name: str
    op: str
    before: int
    after: int


@dataclass(frozen=True)
class Training:
    """The fine-tuning that follows pruning (``data`` None: prune only)."""

    data: Dataset | None = None
    epochs: int = 0
    progress: Progress | None = None
    #: Replaces the loss chosen from the labels (distillation).
    loss: Any = None


@dataclass
class SparsityOutcome:
    """What applying a sparsity kind did; crosses the conversion process as a dict."""

    #: Layers whose channels were removed (channel pruning).
    pruned_layers: list[PrunedLayer] = field(default_factory=list)
    #: Layers left dense, and why (N:M).
    skipped: dict[str, str] = field(default_factory=dict)
    fine_tune: list[FineTuneResult] = field(default_factory=list)
    #: Fractions removed after each pruning stage (channel pruning).
    prune_stages: list[float] | None = None
    #: Layers masked (N:M): the written file must show the pattern in as many tensors.
    masks: int = 0

    def merged(self, other: SparsityOutcome) -> SparsityOutcome:
        """This outcome followed by ``other`` (a second kind applied after this one)."""
        return SparsityOutcome(
            pruned_layers=self.pruned_layers + other.pruned_layers,
            skipped={**self.skipped, **other.skipped}, fine_tune=self.fine_tune + other.fine_tune,
            prune_stages=other.prune_stages or self.prune_stages, masks=self.masks + other.masks)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SparsityOutcome:
        from devicefit.sdk.convert.finetune import FineTuneResult

        return cls(pruned_layers=[PrunedLayer(**p) for p in data.get("pruned_layers", [])],
                   skipped=dict(data.get("skipped", {})),
                   fine_tune=[FineTuneResult(**f) for f in data.get("fine_tune", [])],
                   prune_stages=data.get("prune_stages"), masks=int(data.get("masks", 0)))


class SparsitySpec(Protocol):
    """One kind's settings (``NMPattern``, ``ChannelRatio``)."""

    kind: ClassVar[str]

    def option_value(self) -> Any:
        """The value of the kind's flag / ``convert()`` keyword that builds this spec."""

    def to_mapping(self) -> dict[str, Any]:
        """The YAML form, ``kind`` included."""

    def settings(self) -> dict[str, Any]:
        """The conversion-metadata keys this kind sets."""

    def fits(self, profile: Profile) -> None:
        """Raise a UsageError if the profile allows the kind but not these settings."""

    def apply(self, model: Any, training: Training) -> tuple[Any, SparsityOutcome]:
        """The sparse (and fine-tuned) Keras model; never changes ``model`` in place."""

    def group_pattern(self) -> Any:
        """The N:M pattern the read-back checks group by group, or None."""

    def check_written(self, weights: list[WeightSparsity], outcome: SparsityOutcome) -> None:
        """Raise if the written weights do not show what :meth:`apply` did."""


@dataclass(frozen=True)
class SparsityKind:
    """A registered kind: the name profiles list in ``sparsity.kinds`` and how to build it."""

    name: str
    #: ``convert()``'s keyword and the CLI option's dest.
    option: str
    flag: str
    metavar: str
    help: str
    #: The flag's value → spec (a UsageError naming the flag when it is wrong).
    parse: Callable[[Any], SparsitySpec]
    #: YAML keys under ``sparsity:`` besides ``kind``, → what each takes.
    keys: Mapping[str, str]
    #: The YAML mapping → spec; ValueError with the reason when a value is wrong.
    from_mapping: Callable[[Mapping[str, Any]], SparsitySpec]
    #: argparse ``type`` of the flag.
    flag_type: Callable[[str], Any] = str
    #: Place among the kinds in help and messages.
    order: int = 100


def clone_model(model: Any) -> Any:
    """A copy of a Keras model with the same weights."""
    import keras

    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    return clone
