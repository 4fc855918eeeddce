"""Build the CSC graph (in-neighbour lists) from a stream of edge chunks.

Two passes over the edges: the first checks ids and counts in-degrees, the
second scatters sources into place, and each node's list is then sorted.
`build_csc` keeps the result in memory; `write_csc` (datasets/csc_file.py)
writes it to disk within a memory budget, spilling the edges to per-bucket
files when the lists do not fit at once.
"""

from __future__ import annotations

import numba
import numpy as np

from gnnsys.errors import DatasetError
from gnnsys.ids import count_ids

from .source import EdgeChunks


def index_dtype(num_nodes: int):
    """int32 node ids while they fit, else int64 (docs/architecture.md, "On-disk dataset format")."""
    return np.int32 if num_nodes < 2**31 else np.int64


def check_edge_ids(src, dst, num_nodes: int, file: str, first_row: int, num_src: int | None = None):
    """(src, dst) as int64 after checking every id is an integer in [0, num_nodes)
    (source ids in [0, num_src) when given: a relation between two node types);
    a bad id raises DatasetError naming `file` and its row (first_row + position)."""
    for ids, bound in ((src, num_nodes if num_src is None else num_src), (dst, num_nodes)):
        if ids.size == 0:
            continue
        if not np.issubdtype(ids.dtype, np.integer):
            raise DatasetError(file, f"node ids must be integers, got {ids.dtype}")
        bad = np.flatnonzero((ids < 0) | (ids >= bound))
        if bad.size:
            row = first_row + int(bad[0])
            raise DatasetError(file, f"node id {int(ids[bad[0]])} out of range [0, {bound})", row=row)
    return src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)


class EdgeStream:
    """The edges of `edge_chunks` as the CSC will hold them: int64 (src, dst)
    chunks with self-loops dropped (`drop_self_loops`), every edge's reverse
    added (`to_undirected`) and ids renamed by `inverse` (new id of each old
    one) when set. `in_degrees()` is the checking, counting pass.

    With `edge_rows` (the number of edge-feature rows) every edge carries the
    row of its features and chunks are (src, dst, row): the third array of a
    source chunk, else the edge's position in the stream; a reverse edge
    shares its edge's row.

    `num_src`, when given, makes it a relation between two node types:
    destinations are ids in [0, num_nodes) (the CSC's columns), sources ids
    in [0, num_src); such a stream cannot be made undirected.
    """

    def __init__(
        self,
        edge_chunks: EdgeChunks,
        num_nodes: int,
        *,
        num_src: int | None = None,
        file: str = "edges",
        to_undirected: bool = False,
        drop_self_loops: bool = False,
        progress=None,
        expected: int | None = None,
        edge_rows: int | None = None,
        edge_row_file: str = "edge features",
    ):
        self.edge_chunks, self.num_nodes, self.file = edge_chunks, num_nodes, file
        self.num_src = num_nodes if num_src is None else num_src
        if to_undirected and self.num_src != num_nodes:
            raise ValueError("only edges within one node type can be made undirected")
        self.expected = expected  # edges the source says it holds (for progress bars), if it knows
        self.to_undirected, self.drop_self_loops = to_undirected, drop_self_loops
        self.progress = progress
        self.inverse = None
        self.edge_rows, self.edge_row_file = edge_rows, edge_row_file

    @property
    def carries_rows(self) -> bool:
        """Whether every edge carries the row of its features."""
        return self.edge_rows is not None

    def _source(self):
        """The source's chunks as int64 (src, dst, rows), rows None unless carried."""
        position = 0
        for chunk in self.edge_chunks():
            src, dst = np.asarray(chunk[0]), np.asarray(chunk[1])
            rows = None
            if self.carries_rows:
                given = len(chunk) > 2
                rows = np.asarray(chunk[2], np.int64) if given else np.arange(position, position + src.shape[0])
            position += src.shape[0]
            yield src, dst, rows

    def _transformed(self, src, dst, rows):
        if self.drop_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
            rows = rows[keep] if rows is not None else None
        if self.inverse is not None:
            src, dst = self.inverse[src], self.inverse[dst]
        if self.to_undirected:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            rows = np.concatenate([rows, rows]) if rows is not None else None
        return src, dst, rows

    def in_degrees(self, counts: np.ndarray | None = None) -> np.ndarray:
        """int64 in-degree of every node (before any renaming), into `counts`
        when given; raises DatasetError naming the file and row of the first
        id out of range (or, carrying rows, of an edge without a feature row)."""
        counts = np.zeros(self.num_nodes, np.int64) if counts is None else counts
        row = 0
        for src, dst, rows in self._source():
            src, dst = check_edge_ids(src, dst, self.num_nodes, self.file, row, self.num_src)
            if rows is not None:
                self._check_rows(rows, row)
            row += src.shape[0]
            if self.progress:
                self.progress(src.shape[0])
            if self.drop_self_loops:
                keep = src != dst
                src, dst = src[keep], dst[keep]
            count_ids(dst, counts)
            if self.to_undirected:
                count_ids(src, counts)
        return counts

    def _check_rows(self, rows, first_row: int):
        bad = np.flatnonzero((rows < 0) | (rows >= self.edge_rows))
        if bad.size:
            raise DatasetError(
                self.edge_row_file,
                f"has {self.edge_rows} rows, but edge {first_row + int(bad[0])} of {self.file} "
                f"needs row {int(rows[bad[0]])}: one feature row per edge is expected",
            )

    def __iter__(self):
        for src, dst, rows in self._source():
            src, dst, rows = self._transformed(np.asarray(src, np.int64), np.asarray(dst, np.int64), rows)
            yield (src, dst, rows) if rows is not None else (src, dst)
            if self.progress:
                self.progress(src.shape[0])

    def changed(self) -> DatasetError:
        """The error for a stream that did not repeat itself on the second pass."""
        return DatasetError(self.file, "edges changed between the two reading passes")


@numba.njit(nogil=True, cache=True)
def scatter_edges(src, dst, lo, cursor, end, lists):
    """Place each edge at its destination's cursor (cursor/end indexed by
    dst - lo, positions in `lists`); False if a list would overflow (the edge
    stream changed between passes)."""
    for e in range(src.shape[0]):
        d = dst[e] - lo
        if cursor[d] >= end[d]:
            return False
        lists[cursor[d]] = src[e]
        cursor[d] += 1
    return True


@numba.njit(nogil=True, cache=True)
def scatter_edges_with_rows(src, dst, rows, lo, cursor, end, lists, list_rows):
    """scatter_edges that also places each edge's feature row in `list_rows`."""
    for e in range(src.shape[0]):
        d = dst[e] - lo
        if cursor[d] >= end[d]:
            return False
        lists[cursor[d]] = src[e]
        list_rows[cursor[d]] = rows[e]
        cursor[d] += 1
    return True


@numba.njit(parallel=True, nogil=True, cache=True)
def sort_lists_with_rows(indptr, indices, rows):
    """Sort each node's list by (source, feature row), moving `rows` with `indices`:
    the order is a function of the edges alone, however they arrived."""
    for v in numba.prange(indptr.shape[0] - 1):
        a, b = indptr[v], indptr[v + 1]
        by_row = np.argsort(rows[a:b], kind="mergesort")
        srcs = indices[a:b][by_row]
        by_src = np.argsort(srcs, kind="mergesort")
        indices[a:b] = srcs[by_src]
        rows[a:b] = rows[a:b][by_row][by_src]


@numba.njit(parallel=True, nogil=True, cache=True)
def sort_lists(indptr, indices):
    """Sort each node's list indices[indptr[v]:indptr[v + 1]] in place."""
    for v in numba.prange(indptr.shape[0] - 1):
        indices[indptr[v] : indptr[v + 1]].sort()


@numba.njit(nogil=True, cache=True)
def dedup_lists(indptr, indices, counts):
    """Remove repeats from each sorted list, compacting `indices` in place
    (front to back); counts[v] = the length of v's deduplicated list. Returns
    the total length."""
    q = 0
    for v in range(indptr.shape[0] - 1):
        first = q
        for p in range(indptr[v], indptr[v + 1]):
            if p == indptr[v] or indices[p] != indices[p - 1]:
                indices[q] = indices[p]
                q += 1
        counts[v] = q - first
    return q


def build_csc(
    edge_chunks: EdgeChunks,
    num_nodes: int,
    *,
    num_src: int | None = None,
    file: str = "edges",
    to_undirected: bool = False,
    drop_self_loops: bool = False,
    progress=None,
):
    """CSC (indptr int64, indices int32/int64, sorted per node) of the edges, in memory.

    `num_src` (default num_nodes) bounds the source ids of a relation between
    two node types; indices are int32 while they are below 2**31. Raises
    DatasetError naming `file` and the row of the first id out of range.
    `progress(n_edges)` is called after each chunk of each pass.
    """
    edges = EdgeStream(
        edge_chunks,
        num_nodes,
        num_src=num_src,
        file=file,
        to_undirected=to_undirected,
        drop_self_loops=drop_self_loops,
        progress=progress,
    )
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(edges.in_degrees(), out=indptr[1:])
    indices = np.empty(int(indptr[-1]), index_dtype(edges.num_src))
    cursor = indptr[:-1].copy()
    for src, dst in edges:
        if not scatter_edges(src, dst, 0, cursor, indptr[1:], indices):
            raise edges.changed()
    if not np.array_equal(cursor, indptr[1:]):
        raise edges.changed()
    sort_lists(indptr, indices)
    return indptr, indices
