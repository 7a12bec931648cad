"""A second real data set for the architecture-search benchmark (issue 34): UCI's Japanese
Vowels, as shipped inside sktime's wheel (``pip install 'devicefit[bench]'``, which pins
sktime 1.2.0; nothing is downloaded at run time), and the hand-designed model it is compared
with.

Nine male speakers say the vowel /ae/; each utterance is a series of 7-29 frames of 12 LPC
cepstrum coefficients (audio features of the kind a keyword spotter computes on the device),
the label is the speaker: 270 training and 370 test utterances (Kudo, Toyama and Shimbo,
Pattern Recognition Letters 20 (1999)). Frames are z-scored per coefficient with the training
set's statistics and the series zero-padded at the end to 29 frames: inputs (29, 12).

The files are read from the installed distribution without importing sktime (which would
import pandas for a nested data frame): the ``.ts`` text format is a header of ``@`` lines,
then one utterance per line, its 12 coefficient series separated by ``:`` and the label last.
Their sha256 is checked, so another sktime release that changed the data is one clear error.

The baseline is the fully convolutional network of Wang, Yan and Oates ("Time series
classification from scratch with deep neural networks: a strong baseline", IJCNN 2017), the
hand-designed reference model of the UCR/UEA deep-learning comparisons (Fawaz et al., 2019):
three Conv1D + BatchNorm + ReLU blocks of 128, 256 and 128 filters (kernels 8, 5, 3), global
average pooling, a softmax layer. It is what a user brings to ``devicefit fit`` for this data.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devicefit.simulator.errors import install_command

#: The requirement (pyproject.toml's ``bench`` extra) and what its files must hash to.
PACKAGE, VERSION = "sktime", "1.2.0"
FOLDER = "sktime/datasets/data/JapaneseVowels"
SHA256 = {"TRAIN": "68a430eabd919cc77f40b1f5f3bc0dcafacc1486bca9260785aeb7d262cc78cd",
          "TEST": "b3d41d6a0ca3bcad3afb9ca7d4365382aa51341e2e58bae2a574babdda5b9462"}
FRAMES, COEFFICIENTS, CLASSES = 29, 12, 9
INPUT_SHAPE = (FRAMES, COEFFICIENTS)


class MissingDataset(Exception):
    """The package that ships the data is not installed (or ships other data)."""


@dataclass(frozen=True)
class Split:
    #: (n, 29, 12) float32 and the labels 0-8.
    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class Vowels:
    train: Split
    test: Split

    def save_npz(self, folder: Path) -> dict[str, Path]:
        """Write vowels_train.npz / vowels_test.npz (arrays x, y) as the CLI reads them."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name, split in (("train", self.train), ("test", self.test)):
            paths[name] = folder / f"vowels_{name}.npz"
            np.savez(paths[name], x=split.x, y=split.y)
        return paths


def data_file(split: str) -> Path:
    """The installed ``.ts`` file of ``split`` (TRAIN or TEST), its hash checked."""
    install = f"{install_command('bench')} (or {PACKAGE}=={VERSION})"
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise MissingDataset(f"Japanese Vowels ships inside {PACKAGE}, which is not "
                             f"installed: {install}") from None
    path = Path(str(dist.locate_file(f"{FOLDER}/JapaneseVowels_{split}.ts")))
    if not path.is_file():
        raise MissingDataset(f"{PACKAGE} {dist.version} has no {path.name}: {install}")
    if hashlib.sha256(path.read_bytes()).hexdigest() != SHA256[split]:
        raise MissingDataset(f"{path} of {PACKAGE} {dist.version} is not the data this "
                             f"benchmark was measured on: {install}")
    return path


def read_ts(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """Each utterance as a (frames, 12) array, and the labels 0-8."""
    series, labels = [], []
    for line in path.read_text().splitlines():
        if not line or line.startswith(("#", "@")):
            continue
        *dims, label = line.split(":")
        series.append(np.array([[float(v) for v in d.split(",")] for d in dims]).T)
        labels.append(int(label) - 1)
    return series, np.array(labels, dtype=np.int64)


def load_vowels() -> Vowels:
    """270 training and 370 test utterances, shape (n, 29, 12), float32."""
    train, y_train = read_ts(data_file("TRAIN"))
    test, y_test = read_ts(data_file("TEST"))
    frames = np.concatenate(train)
    mean, std = frames.mean(axis=0), frames.std(axis=0)

    def padded(series: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((len(series), FRAMES, COEFFICIENTS), dtype=np.float32)
        for i, s in enumerate(series):
            out[i, :len(s)] = (s - mean) / std
        return out

    return Vowels(Split(padded(train), y_train), Split(padded(test), y_test))


def build_fcn(seed: int = 0):
    import keras

    keras.utils.set_random_seed(seed)
    L = keras.layers
    x = inp = keras.Input(INPUT_SHAPE, name="frames")
    for i, (filters, kernel) in enumerate(((128, 8), (256, 5), (128, 3)), start=1):
        x = L.Conv1D(filters, kernel, padding="same", use_bias=False, name=f"conv{i}")(x)
        x = L.ReLU(name=f"relu{i}")(L.BatchNormalization(name=f"bn{i}")(x))
    x = L.GlobalAveragePooling1D(name="pool")(x)
    out = L.Dense(CLASSES, activation="softmax", name="speakers")(x)
    return keras.Model(inp, out, name="vowels_fcn")


def train_fcn(data: Vowels, epochs: int = 20, seed: int = 0):
    import keras

    model = build_fcn(seed)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(data.train.x, data.train.y, batch_size=16, epochs=epochs, verbose=0)
    return model

