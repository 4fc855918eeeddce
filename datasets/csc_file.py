"""`write_csc`: the CSC of an edge stream written to indptr.npy and
indices.npy with the process's memory under a limit.

After the counting pass, nodes are cut into buckets (contiguous id ranges)
whose neighbour lists fit in the memory left. One bucket: the second pass
scatters straight into its lists. Several: the second pass appends each edge
to its bucket's spill file (a bucketed counting sort, sequential writes
only); then each bucket's file is read back, scattered into its lists, sorted,
deduplicated when asked, appended to indices.npy and deleted. indices.npy is
written front to back and hashed as it is written.

When the edge stream carries each edge's feature row (EdgeStream.edge_rows),
the rows travel with the sources through the scatter, the spill files (one
beside each bucket's) and the sort, and are written in CSC order to a scratch
file (CSCFiles.edge_rows_file, int64) for the writer to gather the edge
features by; both builds give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from gnnsys.atomic import sha256_file
from gnnsys.errors import DatasetError
from gnnsys.host_memory import anonymous_bytes

from .csc import (
    EdgeStream,
    dedup_lists,
    index_dtype,
    scatter_edges,
    scatter_edges_with_rows,
    sort_lists,
    sort_lists_with_rows,
)
from .output_file import OutputFile, npy_header, write_error, write_npy

CHUNK_MARGIN = 512 << 20  # one source chunk and its transformed copies in flight
SPILL_PIECE = 1 << 23  # edges read back from a spill file at a time
SPILL_BUFFER = 1 << 20  # bytes buffered per open spill file
NODE_BYTES = 17  # a bucket's bytes per node: its list bounds and cursor (int64 each), a bool of the final check
ROW_BYTES = 24  # a carried edge-feature row per edge: int64 in the list, and the sort's two int64 permutations
EDGE_ROWS_FILE = ".edge-rows.bin"


@dataclass
class CSCFiles:
    """What write_csc wrote: the final indptr (int64, in memory), the node
    order when relabelled by degree (new id -> old id), each file's sha256,
    the bucket count, the bytes spilled to scratch files, and the scratch
    file of each edge's feature row in CSC order (int64; None unless the
    stream carries rows)."""

    indptr: np.ndarray
    order: np.ndarray | None
    checksums: dict
    buckets: int
    spill_bytes: int
    edge_rows_file: Path | None = None


def plan_buckets(indptr: np.ndarray, itemsize: int, budget: int) -> list[tuple[int, int]]:
    """Contiguous node ranges [lo, hi) whose lists (itemsize bytes an edge)
    and per-node state (NODE_BYTES a node) each fit in `budget` bytes; raises
    DatasetError("--mem-limit") when one node's list alone does not."""
    n = indptr.shape[0] - 1

    def cost(a, b):
        return int(indptr[b] - indptr[a]) * itemsize + (b - a) * NODE_BYTES

    buckets, a = [], 0
    while a < n:
        if cost(a, a + 1) > budget:
            raise DatasetError(
                "--mem-limit",
                f"too small to build the graph: node {a}'s "
                f"{int(indptr[a + 1] - indptr[a])} in-edges alone need {cost(a, a + 1)} bytes "
                f"beyond what the process holds, and {budget} bytes are left",
            )
        lo, hi = a + 1, n  # largest b in [lo, hi] with cost(a, b) <= budget
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if cost(a, mid) <= budget else (lo, mid - 1)
        buckets.append((a, lo))
        a = lo
    return buckets or [(0, 0)]


@numba.njit(nogil=True, cache=True)
def _group_by_bucket(src, dst, rows, bounds, out, out_rows):
    """Counting sort of the edges by bucket (bounds[k] <= dst < bounds[k + 1]):
    out holds (src, dst) pairs bucket after bucket, and out_rows the edges'
    `rows` in the same order (when rows is not empty); returns each bucket's
    start in pairs (len(bounds))."""
    nb = bounds.shape[0] - 1
    bucket = np.empty(src.shape[0], np.int32)
    starts = np.zeros(nb + 1, np.int64)
    for e in range(src.shape[0]):
        k = np.searchsorted(bounds, dst[e], "right") - 1
        bucket[e] = k
        starts[k + 1] += 1
    for k in range(nb):
        starts[k + 1] += starts[k]
    cursor = starts[:-1].copy()
    for e in range(src.shape[0]):
        p = cursor[bucket[e]]
        out[2 * p] = src[e]
        out[2 * p + 1] = dst[e]
        if rows.shape[0]:
            out_rows[p] = rows[e]
        cursor[bucket[e]] += 1
    return starts


class _Spill:
    """One scratch file per bucket, appended to with buffered writes; with
    `rows`, a second file per bucket holding each edge's feature row."""

    def __init__(self, directory: Path, buckets, dtype, rows: bool = False):
        self.paths = [directory / f".spill-{k}.bin" for k in range(len(buckets))]
        self.row_paths = [directory / f".spill-{k}.rows.bin" for k in range(len(buckets))] if rows else []
        self.bounds = np.array([b[0] for b in buckets] + [buckets[-1][1]], np.int64)
        self.dtype = np.dtype(dtype)
        self.bytes = 0
        self.files = []
        try:
            for p in self.paths + self.row_paths:
                self.files.append(open(p, "wb", buffering=SPILL_BUFFER))
        except OSError as e:
            self.discard()
            raise write_error(directory, e) from None

    def _append(self, k: int, data):
        try:
            self.files[k].write(data)
        except OSError as e:
            raise write_error((self.paths + self.row_paths)[k], e) from None

    def add(self, src, dst, rows=None):
        out = np.empty(2 * src.shape[0], self.dtype)
        out_rows = np.empty(src.shape[0] if rows is not None else 0, np.int64)
        given = rows if rows is not None else np.empty(0, np.int64)
        starts = _group_by_bucket(src, dst, given, self.bounds, out, out_rows)
        buckets = len(self.paths)
        for k in range(buckets):
            if starts[k + 1] > starts[k]:
                self._append(k, out[2 * starts[k] : 2 * starts[k + 1]].data)
                if rows is not None:
                    self._append(buckets + k, out_rows[starts[k] : starts[k + 1]].data)
        self.bytes += out.nbytes + out_rows.nbytes

    def finish(self):
        for p, f in zip(self.paths + self.row_paths, self.files):
            try:
                f.close()
            except OSError as e:
                raise write_error(p, e) from None

    def pieces(self, k: int):
        """The (src, dst) edges of bucket k (strided views of the pairs read),
        as (src, dst, rows) when rows were spilled, SPILL_PIECE at a time;
        the files are deleted after."""
        rows = open(self.row_paths[k], "rb") if self.row_paths else None
        try:
            with open(self.paths[k], "rb") as f:
                while (pairs := np.fromfile(f, self.dtype, 2 * SPILL_PIECE)).size:
                    if rows is None:
                        yield pairs[0::2], pairs[1::2]
                    else:
                        yield pairs[0::2], pairs[1::2], np.fromfile(rows, np.int64, pairs.size // 2)
        finally:
            if rows is not None:
                rows.close()
        for p in [self.paths[k], *self.row_paths[k : k + 1]]:
            p.unlink()

    def discard(self):
        for f in self.files:
            if not f.closed:
                f.close()
        for p in self.paths + self.row_paths:
            p.unlink(missing_ok=True)


def check_dedup(dedup: bool, carries_rows: bool):
    """DatasetError("--dedup") when repeated edges carrying edge features would be merged."""
    if dedup and carries_rows:
        raise DatasetError(
            "--dedup", "cannot merge repeated edges that carry edge features (their features may differ)"
        )


def _degree_order(degree: np.ndarray) -> np.ndarray:
    """New id -> old id, by in-degree descending (ties keep the old order)."""
    return np.argsort(-degree, kind="stable")


def write_csc(
    edges: EdgeStream,
    directory,
    *,
    dedup: bool = False,
    reorder: bool = False,
    mem_limit: int | None = None,
    check_space=None,
    bar=None,
    names: tuple[str, str] = ("indptr.npy", "indices.npy"),
) -> CSCFiles:
    """Write the CSC of `edges` to directory/indptr.npy and indices.npy
    (`names` gives others: a heterogeneous dataset has one pair per relation).

    `mem_limit` bytes bound the process's anonymous memory (what it holds
    when the lists are planned counts against it; pages of memory-mapped
    files are page cache, which the kernel reclaims); None keeps all lists
    in memory at once.
    `reorder` renames nodes by in-degree, hottest first; `dedup` removes
    repeated edges. `check_space(scratch_bytes, indices_bytes)` is called
    before the first byte is written. `bar(phase, total)` returns a progress
    callback for each pass. When `edges` carries feature rows, they are
    written in CSC order to directory/EDGE_ROWS_FILE (not with `dedup`,
    which would merge edges of different features).
    """
    directory = Path(directory)
    bar = bar or (lambda phase, total: None)
    check_dedup(dedup, edges.carries_rows)
    n = edges.num_nodes
    if reorder and edges.num_src != n:
        raise ValueError("only a graph of one node type can be relabelled by degree")
    dtype = np.dtype(index_dtype(edges.num_src))  # the lists hold source ids
    indptr_name, indices_name = names
    edges.progress = bar("count edges", edges.expected)
    indptr = np.zeros(n + 1, np.int64)
    degree = edges.in_degrees(indptr[1:])
    order = None
    if reorder:
        order = _degree_order(degree)
        degree[:] = degree[order]
        edges.inverse = np.empty(n, dtype)
        edges.inverse[order] = np.arange(n, dtype=dtype)
    np.cumsum(degree, out=degree)
    total = int(indptr[-1])
    if mem_limit is None:
        buckets = [(0, n)]
    else:
        held = anonymous_bytes() + CHUNK_MARGIN + (8 * n if dedup else 0)  # dedup: the new degrees
        if held >= mem_limit:
            raise DatasetError(
                "--mem-limit",
                f"{mem_limit / 1e9:.2f} GB is too small: the process already holds "
                f"{held / 1e9:.2f} GB (the input's arrays, the in-degrees and one chunk of edges "
                "in flight) before any neighbour list",
            )
        edge_bytes = dtype.itemsize + (ROW_BYTES if edges.carries_rows else 0)
        buckets = plan_buckets(indptr, edge_bytes, mem_limit - held)
    row_bytes = 8 * total if edges.carries_rows else 0
    pair_dtype = np.dtype(index_dtype(max(n, edges.num_src)))  # a spilled (source, destination) pair
    spill_bytes = 2 * total * pair_dtype.itemsize + row_bytes if len(buckets) > 1 else 0
    header = npy_header(dtype, total)
    if check_space:
        check_space(spill_bytes + row_bytes, len(header) + total * dtype.itemsize)
    out = OutputFile(directory / indices_name, len(header) + total * dtype.itemsize)
    rows_out = OutputFile(directory / EDGE_ROWS_FILE, row_bytes) if edges.carries_rows else None
    spill = None
    try:
        out.write(header)
        counts = np.empty(n, np.int64) if dedup else None
        if len(buckets) == 1:
            edges.progress = bar("place edges", total)
            _emit(out, rows_out, indptr, 0, n, iter(edges), counts, edges)
        else:
            spill = _Spill(directory, buckets, pair_dtype, rows=edges.carries_rows)
            edges.progress = bar("spill edges", total)
            for chunk in edges:
                spill.add(*chunk)
            spill.finish()
            progress = bar("sort buckets", len(buckets))
            for k, (lo, hi) in enumerate(buckets):
                _emit(out, rows_out, indptr, lo, hi, spill.pieces(k), counts, edges)
                if progress:
                    progress(1)
        digest = out.close()  # truncated to what was written: deduplicated lists end early
        if rows_out is not None:
            rows_out.close()
    except BaseException:
        if spill is not None:
            spill.discard()
        out.abandon()
        if rows_out is not None:
            rows_out.abandon()
        raise
    if dedup:
        indptr[1:] = np.cumsum(counts)
        digest = _rewrite_count(directory / indices_name, dtype, int(indptr[-1]), len(header))
    checksums = {indices_name: digest, indptr_name: write_npy(directory / indptr_name, indptr)}
    rows_file = directory / EDGE_ROWS_FILE if edges.carries_rows else None
    return CSCFiles(indptr, order, checksums, len(buckets), spill_bytes, rows_file)


def _emit(out: OutputFile, rows_out, indptr, lo: int, hi: int, pieces, counts, edges: EdgeStream):
    """Scatter the edges of nodes [lo, hi) into their lists, sort them (and
    deduplicate into counts[lo:hi]) and append them to `out`; with `rows_out`
    the pieces are (src, dst, rows) and the rows, in list order, go there."""
    local = indptr[lo : hi + 1] - indptr[lo]
    lists = np.empty(int(local[-1]), index_dtype(edges.num_src))
    list_rows = np.empty(lists.shape[0] if rows_out is not None else 0, np.int64)
    cursor = local[:-1].copy()
    for piece in pieces:
        if rows_out is None:
            placed = scatter_edges(*piece, lo, cursor, local[1:], lists)
        else:
            placed = scatter_edges_with_rows(*piece, lo, cursor, local[1:], lists, list_rows)
        if not placed:
            raise edges.changed()
    if not np.array_equal(cursor, local[1:]):
        raise edges.changed()
    if rows_out is None:
        sort_lists(local, lists)
    else:
        sort_lists_with_rows(local, lists, list_rows)
        rows_out.write(list_rows)
    size = dedup_lists(local, lists, counts[lo:hi]) if counts is not None else lists.shape[0]
    out.write(lists[:size])


def _rewrite_count(path: Path, dtype, count: int, header_len: int) -> str:
    """Fix the header of an indices.npy shortened by deduplication (padded to
    its old length) and return the file's sha256 (a second read: only here)."""
    header = bytearray(npy_header(dtype, count))
    pad = header_len - len(header)
    if pad < 0:
        raise AssertionError("a smaller count cannot need a longer .npy header")
    header[-1:] = b" " * pad + b"\n"
    header[8:10] = (header_len - 10).to_bytes(2, "little")
    try:
        with open(path, "r+b") as f:
            f.write(header)
    except OSError as e:
        raise write_error(path, e) from None
    return sha256_file(path)
