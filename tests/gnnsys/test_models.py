"""GNNLayer / GNN over hand-made blocks, checked against PyG on the whole graph."""
import pytest
import torch
from torch_geometric.nn import GATConv

from gnnsys.models import GNN, GNNLayer, gcn_adj_t
from gnnsys.samplers import Block


def random_csc(n=12, e=40, seed=0):
    """CSC (indptr, indices, edge_index) of a random undirected graph (both
    directions of each edge) with sorted in-neighbour lists."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, n, (e // 2,), generator=g)
    b = torch.randint(0, n, (e // 2,), generator=g)
    src, dst = torch.cat([a, b]), torch.cat([b, a])
    order = torch.argsort(dst * n + src)
    src, dst = src[order], dst[order]
    indptr = torch.zeros(n + 1, dtype=torch.long)
    indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    return indptr, src, torch.stack([src, dst])


def sub_block(indptr, indices, dst_nodes):
    """A block holding every in-edge of `dst_nodes` (local ids, dst first)."""
    srcs = list(dst_nodes)
    local = {v: i for i, v in enumerate(srcs)}
    rows, cols = [0], []
    for v in dst_nodes:
        nbrs = indices[indptr[v]:indptr[v + 1]].tolist()
        for u in nbrs:
            if u not in local:
                local[u] = len(srcs)
                srcs.append(u)
        cols += sorted(local[u] for u in nbrs)
        rows.append(len(cols))
    block = Block(torch.tensor(rows), torch.tensor(cols, dtype=torch.long), len(srcs), len(dst_nodes))
    return block, torch.tensor(srcs)


def test_sage_layer_is_mean_plus_root():
    # dst 0 <- {1, 2}, dst 1 <- {2}; src 3 unused
    block = Block(torch.tensor([0, 2, 3]), torch.tensor([1, 2, 2]), 4, 2)
    layer = GNNLayer("sage", 3, 5, activation=False)
    x = torch.randn(4, 3)
    out = layer(x, block)
    lin_l, lin_r = layer.conv.lin_l, layer.conv.lin_r
    expect = torch.stack([lin_l((x[1] + x[2]) / 2) + lin_r(x[0]), lin_l(x[2]) + lin_r(x[1])])
    torch.testing.assert_close(out, expect)


def test_gcn_layer_is_mean_over_self_and_neighbours():
    indptr, indices, edge_index = random_csc()
    layer = GNNLayer("gcn", 4, 6, activation=False)
    x = torch.randn(12, 4)
    adj = torch.zeros(12, 12).index_put_((edge_index[1], edge_index[0]), torch.ones(edge_index.shape[1]),
                                         accumulate=True)  # a repeated edge counts as often as it appears
    adj.fill_diagonal_(1.0)  # exactly one self-loop per node
    expect = (adj / adj.sum(1, keepdim=True)) @ layer.conv.lin(x) + layer.conv.bias
    torch.testing.assert_close(layer(x, Block.full_graph(indptr, indices)), expect)


def test_gcn_adj_keeps_one_self_loop():
    block = Block(torch.tensor([0, 2, 3]), torch.tensor([0, 2, 0]), 3, 2)  # 0 <- {0, 2}, 1 <- {0}
    assert gcn_adj_t(block).to_dense().tolist() == [[0.5, 0.0, 0.5], [0.5, 0.5, 0.0]]
    assert gcn_adj_t(block) is gcn_adj_t(block)


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
def test_block_rows_equal_full_graph_rows(conv):
    """A block with every in-neighbour gives the full-graph rows of its dst
    nodes. GCN counts source degrees inside the block, so its block must hold
    every node as a destination (the graph relabelled)."""
    indptr, indices, _ = random_csc()
    torch.manual_seed(0)
    layer = GNNLayer(conv, 4, 8, heads=2).eval()
    x = torch.randn(12, 4)
    full = layer(x, Block.full_graph(indptr, indices))
    dst = [5, 0, 7] if conv != "gcn" else list(range(12))
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
