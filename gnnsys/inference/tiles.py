"""The edge tiles of streaming inference (gnnsys.inference.layerwise): the
in-edges of each (block of destinations x chunk of source rows), as
`bucket_edges` groups them, bucketed once and kept in a scratch file for
the later layers that run over every node on the same grid (chunk rows and
block boundaries), which read them back instead of bucketing again.

A layer adopts the grid of the tiles kept when its sources are on that
chunk grid, the grid takes no more passes than its own plan, and each kept
block fits its budget; otherwise it buckets its own tiles (and keeps them
in place of the old ones when a later layer may use them). The file's
space is reserved before it is written; where the scratch disk cannot hold
it, every layer buckets its own tiles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.inference.rows_io import ScratchSpaceError, reserve_space
from gnnsys.inference.streaming import bucket_edges


class TileStore:
    """The tiles of one grid over every node, in `directory`/tiles.bin (see the module docstring)."""

    def __init__(self, directory, indptr: np.ndarray, indices: np.ndarray):
        self.path, self.indptr, self.indices = Path(directory) / "tiles.bin", indptr, indices
        self.grid = None  # (chunk_rows, drop_self, bounds) of the tiles kept
        self.index: list = []  # per block: (file offset, num_chunks + 1 offsets, edges, destinations)
        self.reused = 0

    def adopt(self, plan, drop_self: bool, align_rows: int, row_bytes: int, budget: int) -> bool:
        """Take the kept grid into `plan` (its chunk_rows, bounds and input
        chunks' bytes at `row_bytes` a row) when it fits: same drop_self,
        chunk rows on the `align_rows` grid, no more passes, and each block
        within `budget` beside the plan's fixed arrays at plan.per_dst bytes
        per destination and plan.per_edge per in-edge."""
        if self.grid is None or len(self.index) != len(self.grid[2]) - 1:
            return False
        chunk_rows, kept_drop, bounds = self.grid
        if kept_drop != drop_self or chunk_rows % align_rows or len(bounds) > len(plan.bounds):
            return False
        fixed = dict(plan.fixed, **{"input chunks": chunk_rows * row_bytes})
        avail = budget - sum(fixed.values())
        for b0, b1 in zip(bounds[:-1], bounds[1:]):
            if plan.per_dst * (b1 - b0) + plan.per_edge * int(self.indptr[b1] - self.indptr[b0]) > avail:
                return False
        plan.chunk_rows, plan.bounds, plan.fixed = chunk_rows, list(bounds), fixed
        return True

    def tiles(self, k: int, block: np.ndarray, chunk_rows: int, num_chunks: int, drop_self: bool, keep: bool):
        """Block k's tiles (offsets, src, dst, count as bucket_edges gives
        them): read back when kept, else bucketed (and kept when `keep`)."""
        if self.grid is not None and self.grid[:2] == (chunk_rows, drop_self) and k < len(self.index):
            self.reused += 1
            return self._read(*self.index[k])
        tiles = bucket_edges(self.indptr, self.indices, block, chunk_rows, num_chunks, drop_self)
        if keep:
            self._keep(k, tiles, chunk_rows, drop_self)
        return tiles

    def start(self, plan, drop_self: bool, keep: bool):
        """A layer on `plan`'s grid begins: unless the kept tiles are on it, they are dropped, and when
        `keep`, this grid's will be kept (space for every node's in-edges reserved; none kept where
        the disk cannot hold them)."""
        grid = (plan.chunk_rows, drop_self, tuple(plan.bounds))
        if self.grid == grid:
            return
        self.grid, self.index = None, []
        self.path.unlink(missing_ok=True)
        if not keep:
            return
        num_chunks = -(-(len(self.indptr) - 1) // plan.chunk_rows)
        size = 8 * int(self.indptr[-1]) + 8 * (len(self.indptr) - 1) + 8 * (num_chunks + 1) * (len(plan.bounds) - 1)
        self.path.touch()
        try:
            reserve_space(self.path, size)
        except ScratchSpaceError:
            self.path.unlink(missing_ok=True)
            return
        self.grid = grid

    def _keep(self, k: int, tiles, chunk_rows: int, drop_self: bool):
        if self.grid is None or self.grid[:2] != (chunk_rows, drop_self) or k != len(self.index):
            return
        offset = self.index[-1][0] + _nbytes(*self.index[-1][1:]) if self.index else 0
        offsets, src, dst, count = tiles
        with open(self.path, "r+b") as f:
            f.seek(offset)
            for array in (offsets, src, dst, count):
                np.ascontiguousarray(array).tofile(f)
        self.index.append((offset, offsets.shape[0], src.shape[0], count.shape[0]))

    def _read(self, offset: int, num_offsets: int, edges: int, dsts: int):
        with open(self.path, "rb") as f:
            f.seek(offset)
            arrays = tuple(
                np.fromfile(f, dtype, n)
                for dtype, n in ((np.int64, num_offsets), (np.int32, edges), (np.int32, edges), (np.int64, dsts))
            )
        if [a.shape[0] for a in arrays] != [num_offsets, edges, edges, dsts]:
            raise OSError(f"{self.path}: kept edge tiles cut short")
        return arrays

    def remove(self):
        """Delete the file."""
        self.path.unlink(missing_ok=True)


def _nbytes(num_offsets: int, edges: int, dsts: int) -> int:
    return 8 * num_offsets + 8 * edges + 8 * dsts
