"""`BatchDraws`: the input ids of every training batch of a run, drawn as
the run's loader draws them, for a tier that packs batches ahead of
training (storage/packed_source.py). Every draw is a function of (seed,
epoch, batch, layer, node) and every sampler kind draws the same, so the
CPU sampler drawing epoch e's batch i here gives exactly what the loader
gathers for it."""

from __future__ import annotations

import functools

import numpy as np

from gnnsys.datasets.meta_schema import identity
from gnnsys.loading.loader import seed_batches
from gnnsys.loading.minibatch_arrays import minibatch_arrays
from gnnsys.loading.options import BatchOptions


class BatchDraws:
    """The batches of `dataset`'s training split under `options` (a
    MinibatchOptions) for data-parallel rank `rank` of `world_size`:
    `batches` an epoch, `epochs` (the run's), `draw(epoch, batch)` its input
    ids (int64), `sampled(epoch, batch)` the whole batch as arrays, and `key`,
    what decides them (the dataset's identity, split, seed, batch size,
    fanouts, sampling, rank and world size), for a packed window's manifest."""

    def __init__(self, dataset, options, sampler, rank: int = 0, world_size: int = 1):
        batches = BatchOptions(
            batch_size=options.batch_size, shuffle=True, seed=options.seed, rank=rank, world_size=world_size
        )
        self.seeds = seed_batches(dataset.split("train"), batches)
        self.sampler = sampler
        self.batches, self.epochs = len(self.seeds), options.epochs
        self.key = {
            "dataset": identity(dataset.meta) or dataset.name,
            "split": "train",
            "seed": options.seed,
            "batch_size": options.batch_size,
            "fanouts": list(options.fanouts),
            "sampling": options.sampling,
            "rank": rank,
            "world_size": world_size,
            "batches_per_epoch": self.batches,
        }

    @functools.lru_cache(maxsize=2)  # noqa: B019 -- one draws object per run; two epochs of seeds at most
    def _epoch(self, epoch: int) -> list:
        return self.seeds.epoch(epoch)

    def draw(self, epoch: int, batch: int) -> np.ndarray:
        """The input ids of batch `batch` of epoch `epoch`."""
        return self.sampled(epoch, batch)["input_nodes"]

    def sampled(self, epoch: int, batch: int) -> dict:
        """Batch `batch` of epoch `epoch` as the loader samples it, as arrays (`minibatch_arrays`)."""
        return minibatch_arrays(self.sampler.sample(self._epoch(epoch)[batch], epoch, batch))
