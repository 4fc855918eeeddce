"""Edge features in CSC order, and node features derived from them.

The input's edge-feature rows arrive in its own edge order. `stage_edge_features`
writes them, checked, as float32 to a scratch file; the CSC build carries each
edge's row through its passes (csc.EdgeStream, csc_file.write_csc) and leaves
the rows in CSC order in another scratch file; `EdgeFeaturePass` then walks
the CSC a run of whole nodes at a time, gathers the rows of their edges from
the scratch copy and writes them to edge_features.bin (row i is the features
of the edge at position i of indices.npy), and, when asked, yields each
node's mean or sum of its in-edges' features (the node features OGB's
ogbn-proteins examples derive; a node without in-edges gets zeros).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numba
import numpy as np

from gnnsys.errors import DatasetError

from .csc_file import check_dedup
from .features_file import encoded_rows
from .output_file import BackgroundWriter, OutputFile

EDGES_AT_ONCE = 1 << 20  # edges gathered into CSC order at a time (a node with more takes a run alone)


def stage_edge_features(src, path: Path, nan_to_zero: bool) -> int:
    """Write src.edge_feature_chunks() to `path` as float32 rows (scratch,
    the input's order); the number of rows. DatasetError naming
    src.edge_feature_file for a chunk of another width, no rows, or NaN/inf
    (replaced by 0 with `nan_to_zero`)."""
    dim, file = src.edge_feature_dim, src.edge_feature_file
    out = BackgroundWriter(OutputFile(path))
    rows = 0
    try:
        for chunk in src.edge_feature_chunks():
            chunk = np.asarray(chunk)
            if chunk.ndim != 2 or chunk.shape[1] != dim:
                raise DatasetError(file, f"expected {dim} edge feature columns, got shape {chunk.shape}", row=rows)
            finite = np.isfinite(chunk)
            if not finite.all():
                if not nan_to_zero:
                    r = int(np.flatnonzero(~finite.all(axis=1))[0])
                    raise DatasetError(
                        file, "NaN or inf in edge features (use --nan-to-zero to replace them with 0)", row=rows + r
                    )
                chunk = np.where(finite, chunk, 0)
            out.write(np.ascontiguousarray(chunk, np.float32))
            rows += chunk.shape[0]
    except BaseException:
        out.abandon()
        raise
    out.close()
    if rows == 0:
        raise DatasetError(file, "holds no edge feature rows")
    return rows


@numba.njit(nogil=True, cache=True)
def segment_sums(values, ptr):
    """float64 [len(ptr) - 1, dim]: row v sums values[ptr[v]:ptr[v + 1]] in order."""
    out = np.zeros((ptr.shape[0] - 1, values.shape[1]), np.float64)
    for v in range(ptr.shape[0] - 1):
        for e in range(ptr[v], ptr[v + 1]):
            for j in range(values.shape[1]):
                out[v, j] += values[e, j]
    return out


def node_runs(indptr: np.ndarray, edges: int = EDGES_AT_ONCE):
    """Consecutive node ranges [lo, hi) covering every node, each holding at
    most `edges` in-edges unless a single node has more."""
    n, lo = indptr.shape[0] - 1, 0
    while lo < n:
        hi = int(np.searchsorted(indptr, indptr[lo] + edges, "right")) - 1
        hi = min(n, max(hi, lo + 1))
        yield lo, hi
        lo = hi


class EdgeFeaturePass:
    """One pass over the CSC that writes edge_features.bin and, with `reduce`
    ("mean" or "sum"), derives node features.

    indptr: the final CSC's; rows_file: each edge's feature row in CSC order
    (int64); staged: the float32 rows written by stage_edge_features
    (num_rows x dim); out: edge_features.bin, rows of `stride` bytes in `dtype`.
    `node_chunks()` yields the derived float32 node rows in node order while
    writing; `run()` only writes. `digest` is the file's sha256 once done.
    """

    def __init__(self, indptr, rows_file, staged, num_rows: int, dim: int, out: Path, dtype: str, stride: int):
        self.indptr, self.dim, self.out, self.dtype, self.stride = indptr, dim, Path(out), dtype, stride
        total = int(indptr[-1])
        self.rows = np.memmap(rows_file, np.int64, "r", shape=(total,)) if total else np.empty(0, np.int64)
        self.staged = np.memmap(staged, np.float32, "r", shape=(num_rows, dim))
        self.digest = None

    def run(self) -> str:
        """Write edge_features.bin; its sha256."""
        for _ in self._runs(None):
            pass
        return self.digest

    def node_chunks(self, reduce: str):
        """The node features derived by `reduce` over each node's in-edges, as
        float32 [run, dim] chunks in node order (edge_features.bin is written as
        they are made; `digest` is set when the last has been taken)."""
        if reduce not in ("mean", "sum"):
            raise ValueError(f"reduce must be mean or sum, got {reduce!r}")
        return self._runs(reduce)

    def _runs(self, reduce):
        out = BackgroundWriter(OutputFile(self.out, int(self.indptr[-1]) * self.stride))
        try:
            for lo, hi in node_runs(self.indptr):
                a, b = int(self.indptr[lo]), int(self.indptr[hi])
                values = self.staged[np.asarray(self.rows[a:b])]
                out.write(encoded_rows(values, self.dtype, self.stride))
                if reduce is not None:
                    ptr = self.indptr[lo : hi + 1] - a
                    sums = segment_sums(values, ptr)
                    if reduce == "mean":
                        sums /= np.maximum(np.diff(ptr), 1)[:, None]
                    yield sums.astype(np.float32)
        except BaseException:
            out.abandon()
            raise
        self.digest = out.close()


def edge_feature_dim(src, opts) -> int:
    """The width of the edge features to write (0: none); DatasetError when
    the node features cannot be had as `opts` asks (none in the input and
    none derived, derived with none to derive from or beside the input's own)
    or the options do not go with edge features."""
    edge_dim = src.edge_feature_dim if src.edge_feature_chunks is not None else 0
    derive = opts.node_features_from_edges
    if derive != "none":
        if not edge_dim:
            raise DatasetError(
                "--node-features-from-edges", "the input has no edge features to derive node features from"
            )
        if src.feature_dim:
            raise DatasetError(
                "--node-features-from-edges",
                f"the input has its own node features ({src.feature_file}); derive them only for an input without",
            )
    elif src.feature_dim < 1:
        hint = "; derive them from its edge features with --node-features-from-edges mean" if edge_dim else ""
        raise DatasetError(src.feature_file, f"holds no feature columns; a node needs at least one feature{hint}")
    check_dedup(opts.dedup, bool(edge_dim))
    return edge_dim


def derived_nodes(src, edge_pass: EdgeFeaturePass, reduce: str):
    """`src` whose node features are the `reduce` of each node's in-edge features, made by `edge_pass`."""
    return dataclasses.replace(
        src,
        feature_dim=edge_pass.dim,
        feature_chunks=lambda: edge_pass.node_chunks(reduce),
        feature_file=f"node features derived from {src.edge_feature_file} ({reduce})",
    )
