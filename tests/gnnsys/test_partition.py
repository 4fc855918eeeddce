"""Chunking for GNNPipe: permutations, contiguous chunks, locality, halos."""

import numpy as np
import pytest
import torch

from gnnsys.parallel.partition import chunk_graph, halo_sizes, metis_available, relabel_csc


def ring_csc(n=120, perm_seed=0):
    """A ring (each node's in-neighbours: i-1 and i+1) with shuffled ids."""
    p = np.random.default_rng(perm_seed).permutation(n)
    src = np.concatenate([np.arange(n), np.arange(n)])
    dst = np.concatenate([(np.arange(n) + 1) % n, (np.arange(n) - 1) % n])
    src, dst = p[src], p[dst]
    order = np.lexsort((src, dst))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return torch.from_numpy(indptr), torch.from_numpy(src[order].astype(np.int64))


def edge_set(indptr, indices, rename=None):
    dst = torch.repeat_interleave(torch.arange(indptr.shape[0] - 1), indptr.diff())
    src = indices.long()
    if rename is not None:
        src, dst = rename[src], rename[dst]
    return set(zip(src.tolist(), dst.tolist()))


METHODS = ["rcm", "range"] + (["metis"] if metis_available() else [])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("chunks", [1, 3, 8])
def test_chunks_are_a_permutation_in_contiguous_ranges(method, chunks):
    indptr, indices = ring_csc()
    part = chunk_graph(indptr, indices, chunks, method)
    assert sorted(part.perm.tolist()) == list(range(120))
    assert part.chunk_ptr[0] == 0 and part.chunk_ptr[-1] == 120 and part.num_chunks == chunks
    assert bool((part.chunk_sizes() >= 0).all())
    assert torch.equal(part.perm[part.inverse()], torch.arange(120))


@pytest.mark.parametrize("method", [m for m in METHODS if m != "range"])
def test_locality_preserving_chunks_have_small_halos(method):
    """A shuffled ring cut into 4 chunks: a good order leaves 2 halo nodes per
    chunk; the shuffled identity order leaves nearly every neighbour outside."""
    indptr, indices = ring_csc()
    good = chunk_graph(indptr, indices, 4, method)
    bad = chunk_graph(indptr, indices, 4, "range")
    halo_good = halo_sizes(*relabel_csc(indptr, indices, good.perm), good.chunk_ptr)
    halo_bad = halo_sizes(indptr, indices, bad.chunk_ptr)
    assert int(halo_good.sum()) <= 4 * 4
    assert int(halo_bad.sum()) > 5 * int(halo_good.sum())


def test_relabel_keeps_every_edge_and_halo_counts_match_brute_force():
    indptr, indices = ring_csc(60, perm_seed=3)
    part = chunk_graph(indptr, indices, 5, "rcm")
    ip, ix = relabel_csc(indptr, indices, part.perm)
    assert edge_set(ip, ix) == edge_set(indptr, indices, rename=part.inverse())
    owner = np.repeat(np.arange(5), part.chunk_sizes().numpy())
    expect = [len({s for s, d in edge_set(ip, ix) if owner[d] == c and owner[s] != c}) for c in range(5)]
    assert halo_sizes(ip, ix, part.chunk_ptr).tolist() == expect


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_chunks": 0}, "num_chunks"),
        ({"num_chunks": 500}, "num_chunks"),
        ({"num_chunks": 2, "method": "kmeans"}, "method"),
    ],
)
def test_bad_arguments_say_which(kwargs, message):
    indptr, indices = ring_csc()
    with pytest.raises(ValueError, match=message):
        chunk_graph(indptr, indices, **kwargs)
