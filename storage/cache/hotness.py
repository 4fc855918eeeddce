"""Static scores for warming a cache: in-degree, or hotness counted by
pre-sampling a few epochs without training (GNNLab). The sampler is passed
in, so this module does not import gnnsys.samplers."""
from __future__ import annotations

import numpy as np
import torch


def in_degree(indptr) -> np.ndarray:
    """Each node's in-degree from the CSC `indptr` (float64, a cache score)."""
    return np.diff(np.asarray(indptr, dtype=np.int64)).astype(np.float64)


def presample_hotness(sampler, seed_batches, epochs) -> np.ndarray:
    """How many sampled batches each node's features are needed in.

    sampler: has `num_nodes` and `sample(seeds, epoch, batch)` returning a
    MiniBatch with `input_nodes` (e.g. gnnsys.samplers.NeighborSampler);
    seed_batches: has `epoch(e)`, the seed batches of epoch e (SeedBatches);
    epochs: the epoch numbers to sample (pick ones training will not use).
    """
    counts = np.zeros(sampler.num_nodes, np.float64)
    for e in epochs:
        for b, seeds in enumerate(seed_batches.epoch(e)):
            ids = torch.as_tensor(sampler.sample(seeds, e, b).input_nodes).numpy()
            counts[np.unique(ids)] += 1
    return counts
