"""Static scores for warming a cache: out-degree, or hotness counted by
pre-sampling a few epochs without training (GNNLab). The sampler is passed
in, so this module does not import gnnsys.samplers."""

from __future__ import annotations

import numpy as np
import torch

from gnnsys.ids import count_ids, sorted_distinct


def out_degree(indices, num_nodes: int) -> np.ndarray:
    """How often each node is an in-neighbour in the CSC `indices` (float64,
    a cache score): its out-degree, which is how many lists the neighbour
    sampler can draw it from (PaGraph's score; the in-degree on an undirected
    graph)."""
    counts = np.zeros(num_nodes, np.int64)
    count_ids(np.asarray(indices), counts)
    return counts.astype(np.float64)


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
            counts[sorted_distinct(ids)] += 1
    return counts
