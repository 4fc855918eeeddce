"""SeedBatches: batch counts, coverage, shuffle as a function of (seed, epoch)."""

import pytest
import torch

from gnnsys.samplers import SeedBatches


@pytest.mark.parametrize(
    "n, batch_size, drop_last, sizes",
    [
        (10, 3, False, [3, 3, 3, 1]),
        (10, 3, True, [3, 3, 3]),
        (9, 3, True, [3, 3, 3]),
        (2, 5, True, []),
        (0, 4, False, []),
    ],
)
def test_batch_sizes(n, batch_size, drop_last, sizes):
    seeds = SeedBatches(torch.arange(n), batch_size, drop_last=drop_last)
    batches = seeds.epoch(0)
    assert len(seeds) == len(sizes) and [b.numel() for b in batches] == sizes


def test_each_epoch_is_a_permutation_fixed_by_seed_and_epoch():
    ids = torch.arange(100, 200)
    seeds = SeedBatches(ids, 16, seed=3)
    e0, e1 = torch.cat(seeds.epoch(0)), torch.cat(seeds.epoch(1))
    assert torch.equal(e0.sort().values, ids) and torch.equal(e1.sort().values, ids)
    assert not torch.equal(e0, e1) and not torch.equal(e0, ids)
    assert torch.equal(e1, torch.cat(SeedBatches(ids, 16, seed=3).epoch(1)))  # replayable alone
    assert not torch.equal(e1, torch.cat(SeedBatches(ids, 16, seed=4).epoch(1)))


def test_no_shuffle_keeps_order():
    ids = torch.tensor([5, 3, 9, 1], dtype=torch.int32)
    batches = SeedBatches(ids, 3, shuffle=False).epoch(7)
    assert [b.tolist() for b in batches] == [[5, 3, 9], [1]] and batches[0].dtype == torch.int64


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((torch.arange(4), 0), ValueError, "batch_size"),
        ((torch.ones(3), 2), TypeError, "ids"),
        ((torch.ones(2, 2, dtype=torch.long), 2), TypeError, "ids"),
    ],
)
def test_bad_seed_arguments(args, error, match):
    with pytest.raises(error, match=match):
        SeedBatches(*args)
    with pytest.raises(ValueError, match="epoch"):
        SeedBatches(torch.arange(3), 2).epoch(-1)
