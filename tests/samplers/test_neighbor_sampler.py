"""NeighborSampler: sampled edges exist, counts, uniformity, determinism, layout."""

import threading

import numba
import numpy as np
import pytest
import torch
from numba.core.caching import NullCache

from gnnsys.datasets import Dataset
from gnnsys.datasets.csc import build_csc
from gnnsys.datasets.source import array_edge_chunks
from gnnsys.errors import DatasetError
from gnnsys.samplers import NeighborSampler
from gnnsys.samplers.neighbor import _claim_seeds, _count, _fill, _relabel, _sort_rows


def random_csc(num_nodes=80, num_edges=900, seed=0, index_dtype=np.int32):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, num_nodes, num_edges), rng.integers(0, num_nodes, num_edges)
    # a few nodes with zero in-degree
    keep = dst % 17 != 3
    indptr, indices = build_csc(array_edge_chunks(src[keep], dst[keep]), num_nodes)
    return indptr, indices.astype(index_dtype)


def neighbours(indptr, indices, v):
    return indices[indptr[v] : indptr[v + 1]]


def check_layout(mb, seeds):
    """Seeds first, dst nodes first among srcs, nested blocks, sorted rows."""
    assert torch.equal(mb.seeds, torch.as_tensor(seeds, dtype=torch.long))
    assert torch.equal(mb.input_nodes[: len(seeds)], mb.seeds)
    assert mb.input_nodes.unique().numel() == mb.input_nodes.numel()
    assert mb.blocks[0].num_src == mb.input_nodes.numel()
    assert mb.blocks[-1].num_dst == len(seeds)
    for inner, outer in zip(mb.blocks[:-1], mb.blocks[1:]):
        assert inner.num_dst == outer.num_src
    for b in mb.blocks:
        assert b.indptr.dtype == b.indices.dtype == torch.int64
        assert b.indptr.shape[0] == b.num_dst + 1 and int(b.indptr[-1]) == b.num_edges
        if b.num_edges:
            assert int(b.indices.min()) >= 0 and int(b.indices.max()) < b.num_src
        for r in range(b.num_dst):
            row = b.indices[b.indptr[r] : b.indptr[r + 1]]
            assert torch.all(row[1:] >= row[:-1])


def edges_of(mb):
    """Per block: list over dst rows of (global dst, array of global srcs)."""
    nodes = mb.input_nodes.numpy()
    out = []
    for b in mb.blocks:
        ip, ix = b.indptr.numpy(), b.indices.numpy()
        out.append([(nodes[r], nodes[ix[ip[r] : ip[r + 1]]]) for r in range(b.num_dst)])
    return out


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("fanouts", [[3, 2], [5], [2, 4, 1], [-1, 2]])
def test_counts_and_edges_without_replacement(index_dtype, fanouts):
    indptr, indices = random_csc(index_dtype=index_dtype)
    seeds = [5, 0, 3, 71, 20]
    mb = NeighborSampler(torch.from_numpy(indptr), torch.from_numpy(indices), fanouts).sample(seeds)
    check_layout(mb, seeds)
    assert len(mb.blocks) == len(fanouts)
    for fanout, rows in zip(fanouts, reversed(edges_of(mb))):  # output layer first, as fanouts
        for v, srcs in rows:
            nbrs = neighbours(indptr, indices, v)
            deg = len(nbrs)
            assert len(srcs) == (deg if fanout == -1 else min(fanout, deg))
            # no position drawn twice: sampled multiset is a sub-multiset of the neighbours
            avail = dict(zip(*np.unique(nbrs, return_counts=True)))
            got = dict(zip(*np.unique(srcs, return_counts=True)))
            assert all(c <= avail.get(u, 0) for u, c in got.items())
            if fanout == -1 or deg <= fanout:
                assert sorted(srcs) == sorted(nbrs)


def test_replacement_gives_fanout_draws_of_neighbours():
    indptr, indices = random_csc()
    mb = NeighborSampler(indptr, indices, [7, 3], replace=True).sample([1, 2, 3, 4])
    check_layout(mb, [1, 2, 3, 4])
    for fanout, rows in zip([7, 3], reversed(edges_of(mb))):
        for v, srcs in rows:
            nbrs = neighbours(indptr, indices, v)
            assert len(srcs) == (fanout if len(nbrs) else 0)
            assert set(srcs.tolist()) <= set(nbrs.tolist())


def test_full_neighbourhood_block_is_exact():
    indptr, indices = random_csc()
    dst = torch.arange(indptr.shape[0] - 1)
    mb = NeighborSampler(indptr, indices, [-1]).sample(dst)
    (block,) = mb.blocks
    assert torch.equal(block.indptr, torch.from_numpy(indptr))
    got = mb.input_nodes[block.indices].numpy()
    for v in range(dst.shape[0]):
        assert sorted(got[indptr[v] : indptr[v + 1]]) == sorted(neighbours(indptr, indices, v))


def test_zero_in_degree_and_empty_seeds():
    indptr, indices = random_csc()
    isolated = [v for v in range(len(indptr) - 1) if indptr[v] == indptr[v + 1]]
    assert isolated
    sampler = NeighborSampler(indptr, indices, [4, 4])
    mb = sampler.sample(isolated)
    check_layout(mb, isolated)
    assert all(b.num_edges == 0 for b in mb.blocks)
    assert torch.equal(mb.input_nodes, torch.tensor(isolated))
    empty = sampler.sample(torch.empty(0, dtype=torch.long))
    assert empty.input_nodes.numel() == 0 and all(b.num_dst == b.num_src == 0 for b in empty.blocks)


def test_deterministic_across_runs_threads_and_calls():
    indptr, indices = random_csc(num_nodes=300, num_edges=6000)
    seeds = torch.arange(0, 300, 7)
    make = lambda: NeighborSampler(indptr, indices, [6, 4, 3], seed=11)  # noqa: E731
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = make().sample(seeds, epoch=2, batch=5)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = make().sample(seeds, epoch=2, batch=5)
    finally:
        numba.set_num_threads(before)
    again = make()
    again.sample(seeds[:4], epoch=0, batch=0)  # the reused map must come back clean
    three = again.sample(seeds, epoch=2, batch=5)
    for other in (two, three):
        assert torch.equal(one.input_nodes, other.input_nodes)
        for a, b in zip(one.blocks, other.blocks):
            assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
    other_stream = make().sample(seeds, epoch=3, batch=5)
    assert not torch.equal(one.input_nodes, other_stream.input_nodes)


def test_concurrent_calls_match_sequential():
    indptr, indices = random_csc(num_nodes=500, num_edges=8000)
    sampler = NeighborSampler(indptr, indices, [5, 5])
    batches = [torch.arange(i, 500, 37) for i in range(8)]
    expected = [sampler.sample(b, 0, i).input_nodes for i, b in enumerate(batches)]
    got = [None] * len(batches)

    def work(i):
        for _ in range(5):
            got[i] = sampler.sample(batches[i], 0, i).input_nodes

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


def stars(num_stars, deg, index_dtype=np.int32):
    """Centres 0..num_stars-1, each with its own `deg` in-neighbours (leaves)."""
    n = num_stars * (deg + 1)
    indptr = np.concatenate([np.arange(num_stars + 1) * deg, np.full(n - num_stars, num_stars * deg)])
    indices = (num_stars + np.arange(num_stars * deg)).astype(index_dtype)
    return indptr.astype(np.int64), indices


@pytest.mark.parametrize("replace", [False, True])
def test_neighbours_are_drawn_uniformly(replace):
    """Which of its 10 leaves a centre draws (fanout 3): uniform over 3000 draws per slot."""
    num_stars, deg, fanout, epochs = 100, 10, 3, 10
    indptr, indices = stars(num_stars, deg)
    sampler = NeighborSampler(indptr, indices, [fanout], replace=replace)
    counts = np.zeros(deg)
    for e in range(epochs):
        mb = sampler.sample(np.arange(num_stars), epoch=e)
        leaf = mb.input_nodes[mb.blocks[0].indices].numpy() - num_stars
        counts += np.bincount(leaf % deg, minlength=deg)
    expected = num_stars * epochs * fanout / deg
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert counts.sum() == num_stars * epochs * fanout
    assert chi2 < 27.9  # p = 0.001 for 9 degrees of freedom


def test_floyd_subsets_are_uniform():
    """Every 2-subset of 5 leaves appears about equally often (2000 samples)."""
    num_stars, epochs = 200, 10
    indptr, indices = stars(num_stars, 5, np.int64)
    sampler = NeighborSampler(indptr, indices, [2])
    seen = np.zeros((5, 5))
    for e in range(epochs):
        mb = sampler.sample(np.arange(num_stars), epoch=e)
        leaf = (mb.input_nodes[mb.blocks[0].indices].numpy() - num_stars) % 5
        pairs = leaf.reshape(-1, 2)
        assert np.all(pairs[:, 0] != pairs[:, 1])
        np.add.at(seen, (pairs.min(1), pairs.max(1)), 1)
    observed = seen[np.triu_indices(5, 1)]
    chi2 = ((observed - 200) ** 2 / 200).sum()
    assert chi2 < 27.9  # p = 0.001 for 9 degrees of freedom


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(fanouts=[]), ValueError, "fanouts"),
        (dict(fanouts=[3, -2]), ValueError, "fanouts"),
        (dict(fanouts=[3], seed=-1), ValueError, "seed"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    indptr, indices = random_csc()
    with pytest.raises(error, match=match):
        NeighborSampler(indptr, indices, **kwargs)


def test_bad_graph_and_seeds():
    indptr, indices = random_csc()
    with pytest.raises(TypeError, match="indptr"):
        NeighborSampler(indptr.astype(np.int32), indices, [2])
    with pytest.raises(TypeError, match="seeds"):
        NeighborSampler(indptr, indices, [2]).sample(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="indptr"):
        NeighborSampler(indptr[:-1], indices, [2])
    sampler = NeighborSampler(indptr, indices, [2])
    with pytest.raises(IndexError, match="seeds: id 80 out of range"):
        sampler.sample([1, 80])
    with pytest.raises(ValueError, match="node 4 appears more than once"):
        sampler.sample([4, 2, 4])
    with pytest.raises(ValueError, match="epoch and batch"):
        sampler.sample([1], epoch=-1)
    assert torch.equal(sampler.sample([4, 2]).seeds, torch.tensor([4, 2]))  # map left clean


def _node_with_neighbours(indptr, at_least=2):
    return int(np.flatnonzero(np.diff(indptr) >= at_least)[0])


@pytest.mark.parametrize(
    "corruption, message",
    [
        ("id past the end", r"indices: node {v}'s in-neighbour list holds node id 80, out of range \[0, 80\)"),
        ("negative id", r"indices: node {v}'s in-neighbour list holds node id -1, out of range"),
        ("reversed range", r"indptr: node {v}'s edge range \[\d+, -?\d+\) is not inside the \d+ edges"),
        ("range past the end", r"indptr: node {v}'s edge range \[\d+, 1000000000000\) is not inside the \d+ edges"),
    ],
)
@pytest.mark.parametrize("replace", [False, True])
def test_a_corrupted_graph_raises_instead_of_reading_outside_it(corruption, message, replace):
    """The sampler checks each node's edge range and each sampled id inside
    its kernels, so a graph corrupted after any load-time check is an error,
    never a read outside the arrays."""
    indptr, indices = random_csc()
    v = _node_with_neighbours(indptr)
    if corruption == "id past the end":
        indices[indptr[v] : indptr[v + 1]] = 80
    elif corruption == "negative id":
        indices[indptr[v] : indptr[v + 1]] = -1
    elif corruption == "reversed range":
        indptr[v + 1] = indptr[v] - 1
    else:
        indptr[v + 1] = 10**12
    sampler = NeighborSampler(indptr, indices, [-1, 3], replace=replace)
    with pytest.raises(DatasetError, match=message.format(v=v)):
        sampler.sample([v])


def test_training_on_a_dataset_corrupted_in_memory_raises():
    """A Dataset made in memory (no load_dataset), its indices corrupted
    after it was checked: training stops with DatasetError (before the
    sampler's own checks, this was a read outside the arrays)."""
    from gnnsys import train

    indptr, indices = random_csc()
    g = torch.Generator().manual_seed(0)
    ds = Dataset(
        name="mem",
        indptr=torch.from_numpy(indptr),
        indices=torch.from_numpy(indices),
        features=torch.randn(80, 4, generator=g),
        labels=torch.randint(0, 3, (80,), generator=g),
        splits={"train": torch.arange(0, 40), "valid": torch.arange(40, 60), "test": torch.arange(60, 80)},
        num_classes=3,
    )
    v = _node_with_neighbours(indptr[:41], at_least=1)
    ds.indices[ds.indptr[v]] = 10**6
    with pytest.raises(DatasetError, match=r"in-neighbour list holds node id 1000000, out of range \[0, 80\)"):
        train(ds, fanouts=(-1, -1), epochs=1, batch_size=8, hidden=8, progress=False)


def test_kernels_are_cached_on_disk():
    for kernel in (_count, _fill, _claim_seeds, _relabel, _sort_rows):
        assert not isinstance(kernel._cache, NullCache), kernel
