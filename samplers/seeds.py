"""Seed iteration: the node ids of a split cut into (shuffled) batches."""

from __future__ import annotations

import numpy as np
import torch


class SeedBatches:
    """Batches of `ids` for one epoch at a time.

    With `shuffle`, epoch e uses a permutation that is a function of
    (seed, e) only, so any epoch can be replayed on its own (resume).
    `drop_last` drops a final batch smaller than `batch_size`. With
    `world_size` W > 1 (data-parallel training) this is the share of rank
    `rank`: every epoch's order is cut into W disjoint strided shares of
    len(ids) // W ids each (the n % W ids left at the end of that epoch's
    order sit out that epoch), so every rank runs the same number of batches.
    """

    def __init__(
        self,
        ids,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        ids = torch.as_tensor(ids)
        if ids.ndim != 1 or (ids.numel() and ids.dtype not in (torch.int32, torch.int64)):
            raise TypeError(f"ids must be a 1-D int32/int64 tensor, got {ids.ndim}-D {ids.dtype}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size) and world_size >= 1, got {rank} of {world_size}")
        self.ids = ids.long()
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.rank, self.world_size = int(rank), int(world_size)

    def __len__(self) -> int:
        n = self.ids.shape[0] // self.world_size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def order(self, epoch: int) -> torch.Tensor:
        """The ids (this rank's share) in the order epoch `epoch` visits them."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        ids = self.ids
        if self.shuffle:
            ids = ids[torch.from_numpy(np.random.default_rng([self.seed, epoch]).permutation(ids.shape[0]))]
        share = ids.shape[0] // self.world_size
        return ids if self.world_size == 1 else ids[self.rank : share * self.world_size : self.world_size]

    def epoch(self, epoch: int) -> list[torch.Tensor]:
        """The batches of epoch `epoch`, in order (len(self) of them)."""
        return list(self.order(epoch).split(self.batch_size))[: len(self)]
