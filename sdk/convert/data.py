"""Calibration, evaluation and training data: ``.npy``, ``.npz`` (arrays ``x`` and ``y``), a
folder of images, a Python callable, or — only when asked for by name — random data.

Every source becomes a :class:`Dataset` whose ``x`` matches the model's input shape exactly;
a mismatch is the user's to fix, so it is an error naming both shapes, never a silent reshape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import InputError, UsageError

log = logging.getLogger(__name__)

RANDOM = "random"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
RANDOM_WARNING = ("calibrating on RANDOM data: int8 ranges will not match real inputs and "
                  "accuracy can collapse; give real samples with --calibration")

DataSource = str | Path | Callable[[], Any]


@dataclass
class Dataset:
    x: np.ndarray
    y: np.ndarray | None
    source: str
    random: bool = False

    def __len__(self) -> int:
        return len(self.x)

    def head(self, n: int | None) -> Dataset:
        if n is None or n >= len(self.x):
            return self
        return Dataset(self.x[:n], None if self.y is None else self.y[:n], self.source,
                       self.random)


def load_data(source: DataSource, input_shape: tuple[int, ...], *, what: str,
              limit: int | None = None, seed: int = 0) -> Dataset:
    """Read ``source`` and check it against the model's per-sample ``input_shape``.

    ``what`` names the data in errors ("calibration", "evaluation", "training").
    """
    if isinstance(source, str) and source == RANDOM:
        log.warning(RANDOM_WARNING)
        rng = np.random.default_rng(seed)
        x = rng.uniform(0.0, 1.0, size=(limit or 200, *input_shape)).astype(np.float32)
        return Dataset(x, None, RANDOM, random=True)
    if callable(source):
        ds = _from_value(source(), f"<{getattr(source, '__name__', 'callable')}()>", what)
    else:
        ds = _from_path(Path(source), input_shape, what)
    _check_shape(ds, input_shape, what)
    return ds.head(limit)


def _from_path(path: Path, input_shape: tuple[int, ...], what: str) -> Dataset:
    if not path.exists():
        raise InputError(f"{what} data not found: {path}")
    if path.is_dir():
        return _from_image_folder(path, input_shape, what)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return _from_value(np.load(path, allow_pickle=False), str(path), what)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                return _from_npz(dict(npz), path, what)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot read {what} data: {exc}") from exc
    raise InputError(f"{path}: {what} data must be .npy, .npz (arrays x, y) or a folder of images")


def _from_npz(arrays: dict[str, np.ndarray], path: Path, what: str) -> Dataset:
    if "x" in arrays:
        return _from_value((arrays["x"], arrays.get("y")), str(path), what)
    if len(arrays) == 1:
        return _from_value(next(iter(arrays.values())), str(path), what)
    raise InputError(f"{path}: {what} .npz needs an array named 'x' (and 'y' for labels); "
                     f"found {', '.join(sorted(arrays))}")


def _from_value(value: Any, source: str, what: str) -> Dataset:
    """An array, or an (x, y) pair, as returned by a callable or read from a file."""
    x, y = (value[0], value[1]) if isinstance(value, tuple) and len(value) == 2 else (value, None)
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.number):
        raise InputError(f"{source}: {what} data must be numeric, got {x.dtype}")
    if y is not None:
        y = np.asarray(y)
        if len(y) != len(x):
            raise InputError(f"{source}: {what} data has {len(x)} samples but {len(y)} labels")
    if len(x) == 0:
        raise InputError(f"{source}: {what} data is empty")
    return Dataset(x.astype(np.float32, copy=False), y, source)


def _from_image_folder(path: Path, input_shape: tuple[int, ...], what: str) -> Dataset:
    """Images in ``path`` (unlabelled) or in one sub-folder per class (labels = sorted names).

    Pixels stay in 0..255 as float32, like ``keras.utils.image_dataset_from_directory``, so a
    model trained from that helper gets what it saw in training.
    """
    from PIL import Image

    if len(input_shape) != 3 or input_shape[-1] not in (1, 3):
        raise UsageError(f"{path}: image folders need a model input of (height, width, 1 or 3), "
                         f"the model takes {input_shape}")
    height, width, channels = input_shape
    classes = sorted(d.name for d in path.iterdir() if d.is_dir())
    files: list[tuple[Path, int | None]] = []
    if classes:
        for label, name in enumerate(classes):
            files += [(f, label) for f in sorted((path / name).iterdir()) if _is_image(f)]
    else:
        files = [(f, None) for f in sorted(path.iterdir()) if _is_image(f)]
    if not files:
        raise InputError(f"{path}: no images ({', '.join(IMAGE_SUFFIXES)}) found for {what}")
    mode = "L" if channels == 1 else "RGB"
    x = np.empty((len(files), height, width, channels), dtype=np.float32)
    for i, (f, _) in enumerate(files):
        try:
            with Image.open(f) as img:
                arr = np.asarray(img.convert(mode).resize((width, height)), dtype=np.float32)
        except OSError as exc:
            raise InputError(f"{f}: cannot read image: {exc}") from exc
        x[i] = arr.reshape(height, width, channels)
    y = np.array([label for _, label in files]) if classes else None
    return Dataset(x, y, str(path))


def _is_image(f: Path) -> bool:
    return f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES


def _check_shape(ds: Dataset, input_shape: tuple[int, ...], what: str) -> None:
    got = tuple(ds.x.shape[1:])
    if got != tuple(input_shape):
        raise InputError(
            f"{ds.source}: {what} samples have shape {got} but the model input is "
            f"{tuple(input_shape)} (arrays are (samples, *input_shape))")
