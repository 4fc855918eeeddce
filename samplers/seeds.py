"""Seed iteration: the node ids of a split cut into (shuffled) batches."""
from __future__ import annotations

import numpy as np
import torch


class SeedBatches:
    """Batches of `ids` for one epoch at a time.

    With `shuffle`, epoch e uses a permutation that is a function of
    (seed, e) only, so any epoch can be replayed on its own (resume).
    `drop_last` drops a final batch smaller than `batch_size`.
    """

    def __init__(self, ids, batch_size: int, shuffle: bool = True, drop_last: bool = False, seed: int = 0):
        ids = torch.as_tensor(ids)
        if ids.ndim != 1 or (ids.numel() and ids.dtype not in (torch.int32, torch.int64)):
            raise TypeError(f"ids must be a 1-D int32/int64 tensor, got {ids.ndim}-D {ids.dtype}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.ids = ids.long()
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)

    def __len__(self) -> int:
        n = self.ids.shape[0]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def order(self, epoch: int) -> torch.Tensor:
        """All ids in the order epoch `epoch` visits them."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        if not self.shuffle:
            return self.ids
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.ids.shape[0])
        return self.ids[torch.from_numpy(perm)]

    def epoch(self, epoch: int) -> list[torch.Tensor]:
        """The batches of epoch `epoch`, in order (len(self) of them)."""
        return list(self.order(epoch).split(self.batch_size))[:len(self)]
