"""The stack of feature tiers, its memory and its rules, and the `x[ids]` wrapper.

Every placement (in memory, memory-mapped file, pinned host, GPU, staged
copies, the SSD tier) and every tier over one (a cache, a victim buffer)
is a `FeatureSource` (the contract, storage/source.py); training code
only ever calls `gather` or indexes a `UnifiedTensor`, so changing the
placement changes no caller. A tier may wrap a lower one (`base`): rows it
does not hold itself come from there. `tiers` walks a stack top-down,
`stack_host_bytes` sums what its tiers hold in host memory, and
`check_stack` refuses stacks that make no sense. storage/stack_builder.py
builds the stacks training uses; the bottom is the dataset's `RowTable`
(gnnsys.storage.table) or the SSD tier. See docs/architecture.md,
"Feature tiers".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from gnnsys.errors import ConfigError
from gnnsys.ids import index_to_ids
from gnnsys.storage.source import CacheTier, FeatureSource, VictimTier

if TYPE_CHECKING:
    import torch

__all__ = ["UnifiedTensor", "check_roles", "check_stack", "has_tier", "stack_host_bytes", "tiers"]


def tiers(source: FeatureSource) -> Iterator[FeatureSource]:
    """The stack of sources from `source` down to the bottom (following `base`)."""
    tier: FeatureSource | None = source
    while tier is not None:
        yield tier
        tier = tier.base


def has_tier(source, role: type) -> bool:
    """Whether `source` is a FeatureSource whose stack holds a tier of class
    `role` (storage.source.CacheTier, VictimTier, or any tier class)."""
    return isinstance(source, FeatureSource) and any(isinstance(t, role) for t in tiers(source))


def stack_host_bytes(source: FeatureSource) -> dict:
    """{"tier.part": bytes} of host memory every tier of `source` holds now
    (each tier's host_bytes(), keyed by its name), plus "total"."""
    held = {f"{t.name}.{part}": int(n) for t in tiers(source) for part, n in t.host_bytes().items()}
    held["total"] = sum(held.values())
    return held


def check_stack(source: FeatureSource) -> FeatureSource:
    """`source` if its stack makes sense, else ConfigError naming the problem:
    every tier is a FeatureSource of the same shape and dtype as its base, and
    the tiers' roles are in order (check_roles)."""
    stack = list(tiers(source))
    for upper, lower in zip(stack, stack[1:]):
        if not isinstance(lower, FeatureSource):
            raise ConfigError("features", f"{type(lower).__name__} under {upper.name} is not a FeatureSource")
        if tuple(upper.shape) != tuple(lower.shape) or upper.dtype != lower.dtype:
            raise ConfigError(
                "features",
                f"{upper.name} ({tuple(upper.shape)}, {upper.dtype}) over "
                f"{lower.name} ({tuple(lower.shape)}, {lower.dtype}): shapes and dtypes differ",
            )
    return check_roles(source)


def check_roles(source: FeatureSource) -> FeatureSource:
    """`source` if its tiers' roles are in order, else ConfigError: at most
    one cache (a CacheTier over another only copies rows twice), and a victim
    buffer (VictimTier) only directly under the cache (nothing else offers it
    rows). A cache checks its own stack with it when it is made."""
    stack = list(tiers(source))
    names = " over ".join(t.name for t in stack)
    if sum(isinstance(t, CacheTier) for t in stack) > 1:
        raise ConfigError("features", f"a cache over a cache ({names}): keep one, of their combined size")
    for i, tier in enumerate(stack):
        if isinstance(tier, VictimTier) and (i == 0 or not isinstance(stack[i - 1], CacheTier)):
            raise ConfigError("features", f"a victim buffer must sit directly under the cache ({names})")
    return source


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
