"""BatchDraws (gnnsys/loading/batch_draws.py) draws exactly the loader's
batches, and a packed run resumed from its checkpoint packs the epoch it
resumes and equals the run that was not interrupted."""

from types import SimpleNamespace

import numpy as np
import pytest

from gnnsys import train
from gnnsys.datasets import PrepareOptions
from gnnsys.loading.batch_draws import BatchDraws
from gnnsys.loading.feature_store import training_sampler
from gnnsys.loading.loader import MinibatchLoader
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


def test_a_resumed_packed_run_packs_the_epoch_it_resumes_and_equals_the_whole_run(make_dataset, tmp_path):
    ds, _ = make_dataset(num_nodes=300, num_edges=2400, dim=12, options=PrepareOptions(progress=False, align=512))
    packed = dict(FAST, features="packed", cache_rows=60)
    whole = train(ds, epochs=3, **FAST)
    train(ds, epochs=1, checkpoint_dir=tmp_path, **packed)
    resumed = train(ds, epochs=3, checkpoint_dir=tmp_path, resume=True, **packed)
    assert [r["loss"] for r in resumed.epochs] == [r["loss"] for r in whole.epochs]
    for record in resumed.epochs[1:]:  # epochs 2 and 3, from packs built for them
        assert record["tiers"]["packed"]["unplanned"] == 0 and record["tiers"]["packed"]["batches"] > 0
