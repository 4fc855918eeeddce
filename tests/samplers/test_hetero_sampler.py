"""HeteroNeighborSampler: per-relation counts, sampled edges exist, layout,
determinism, uniform inclusion, empty relations and featureless types."""

import numba
import numpy as np
import pytest
import torch

from gnnsys.errors import DatasetError
from gnnsys.samplers.hetero import HeteroNeighborSampler, relation_fanouts
from tests.hetero_graphs import CITES, EMPLOYS, WRITES, WRITTEN_BY, csc, hetero_dataset, hetero_graph


def sampler(fanouts, seed=0, **kwargs):
    types, relations, _ = hetero_graph(**kwargs)
    return HeteroNeighborSampler(types, relations, "paper", fanouts, seed=seed), relations


def neighbours(relations, relation, v):
    indptr, indices = relations[relation]
    return indices[indptr[v] : indptr[v + 1]].numpy()


def check_layout(mb, seeds):
    """Seeds first, distinct inputs per type, nested layers, local ids in range, sorted rows."""
    assert torch.equal(mb.seeds, torch.as_tensor(seeds))
    assert torch.equal(mb.input_nodes["paper"][: len(seeds)], mb.seeds)
    for ids in mb.input_nodes.values():
        assert ids.unique().numel() == ids.numel()
    assert mb.blocks[0].num_src == {t: ids.numel() for t, ids in mb.input_nodes.items()}
    assert mb.blocks[-1].num_dst == {"paper": len(seeds), "author": 0, "institution": 0}
    for inner, outer in zip(mb.blocks[:-1], mb.blocks[1:]):
        assert inner.num_dst == outer.num_src
    for layer in mb.blocks:
        assert all(layer.num_dst[t] <= layer.num_src[t] for t in layer.num_src)
        for (src, _, dst), b in layer.relations.items():
            assert (b.num_src, b.num_dst) == (layer.num_src[src], layer.num_dst[dst])
            assert b.indptr.shape[0] == b.num_dst + 1 and int(b.indptr[-1]) == b.num_edges
            if b.num_edges:
                assert 0 <= int(b.indices.min()) and int(b.indices.max()) < b.num_src
            for r in range(b.num_dst):
                row = b.indices[b.indptr[r] : b.indptr[r + 1]]
                assert torch.all(row[1:] >= row[:-1])


def sampled_edges(mb, layer):
    """{relation: [(global dst, global srcs)]} of blocks[layer]."""
    out = {}
    for (src, rel, dst), b in mb.blocks[layer].relations.items():
        ip, ix = b.indptr.numpy(), b.indices.numpy()
        srcs, dsts = mb.input_nodes[src].numpy(), mb.input_nodes[dst].numpy()
        out[src, rel, dst] = [(dsts[r], srcs[ix[ip[r] : ip[r + 1]]]) for r in range(b.num_dst)]
    return out


@pytest.mark.parametrize(
    "fanouts",
    [
        [3, 2],
        [5],
        [-1, 2],
        [{WRITES: 2, CITES: 1, WRITTEN_BY: 4, EMPLOYS: 3}, 2],
        [
            {
                "author__writes__paper": 0,
                "paper__cites__paper": -1,
                "paper__written_by__author": 1,
                "institution__employs__author": 2,
            }
        ],
    ],
)
def test_counts_are_min_fanout_degree_of_existing_edges(fanouts):
    hetero, relations = sampler(fanouts)
    per_layer = relation_fanouts(fanouts, list(relations))
    seeds = [5, 0, 3, 41, 20]
    mb = hetero.sample(seeds, epoch=1, batch=2)
    check_layout(mb, seeds)
    assert len(mb.blocks) == len(fanouts)
    for layer, fanout in enumerate(reversed(per_layer)):  # blocks are input layer first
        for relation, rows in sampled_edges(mb, layer).items():
            k = fanout[relation]
            for v, srcs in rows:
                nbrs = neighbours(relations, relation, v)
                assert len(srcs) == (len(nbrs) if k == -1 else min(k, len(nbrs)))
                avail = dict(zip(*np.unique(nbrs, return_counts=True)))
                got = dict(zip(*np.unique(srcs, return_counts=True)))
                assert all(c <= avail.get(u, 0) for u, c in got.items()), (relation, v)  # no position drawn twice


def test_destinations_of_every_type_draw_in_every_layer():
    hetero, _ = sampler([2, 2, 2])
    mb = hetero.sample([1, 2, 3])
    # the output layer's destinations are the seeds: no author draws papers there
    assert mb.blocks[-1].relations[WRITES].num_edges > 0 and mb.blocks[-1].relations[WRITTEN_BY].num_dst == 0
    # the authors it drew are destinations one layer in, and draw papers they wrote
    authors = mb.blocks[-1].num_src["author"]
    assert authors > 0 and mb.blocks[-2].num_dst["author"] == authors
    assert mb.blocks[-2].relations[WRITTEN_BY].num_dst == authors and mb.blocks[-2].relations[WRITTEN_BY].num_edges > 0


def test_an_empty_relation_and_a_type_without_features():
    hetero, _ = sampler([3, 3])
    mb = hetero.sample(torch.arange(10))
    for layer in mb.blocks:
        block = layer.relations[EMPLOYS]
        assert block.num_edges == 0 and block.num_dst == layer.num_dst["author"]
    assert mb.input_nodes["institution"].numel() == 0
    assert mb.input_nodes["author"].numel() > 0  # featureless, still sampled
    ds = hetero_dataset()
    assert ds.feature_dim("author") is None
    mb = HeteroNeighborSampler.from_dataset(ds, [2]).sample(ds.split("train")[:8])
    check_layout(mb, ds.split("train")[:8])


def test_deterministic_per_seed_epoch_batch_and_thread_count():
    make = lambda: sampler([4, 3], seed=11, num_papers=300, num_authors=200)[0]  # noqa: E731
    seeds = torch.arange(0, 300, 7)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = make().sample(seeds, epoch=2, batch=5)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = make().sample(seeds, epoch=2, batch=5)
    finally:
        numba.set_num_threads(before)
    again = make()
    again.sample(seeds[:4], epoch=0, batch=0)  # the reused maps must come back clean
    three = again.sample(seeds, epoch=2, batch=5)
    for other in (two, three):
        assert same(one, other)
    for changed in (dict(epoch=3, batch=5), dict(epoch=2, batch=6)):
        assert not same(one, make().sample(seeds, **changed))
    assert not same(one, sampler([4, 3], seed=12, num_papers=300, num_authors=200)[0].sample(seeds, 2, 5))


def same(a, b) -> bool:
    if a.input_nodes.keys() != b.input_nodes.keys():
        return False
    if not all(torch.equal(a.input_nodes[t], b.input_nodes[t]) for t in a.input_nodes):
        return False
    for x, y in zip(a.blocks, b.blocks, strict=True):
        if x.num_src != y.num_src or x.num_dst != y.num_dst:
            return False
        for r in x.relations:
            p, q = x.relations[r], y.relations[r]
            if not (torch.equal(p.indptr, q.indptr) and torch.equal(p.indices, q.indices)):
                return False
    return True


def test_each_neighbour_is_included_with_probability_fanout_over_degree():
    """Two relations into the seeds, degrees 2..12, fanouts 3 and 5: over 1500
    batches every neighbour is drawn fanout / degree of the time, within 5 sigma."""
    degrees = [2, 3, 5, 8, 12]
    pool = 16
    src, dst = [], []
    rng = np.random.default_rng(3)
    for v, d in enumerate(degrees):
        src += rng.choice(pool, d, replace=False).tolist()
        dst += [v] * d
    a = ("x", "a", "seed")
    b = ("y", "b", "seed")
    types = {"seed": len(degrees), "x": pool, "y": pool}
    relations = {a: csc(src, dst, len(degrees)), b: csc(src[::-1], dst[::-1], len(degrees))}
    fanout = {a: 3, b: 5}
    hetero = HeteroNeighborSampler(types, relations, "seed", [fanout], seed=7)
    draws = 1500
    counts = {r: np.zeros(len(src)) for r in relations}
    for batch in range(draws):
        mb = hetero.sample(np.arange(len(degrees)), epoch=0, batch=batch)
        for (s, name, d), rows in sampled_edges(mb, 0).items():
            indptr, indices = relations[s, name, d]
            for v, srcs in rows:
                lo, hi = int(indptr[v]), int(indptr[v + 1])
                counts[s, name, d][lo:hi] += np.isin(indices[lo:hi].numpy(), srcs)
    for r, (indptr, _) in relations.items():
        for v, d in enumerate(degrees):
            p = min(1.0, fanout[r] / d)
            edge = counts[r][int(indptr[v]) : int(indptr[v + 1])]
            assert np.all(np.abs(edge - draws * p) <= 5 * np.sqrt(draws * p * (1 - p)) + 1e-9), (r, d, edge)


def test_labor_keeps_existing_edges_and_is_deterministic():
    types, relations, _ = hetero_graph()
    labor = HeteroNeighborSampler(types, relations, "paper", [3, 2], method="labor", seed=4)
    one, two = labor.sample([1, 5, 9], 0, 3), labor.sample([1, 5, 9], 0, 3)
    assert same(one, two)
    check_layout(one, [1, 5, 9])
    for layer in range(2):
        for relation, rows in sampled_edges(one, layer).items():
            for v, srcs in rows:
                assert set(srcs.tolist()) <= set(neighbours(relations, relation, v).tolist())


@pytest.mark.parametrize(
    "fanouts, match",
    [
        ([], "non-empty"),
        (3, "non-empty"),
        ([{WRITES: 2}], "no fanout for relation 'paper__cites__paper'"),
        ([{**dict.fromkeys([WRITES, CITES, WRITTEN_BY, EMPLOYS], 1), ("a", "b", "c"): 1}], "unknown relation"),
        ([-2], "fanouts\\[0\\]"),
    ],
)
def test_bad_fanouts(fanouts, match):
    with pytest.raises(ValueError, match=match):
        sampler(fanouts)


def test_bad_seeds_graph_and_arguments():
    hetero, _ = sampler([2])
    with pytest.raises(IndexError, match="out of range"):
        hetero.sample([0, 60])
    with pytest.raises(ValueError, match="more than once"):
        hetero.sample([3, 3])
    assert hetero.sample([3]).input_nodes["paper"][0] == 3  # the maps were reset after the refusals
    types, relations, _ = hetero_graph()
    with pytest.raises(ValueError, match="target"):
        HeteroNeighborSampler(types, relations, "venue", [2])
    with pytest.raises(ValueError, match="method"):
        HeteroNeighborSampler(types, relations, "paper", [2], method="magic")
    short = {**relations, CITES: (relations[CITES][0][:-1], relations[CITES][1])}
    with pytest.raises(ValueError, match="paper__cites__paper"):
        HeteroNeighborSampler(types, short, "paper", [2])
    indptr, indices = relations[WRITES]
    v = int(torch.nonzero(indptr.diff())[0])  # a paper with an author
    corrupt = indices.clone()
    corrupt[indptr[v]] = 10_000  # its first author id is past the authors
    hetero = HeteroNeighborSampler(types, {**relations, WRITES: (indptr, corrupt)}, "paper", [-1])
    with pytest.raises(DatasetError, match=f"author__writes__paper.indices.*paper node {v}'s.*author id 10000"):
        hetero.sample([v])
