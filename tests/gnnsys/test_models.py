"""GNNLayer / GNN over hand-made blocks, checked against PyG on the whole graph."""

import math

import pytest
import torch
from torch_geometric.nn import GATConv, GCNConv

from gnnsys.models.dropout import hash_dropout
from gnnsys.models.gnn import GNN, GNNLayer, gcn_adj_t
from gnnsys.samplers import Block
from gnnsys.samplers.block import gcn_degree


def random_csc(n=12, e=40, seed=0, extra=()):
    """CSC (indptr, indices, edge_index) of a random undirected graph (both
    directions of each edge) plus the directed `extra` (src, dst) edges, with
    sorted in-neighbour lists."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, n, (e // 2,), generator=g)
    b = torch.randint(0, n, (e // 2,), generator=g)
    more = torch.tensor(extra, dtype=torch.long).view(-1, 2)
    src, dst = torch.cat([a, b, more[:, 0]]), torch.cat([b, a, more[:, 1]])
    order = torch.argsort(dst * n + src)
    src, dst = src[order], dst[order]
    indptr = torch.zeros(n + 1, dtype=torch.long)
    indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    return indptr, src, torch.stack([src, dst])


def sub_block(indptr, indices, dst_nodes):
    """A block holding every in-edge of `dst_nodes` (local ids, dst first),
    with its source nodes' degrees in the whole graph."""
    srcs = list(dst_nodes)
    local = {v: i for i, v in enumerate(srcs)}
    rows, cols = [0], []
    for v in dst_nodes:
        nbrs = indices[indptr[v] : indptr[v + 1]].tolist()
        for u in nbrs:
            if u not in local:
                local[u] = len(srcs)
                srcs.append(u)
        cols += sorted(local[u] for u in nbrs)
        rows.append(len(cols))
    srcs = torch.tensor(srcs)
    block = Block(
        torch.tensor(rows),
        torch.tensor(cols, dtype=torch.long),
        len(srcs),
        len(dst_nodes),
        full_degree=gcn_degree(indptr, indices)[srcs],
    )
    return block, srcs


def test_sage_layer_is_mean_plus_root():
    # dst 0 <- {1, 2}, dst 1 <- {2}; src 3 unused
    block = Block(torch.tensor([0, 2, 3]), torch.tensor([1, 2, 2]), 4, 2)
    layer = GNNLayer("sage", 3, 5, activation=False)
    x = torch.randn(4, 3)
    out = layer(x, block)
    lin_l, lin_r = layer.conv.lin_l, layer.conv.lin_r
    expect = torch.stack([lin_l((x[1] + x[2]) / 2) + lin_r(x[0]), lin_l(x[2]) + lin_r(x[1])])
    torch.testing.assert_close(out, expect)


def test_gcn_layer_is_pyg_gcnconv_on_the_whole_graph():
    """Kipf & Welling's symmetric normalisation, as PyG's GCNConv computes it,
    on a graph with self-loops (two on node 3) and a repeated edge (1 -> 2)."""
    indptr, indices, edge_index = random_csc(extra=[(3, 3), (3, 3), (1, 2), (1, 2)])
    torch.manual_seed(0)
    ours = GNNLayer("gcn", 4, 6, activation=False)
    ref = GCNConv(4, 6)
    ref.load_state_dict(ours.conv.state_dict())
    x = torch.randn(12, 4)
    torch.testing.assert_close(ours(x, Block.full_graph(indptr, indices)), ref(x, edge_index))


def test_gcn_adj_normalises_by_whole_graph_degrees_and_rescales_samples():
    # 0 <- {0, 2}, 1 <- {0}; whole-graph degrees (self-loop included) 3, 2, 5: dst 0 has 2 in-edges
    # from other nodes of which 1 was sampled (scale 2), dst 1 has 1 of 1; the sampled 0 -> 0 gives way
    block = Block(torch.tensor([0, 2, 3]), torch.tensor([0, 2, 0]), 3, 2, full_degree=torch.tensor([3.0, 2.0, 5.0]))
    expect = torch.tensor([[1 / 3, 0.0, 2 / math.sqrt(3 * 5)], [1 / math.sqrt(2 * 3), 1 / 2, 0.0]])
    torch.testing.assert_close(gcn_adj_t(block).to_dense(), expect)
    assert gcn_adj_t(block) is gcn_adj_t(block)


def test_gcn_needs_whole_graph_degrees():
    block = Block(torch.tensor([0, 2, 3]), torch.tensor([0, 2, 0]), 3, 2)
    with pytest.raises(ValueError, match="full_degree"):
        GNNLayer("gcn", 4, 4)(torch.randn(3, 4), block)
    assert GNN("gcn", 4, 4, 2, 2).needs_degree and not GNN("sage", 4, 4, 2, 2).needs_degree


@pytest.mark.parametrize("activation", [True, False])
def test_input_dropout_drops_the_source_rows_before_the_conv(activation):
    block = Block.full_graph(*random_csc()[:2])
    torch.manual_seed(0)
    plain = GNNLayer("sage", 4, 6, activation=activation)
    dropping = GNNLayer("sage", 4, 6, activation=activation, input_dropout=0.5)
    dropping.load_state_dict(plain.state_dict())
    x = torch.randn(12, 4)
    torch.manual_seed(1)
    out = dropping(x, block)
    torch.manual_seed(1)
    torch.testing.assert_close(out, plain(hash_dropout(x, 0.5), block))
    assert not torch.allclose(out, plain(x, block))
    torch.testing.assert_close(dropping.eval()(x, block), plain.eval()(x, block))


@pytest.mark.parametrize("activation", [True, False])
def test_gat_layer_matches_pyg_on_full_graph(activation):
    indptr, indices, edge_index = random_csc()
    torch.manual_seed(0)
    ours = GNNLayer("gat", 4, 8, heads=2, activation=activation)
    ref = GATConv(4, 8 // 2 if activation else 8, heads=2, concat=activation)
    ref.load_state_dict(ours.conv.state_dict())
    x = torch.randn(12, 4)
    out = ref(x, edge_index)
    torch.testing.assert_close(ours(x, Block.full_graph(indptr, indices)), out.relu() if activation else out)


@pytest.mark.parametrize("conv", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("dst", [[5, 0, 7], [7], list(range(12))])
def test_block_rows_equal_full_graph_rows(conv, dst):
    """A block with every in-neighbour gives the full-graph rows of its dst
    nodes, whichever other nodes share it (GCN reads whole-graph degrees)."""
    indptr, indices, _ = random_csc(extra=[(7, 7)])
    torch.manual_seed(0)
    layer = GNNLayer(conv, 4, 8, heads=2).eval()
    x = torch.randn(12, 4)
    full = layer(x, Block.full_graph(indptr, indices))
    block, srcs = sub_block(indptr, indices, dst)
    torch.testing.assert_close(layer(x[srcs], block), full[dst])


@pytest.mark.parametrize("conv", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("norm,residual", [(None, False), ("batch", True), ("layer", True)])
def test_gnn_trains_on_blocks(conv, norm, residual):
    indptr, indices, _ = random_csc(n=30, e=120)
    b2, srcs2 = sub_block(indptr, indices, [3, 4, 5])
    b1, srcs1 = sub_block(indptr, indices, srcs2.tolist())
    torch.manual_seed(0)
    model = GNN(conv, 4, 16, 3, num_layers=2, norm=norm, residual=residual, heads=2, dropout=0.0)
    x = torch.randn(30, 4)
    y = torch.tensor([0, 1, 2])
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[srcs1], [b1, b2]), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert model(x[srcs1], [b1, b2]).shape == (3, 3)
    assert losses[-1] < 0.5 * losses[0]


def test_full_graph_model_and_bad_inputs():
    indptr, indices, _ = random_csc()
    model = GNN("sage", 4, 8, 3, num_layers=2)
    full = Block.full_graph(indptr, indices)
    assert model(torch.randn(12, 4), [full] * 2).shape == (12, 3)
    with pytest.raises(ValueError, match="got 1 blocks for a 2-layer"):
        model(torch.randn(12, 4), [full])
    with pytest.raises(ValueError, match="x_src has 5 rows"):
        model.layers[0](torch.randn(5, 4), full)
    with pytest.raises(ValueError, match="conv must be one of"):
        GNNLayer("gin", 4, 4)
    with pytest.raises(ValueError, match="not a multiple of heads"):
        GNNLayer("gat", 4, 6, heads=4)
