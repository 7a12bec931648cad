"""``n:m`` sparsity: magnitude pruning of Conv/Dense kernels where every group of M consecutive
input channels keeps its N largest weights.

TFLite stores conv weights as (out, h, w, in) and fully-connected weights as (out, in), so the
groups are contiguous in the written file; :meth:`NMPattern.check_written` checks them there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from devicefit.sdk.convert.sparsity.base import SparsityKind, SparsityOutcome, Training, clone_model
from devicefit.sdk.convert.sparsity.readback import WeightSparsity
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile

#: What ``convert`` says after an N:M conversion (issue 47: a technique that saves nothing is
#: said to save nothing).
SAVES_NOTHING = ("N:M sparsity saves no bytes and no time on any target devicefit supports: "
                 "the zeros are stored dense (TFLite's sparse encoding is never written: TFLM "
                 "and the Edge TPU cannot read it), no kernel these profiles run skips them, "
                 "and devicefit's latency estimate does not count them; --prune-channels or "
                 "--weights int4 make the model smaller")


@dataclass(frozen=True)
class NMPattern:
    n: int
    m: int

    kind: ClassVar[str] = "n:m"

    def __str__(self) -> str:
        return f"{self.n}:{self.m}"

    def option_value(self) -> str:
        return str(self)

    def to_mapping(self) -> dict[str, Any]:
        return {"kind": self.kind, "pattern": str(self)}

    def settings(self) -> dict[str, Any]:
        """The conversion metadata keys this kind sets."""
        return {"sparsity": str(self)}

    def fits(self, profile: Profile) -> None:
        """A profile that names its pattern (``sparsity.n_m``) takes the same M and at most
        its N kept: the kernels skip exactly that pattern."""
        if profile.sparsity.n_m:
            want = parse_nm(profile.sparsity.n_m)
            if self.m != want.m or self.n > want.n:
                raise UsageError(f"profile {profile.name} uses {want} sparsity; --sparsity "
                                 f"{self} does not fit it (same M, at most {want.n} kept)")

    def apply(self, model: Any, training: Training) -> tuple[Any, SparsityOutcome]:
        """Masks on a copy of ``model`` (never the caller's), kept through fine-tuning."""
        model = clone_model(model)
        masks, skipped = nm_masks(model, self)
        if not masks:
            raise UsageError(f"no Conv/Dense layer takes {self} sparsity (input channels must "
                             f"be a multiple of {self.m})")
        apply_masks(model, masks)
        outcome = SparsityOutcome(skipped=skipped, masks=len(masks))
        if training.data is not None:
            from devicefit.sdk.convert.finetune import NM_MASKS, fine_tune

            outcome.fine_tune.append(fine_tune(
                model, training.data, training.epochs, progress=training.progress,
                loss=training.loss, on_step_end=keep_masks(masks), purpose=NM_MASKS))
            apply_masks(model, masks)
        return model, outcome

    def group_pattern(self) -> NMPattern:
        """The pattern the read-back checks group by group."""
        return self

    def check_written(self, weights: list[WeightSparsity], outcome: SparsityOutcome) -> None:
        """The written file must hold the pattern in as many tensors as were pruned."""
        clean = [w for w in weights if w.nm_groups and w.nm_violations == 0]
        if len(clean) < outcome.masks:
            raise RuntimeError(f"{self} pruning of {outcome.masks} layers survived in only "
                               f"{len(clean)} weight tensors of the written .tflite")


def parse_nm(text: str) -> NMPattern:
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--sparsity {text!r}: expected N:M such as 2:4")
    n, m = int(parts[0]), int(parts[1])
    if not 0 < n < m:
        raise UsageError(f"--sparsity {text}: need 0 < N < M (N weights kept of every M)")
    return NMPattern(n, m)


def _from_mapping(data: Mapping[str, Any]) -> NMPattern:
    pattern = data.get("pattern")
    if not isinstance(pattern, str):
        raise ValueError("'pattern' must be an N:M string such as \"2:4\" (quote it)")
    try:
        return parse_nm(pattern)
    except UsageError as exc:
        raise ValueError(str(exc).replace("--sparsity", "pattern")) from None


def nm_layer_problem(layer: Any) -> str | None:
    """Why ``layer`` cannot take N:M along its input channels, or None when it can."""
    kind = type(layer).__name__
    if kind not in ("Dense", "Conv1D", "Conv2D", "Conv3D"):
        return "not a Conv/Dense layer"
    if getattr(layer, "groups", 1) != 1:
        return "grouped convolution"
    return None


def nm_masks(model: Any, pattern: NMPattern) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Masks (layer name → 0/1 array shaped like the kernel) and the layers left dense, why."""
    masks: dict[str, np.ndarray] = {}
    skipped: dict[str, str] = {}
    for layer in model.layers:
        reason = nm_layer_problem(layer)
        if reason is not None:
            if layer.weights and type(layer).__name__ not in ("BatchNormalization",):
                skipped[layer.name] = reason
            continue
        kernel = layer.kernel.numpy()
        cin = kernel.shape[-2]
        if cin % pattern.m:
            skipped[layer.name] = f"{cin} input channels is not a multiple of {pattern.m}"
            continue
        masks[layer.name] = nm_mask(kernel, pattern)
    return masks, skipped


def nm_mask(kernel: np.ndarray, pattern: NMPattern) -> np.ndarray:
    """0/1 mask keeping the N largest magnitudes of every M input channels of ``kernel``."""
    # Put input channels last, group them by M, keep the N largest magnitudes in each group.
    moved = np.moveaxis(np.abs(kernel), -2, -1)
    groups = moved.reshape(-1, pattern.m)
    order = np.argsort(-groups, axis=1, kind="stable")
    keep = np.zeros_like(groups, dtype=bool)
    np.put_along_axis(keep, order[:, :pattern.n], True, axis=1)
    return np.moveaxis(keep.reshape(moved.shape), -1, -2).astype(kernel.dtype)


def apply_masks(model: Any, masks: dict[str, np.ndarray]) -> None:
    """Zero the masked kernel weights in place (after pruning and after each training step)."""
    for name, mask in masks.items():
        kernel = model.get_layer(name).kernel
        kernel.assign(kernel.numpy() * mask)


def keep_masks(masks: dict[str, np.ndarray],
               then: Callable[[Any], None] | None = None) -> Callable[[Any], None]:
    """A fine-tuning ``on_step_end`` that re-zeroes the masked weights after every update
    (then runs ``then``)."""
    def run(model: Any) -> None:
        apply_masks(model, masks)
        if then is not None:
            then(model)
    return run


KIND = SparsityKind(
    name=NMPattern.kind, option="sparsity_pattern", flag="--sparsity", metavar="N:M",
    help="N:M weight sparsity, e.g. 2:4", parse=parse_nm, keys={"pattern": "N:M such as \"2:4\""},
    from_mapping=_from_mapping, order=0)
