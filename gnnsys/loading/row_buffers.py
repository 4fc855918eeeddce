"""The host buffers a loader's gathered rows land in, reused once nothing refers to them."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from gnnsys.storage.base import has_tier
from gnnsys.storage.source import CacheTier


class FeatureRows:
    """A feature source with the reusable host buffers its gathered rows land
    in (`x`, x_dtype) and, for rows stored in another dtype, are read into
    first (`raw`); ValueError for a `lookahead` without a cache to take the window."""

    def __init__(self, source, x_dtype: torch.dtype, capacity: int, lookahead: int = 0):
        if lookahead and not has_tier(source, CacheTier):
            raise ValueError(f"lookahead needs a feature stack with a cache, which takes the window; got {source!r}")
        self.source = source
        self.x = BufferPool(source.shape[1], x_dtype, capacity=capacity)
        self.raw = None if source.dtype == x_dtype else BufferPool(source.shape[1], source.dtype, capacity=2)


class BufferPool:
    """Reusable host buffers for gathered rows. A buffer is handed out again
    only when no tensor refers to its memory any more, so rows the caller or
    autograd still hold are never overwritten: each buffer is a numpy byte
    array, a batch's rows are a tensor over a numpy view of it, and that
    tensor's storage (shared by every view of the rows) holds the numpy view
    until the last tensor over it is freed, which a weak reference sees. A
    fresh allocation of a batch's rows (tens of MB) page-faults on first touch
    and costs more than the gather itself (benchmarks/README.md,
    "Measurements behind design choices").
    """

    def __init__(self, dim: int, dtype: torch.dtype, capacity: int):
        self.dim, self.dtype, self.capacity = dim, dtype, capacity
        self.row_bytes = dim * dtype.itemsize
        self.buffers: list[list] = []  # [bytes, weak reference to the view lent out last, or None]
        self.lock = threading.Lock()

    def take(self, rows: int) -> torch.Tensor:
        """A [rows, dim] tensor that nothing else refers to."""
        with self.lock:
            free = [entry for entry in self.buffers if entry[1] is None or entry[1]() is None]
            fits = [entry for entry in free if entry[0].shape[0] >= rows * self.row_bytes]
            if fits:
                return self._lend(fits[0], rows)
            if free:  # too small: make room for a bigger one
                self.buffers = [entry for entry in self.buffers if entry is not free[0]]
            entry = [np.empty((rows + rows // 4) * self.row_bytes, np.uint8), None]
            if len(self.buffers) < self.capacity:
                self.buffers.append(entry)
            return self._lend(entry, rows)

    def _lend(self, entry: list, rows: int) -> torch.Tensor:
        view = entry[0][: rows * self.row_bytes]
        entry[1] = weakref.ref(view)
        return torch.from_numpy(view).view(self.dtype).view(rows, self.dim)
