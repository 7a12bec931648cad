"""Weight clustering (non-uniform quantization): each layer's kernel shares K values.

k-means per Conv/Dense kernel puts every weight on one of K centroids; during fine-tuning
each weight keeps its cluster and the centroids move to the mean of their weights after
every update (weight sharing). After the converter's per-channel int8 quantization a channel
holds at most K distinct bytes, which general-purpose compression exploits. That is what
clustering buys on stock runtimes: a smaller *compressed download* (gzip of the .tflite).
TFLite-Micro and LiteRT store the int8 weights uncompressed, so flash and RAM do not change;
the report says exactly that and never counts it as a flash or arena saving.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from devicefit.simulator.errors import UsageError

CLUSTERED_LAYERS = ("Conv1D", "Conv2D", "Conv3D", "Dense", "DepthwiseConv2D")
KMEANS_ITERATIONS = 25
MIN_CLUSTERS, MAX_CLUSTERS = 2, 256


def gzip_size(data: bytes) -> int:
    """Bytes of ``data`` after gzip -9 with a fixed timestamp (the download size)."""
    return len(gzip.compress(data, compresslevel=9, mtime=0))


def kmeans_1d(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Centroids and assignment of 1-D ``values``; linear initialisation (deterministic, and
    better than random for the long tails of weight distributions)."""
    flat = values.reshape(-1).astype(np.float64)
    k = min(k, len(np.unique(flat)))
    centroids = np.linspace(flat.min(), flat.max(), k)
    for _ in range(KMEANS_ITERATIONS):
        edges = (centroids[1:] + centroids[:-1]) / 2.0
        assign = np.searchsorted(edges, flat)
        sums = np.bincount(assign, weights=flat, minlength=k)
        counts = np.bincount(assign, minlength=k)
        moved = np.where(counts > 0, sums / np.maximum(counts, 1), centroids)
        if np.allclose(moved, centroids):
            break
        centroids = np.sort(moved)
    edges = (centroids[1:] + centroids[:-1]) / 2.0
    return centroids, np.searchsorted(edges, flat).reshape(values.shape)


@dataclass
class ClusterKeeper:
    """Keeps each clustered kernel on its K shared values; call after every update."""

    layers: list[Any]
    assignments: list[np.ndarray]
    clusters: int
    names: list[str] = field(default_factory=list)

    def __call__(self, model: Any = None) -> None:
        for layer, assign in zip(self.layers, self.assignments, strict=True):
            kernel = layer.kernel.numpy()
            sums = np.bincount(assign.reshape(-1), weights=kernel.reshape(-1).astype(np.float64))
            counts = np.maximum(np.bincount(assign.reshape(-1)), 1)
            layer.kernel.assign((sums / counts)[assign].astype(kernel.dtype))



def file_distinct_values(tflite: bytes) -> dict[str, int]:
    """Weight tensor → most distinct stored values in one of its channels, read from the
    written file: per-channel scales turn K float centroids into up to K int8 values per
    channel (counting the float kernels instead said K where the file held 41-78 per
    tensor)."""
    from devicefit.sdk.convert.sparsity import tflite_weight_sparsity

    return {w.tensor: w.distinct_per_channel for w in tflite_weight_sparsity(tflite)
            if w.distinct_per_channel is not None}


def check_clusters(clusters: int) -> None:
    if not MIN_CLUSTERS <= clusters <= MAX_CLUSTERS:
        raise UsageError(f"--cluster {clusters}: give between {MIN_CLUSTERS} and "
                         f"{MAX_CLUSTERS} clusters per layer (16 is typical)")


def cluster_weights(model: Any, clusters: int) -> ClusterKeeper:
    """Cluster every Conv/Dense kernel of ``model`` in place to ``clusters`` values."""
    check_clusters(clusters)
    layers, assignments = [], []
    for layer in model.layers:
        if type(layer).__name__ not in CLUSTERED_LAYERS:
            continue
        kernel = layer.kernel.numpy()
        centroids, assign = kmeans_1d(kernel, clusters)
        layer.kernel.assign(centroids[assign].astype(kernel.dtype))
        layers.append(layer)
        assignments.append(assign)
    if not layers:
        raise UsageError("--cluster: the model has no Conv/Dense layer to cluster")
    return ClusterKeeper(layers, assignments, clusters, [layer.name for layer in layers])
