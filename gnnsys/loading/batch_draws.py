"""`BatchDraws`: the input ids of every training batch of a run, drawn as
the run's loader draws them, for a tier that packs batches ahead of
training (storage/packed_source.py). Every draw is a function of (seed,
epoch, batch, layer, node) and every sampler kind draws the same, so the
CPU sampler drawing epoch e's batch i here gives exactly what the loader
gathers for it. `BatchDraws.fixed_stream` is a fixed stream instead (sampled
evaluation's): given seeds in order, every batch in one sampling epoch."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch

from gnnsys.datasets.meta_schema import identity
from gnnsys.loading.loader import seed_batches
from gnnsys.loading.minibatch_arrays import minibatch_arrays
from gnnsys.loading.options import BatchOptions
from gnnsys.storage.packing import ids_hash


class BatchDraws:
    """The batches of `dataset`'s training split under `options` (a
    MinibatchOptions) for data-parallel rank `rank` of `world_size`:
    `batches` an epoch, `epochs` (the run's), `draw(epoch, batch)` its input ids (int64), and `key`,
    what decides them (the dataset's identity, split, seed, batch size,
    fanouts, sampling, rank and world size), for a packed window's manifest.
    `fixed`: a fixed stream gathered besides them (None here; see `with_fixed`).
    for_loader: `sampled(epoch, batch)` gives the whole batch as arrays
    (gnnsys.loading.minibatch_arrays), which the packer writes for the loader
    to take instead of sampling the batch again (a homogeneous graph's)."""

    fixed: BatchDraws | None = None
    sampled: Callable[[int, int], dict] | None = None

    def __init__(self, dataset, options, sampler, rank: int = 0, world_size: int = 1, for_loader: bool = False):
        batches = BatchOptions(
            batch_size=options.batch_size, shuffle=True, seed=options.seed, rank=rank, world_size=world_size
        )
        self._start(dataset, options, sampler, dataset.split("train"), batches, options.epochs, split="train")
        self.key.update(rank=rank, world_size=world_size)
        if for_loader:
            self.sampled = self._arrays

    @classmethod
    def fixed_stream(cls, dataset, options, sampler, nodes: torch.Tensor, epoch: int) -> BatchDraws:
        """The batches of `nodes` in order (options.batch_size each, not
        shuffled), every one drawn in sampling epoch `epoch` whatever epoch
        `draw` is given: what a loader of `nodes` set to `epoch` gathers, one epoch of them."""
        draws = cls.__new__(cls)
        batches = BatchOptions(batch_size=options.batch_size, shuffle=False, seed=options.seed)
        nodes = torch.as_tensor(nodes)
        draws._start(dataset, options, sampler, nodes, batches, 1, split="fixed", epoch=int(epoch))
        draws.key["nodes"] = [int(nodes.shape[0]), ids_hash(nodes.numpy().astype(np.int64))]
        draws._epoch_of = int(epoch)
        return draws

    def with_fixed(self, fixed: BatchDraws | None) -> BatchDraws:
        """These draws with `fixed` (a `fixed_stream`) to pack once besides them."""
        self.fixed = fixed
        return self

    def _start(self, dataset, options, sampler, ids, batches: BatchOptions, epochs, **key):
        self.seeds = seed_batches(ids, batches)
        self.sampler = sampler
        self.batches, self.epochs = len(self.seeds), epochs
        self._epoch_of: int | None = None
        self.key = {
            "dataset": identity(dataset.meta) or dataset.name,
            **key,
            "seed": options.seed,
            "batch_size": options.batch_size,
            "fanouts": list(options.fanouts),
            "sampling": options.sampling,
            "batches_per_epoch": self.batches,
        }

    @functools.lru_cache(maxsize=2)  # noqa: B019 -- one draws object per run; two epochs of seeds at most
    def _epoch(self, epoch: int) -> list:
        return self.seeds.epoch(epoch)

    def _minibatch(self, epoch: int, batch: int):
        epoch = epoch if self._epoch_of is None else self._epoch_of
        return self.sampler.sample(self._epoch(epoch)[batch], epoch, batch)

    def draw(self, epoch: int, batch: int) -> np.ndarray:
        """The input ids of batch `batch` of epoch `epoch` (of the fixed stream's epoch for a fixed stream)."""
        return self._minibatch(epoch, batch).input_nodes.numpy().astype(np.int64, copy=False)

    def _arrays(self, epoch: int, batch: int) -> dict:
        return minibatch_arrays(self._minibatch(epoch, batch))
