"""A small real model to convert: a CNN on scikit-learn's 8x8 digits (shipped inside
scikit-learn, so nothing is downloaded). Used by ``examples/demo.py``, the tests and the
benchmarks.

The CNN has what channel pruning must rewire: BatchNorm after convs, a residual add, and a
Flatten into a Dense layer.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

INPUT_SHAPE = (8, 8, 1)
CLASSES = 10


@dataclass
class Digits:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def save_npz(self, folder: Path) -> dict[str, Path]:
        """Write train/test .npz files (arrays x, y) as the CLI reads them."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = {"train": folder / "digits_train.npz", "test": folder / "digits_test.npz"}
        np.savez(paths["train"], x=self.x_train, y=self.y_train)
        np.savez(paths["test"], x=self.x_test, y=self.y_test)
        return paths


def load_digits(seed: int = 0) -> Digits:
    """1437 training and 360 test images, pixels scaled to 0..1, shape (n, 8, 8, 1)."""
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_digits()
    x = (bunch.images / 16.0).astype(np.float32)[..., None]
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return Digits(x_tr, y_tr, x_te, y_te)


def build_cnn(seed: int = 0):
    import keras

    keras.utils.set_random_seed(seed)
    L = keras.layers
    inp = keras.Input(INPUT_SHAPE, name="image")
    x = L.Conv2D(16, 3, padding="same", use_bias=False, name="conv1")(inp)
    x = L.ReLU(name="relu1")(L.BatchNormalization(name="bn1")(x))
    x = L.Conv2D(32, 3, padding="same", use_bias=False, name="conv2")(x)
    x = L.ReLU(name="relu2")(L.BatchNormalization(name="bn2")(x))
    x = L.MaxPooling2D(2, name="pool")(x)
    y = L.Conv2D(32, 3, padding="same", activation="relu", name="conv3")(x)
    x = L.Add(name="residual")([x, y])
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(96, activation="relu", name="fc1")(x)
    out = L.Dense(CLASSES, activation="softmax", name="classes")(x)
    return keras.Model(inp, out, name="digits_cnn")


def train_cnn(digits: Digits, epochs: int = 8, seed: int = 0):
    """The CNN trained for ``epochs`` (about 98 % test accuracy after 8, in seconds)."""
    import keras

    model = build_cnn(seed)
    model.compile(optimizer=keras.optimizers.Adam(2e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(digits.x_train, digits.y_train, batch_size=32, epochs=epochs, verbose=0,
              shuffle=True)
    return model


def cached_cnn(folder: Path, epochs: int = 8) -> Path:
    """Train once and keep ``digits_cnn.keras`` in ``folder`` (file-locked, so parallel test
    workers train it once); retrain when this file changes."""
    key = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"digits_cnn-{key}-e{epochs}.keras"
    with open(folder / ".digits.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            model = train_cnn(load_digits(), epochs)
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.keras")
            model.save(tmp)
            os.replace(tmp, path)
    return path
