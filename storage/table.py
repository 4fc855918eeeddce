"""`RowTable`: feature rows in memory or memory-mapped from the aligned
`features.bin`, read with a parallel numba gather. It is the bottom of every
stack of feature sources (gnnsys.storage) and what `Dataset.features` is."""

from __future__ import annotations

import numpy as np
import torch

from gnnsys.ids import check_ids, gather_output, index_to_ids
from gnnsys.storage.source import FeatureSource

from .gather_cpu import gather_rows, gather_rows_to, tensor_words, word_view


class RowTable(FeatureSource):
    """A FeatureSource over a [num_rows, row_stride] uint8 table (a memmap of
    features.bin or an in-memory array) holding `dim` values of `dtype` per row.

    gather copies the requested rows in parallel into a reusable buffer, so a
    steady-state gather allocates nothing when `out` is passed; `table[ids]`
    (ids, a slice, a boolean mask or an int) returns the exact stored rows.
    It is a FeatureSource (gnnsys.storage.source) with no lower tier (`base`
    None); host_bytes() counts an in-memory table, not a memory-mapped one
    (its pages belong to the page cache).
    """

    def __init__(self, table: np.ndarray, dim: int, dtype: torch.dtype):
        if table.dtype != np.uint8 or table.ndim != 2:
            raise TypeError("table must be a 2-D uint8 array of rows")
        self.mapped = isinstance(table, np.memmap)
        self.table = np.asarray(table)
        self.dtype = dtype
        self.shape = (table.shape[0], dim)
        self.row_bytes = dim * dtype.itemsize
        if self.row_bytes > table.shape[1]:
            raise ValueError(f"rows of {table.shape[1]} bytes cannot hold {dim} x {dtype}")
        self._words = word_view(self.table, self.row_bytes)
        self.file = self.identity = None  # a mapped file's path and FileIdentity, when a load recorded them

    @classmethod
    def from_tensor(cls, x: torch.Tensor) -> RowTable:
        """An in-memory table holding a copy of the 2-D tensor `x`."""
        x = x.detach().contiguous().cpu()
        raw = x.view(torch.uint8).reshape(x.shape[0], -1).numpy()
        return cls(raw, x.shape[1], x.dtype)

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` (exact stored values) as a [len(ids), dim] tensor, in `out` if given."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        n = ids.shape[0]
        out = gather_output(out, n, self.shape[1], self.dtype)
        if n:
            raw = out.view(torch.uint8).reshape(n, self.row_bytes).numpy().view(self._words.dtype)
            gather_rows(self._words, ids.numpy(), raw)
        return out

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        """Row ids[i] into out[at[i]] (a CPU tensor of this dtype; `at` distinct), with no temporary."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        if out.device.type != "cpu" or not out.is_contiguous():
            return super().gather_into(ids, out, at)
        gather_rows_to(self._words, ids.numpy(), tensor_words(out), at.numpy())

    def host_bytes(self) -> dict:
        """{"rows": bytes} of an in-memory table; {} for a memory-mapped one."""
        return {} if self.mapped else {"rows": int(self.table.nbytes)}

    def __getitem__(self, index) -> torch.Tensor:
        ids = index_to_ids(index, self.shape[0])
        return self.gather(ids.view(1))[0] if ids.dim() == 0 else self.gather(ids)

    def __repr__(self):
        kind = "memory-mapped" if self.mapped else "in memory"
        return f"RowTable(shape={self.shape}, dtype={self.dtype}, {kind})"
