"""SAGE and GCN layers on gnnsys's aggregation, in either order, against PyG's convolutions."""

import pytest
import torch

import gnnsys.models.sage_gcn as sage_gcn
from gnnsys.models.gnn import GNNLayer, gcn_adj_t
from gnnsys.models.sage_gcn import gemm_rows, project_first
from gnnsys.samplers import Block
from tests.gnnsys.test_models import random_csc, sub_block

DIMS = [(16, 3), (3, 16), (8, 8)]


def blocks(n=30):
    """A sampled-style block (few destinations, more sources) and the whole graph."""
    indptr, indices, _ = random_csc(n=n, e=120, seed=3, extra=[(4, 4), (1, 2), (1, 2)])
    sampled, _ = sub_block(indptr, indices, [0, 5, 7, 9])
    whole = Block.full_graph(indptr, indices)
    return {"sampled": sampled, "whole": whole}


def pyg_rows(layer, x_src, block):
    """The layer's conv as PyG computes it: SAGEConv over the unit CSR, GCNConv over gcn_adj_t."""
    if layer.kind == "sage":
        return layer.conv((x_src, x_src[: block.num_dst]), block.adj_t())
    return layer.conv(x_src, gcn_adj_t(block))


def outputs_and_grads(layer, x, block, rows):
    x = x.clone().requires_grad_(True)
    layer.zero_grad()
    out = rows(layer, x, block)
    out.backward(torch.linspace(-1, 1, out.numel()).view_as(out).to(out.dtype))
    return out.detach().float(), x.grad.float(), {k: p.grad.clone() for k, p in layer.named_parameters()}


def ours(layer, x, block):
    return layer._conv(x, x[: block.num_dst], block)


def orders(monkeypatch, first):
    """Force the order: project first (True), aggregate first (False) or by FLOPs (None)."""
    if first is not None:
        monkeypatch.setattr(sage_gcn, "project_first", lambda *a: first)


@pytest.mark.parametrize("conv", ["sage", "gcn"])
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("kind", ["sampled", "whole"])
@pytest.mark.parametrize("first", [None, True, False])
def test_fp32_outputs_and_gradients_are_pygs(monkeypatch, conv, dims, kind, first):
    block = blocks()[kind]
    torch.manual_seed(0)
    layer = GNNLayer(conv, *dims, activation=False)
    x = torch.randn(block.num_src, dims[0])
    expect = outputs_and_grads(layer, x, block, pyg_rows)
    orders(monkeypatch, first)
    got = outputs_and_grads(layer, x, block, ours)
    torch.testing.assert_close(got, expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv", ["sage", "gcn"])
@pytest.mark.parametrize("first", [True, False])
def test_bf16_outputs_and_gradients_are_pygs_within_bf16(monkeypatch, conv, first):
    block = blocks()["whole"]
    torch.manual_seed(0)
    layer = GNNLayer(conv, 16, 4, activation=False)
    x = torch.randn(block.num_src, 16)
    expect = outputs_and_grads(layer, x, block, pyg_rows)
    orders(monkeypatch, first)
    with torch.autocast("cpu", torch.bfloat16):
        got = outputs_and_grads(layer, x, block, ours)
    assert got[0].dtype == torch.float32  # compared as fp32; the layer's output was bf16
    torch.testing.assert_close(got, expect, rtol=0.03, atol=0.03)


@pytest.mark.parametrize("conv", ["sage", "gcn"])
@pytest.mark.parametrize(
    ("kind", "dims", "width"),
    [("whole", (16, 3), 3), ("whole", (3, 16), 3), ("whole", (8, 8), 8), ("sampled", (16, 3), 16)],
)
def test_the_cheaper_order_aggregates_the_narrower_rows_where_it_pays(monkeypatch, conv, kind, dims, width):
    """On the whole graph a narrowing layer projects first and aggregates out_dim-wide
    rows; a widening one, and a sampled block (many more sources), aggregate first."""
    seen = []
    real = sage_gcn.aggregate, sage_gcn.aggregate_with_root
    for name, fn in zip(("aggregate", "aggregate_with_root"), real):
        monkeypatch.setattr(sage_gcn, name, lambda adj, x, *rest, fn=fn: seen.append(x.shape[1]) or fn(adj, x, *rest))
    block = blocks()[kind]
    layer = GNNLayer(conv, *dims, activation=False)
    layer(torch.randn(block.num_src, dims[0]), block)
    assert seen == [width]


def test_project_first_counts_multiply_adds():
    # whole graph, 100 nodes, 500 edges, 256 -> 40: 500*40 + 100*256*40 < 500*256 + 100*256*40
    assert project_first(100, 100, 500, 256, 40)
    assert not project_first(100, 100, 500, 40, 256)
    # sampled: 1,000 destinations of 9,500 sources over 5,000 edges, 256 -> 40
    assert not project_first(1_000, 9_500, 5_000, 256, 40)
    # equal costs keep PyG SAGEConv's order (aggregate first)
    assert not project_first(10, 10, 10, 8, 8)


@pytest.mark.parametrize("conv", ["sage", "gcn"])
def test_the_cpu_refuses_float64_in_one_line(conv):
    block = blocks()["whole"]
    layer = GNNLayer(conv, 4, 3, activation=False).double()
    with pytest.raises(TypeError, match="aggregation on the CPU takes float32 or bfloat16, got input torch.float64"):
        layer(torch.randn(block.num_src, 4, dtype=torch.float64), block)


def test_gemm_rows_round_up_the_rows_of_cpu_products_on_onednn_only(monkeypatch):
    x = torch.zeros(1)
    rounded = [1, 17, 38, 1024, 9728, 55296]
    assert [gemm_rows(n, x, torch.bfloat16) for n in (1, 17, 37, 1024, 9525, 54530)] == rounded
    assert gemm_rows(54530, x, torch.float32) == (55296 if sage_gcn.ONEDNN else 54530)
    for n in range(1, 5000, 7):
        assert n <= gemm_rows(n, x, torch.bfloat16) <= n * 17 / 16
    monkeypatch.setattr(sage_gcn, "ONEDNN", False)  # fp32 products then run on F.linear
    assert gemm_rows(54530, x, torch.float32) == 54530 and gemm_rows(54530, x, torch.bfloat16) == 55296


@pytest.mark.skipif(not sage_gcn.ONEDNN, reason="fp32 products run on oneDNN only where torch has it")
@pytest.mark.parametrize("conv", ["sage", "gcn"])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_products_on_onednn_run_at_the_rounded_up_rows_with_the_same_result(monkeypatch, conv, precision):
    """An aggregate-first layer whose product runs on oneDNN (bf16; fp32 through `linear`)
    multiplies gemm_rows(num_dst) rows and returns num_dst of them; outputs and gradients
    as without the padding."""
    indptr, indices, _ = random_csc(n=200, e=900, seed=4)
    block, _ = sub_block(indptr, indices, list(range(37)))
    torch.manual_seed(0)
    layer = GNNLayer(conv, 16, 8, activation=False)
    x = torch.randn(block.num_src, 16)
    shapes = []

    def spy(real):
        def aggregating(*a):
            out = real(*a)
            shapes.append((out[0] if isinstance(out, tuple) else out).shape[0])
            return out

        return aggregating

    for name in ("aggregate", "aggregate_with_root"):
        monkeypatch.setattr(sage_gcn, name, spy(getattr(sage_gcn, name)))
    with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
        padded = outputs_and_grads(layer, x, block, ours)
        monkeypatch.setattr(sage_gcn, "gemm_rows", lambda rows, *a: rows)
        plain = outputs_and_grads(layer, x, block, ours)
    assert shapes == [38, 37] and padded[0].shape == (37, 8)
    tolerance = 0.01 if precision == "bf16" else 1e-5
    torch.testing.assert_close(padded, plain, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("conv", ["sage", "gcn"])
@pytest.mark.parametrize("kind", ["sampled", "whole"])
def test_a_hidden_layer_adds_the_bias_in_relu_dropout_like_pyg(conv, kind):
    """A hidden layer (ReLU + dropout right after the conv) leaves the bias out of the
    product and relu_dropout adds it: outputs and gradients (the bias's included) are
    PyG's conv, then ReLU and the same dropout mask, to fp32 rounding."""
    from gnnsys.models.dropout import _draw_key, hash_dropout

    block = blocks()[kind]
    torch.manual_seed(0)
    layer = GNNLayer(conv, 8, 16, dropout=0.5)
    assert layer._fused_bias() is not None
    x = torch.randn(block.num_src, 8)

    def pyg_hidden(layer, x, block):
        return hash_dropout(torch.relu(pyg_rows(layer, x, block)), 0.5, key=_draw_key())

    torch.manual_seed(1)
    expect = outputs_and_grads(layer, x, block, pyg_hidden)
    torch.manual_seed(1)
    got = outputs_and_grads(layer, x, block, lambda layer, x, block: layer(x, block))
    assert (got[0] == 0).any() and (got[0] > 0).any()
    torch.testing.assert_close(got, expect, rtol=1e-5, atol=1e-5)
