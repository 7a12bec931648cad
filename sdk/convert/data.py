"""Calibration, evaluation and training data: ``.npy``, ``.npz`` (arrays ``x`` and ``y``), a
folder of images, a Python callable, or — only when asked for by name — random data.

Every source becomes a :class:`Dataset` whose ``x`` matches the model's input shape exactly;
a mismatch is the user's to fix, so it is an error naming both shapes, never a silent reshape.
"""

from __future__ import annotations

import logging
import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from devicefit.simulator.errors import InputError, UsageError
from devicefit.simulator.infra.units import format_size

log = logging.getLogger(__name__)

RANDOM = "random"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
RANDOM_WARNING = ("calibrating on RANDOM data: int8 ranges will not match real inputs and "
                  "accuracy can collapse; give real samples with --calibration")

DataSource = str | Path | Callable[[], Any]

#: Largest array read from a data file (after keeping only the samples used).
MAX_DATA_BYTES = 2 << 30


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
        ds = _from_path(Path(source), input_shape, what, limit)
    _check_shape(ds, input_shape, what)
    ds = ds.head(limit)
    _check_finite(ds, what)
    return ds


def load_labelled(train: DataSource, evaluation: DataSource, calibration: DataSource | None,
                  input_shape: tuple[int, ...], *, samples: int, command: str, purpose: str
                  ) -> tuple[Dataset, Dataset, Dataset]:
    """Labelled training and evaluation data, and calibration data: ``calibration``'s first
    ``samples``, or the first training samples. Missing labels are a UsageError saying
    "``command`` needs labels … to ``purpose``"."""
    training = load_data(train, input_shape, what="training")
    evaluated = load_data(evaluation, input_shape, what="evaluation")
    if training.y is None or evaluated.y is None:
        raise UsageError(f"{command} needs labels in --train and --eval (.npz with x and y) "
                         f"to {purpose}")
    calibrated = training.head(samples) if calibration is None else \
        load_data(calibration, input_shape, what="calibration", limit=samples)
    return training, evaluated, calibrated


def _from_path(path: Path, input_shape: tuple[int, ...], what: str,
               limit: int | None = None) -> Dataset:
    if not path.exists():
        raise InputError(f"{what} data not found: {path}")
    if path.is_dir():
        return _from_image_folder(path, input_shape, what)
    if not path.is_file():  # /dev/null, a FIFO, /dev/zero: reading them never ends or lies
        raise InputError(f"{path}: {what} data must be a regular file or a folder of images")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            with open(path, "rb") as f:
                return _from_value(_read_npy(f, path.stat().st_size, str(path), what, limit),
                                   str(path), what)
        if suffix == ".npz":
            return _from_npz(_read_npz(path, what, limit), path, what)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: cannot read {what} data: {_one_line(exc)}") from exc
    raise InputError(f"{path}: {what} data must be .npy, .npz (arrays x, y) or a folder of images")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _read_npy(f: IO[bytes], file_bytes: int, source: str, what: str,
              limit: int | None) -> np.ndarray:
    """One ``.npy`` array, its header checked before a byte of data is allocated.

    The header states shape and dtype; a file claiming more than it holds (truncated, or a
    forged 23 TiB shape) or more than :data:`MAX_DATA_BYTES` is refused, and only the first
    ``limit`` samples are read (calibration needs a few hundred, not the whole training set).
    """
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise InputError(f"{source}: unsupported .npy version {version}")
    if dtype.hasobject or not np.issubdtype(dtype, np.number):
        raise InputError(f"{source}: {what} data must be numeric, got {dtype}")
    if len(shape) == 0:
        raise InputError(f"{source}: {what} data is a single number (a scalar); give an array "
                         "of samples, (samples, *input_shape)")
    claimed = math.prod(shape) * dtype.itemsize
    available = file_bytes - f.tell()
    if claimed > available:
        raise InputError(f"{source}: {what} data is truncated or its header lies: shape "
                         f"{tuple(shape)} {dtype} needs {format_size(claimed)}, the file holds "
                         f"{format_size(max(available, 0))}")
    rows = shape[0] if limit is None else min(shape[0], limit)
    wanted = math.prod((rows, *shape[1:])) * dtype.itemsize
    if wanted > MAX_DATA_BYTES:
        raise InputError(f"{source}: {what} data of shape {tuple(shape)} is "
                         f"{format_size(wanted)}; more than the {format_size(MAX_DATA_BYTES)} "
                         "devicefit reads (give fewer samples)")
    if fortran and rows != shape[0]:  # column-major: the first samples are not contiguous
        rows = shape[0]
    count = math.prod((rows, *shape[1:]))
    buf = f.read(count * dtype.itemsize)
    if len(buf) != count * dtype.itemsize:
        raise InputError(f"{source}: {what} data is truncated")
    arr = np.frombuffer(buf, dtype=dtype, count=count)
    return arr.reshape((rows, *shape[1:]), order="F" if fortran else "C")[:limit]


def _read_npz(path: Path, what: str, limit: int | None) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz``; the zip directory's sizes are checked before inflating (a
    zip bomb of a few KB can claim gigabytes)."""
    with zipfile.ZipFile(path) as zf:
        members = [m for m in zf.infolist() if m.filename.endswith(".npy")]
        total = sum(m.file_size for m in members)
        if total > MAX_DATA_BYTES * 2:
            raise InputError(f"{path}: {what} .npz inflates to {format_size(total)}; more than "
                             f"devicefit reads ({format_size(MAX_DATA_BYTES)} per array)")
        arrays = {}
        for m in members:
            with zf.open(m) as f:
                arrays[m.filename[:-4]] = _read_npy(f, m.file_size, f"{path}:{m.filename}",
                                                    what, limit)
        return arrays


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
    if x.ndim == 0:
        raise InputError(f"{source}: {what} data is a single number (a scalar); give an array "
                         "of samples, (samples, *input_shape)")
    if y is not None:
        y = np.asarray(y)
        if y.ndim == 0 or len(y) != len(x):
            raise InputError(f"{source}: {what} data has {len(x)} samples but {y.size if y.ndim == 0 else len(y)} labels")
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


def _check_finite(ds: Dataset, what: str) -> None:
    """NaN or ±Inf in a sample poisons calibration ranges (the converter then silently keeps
    float tensors, or crashes); name the first bad sample."""
    finite = np.isfinite(ds.x.reshape(len(ds.x), -1)).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        kind = "NaN" if np.isnan(ds.x[bad[0]]).any() else "Inf"
        raise InputError(f"{ds.source}: {what} sample {int(bad[0])} contains {kind} "
                         f"({len(bad)} of {len(ds.x)} samples are not finite); clean the data")


def _check_shape(ds: Dataset, input_shape: tuple[int, ...], what: str) -> None:
    got = tuple(ds.x.shape[1:])
    if got != tuple(input_shape):
        raise InputError(
            f"{ds.source}: {what} samples have shape {got} but the model input is "
            f"{tuple(input_shape)} (arrays are (samples, *input_shape))")
