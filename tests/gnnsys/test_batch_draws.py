"""BatchDraws (gnnsys/loading/batch_draws.py) draws exactly the loader's
batches, and a packed run resumed from its checkpoint packs the epoch it
resumes and equals the run that was not interrupted."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gnnsys import train
from gnnsys.datasets import PrepareOptions
from gnnsys.loading.batch_draws import BatchDraws
from gnnsys.loading.feature_store import training_sampler
from gnnsys.loading.loader import MinibatchLoader
from gnnsys.loading.minibatch_arrays import minibatch_from_arrays
from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=16, progress=False, prefetch=2, eval_every=3)


@pytest.mark.parametrize("rank, world_size", [(0, 1), (1, 2)])
def test_draws_are_the_loaders_batches(make_dataset, rank, world_size):
    ds, _ = make_dataset(num_nodes=200, num_edges=1000)
    options = SimpleNamespace(batch_size=16, seed=3, fanouts=[4, 3], sampling="uniform", epochs=2, sampler="cpu")
    draws = BatchDraws(ds, options, training_sampler(ds, options), rank, world_size)
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[4, 3]),
        BatchOptions(batch_size=16, seed=3, rank=rank, world_size=world_size),
        PipelineOptions(prefetch=0),
    )
    assert draws.batches == len(loader) and draws.key["rank"] == rank and draws.key["world_size"] == world_size
    for epoch in (1, 0):
        loader.set_epoch(epoch)
        for i, mb in enumerate(loader):
            assert np.array_equal(draws.draw(epoch, i), mb.input_nodes.numpy())


def test_a_sampled_batch_comes_back_from_its_arrays_exactly(make_dataset):
    ds, _ = make_dataset(num_nodes=200, num_edges=1000)
    options = SimpleNamespace(batch_size=16, seed=3, fanouts=[4, 3], sampling="labor", epochs=2, sampler="cpu")
    sampler = training_sampler(ds, options)
    draws = BatchDraws(ds, options, sampler, for_loader=True)
    mb = sampler.sample(draws.seeds.epoch(1)[2], 1, 2)
    back = minibatch_from_arrays(draws.sampled(1, 2))
    assert torch.equal(back.seeds, mb.seeds) and torch.equal(back.input_nodes, mb.input_nodes)
    assert len(back.blocks) == len(mb.blocks) == 2
    for got, want in zip(back.blocks, mb.blocks, strict=True):
        assert (got.num_src, got.num_dst) == (want.num_src, want.num_dst)
        for a, b in ((got.indptr, want.indptr), (got.indices, want.indices)):
            assert torch.equal(a, b) and a.dtype == b.dtype
    assert np.array_equal(draws.draw(1, 2), mb.input_nodes.numpy())


def test_the_loader_takes_the_batches_the_packed_tier_sampled_and_trains_as_in_memory(make_dataset, tmp_path):
    from gnnsys.storage.packed_source import PackedFeatures
    from gnnsys.storage.ssd import SSDFeatures

    ds, _ = make_dataset(num_nodes=300, num_edges=2400, dim=12, options=PrepareOptions(progress=False, align=512))
    packed = train(ds, epochs=3, **FAST, features="packed", cache_rows=60)
    memory = train(ds, epochs=3, **FAST)
    assert [r["loss"] for r in packed.epochs] == [r["loss"] for r in memory.epochs]
    batches = packed.epochs[0]["tiers"]["packed"]["batches"]
    assert all(r["tiers"]["packed"]["presampled"] == batches for r in packed.epochs[1:])  # packed an epoch ahead
    options = SimpleNamespace(batch_size=16, seed=0, fanouts=[4, 3], sampling="uniform", epochs=2, sampler="cpu")
    draws = BatchDraws(ds, options, training_sampler(ds, options), for_loader=True)
    base = SSDFeatures(ds.features, engine="threads", threads=2, max_gap=0, host_mem_budget=1 << 20)
    tier = PackedFeatures(base, ds.features, draws, capacity=10, scratch_dir=tmp_path)
    seeds = lambda e, b: torch.as_tensor(draws.sampled(e, b)["seeds"])  # noqa: E731
    assert tier.presampled(seeds(0, 1), 0, 1) is None  # nothing packed yet
    tier.gather(torch.from_numpy(draws.draw(0, 0)))  # packs epoch 0's window
    assert tier.presampled(seeds(0, 2), 0, 1) is None  # another batch's seeds: not taken
    arrays = tier.presampled(seeds(0, 1), 0, 1)
    assert all(np.array_equal(arrays[k], v) for k, v in draws.sampled(0, 1).items())
    assert tier.presampled(seeds(0, 1), 0, 1) is None and tier.stats()["presampled"] == 1  # taken once
    tier.close()


def test_a_resumed_packed_run_packs_the_epoch_it_resumes_and_equals_the_whole_run(make_dataset, tmp_path):
    ds, _ = make_dataset(num_nodes=300, num_edges=2400, dim=12, options=PrepareOptions(progress=False, align=512))
    packed = dict(FAST, features="packed", cache_rows=60)
    whole = train(ds, epochs=3, **FAST)
    train(ds, epochs=1, checkpoint_dir=tmp_path, **packed)
    resumed = train(ds, epochs=3, checkpoint_dir=tmp_path, resume=True, **packed)
    assert [r["loss"] for r in resumed.epochs] == [r["loss"] for r in whole.epochs]
    for record in resumed.epochs[1:]:  # epochs 2 and 3, from packs built for them
        assert record["tiers"]["packed"]["unplanned"] == 0 and record["tiers"]["packed"]["batches"] > 0
