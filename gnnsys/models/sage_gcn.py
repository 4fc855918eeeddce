"""SAGE and GCN layers computed on gnnsys's aggregation (`gnnsys.models.aggregation`),
in the cheaper of the two exact orders.

A layer's linear map and its aggregation commute: for a weighted sum A (SAGE's
mean, GCN's normalised sum) and a weight W, (A x) W = A (x W), exactly up to
rounding. Aggregating first multiplies the `num_dst` aggregated rows
(`num_edges * in_dim + num_dst * in_dim * out_dim` multiply-adds); projecting
first multiplies all `num_src` source rows and aggregates the narrower ones
(`num_src * in_dim * out_dim + num_edges * out_dim`). `project_first` picks
the smaller per layer and block, forward and backward alike (each backward
product has its forward one's size). PyG's SAGEConv always aggregates first
and its GCNConv always projects first; on sampled blocks (many more sources
than destinations) aggregating first is the cheaper one, on the whole graph
(sources = destinations) projecting first is, whenever out_dim < in_dim.

The rest follows PyG's convolutions, whose modules keep the parameters
(SAGEConv: lin_l with the bias on the aggregated rows, lin_r on the
destination rows only; GCNConv: lin, then bias): the same outputs and
gradients to rounding. The mean's normalisation is part of the aggregation
kernel's weights. Aggregating first, SAGE's two products are one: the kernel
writes each aggregated row beside its root row (`aggregate_with_root`), and
[aggregated | root] times [lin_l | lin_r] (with the bias) is a single GEMM of
twice the inner size, forward and backward (one weight-gradient and one
input-gradient product instead of two each, and no read-modify-write of the
output by a second product); the root columns' gradient is added into the
aggregation's input gradient by the transposed kernel's own pass.

Row counts: a product on the CPU in bf16, or in fp32 through
`gnnsys.models.linear`, runs on oneDNN, which builds a primitive for every new
shape (and gnnsys keeps few of them, see `gnnsys/__init__.py`), and sampled
blocks give nearly every batch new row counts; a bf16 product at a new row
count ran at 0.1-0.4x the rate of a repeated one, and each primitive holds
memory. So on the CPU the aggregated rows (and SAGE's root rows) of an
aggregate-first layer are multiplied as `gemm_rows` rows, the count rounded up
to one of 16 steps per power of two (at most 1/16 more rows; the extra
aggregated rows are zero, the extra root rows are the next source rows), and
the product's first `num_dst` rows are the result (`gnnsys.models.first_rows`, whose
reader ReLU + dropout writes its gradient straight into a padded buffer). Products torch computes
elsewhere (fp32 without oneDNN) are not padded.
"""

from __future__ import annotations

import torch

from gnnsys.models.aggregation import Adjacency, aggregate, aggregate_with_root
from gnnsys.models.first_rows import first_rows
from gnnsys.models.linear import ONEDNN, linear


def project_first(num_dst: int, num_src: int, num_edges: int, in_dim: int, out_dim: int) -> bool:
    """Whether projecting the `num_src` source rows to `out_dim` before aggregating
    them over `num_edges` edges takes fewer multiply-adds than aggregating the
    `in_dim`-wide rows first and projecting the `num_dst` results."""
    aggregating_first = num_edges * in_dim + num_dst * in_dim * out_dim
    projecting_first = num_src * in_dim * out_dim + num_edges * out_dim
    return projecting_first < aggregating_first


def gemm_rows(rows: int, x: torch.Tensor, dtype: torch.dtype) -> int:
    """The rows a layer's products over `rows` destination rows run at for
    input `x` computing in `dtype`: `rows` rounded up to a multiple of
    2**(bit_length(rows) - 5) where the product runs on oneDNN on the CPU (low
    precision, or fp32 through `linear`), else `rows`."""
    if x.device.type != "cpu" or (dtype == torch.float32 and not ONEDNN):
        return rows
    step = 1 << max(rows.bit_length() - 5, 0)
    return -(-rows // step) * step


def sage_rows(conv, x_src: torch.Tensor, adj: Adjacency, dtype: torch.dtype, with_bias: bool = True) -> torch.Tensor:
    """PyG SAGEConv `conv` (mean) of the `adj.num_dst` destination rows from
    `x_src`, aggregated in `dtype` (see the module docstring); without its bias
    unless `with_bias` (for a caller that adds it in its own pass)."""
    w_l, w_r, bias = conv.lin_l.weight, conv.lin_r.weight, conv.lin_l.bias if with_bias else None
    num_dst = adj.num_dst
    if project_first(num_dst, adj.num_src, adj.indices.shape[0], w_l.shape[1], w_l.shape[0]):
        h = aggregate(adj, linear(x_src, w_l), dtype)
        return linear(x_src[:num_dst], w_r, bias).add_(h)
    rows = gemm_rows(num_dst, x_src, dtype)
    rows = rows if rows <= adj.num_src else num_dst  # the root rows are source rows
    both = aggregate_with_root(adj, x_src, dtype, rows)  # [aggregated | root] rows side by side
    return first_rows(linear(both, torch.cat([w_l, w_r], 1), bias), num_dst)


def gcn_rows(conv, x_src: torch.Tensor, adj: Adjacency, dtype: torch.dtype, with_bias: bool = True) -> torch.Tensor:
    """PyG GCNConv `conv` (normalize=False) over `adj`, its propagation matrix
    (`gnnsys.models.gnn.gcn_adj_t`), aggregated in `dtype`; without its bias unless `with_bias`."""
    weight, bias = conv.lin.weight, conv.bias if with_bias else None
    if project_first(adj.num_dst, adj.num_src, adj.indices.shape[0], weight.shape[1], weight.shape[0]):
        h = aggregate(adj, linear(x_src, weight), dtype)
        return h if bias is None else h + bias.to(h.dtype)
    h = aggregate(adj, x_src, dtype, gemm_rows(adj.num_dst, x_src, dtype))
    return first_rows(linear(h, weight, bias), adj.num_dst)
