"""Build the CSC graph (in-neighbour lists) from a stream of edge chunks.

Two passes over the edges: the first checks ids and counts in-degrees, the
second scatters sources into place. Memory is the output plus one chunk.
Neighbour lists come out sorted; `dedup` removes repeats, `reorder_by_degree`
relabels nodes hottest first.
"""
from __future__ import annotations

import numba
import numpy as np

from gnnsys.errors import DatasetError

from .source import EdgeChunks


def index_dtype(num_nodes: int):
    """int32 node ids while they fit, else int64 (docs/architecture.md, "On-disk dataset format")."""
    return np.int32 if num_nodes < 2**31 else np.int64


def _transformed(src, dst, to_undirected: bool, drop_self_loops: bool):
    if drop_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    if to_undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    return src, dst


def check_edge_ids(src, dst, num_nodes: int, file: str, first_row: int):
    """(src, dst) as int64 after checking every id is an integer in [0, num_nodes);
    a bad id raises DatasetError naming `file` and its row (first_row + position)."""
    for ids in (src, dst):
        if ids.size == 0:
            continue
        if not np.issubdtype(ids.dtype, np.integer):
            raise DatasetError(file, f"node ids must be integers, got {ids.dtype}")
        bad = np.flatnonzero((ids < 0) | (ids >= num_nodes))
        if bad.size:
            row = first_row + int(bad[0])
            raise DatasetError(file, f"node id {int(ids[bad[0]])} out of range [0, {num_nodes})", row=row)
    return src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)


@numba.njit(nogil=True, cache=True)
def _scatter(src, dst, cursor, end, indices):
    """Place each edge at its destination's cursor; False if a list overflows
    (the edge stream changed between the two passes)."""
    for e in range(src.shape[0]):
        d = dst[e]
        if cursor[d] >= end[d]:
            return False
        indices[cursor[d]] = src[e]
        cursor[d] += 1
    return True


@numba.njit(parallel=True, nogil=True, cache=True)
def _sort_lists(indptr, indices):
    for v in numba.prange(indptr.shape[0] - 1):
        indices[indptr[v]:indptr[v + 1]].sort()


@numba.njit(parallel=True, nogil=True, cache=True)
def _unique_counts(indptr, indices):
    n = indptr.shape[0] - 1
    counts = np.zeros(n, np.int64)
    for v in numba.prange(n):
        c = 0
        for p in range(indptr[v], indptr[v + 1]):
            if p == indptr[v] or indices[p] != indices[p - 1]:
                c += 1
        counts[v] = c
    return counts


@numba.njit(parallel=True, nogil=True, cache=True)
def _unique_fill(indptr, indices, new_indptr, out):
    for v in numba.prange(indptr.shape[0] - 1):
        q = new_indptr[v]
        for p in range(indptr[v], indptr[v + 1]):
            if p == indptr[v] or indices[p] != indices[p - 1]:
                out[q] = indices[p]
                q += 1


@numba.njit(parallel=True, nogil=True, cache=True)
def _relabel(indptr, indices, order, inverse, new_indptr, out):
    for v in numba.prange(order.shape[0]):
        u = order[v]
        q = new_indptr[v]
        for p in range(indptr[u], indptr[u + 1]):
            out[q] = inverse[indices[p]]
            q += 1
        out[new_indptr[v]:new_indptr[v + 1]].sort()


def build_csc(edge_chunks: EdgeChunks, num_nodes: int, *, file: str = "edges",
              to_undirected: bool = False, drop_self_loops: bool = False,
              progress=None):
    """CSC (indptr int64, indices int32/int64, sorted per node) of the edges.

    Raises DatasetError naming `file` and the row of the first id out of range.
    `progress(n_edges)` is called after each chunk of each pass.
    """
    in_degree = np.zeros(num_nodes, np.int64)
    row = 0
    for src, dst in edge_chunks():
        src, dst = check_edge_ids(np.asarray(src), np.asarray(dst), num_nodes, file, row)
        row += src.shape[0]
        src, dst = _transformed(src, dst, to_undirected, drop_self_loops)
        in_degree += np.bincount(dst, minlength=num_nodes)
        if progress:
            progress(src.shape[0])
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(in_degree, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), index_dtype(num_nodes))
    cursor = indptr[:-1].copy()
    for src, dst in edge_chunks():
        src, dst = _transformed(np.asarray(src, np.int64), np.asarray(dst, np.int64),
                                to_undirected, drop_self_loops)
        if not _scatter(src, dst, cursor, indptr[1:], indices):
            raise DatasetError(file, "edges changed between the two reading passes")
        if progress:
            progress(src.shape[0])
    if not np.array_equal(cursor, indptr[1:]):
        raise DatasetError(file, "edges changed between the two reading passes")
    _sort_lists(indptr, indices)
    return indptr, indices


def dedup(indptr: np.ndarray, indices: np.ndarray):
    """Remove repeated edges from a CSC whose lists are sorted."""
    counts = _unique_counts(indptr, indices)
    new_indptr = np.zeros_like(indptr)
    np.cumsum(counts, out=new_indptr[1:])
    out = np.empty(int(new_indptr[-1]), indices.dtype)
    _unique_fill(indptr, indices, new_indptr, out)
    return new_indptr, out


def degree_order(indptr: np.ndarray) -> np.ndarray:
    """New id -> old id, by in-degree descending (ties keep the old order)."""
    return np.argsort(-np.diff(indptr), kind="stable")


def relabel(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray):
    """The CSC with node order[v] renamed v; lists stay sorted."""
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.shape[0], dtype=order.dtype)
    new_indptr = np.zeros_like(indptr)
    np.cumsum(np.diff(indptr)[order], out=new_indptr[1:])
    out = np.empty_like(indices)
    _relabel(indptr, indices, order, inverse.astype(indices.dtype), new_indptr, out)
    return new_indptr, out
