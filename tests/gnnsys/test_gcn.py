"""GCN on sampled blocks: whole-graph degrees (`gcn_degree`, `MiniBatch.attach_degree`)
from the CPU and the GPU sampler (Triton's interpreter without CUDA), exact with
every neighbour, the whole graph's rows on average with a fanout."""

import itertools

import numpy as np
import pytest
import torch

from gnnsys._capabilities import HAS_CUDA
from gnnsys.models.gnn import GNN, gcn_adj_t
from gnnsys.samplers import Block
from gnnsys.samplers.block import gcn_degree
from gnnsys.samplers.factory import make_sampler

SAMPLERS = ["cpu", "gpu"]


def sample(kind, indptr, indices, fanouts, seeds, seed=0):
    """The MiniBatch of `seeds` from the `kind` sampler with its degrees attached,
    on the CPU (the GPU sampler runs on CUDA when there is one)."""
    device = "cuda" if kind == "gpu" and HAS_CUDA else "cpu"
    mb = make_sampler(kind, indptr, indices, fanouts, device, seed=seed).sample(torch.tensor(seeds))
    return mb.attach_degree(gcn_degree(indptr, indices).to(device)).to("cpu")


def random_graph(n=40, m=300, seed=0):
    """CSC (indptr, indices) of a random directed multigraph (self-loops and repeats included)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    order = np.argsort(dst, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    return torch.from_numpy(indptr), torch.from_numpy(src[order])


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gcn_degree_counts_in_edges_from_other_nodes_plus_one(index_dtype):
    # 0 <- {0, 0, 1}; 1 <- {}; 2 <- {0, 1, 1}: two self-loops count as the one added, a repeat twice
    indptr = torch.tensor([0, 3, 3, 6])
    indices = torch.tensor([0, 0, 1, 0, 1, 1], dtype=index_dtype)
    assert gcn_degree(indptr, indices).tolist() == [2.0, 1.0, 4.0]
    assert torch.equal(Block.full_graph(indptr, indices).full_degree, gcn_degree(indptr, indices))


@pytest.mark.parametrize("kind", SAMPLERS)
def test_attach_degree_gives_each_block_its_source_prefix(kind):
    indptr, indices = random_graph()
    degree = gcn_degree(indptr, indices)
    mb = sample(kind, indptr, indices, [3, 2], [4, 9, 17], seed=1)
    for block in mb.blocks:
        assert torch.equal(block.full_degree, degree[mb.input_nodes[: block.num_src]])
    assert mb.attach_degree(degree) is mb


@pytest.mark.parametrize("kind", SAMPLERS)
@pytest.mark.parametrize("seeds", [[4, 9, 17], [9], list(range(40))])
def test_every_neighbour_gives_the_whole_graph_rows(kind, seeds):
    """With fanout -1 a node's GCN output is its whole-graph row, whichever
    nodes share its batch (what makes layer-wise inference exact)."""
    indptr, indices = random_graph()
    torch.manual_seed(0)
    model = GNN("gcn", 5, 8, 3, num_layers=2).eval()
    x = torch.randn(40, 5)
    full = model(x, [Block.full_graph(indptr, indices)] * 2)
    mb = sample(kind, indptr, indices, [-1, -1], seeds)
    torch.testing.assert_close(model(x[mb.input_nodes], mb.blocks), full[seeds], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fanout", [2, 3, 4])
def test_sampled_rows_average_to_the_whole_graph_row(fanout):
    """Node 0 has in-edges from 0 (a self-loop), 1, 2 and 3. Averaged over
    every equally likely draw of `fanout` of them, its sampled GCN row (the
    sum over drawn neighbours scaled by (d - 1) / k) is its whole-graph row."""
    indptr = torch.tensor([0, 4, 5, 8, 9, 9])
    indices = torch.tensor([0, 1, 2, 3, 0, 0, 1, 3, 4])
    degree = gcn_degree(indptr, indices)
    full = gcn_adj_t(Block.full_graph(indptr, indices)).to_dense()[0]
    rows = []
    for drawn in itertools.combinations(indices[:4].tolist(), fanout):
        block = Block(torch.tensor([0, fanout]), torch.tensor(sorted(drawn)), 5, 1, full_degree=degree)
        rows.append(gcn_adj_t(block).to_dense()[0])  # local ids are global ids here: dst 0 is node 0
    torch.testing.assert_close(torch.stack(rows).mean(0), full)
