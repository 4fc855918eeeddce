"""The `FeatureSource` protocol and the user-facing `x[ids]` wrapper.

Every placement (in memory, memory-mapped file, pinned host, GPU, cached)
implements `FeatureSource`; training code only ever calls `gather` or indexes a
`UnifiedTensor`, so changing the placement changes no caller.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class FeatureSource(Protocol):
    """Rows of a [num_nodes, dim] feature table, wherever they live.

    gather(ids, out=None) returns rows `ids` (an int32/int64 tensor) as a
    [len(ids), dim] tensor on `device`, written into `out` when given.
    gather_async returns a handle whose wait() gives the same tensor.
    """

    shape: tuple
    dtype: torch.dtype
    device: torch.device

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor: ...

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None): ...


class Ready:
    """An already-completed gather handle (for synchronous sources)."""

    def __init__(self, value: torch.Tensor):
        self.value = value

    def wait(self) -> torch.Tensor:
        return self.value


class UnifiedTensor:
    """`x[ids]` over any FeatureSource: rows come back on the source's device."""

    def __init__(self, source: FeatureSource):
        self.source = source

    @property
    def shape(self):
        return self.source.shape

    @property
    def dtype(self):
        return self.source.dtype

    @property
    def device(self):
        return self.source.device

    def __len__(self):
        return self.source.shape[0]

    def __getitem__(self, ids) -> torch.Tensor:
        if isinstance(ids, slice):
            ids = torch.arange(*ids.indices(self.source.shape[0]))
        elif isinstance(ids, int):
            return self.source.gather(torch.tensor([ids]))[0]
        ids = torch.as_tensor(ids)
        if ids.dtype == torch.bool:
            ids = ids.nonzero().flatten()
        return self.source.gather(ids)

    def __repr__(self):
        return f"UnifiedTensor({type(self.source).__name__}, shape={tuple(self.shape)}, dtype={self.dtype})"


def check_ids(ids: torch.Tensor, num_rows: int, name: str = "ids") -> torch.Tensor:
    """Raise IndexError naming the first id outside [0, num_rows)."""
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be int32 or int64, got {ids.dtype}")
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= num_rows:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{name}: id {bad} out of range [0, {num_rows})")
    return ids
