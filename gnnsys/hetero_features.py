"""The feature tiers of heterogeneous training: one stack of FeatureSources
per node type with features, each built by `feature_stack.build_table_stack`
over that type's RowTable, so every placement, the SSD tier (reading the
file a memory-mapped table maps), the cache with every policy, the victim
buffer and the lookahead fill serve each type's table as they serve a
homogeneous dataset's.

The sizes given for the whole run are shared among the featured types: the
cache's rows (`cache_rows`) and the victim buffer's in proportion to the
types' rows, the cache's GB (`cache_gb`) and the host-memory budget
(`host_mem_budget`) in proportion to their tables' bytes; a type's share of
a cache or victim buffer asked for is at least one row. A cache is scored
by the type's out-degree summed over the relations whose sources it holds,
or by its pre-sampled hotness. The counters of every tier are reported per
type (`type_tier_record`: {"tiers": {type: tiers and host bytes}}).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from gnnsys.errors import ConfigError
from gnnsys.feature_stack import (
    build_table_stack,
    largest_batch_rows,
    presampled_hotness,
    reset_tier_stats,
    tier_postfix,
    tier_record,
)


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


def type_out_degree(dataset, node_type: str) -> np.ndarray:
    """How many neighbour lists, over every relation whose sources are
    `node_type`, hold each node of that type (float64: a cache score)."""
    from gnnsys.storage.cache import out_degree

    total = np.zeros(dataset.num_nodes(node_type), np.float64)
    for (src, _, _), (_, indices) in dataset.relations.items():
        if src == node_type:
            total += out_degree(indices.numpy(), total.shape[0])
    return total


def build_type_stacks(
    dataset,
    *,
    sampler,
    seed_batches,
    features: str = "auto",
    cache_rows: int = 0,
    cache_gb: float | None = None,
    victim_rows: int | None = None,
    host_mem_budget: float | None = None,
    lookahead: int = 0,
    **options,
) -> dict:
    """{node type: its FeatureSource stack} for every type of `dataset` (a
    HeteroDataset) with features (see the module docstring). sampler: the
    training HeteroNeighborSampler and seed_batches its SeedBatches of the
    training seeds (pre-sampled hotness, rows per batch for the lookahead);
    options: build_table_stack's (device, cache_policy, progress, ...).
    features "ssd" reads each type's file, so its table must be memory-mapped
    (ConfigError naming the type otherwise)."""
    tables = dataset.features
    rows = {t: table.shape[0] for t, table in tables.items()}
    nbytes = {t: table.shape[0] * table.shape[1] * table.dtype.itemsize for t, table in tables.items()}
    row_share = {t: n / max(sum(rows.values()), 1) for t, n in rows.items()}
    byte_share = {t: n / max(sum(nbytes.values()), 1) for t, n in nbytes.items()}
    share_rows = lambda total, t: None if total is None else max(1, int(total * row_share[t])) if total else 0  # noqa: E731
    share_gb = lambda total, t: None if total is None else total * byte_share[t]  # noqa: E731
    stacks = {}
    try:
        for t, table in tables.items():
            if features == "ssd" and not table.mapped:
                raise ConfigError("features", f"'ssd' reads each node type's features file; {t}'s are held in memory")
            view = TypeInputs(sampler, t)
            stacks[t], _ = build_table_stack(
                table,
                ssd=table,
                features=features,
                degree=lambda t=t: type_out_degree(dataset, t),
                presample=lambda view=view: presampled_hotness(view, seed_batches),
                cache_rows=share_rows(cache_rows, t),
                cache_gb=share_gb(cache_gb, t),
                victim_rows=share_rows(victim_rows, t),
                host_mem_budget=share_gb(host_mem_budget, t),
                lookahead=lookahead,
                batch_rows=largest_batch_rows(view, seed_batches, rows[t]) if lookahead else 0,
                **options,
            )
    except BaseException:
        close_type_tiers(stacks)
        raise
    return stacks


def reset_type_tiers(stacks: dict) -> None:
    """Zero the counters of every tier of every type's stack."""
    for stack in stacks.values():
        reset_tier_stats(stack)


def type_tier_postfix(stacks: dict, elapsed_s: float) -> dict:
    """`feature_stack.tier_postfix` of every type's stack, its keys prefixed "<type>_"."""
    return {f"{t}_{k}": v for t, stack in stacks.items() for k, v in tier_postfix(stack, elapsed_s).items()}


def type_tier_record(stacks: dict) -> dict:
    """For an epoch record: {"tiers": {type: `feature_stack.tier_record`'s
    tiers of its stack}} for the types whose tiers count, {} when none does."""
    per_type = {t: record["tiers"] for t, stack in stacks.items() if (record := tier_record(stack))}
    return {"tiers": per_type} if per_type else {}


def close_type_tiers(stacks: dict) -> None:
    """Close every type's stack."""
    for stack in stacks.values():
        stack.close()
