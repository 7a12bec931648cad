"""Small trainable models (``train`` and ``infer`` signatures, resource variables), built
once with the real TensorFlow converter and cached on disk like :mod:`tests.zoo`.

``trainable_path(choice, batch)``: a frozen convolution (8 filters on 8x8x1) feeding three
dense layers (512→64→32→10), trained with momentum SGD; ``choice`` is what the train
signature updates: ``last`` (the last dense layer), ``biases`` (every dense bias) or
``all`` (every dense layer). The train signature takes a batch of ``batch`` examples.
ReLU's gradient is written out (TFLite has no ReluGrad builtin), so the file runs on
LiteRT's builtin kernels alone.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parent / "artifacts" / "trainable"
_KEY = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
CHOICES = ("last", "biases", "all")
SIZES = ((8 * 8 * 8, 64), (64, 32), (32, 10))


def _build(choice: str, batch: int) -> bytes:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    rng = np.random.default_rng(0)
    conv = tf.constant(rng.normal(0, 0.3, (3, 3, 1, 8)).astype(np.float32))

    @tf.custom_gradient
    def relu(x: tf.Tensor) -> tuple[tf.Tensor, object]:
        return tf.maximum(x, 0.0), lambda dy: dy * tf.cast(x > 0.0, tf.float32)

    class Model(tf.Module):
        def __init__(self) -> None:
            last = len(SIZES) - 1
            self.w, self.b = [], []
            for i, (rows, cols) in enumerate(SIZES):
                train_w = choice == "all" or (choice == "last" and i == last)
                train_b = choice in ("all", "biases") or (choice == "last" and i == last)
                w = rng.normal(0, 0.1, (rows, cols)).astype(np.float32)
                b = np.zeros(cols, np.float32)
                self.w.append(tf.Variable(w) if train_w else tf.constant(w))
                self.b.append(tf.Variable(b) if train_b else tf.constant(b))
            self.trained = [v for v in self.w + self.b if isinstance(v, tf.Variable)]
            self.momentum = [tf.Variable(tf.zeros_like(v)) for v in self.trained]

        def forward(self, x: tf.Tensor) -> tf.Tensor:
            h = tf.reshape(tf.nn.relu(tf.nn.conv2d(x, conv, 1, "SAME")), [-1, 8 * 8 * 8])
            for i in range(len(SIZES)):
                h = tf.matmul(h, self.w[i]) + self.b[i]
                h = relu(h) if i < len(SIZES) - 1 else h
            return h

        @tf.function(input_signature=[tf.TensorSpec([batch, 8, 8, 1]),
                                      tf.TensorSpec([batch, 10])])
        def train(self, x: tf.Tensor, y: tf.Tensor) -> dict[str, tf.Tensor]:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.softmax_cross_entropy_with_logits(y, self.forward(x)))
            for v, m, g in zip(self.trained, self.momentum, tape.gradient(loss, self.trained)):
                m.assign(0.9 * m + g)
                v.assign_sub(0.01 * m)
            return {"loss": loss}

        @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 1])])
        def infer(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"logits": self.forward(x)}

    model = Model()
    with tempfile.TemporaryDirectory() as saved:
        tf.saved_model.save(model, saved, signatures={
            "train": model.train.get_concrete_function(),
            "infer": model.infer.get_concrete_function()})
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.experimental_enable_resource_variables = True
        data: bytes = converter.convert()
        return data


def trainable_path(choice: str, batch: int) -> Path:
    """Path of the cached trainable model, built with the real converter if needed."""
    if choice not in CHOICES:
        raise KeyError(f"unknown choice {choice!r}; known: {CHOICES}")
    folder = ROOT / _KEY
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{choice}_{batch}.tflite"
    if target.exists():
        return target
    with open(folder / f".{choice}_{batch}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(_build(choice, batch))
            os.replace(tmp, target)
    return target


#: Runs the train signature once in LiteRT (builtin kernels, no delegate) and prints, as
#: JSON, ``arena``: the span of the signature subgraph's non-constant tensors from their
#: buffer addresses (the arena LiteRT placed them in; the graph output is left out: LiteRT
#: keeps a scalar output apart from the arena), and ``heap``: the bytes glibc's malloc had
#: handed out more after that step than before it (mallinfo2: arena, variables, the kernels'
#: data, the initialising subgraph, the interpreter's structures).
_TRAIN_STEP = """
import ctypes, json, sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena ordblks smblks hblks hblkhd usmblks "
                                               "fsmblks uordblks fordblks keepcost").split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
def used():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd
path, subgraph, batch, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
it = Interpreter(model_path=path,
                 experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
runner = it.get_signature_runner("train")
x = np.random.default_rng(0).normal(size=(batch, 8, 8, 1)).astype(np.float32)
y = np.eye(10, dtype=np.float32)[np.arange(batch) % 10]
before = used()
runner(x=x, y=y)
heap = used() - before
spans = []
for i in json.loads(skip):
    a = it._interpreter.tensor(it, i, subgraph)
    spans.append((a.__array_interface__["data"][0], a.nbytes))
low = min(s for s, _ in spans)
print(json.dumps({"arena": max(s + n for s, n in spans) - low, "heap": heap}))
"""


def measure_train_step(path: Path, batch: int) -> dict[str, int]:
    """What LiteRT allocated for one step of the train signature (bytes, measured in a
    child process): ``arena`` and ``heap`` (see ``_TRAIN_STEP``)."""
    from devicefit.simulator.read.reader import read_model

    model = read_model(path)
    sig = model.signature("train")
    assert sig is not None
    sg = model.subgraphs[sig.subgraph]
    outputs = {t for _, t in sig.outputs}
    tensors = [t.index for t in sg.tensors if not t.has_data and t.dtype != "resource"
               and t.index not in outputs]
    proc = subprocess.run([sys.executable, "-c", _TRAIN_STEP, str(path), str(sig.subgraph),
                           str(batch), json.dumps(tensors)],
                          capture_output=True, text=True, timeout=120, check=True)
    measured: dict[str, int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return measured
