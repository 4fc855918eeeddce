"""How one layer of streaming inference (gnnsys.inference.layerwise) fits its
host-memory budget: the rows read at a time, the destinations per batch of
the dense maps, and the blocks of destinations (one pass over the input
each).

Every array the layer holds is counted. Fixed, for the whole layer
(`LayerPlan.fixed`, by name): the target node ids when they are an array
(every node is a range and holds none), the whole graph's GCN degrees and
their inverse square roots, the result rows when they are kept in memory,
two chunks of input rows with their buffers and temporaries, and a batch of
the dense maps' temporaries (the destinations' own rows, when a file of
their own holds them, SAGE's projected rows, are read into the same
buffers). Per destination of a block: its state (`LayerStream.dst_bytes`),
its edge count and, for targets given as ids (not a range of every node),
its id and order, and 8 bytes per in-edge (the tile's source and
destination positions). The blocks are cut in one pass over the targets'
degrees without temporaries of the targets' size.

A block of a range of nodes holds its destinations' input rows through its
pass only when that costs no pass: otherwise it reads them again after its
pass, to finish (`LayerPlan.rows_after`), one more read of the input's rows
in all against a pass saved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from gnnsys.errors import ConfigError

MAX_CHUNK = 64 << 20  # bytes a chunk of input rows takes with its buffers, by default at most
PER_ID = 40  # per destination given by id: its id, sort order, sorted id, kept-edge count and its chunk's search
PER_RANGE = 8  # per destination of a range of nodes: its kept-edge count
PER_EDGE = 8  # per in-edge of a block: its source row (int32) and destination position (int32)
MIB = 1 << 20


@dataclass
class LayerPlan:
    """chunk_rows: input rows read at a time; batch_size: destinations per
    batch of the dense maps; fixed: bytes of each array held for the whole
    layer, by name; bounds: the blocks' boundaries in the targets (a pass
    each); per_dst, per_edge: the bytes a block holds per destination and
    per in-edge; rows_after: each block reads its own rows again after its
    pass rather than holding them through it."""

    chunk_rows: int
    batch_size: int
    fixed: dict
    bounds: list
    per_dst: int
    per_edge: int = PER_EDGE
    rows_after: bool = False

    @property
    def passes(self) -> int:
        """Blocks of destinations: passes over the input."""
        return len(self.bounds) - 1


def held_arrays(layer, degree, sink) -> dict:
    """The arrays a layer holds beside its streaming state, by name: the
    whole graph's GCN degrees and their inverse square roots, and the
    result rows `sink` keeps in memory (an array, not a file's memory map)."""
    held = {"degrees": 0 if degree is None or not layer.needs_degree else 2 * degree.nbytes}
    array = getattr(sink, "array", None)
    if isinstance(array, np.ndarray) and not isinstance(array, np.memmap):
        held["result rows"] = array.nbytes
    return held


def chunk_row_bytes(source, stream) -> int:
    """Host bytes per row of a chunk: two raw buffers and two chunks of float
    rows (one read ahead), the stream's extra."""
    return 2 * source.row_bytes + 2 * 4 * source.dim + stream.chunk_row_bytes()


def plan_layer(stream, source, ids, count: int, indptr, budget: int, chunk_bytes, batch_size: int, held: dict):
    """The LayerPlan of `stream` (a LayerStream) reading `source` for `count`
    targets (`ids`, int64, or None for every node 0..count-1) within `budget`
    bytes, `held` naming the other arrays held meanwhile (degrees, result
    rows); ConfigError naming every fixed part when even one destination
    does not fit beside them."""
    chunk_rows = _chunk_rows(source, stream, budget, chunk_bytes)
    dense_row = 4 * (stream.layer.in_dim + 3 * max(stream.layer.out_dim, stream.width))  # a destination's temporaries
    batch_size = max(1, min(batch_size, count, budget // 8 // dense_row))
    fixed = {
        "node ids": 0 if ids is None else ids.nbytes,
        **held,
        "input chunks": chunk_rows * chunk_row_bytes(source, stream),
        "dense batch": batch_size * dense_row,
    }
    avail = budget - sum(fixed.values())
    per_id = PER_RANGE if ids is None else PER_ID
    cuts = [(stream.dst_bytes() + per_id, False)]
    if ids is None and not stream.dst_first:
        cuts.append((stream.dst_bytes(rows_held=False) + per_id, True))
    plans = []
    for per_dst, rows_after in cuts:
        bounds, biggest = _bounds(indptr, ids, count, per_dst, avail)
        plans.append((biggest > avail, len(bounds), rows_after, per_dst, bounds, biggest))
    short, _, rows_after, per_dst, bounds, biggest = min(plans)  # fits, then fewest passes, then rows held
    if short:
        parts = ", ".join(f"{name} {_size(size)}" for name, size in fixed.items() if size)
        raise ConfigError(
            "host_mem_budget",
            f"{budget:,} bytes cannot hold {parts} and one destination ({biggest:,} bytes): "
            f"{sum(fixed.values()) + biggest:,} bytes in all; raise it or lower chunk_bytes",
        )
    return LayerPlan(chunk_rows, batch_size, fixed, bounds, per_dst, rows_after=rows_after)


def _bounds(indptr, ids, count: int, per_dst: int, avail: int):
    """The blocks' boundaries in the targets, each costing at most `avail`
    at `per_dst` bytes per destination and PER_EDGE per in-edge, and the
    largest single target's cost."""
    targets = np.empty(0, np.int64) if ids is None else ids
    num, biggest = _cut(indptr, targets, ids is None, count, per_dst, PER_EDGE, avail, np.empty(0, np.int64))
    bounds = np.empty(num + 1, np.int64)
    _cut(indptr, targets, ids is None, count, per_dst, PER_EDGE, avail, bounds)
    return bounds.tolist(), biggest


def _size(nbytes: int) -> str:
    return f"{nbytes / MIB:,.1f} MiB" if nbytes >= MIB else f"{nbytes:,} bytes"


def _chunk_rows(source, stream, budget: int, chunk_bytes) -> int:
    """Rows read at a time, on the source's alignment grid: chunk_bytes of
    input rows, or by default as many as take min(budget / 16, MAX_CHUNK)
    bytes with their buffers (a pass reads the whole input whatever the
    chunk, so the budget goes to destinations)."""
    if chunk_bytes is None:
        rows = min(budget // 16, MAX_CHUNK) // chunk_row_bytes(source, stream)
    else:
        rows = int(chunk_bytes) // max(source.row_bytes, 1)
    rows = max(source.align_rows, rows - rows % source.align_rows)
    return min(rows, -(-source.num_rows // source.align_rows) * source.align_rows)


@numba.njit(nogil=True, cache=True)
def _cut(indptr, ids, all_nodes, count, per_dst, per_edge, avail, bounds):
    """Cut the targets (ids, or 0..count-1 when all_nodes) into consecutive
    blocks each costing at most `avail` (per_dst + per_edge * in-degree per
    target); the boundaries go to `bounds` where it has room. Returns (number
    of blocks, the largest single target's cost)."""
    blocks, total, biggest = 0, 0, 0
    if bounds.shape[0] > 0:
        bounds[0] = 0
    for j in range(count):
        v = j if all_nodes else ids[j]
        cost = per_dst + per_edge * (indptr[v + 1] - indptr[v])
        biggest = max(biggest, cost)
        if total > 0 and total + cost > avail:
            blocks += 1
            if bounds.shape[0] > blocks:
                bounds[blocks] = j
            total = 0
        total += cost
    if count > 0:
        blocks += 1
        if bounds.shape[0] > blocks:
            bounds[blocks] = count
    return blocks, biggest
