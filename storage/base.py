"""The `FeatureSource` protocol, the stack of sources, and the `x[ids]` wrapper.

Every placement (in memory, memory-mapped file, pinned host, GPU, staged
copies) implements `FeatureSource`; training code only ever calls `gather` or
indexes a `UnifiedTensor`, so changing the placement changes no caller. A
source may wrap a lower tier (`base`): rows it does not hold itself come from
there. `storage.placement` builds the stack; the bottom is always the
dataset's `RowTable` (gnnsys.datasets.feature_table). See
docs/architecture.md, "Feature tiers".
"""
from __future__ import annotations

from typing import Iterator, Protocol, runtime_checkable

import torch

from gnnsys.ids import index_to_ids


@runtime_checkable
class FeatureSource(Protocol):
    """Rows of a [num_nodes, dim] feature table, wherever they live.

    gather(ids, out=None) returns rows `ids` (an int32/int64 tensor) as a
    [len(ids), dim] tensor on `device`, written into `out` when given, and
    raises IndexError for ids outside [0, num_nodes). gather_async returns a
    handle whose wait() gives the same tensor. `base` is the source this one
    wraps and falls back to (None for the bottom of a stack).
    """

    shape: tuple
    dtype: torch.dtype
    device: torch.device
    base: "FeatureSource | None"

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor: ...

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None): ...


def tiers(source: FeatureSource) -> Iterator[FeatureSource]:
    """The stack of sources from `source` down to the bottom (following `base`)."""
    while source is not None:
        yield source
        source = getattr(source, "base", None)


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

    def __getitem__(self, index) -> torch.Tensor:
        ids = index_to_ids(index, self.source.shape[0])
        return self.source.gather(ids.view(1))[0] if ids.dim() == 0 else self.source.gather(ids)

    def __repr__(self):
        return f"UnifiedTensor({type(self.source).__name__}, shape={tuple(self.shape)}, dtype={self.dtype})"
