"""The FeatureStore a training run reads, built from its options for either
kind of graph (a homogeneous one is the store's one-key case).

Each key's cache is scored by out-degree (summed over the relations whose
sources are that node type) or by GNNLab's hotness: in how many batches of
PRESAMPLE_EPOCHS pre-sampled epochs of the training seeds (numbered from
PRESAMPLE_FROM, never trained on) a node's features are read, with the
sampler training uses. With a lookahead window the plan needs the rows a
batch reads: 1.25 x the largest of the first 3 batches of epoch 0.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.loading.batch_draws import BatchDraws
from gnnsys.samplers.seeds import SeedBatches
from gnnsys.storage.cache import out_degree, presample_hotness
from gnnsys.storage.store import HOMOGENEOUS, FeatureStore, build_store

PRESAMPLE_EPOCHS = 2
PRESAMPLE_FROM = 1_000_000  # pre-sampled epochs are numbered far beyond any training epoch


class TypeInputs:
    """One node type's view of a HeteroNeighborSampler: `sample(seeds, epoch,
    batch).input_nodes` are that type's input nodes, `num_nodes` its count
    (what the cache's hotness and batch-size estimates read of a sampler)."""

    def __init__(self, sampler, node_type: str):
        self.sampler, self.node_type = sampler, node_type
        self.num_nodes = sampler.node_types[node_type]

    def sample(self, seeds, epoch: int = 0, batch: int = 0):
        mb = self.sampler.sample(seeds, epoch, batch)
        return SimpleNamespace(input_nodes=mb.input_nodes[self.node_type])


def largest_batch_rows(sampler, seed_batches, num_nodes: int, batches: int = 3) -> int:
    """1.25 x the largest `input_nodes` of the first `batches` batches of
    epoch 0 that `sampler` draws for `seed_batches` (SeedBatches), at most num_nodes."""
    seeds = seed_batches.epoch(0)[:batches]
    largest = max((sampler.sample(s, 0, i).input_nodes.shape[0] for i, s in enumerate(seeds)), default=0)
    return min(num_nodes, largest + largest // 4)


def presampled_hotness(sampler, seed_batches, epochs: int = PRESAMPLE_EPOCHS) -> np.ndarray:
    """storage.cache.presample_hotness of `sampler` (with `num_nodes` and
    `sample`) over `epochs` epochs of `seed_batches` numbered from PRESAMPLE_FROM."""
    return presample_hotness(sampler, seed_batches, range(PRESAMPLE_FROM, PRESAMPLE_FROM + epochs))


def type_out_degree(dataset: HeteroDataset, node_type: str) -> np.ndarray:
    """How many neighbour lists, over every relation whose sources are
    `node_type`, hold each node of that type (float64: a cache score)."""
    total = np.zeros(dataset.num_nodes(node_type), np.float64)
    for (src, _, _), (_, indices) in dataset.relations.items():
        if src == node_type:
            total += out_degree(indices.numpy(), total.shape[0])
    return total


def training_sampler(dataset, options):
    """The CPU sampler training draws with (the loader builds its own, drawing the same)."""
    if isinstance(dataset, HeteroDataset):
        from gnnsys.samplers.hetero import HeteroNeighborSampler

        fanouts = options.sampler_fanouts(dataset.edge_types)
        return HeteroNeighborSampler.from_dataset(dataset, fanouts, seed=options.seed, method=options.sampling)
    from gnnsys.samplers.factory import make_sampler

    fanouts = list(options.fanouts)
    return make_sampler("cpu", dataset.indptr, dataset.indices, fanouts, seed=options.seed, sampling=options.sampling)


def rank_scratch(options, rank: int, world_size: int) -> dict:
    """Where rank `rank` of `world_size` packs its batches: options.scratch_dir
    (None: a directory of the tier's own), a `rank-<rank>` subdirectory of it
    when there are several ranks (each packs its own batches: no two share a
    window), with an equal share of options.scratch_gb."""
    directory, budget = getattr(options, "scratch_dir", None), options.scratch_gb  # a HeteroOptions has none
    if world_size > 1:
        directory = None if directory is None else str(Path(directory) / f"rank-{rank}")
        budget = None if budget is None else budget / world_size
    return {"scratch_dir": directory, "scratch_gb": budget}


def _draws(dataset, options, sampler, rank: int, world_size: int, fixed, for_loader=False, **key) -> BatchDraws:
    """The BatchDraws of rank `rank`'s training batches (for_loader: see BatchDraws), with the fixed stream of
    `fixed` (seeds, epoch) if given; `key`: what else decides them (a node type's view of the sampler: the type
    and the relations' fanouts)."""
    draws = BatchDraws(dataset, options, sampler, rank, world_size, for_loader)
    draws.with_fixed(None if fixed is None else BatchDraws.fixed_stream(dataset, options, sampler, *fixed))
    for each in (draws, draws.fixed):
        if each is not None:
            each.key.update(key)
    return draws


def open_feature_store(dataset, options, device, ranks=None, fixed=None) -> FeatureStore:
    """The FeatureStore over `dataset`'s tables (a Dataset's one, or a
    HeteroDataset's per featured node type) with the tiers `options` (a
    MinibatchOptions or HeteroOptions) ask for, on `device`; `ranks` of
    several data-parallel ranks share one cache (storage.stack_builder),
    except with features "packed" (or "ssd" where it packs), which packs this rank's training batches
    (BatchDraws) with a cache of its own (`rank_scratch`) and,
    once, `fixed`: (seeds, sampling epoch) of a stream the run gathers again
    and again (sampled evaluation's share of this rank; BatchDraws.fixed_stream)."""
    sampler = functools.cache(lambda: training_sampler(dataset, options))  # built only if a score or plan needs it
    rank, world_size = (0, 1) if ranks is None else (ranks.rank, ranks.world_size)
    seeds = SeedBatches(dataset.split("train"), options.batch_size, shuffle=True, seed=options.seed)
    if isinstance(dataset, HeteroDataset):
        tables = dict(dataset.features)
        view = lambda t: TypeInputs(sampler(), t)  # noqa: E731
        degree = {t: lambda t=t: type_out_degree(dataset, t) for t in tables}
        relations = {k: list(v) for k, v in (options.relation_fanouts or {}).items()}
        draws = {
            t: lambda t=t: _draws(dataset, options, view(t), rank, world_size, fixed, node_type=t, relations=relations)
            for t in tables
        }
    else:
        tables = {HOMOGENEOUS: dataset.features}
        view = lambda key: sampler()  # noqa: E731
        degree = {HOMOGENEOUS: lambda: out_degree(dataset.indices.numpy(), dataset.num_nodes)}
        draws = {HOMOGENEOUS: lambda: _draws(dataset, options, sampler(), rank, world_size, fixed, for_loader=True)}
    rows = {k: table.shape[0] for k, table in tables.items()}
    return build_store(
        tables,
        degree=degree,
        presample={k: lambda k=k: presampled_hotness(view(k), seeds) for k in tables},
        batch_rows={k: largest_batch_rows(view(k), seeds, rows[k]) if options.lookahead else 0 for k in tables},
        draws=draws,
        **(rank_scratch(options, rank, world_size) if options.features in ("ssd", "packed") else {}),
        features=options.features,
        device=device,
        cache_rows=options.cache_rows,
        cache_gb=options.cache_gb,
        cache_policy=options.cache_policy,
        lookahead=options.lookahead,
        victim_rows=options.victim_rows,
        host_mem_budget=options.host_mem_budget,
        progress=options.progress,
        ranks=ranks,
        replicate_frac=options.replicate_frac,
    )


def ssd_choice(dataset, options) -> str:
    """One line: what `features="ssd"` reads a homogeneous `dataset`'s rows
    with under `options` (a MinibatchOptions), packed batches or random
    reads, and why (storage.packed_plan.choose_packing over the draws
    training makes, before an evaluation stream is known)."""
    from gnnsys.storage.memory_plan import GB
    from gnnsys.storage.packed_plan import choose_packing

    _, note = choose_packing(
        dataset.features,
        "ssd",
        lambda: _draws(dataset, options, training_sampler(dataset, options), 0, 1, None, for_loader=True),
        random_reads={},
        host_mem_budget=options.host_mem_budget,
        cache_rows=options.cache_rows,
        cache_gb=options.cache_gb,
        scratch_dir=options.scratch_dir,
        scratch_bytes=None if options.scratch_gb is None else int(options.scratch_gb * GB),
    )
    return note
