"""Packed batches of a heterogeneous graph: each featured node type packs
its own input nodes of every batch (and of sampled evaluation's fixed
stream); training equals training in memory, bit for bit."""

import numpy as np
import torch

import gnnsys
from gnnsys.datasets.hetero_dataset import HeteroDataset
from tests.gnnsys.test_hetero_train import mapped, metrics
from tests.hetero_graphs import hetero_graph

FAST = dict(fanouts=[3, 3], hidden=16, batch_size=8, progress=False, prefetch=2, epochs=2, eval_every=1)


def two_featured_types(directory) -> HeteroDataset:
    """Papers and authors with features in files of their own (institutions have none)."""
    types, relations, _ = hetero_graph()
    rng = np.random.default_rng(1)
    x = {
        t: torch.from_numpy(rng.standard_normal((types[t], d)).astype(np.float32))
        for t, d in (("paper", 6), ("author", 3))
    }
    perm = torch.from_numpy(rng.permutation(types["paper"]))
    return HeteroDataset(
        name="two-featured",
        node_types=types,
        relations=relations,
        features={t: mapped(rows, directory / f"{t}.features.bin") for t, rows in x.items()},
        target="paper",
        labels=torch.from_numpy(rng.integers(0, 3, types["paper"])),
        splits={"train": perm[:30], "valid": perm[30:42], "test": perm[42:]},
        num_classes=3,
    )


def test_every_featured_type_trains_from_its_packs_as_in_memory(tmp_path):
    ds = two_featured_types(tmp_path)
    memory = gnnsys.train(ds, eval="sampled", **FAST)
    packed = gnnsys.train(ds, features="packed", cache_rows=20, scratch_gb=0.01, **FAST)
    assert packed.config["eval"] == "auto" and metrics(packed) == metrics(memory)
    for record in packed.epochs:
        for node_type in ("paper", "author"):
            tier = record["tiers"][node_type]["packed"]
            assert tier["batches"] == 30 // 8 + 1 and tier["unplanned"] == 0, (node_type, tier)


def test_sampled_evaluation_reads_every_types_pack(tmp_path):
    from gnnsys.trainers.hetero import HeteroTrainer
    from gnnsys.training.hetero_options import HeteroOptions

    ds = two_featured_types(tmp_path)
    trainer = HeteroTrainer(ds, HeteroOptions(features="packed", **FAST).for_dataset(ds))
    try:
        trainer.store.reset_stats()
        trainer.evaluate()
        for node_type, tiers in trainer.store.stats().items():
            assert tiers["packed"]["fixed"] == -(-60 // 8) and tiers["packed"]["unplanned"] == 0, node_type
    finally:
        trainer.store.close()
