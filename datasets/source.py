"""`GraphSource`: what every reader produces and the writer consumes.

A reader parses one input kind (OGB raw, Planetoid, npz, user arrays,
synthetic) into a `GraphSource`: counts, labels and splits in memory, and the
two big parts, edges and feature rows, as re-iterable streams of chunks so that
memory is bounded by the chunk size and not by the input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

EdgeChunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]
FeatureChunks = Callable[[], Iterator[np.ndarray]]


@dataclass
class GraphSource:
    """A graph to be written in the gnnsys format.

    edge_chunks() yields (src, dst) integer arrays, messages flowing src -> dst;
    it is called more than once (the CSC build makes two passes).
    feature_chunks() yields float arrays of shape [rows, feature_dim] covering
    nodes 0..num_nodes-1 in order. labels is int64 [num_nodes] with -1 for
    unlabelled nodes; splits maps "train"/"valid"/"test" to int64 node ids.
    labels may instead be multi-label: [num_nodes, tasks] of 0/1 with NaN
    (float) or -1 (integer) for an entry without a label.
    feature_dim 0 (and feature_chunks yielding nothing) means the input has
    no node features (they may be derived from the edge features).
    edge_feature_chunks, when set, yields float arrays [rows, edge_feature_dim]
    covering the input's edge rows 0, 1, ... in order; an edge chunk may then
    be (src, dst, row) to say which row each edge takes its features from
    (an inverse edge shares its edge's row), else the edges take the rows in
    stream order. edge_file / feature_file / edge_feature_file / label_file
    name the inputs in error messages. notes are one-line remarks for the
    user (shown by the CLI, kept in meta.json).
    """

    name: str
    kind: str
    num_nodes: int
    feature_dim: int
    edge_chunks: EdgeChunks
    feature_chunks: FeatureChunks
    labels: np.ndarray
    splits: dict
    num_classes: int | None = None
    edge_file: str = "edges"
    feature_file: str = "features"
    label_file: str = "labels"
    split_files: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    expected_num_edges: int | None = None
    edge_feature_dim: int = 0
    edge_feature_chunks: FeatureChunks | None = None
    edge_feature_file: str = "edge features"


def array_edge_chunks(src: np.ndarray, dst: np.ndarray, chunk: int = 1 << 22) -> EdgeChunks:
    """Edge chunks over two in-memory arrays."""

    def chunks():
        for start in range(0, len(src), chunk):
            yield src[start : start + chunk], dst[start : start + chunk]

    return chunks


def array_feature_chunks(x: np.ndarray, chunk: int = 1 << 16) -> FeatureChunks:
    """Feature chunks over an in-memory (or memory-mapped) [N, F] array."""

    def chunks():
        for start in range(0, x.shape[0], chunk):
            yield np.asarray(x[start : start + chunk])

    return chunks
