"""GNN models over sampled blocks: GraphSAGE (mean), GCN and GAT.

Every layer is a PyG conv used bipartitely: it reads the features of a
block's `num_src` source nodes and writes rows for its first `num_dst` of them
(DGL's block layout, see `gnnsys.samplers.block`); the PyG modules own the
parameters. SAGE and GCN compute PyG's result with `gnnsys.models.sage_gcn`:
they aggregate with `gnnsys.models.aggregation` (rows summed in fp32, in bf16
rows under bf16) and project before or after aggregating, whichever takes
fewer multiply-adds. GAT needs per-edge
attention and runs PyG's GATConv on the block's edge_index, under autocast on
PyG's own ops (attention scores and softmax as autocast types them). The same
model runs on the whole graph with `[Block.full_graph(indptr, indices)] * num_layers`.

In bf16 (under `torch.autocast(..., torch.bfloat16)`, or on bf16 inputs) the
SAGE and GCN aggregations read bf16 rows and write bf16 rows and their linear
maps run in bf16.

`GNNLayer` is the reusable unit (the full-graph pipelined trainer stacks
layers itself); `GNN` stacks them for minibatch training.

The blocks interface: what minibatch training (`gnnsys.train(model=...)`)
asks of a model, the built-in `GNN` or a user's `torch.nn.Module`:
- `forward(x, blocks)`: x holds the input features of blocks[0]'s
  `num_src` source nodes (float32, or the precision's input dtype), blocks
  is one `gnnsys.samplers.Block` per fanout, input layer first (each reads
  the rows of its `num_src` sources and writes its first `num_dst`: see
  `block.adj_t()`, `block.edge_index()`, `block.size`); the result is
  [blocks[-1].num_dst, num_classes] logits;
- `needs_degree` (optional, default False): True when it reads
  `block.full_degree` (as `gcn_adj_t` does), so the trainer attaches the
  whole graph's degrees to every batch;
- `layers` (optional): a ModuleList of `GNNLayer`s, one per block, which
  exact layer-wise evaluation streams one at a time; without it a user
  module is evaluated on sampled minibatches (eval "sampled").
A user module's parameters are re-initialised before each run: the
trainer deep-copies it, seeds torch with the run's seed and calls
`reset_parameters()` on every submodule that has one (parameters of no
such submodule keep their given values); the module passed is never changed.
`gnnsys.training.user_model` checks a module against this interface.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from gnnsys.models.aggregation import Adjacency
from gnnsys.models.dropout import HashDropout, relu_dropout
from gnnsys.models.names import CONVS, NORMS
from gnnsys.models.sage_gcn import gcn_rows, sage_rows

_GCN_KEY = "gcn_norm"  # where gcn_adj_t caches a block's adjacency (Block.cache)


def gcn_adj_t(block) -> torch.Tensor:
    """GCN's propagation matrix of a block (Kipf & Welling 2017; PyG's
    GCNConv), sparse CSR [num_dst, num_src]: D^-1/2 (A + I) D^-1/2 with D the
    degrees in the whole graph (`block.full_degree`, `gcn_degree`), so
    destination v gets x_v / d_v + sum over in-neighbours u != v of
    x_u / sqrt(d_u d_v); a sampled self-loop gives way to the added one.

    When only k of v's d_v - 1 in-edges from other nodes were sampled, their
    sum is scaled by (d_v - 1) / k, which makes it an unbiased estimate of the
    whole sum (the neighbour-sampling estimator of Chen et al. 2018), so
    training on sampled blocks sees the scale that inference uses. A block
    holding every in-edge of its destinations (full-neighbour inference, a
    chunk, the whole graph) gives exactly the whole graph's rows, whichever
    nodes share it. Cached on the block like its other adjacencies.
    """
    if block.full_degree is None:
        raise ValueError(
            "gcn needs the whole graph's degrees of the block's source nodes (Block.full_degree): "
            "build the block with Block.full_graph, or call "
            "minibatch.attach_degree(gcn_degree(indptr, indices)) on a sampled one"
        )
    cache = block.cache
    if _GCN_KEY not in cache:
        cache[_GCN_KEY] = _gcn_adj_t(block.indptr, block.indices, block.full_degree, block.num_dst)
    return cache[_GCN_KEY]


def _gcn_adj_t(indptr, indices, degree, num_dst):
    device = indptr.device
    num_src = degree.shape[0]
    dst = torch.arange(num_dst, device=device)
    rows = torch.repeat_interleave(dst, indptr.diff())
    others = indices != rows
    rows, cols = rows[others], indices[others]
    sampled = torch.bincount(rows, minlength=num_dst)
    scale = (degree[:num_dst] - 1) / sampled.clamp(min=1)
    norm = degree.rsqrt()
    values = torch.cat([(scale * norm[:num_dst])[rows] * norm[cols], 1.0 / degree[:num_dst]])
    rows, cols = torch.cat([rows, dst]), torch.cat([cols, dst])
    order = torch.argsort(rows * num_src + cols)
    crow = torch.zeros(num_dst + 1, dtype=torch.long, device=device)
    crow[1:] = torch.cumsum(sampled + 1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's beta warning for sparse CSR
        return torch.sparse_csr_tensor(crow, cols[order], values[order], size=(num_dst, num_src))


def gcn_adjacency(block) -> Adjacency:
    """`gcn_adj_t(block)` as the Adjacency that `gnnsys.models.aggregation` sums over."""
    return Adjacency.from_csr(gcn_adj_t(block))


def low_precision(x: torch.Tensor) -> torch.dtype | None:
    """The dtype a layer reading `x` computes in when it is not fp32: autocast's
    on x's device when autocast is on there, else x's own when x is bf16 or fp16;
    None for fp32 (PyG's own aggregation, bit for bit as without autocast)."""
    kind = x.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return x.dtype if x.dtype in (torch.bfloat16, torch.float16) else None


def _cached(block, key: str, build):
    if key not in block.cache:
        block.cache[key] = build()
    return block.cache[key]


class GNNLayer(nn.Module):
    """One bipartite graph layer: (input dropout ->) conv -> (+ residual) -> norm -> ReLU -> dropout.

    conv: "sage" (mean aggregation plus a root weight), "gcn" (Kipf &
    Welling's GCN, one weight, symmetric normalisation by the whole graph's
    degrees, see `gcn_adj_t`) or "gat" (`heads` attention heads, concatenated
    to `out_dim` in hidden layers, averaged when `activation=False`). norm:
    None, "batch" or "layer". residual adds a linear projection of the
    destination rows (identity when the sizes match). input_dropout: dropout
    on the source rows it reads (the first layer's input features).
    forward(x_src, block) -> [block.num_dst, out_dim].
    """

    def __init__(
        self,
        conv: str,
        in_dim: int,
        out_dim: int,
        *,
        heads: int = 1,
        norm: str | None = None,
        residual: bool = False,
        dropout: float = 0.0,
        activation: bool = True,
        input_dropout: float = 0.0,
    ):
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"conv must be one of {CONVS}, got {conv!r}")
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        self.kind = conv
        self.needs_degree = conv == "gcn"
        self.in_dim, self.out_dim = in_dim, out_dim
        self.input_dropout = HashDropout(input_dropout)
        self.conv = self._make_conv(conv, in_dim, out_dim, heads, activation)
        self.residual = None
        if residual:
            self.residual = nn.Identity() if in_dim == out_dim else nn.Linear(in_dim, out_dim, bias=False)
        self.norm = {None: None, "batch": nn.BatchNorm1d, "layer": nn.LayerNorm}[norm]
        self.norm = self.norm(out_dim) if self.norm else None
        self.activation = activation
        self.dropout = HashDropout(dropout)

    @staticmethod
    def _make_conv(conv, in_dim, out_dim, heads, activation):
        if conv == "sage":
            return SAGEConv(in_dim, out_dim, aggr="mean")
        if conv == "gcn":
            return GCNConv(in_dim, out_dim, normalize=False)
        if activation and out_dim % heads:
            raise ValueError(f"gat: out_dim {out_dim} is not a multiple of heads {heads}")
        per_head = out_dim // heads if activation else out_dim
        return GATConv(in_dim, per_head, heads=heads, concat=activation, add_self_loops=True)

    def forward(self, x_src: torch.Tensor, block) -> torch.Tensor:
        """Rows of the block's destination nodes computed from its sources."""
        if x_src.shape[0] != block.num_src:
            raise ValueError(f"x_src has {x_src.shape[0]} rows, block has {block.num_src} source nodes")
        x_src = self.input_dropout(x_src)
        x_dst = x_src[: block.num_dst]
        bias = self._fused_bias()
        return self.post_conv(self._conv(x_src, x_dst, block, with_bias=bias is None), x_dst, bias)

    def _fused_bias(self) -> torch.Tensor | None:
        """The conv's bias when ReLU + dropout come right after a SAGE/GCN conv: then the
        conv's product leaves it out and `relu_dropout` adds it in its own pass (and sums its
        gradient in its backward one), instead of the product writing it into its output
        first and its gradient taking a pass of its own. None otherwise."""
        if self.kind == "gat" or not self.activation or self.residual is not None or self.norm is not None:
            return None
        return self.conv.lin_l.bias if self.kind == "sage" else self.conv.bias

    def post_conv(self, h: torch.Tensor, x_dst: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The layer after its conv: `h` (the conv's rows, plus `bias` when the conv
        left it out) plus the residual of the destination rows `x_dst`, then norm,
        activation and dropout (also what streaming inference, gnnsys.inference.streaming,
        finishes a block with)."""
        if bias is not None and (not self.activation or self.residual is not None or self.norm is not None):
            h, bias = h + bias.to(h.dtype), None  # something comes between the conv and the activation
        if self.residual is not None:
            h = h + self.residual(x_dst)
        if self.norm is not None:
            h = self.norm(h)
        if self.activation:
            return relu_dropout(h, self.dropout.p, self.training, bias=bias)
        return self.dropout(h)

    def _conv(self, x_src, x_dst, block, with_bias: bool = True):
        dtype = low_precision(x_src) or x_src.dtype
        if self.kind == "sage":
            adj = _cached(block, "mean_adjacency", lambda: Adjacency.mean(block.indptr, block.indices, block.num_src))
            return sage_rows(self.conv, x_src, adj, dtype, with_bias)
        if self.kind == "gcn":
            adj = _cached(block, "gcn_adjacency", lambda: gcn_adjacency(block))
            return gcn_rows(self.conv, x_src, adj, dtype, with_bias)
        return self.conv((x_src, x_dst), block.edge_index(), size=block.size)


class GNN(nn.Module):
    """`num_layers` GNNLayers: in_dim -> hidden -> ... -> out_dim.

    forward(x, blocks): x holds the features of blocks[0]'s source nodes and
    the result the rows of blocks[-1]'s destination nodes (the seeds).
    Dropout `input_dropout` on the input features (in the first layer),
    `dropout` after every hidden layer; the last layer has no norm,
    activation or dropout. GCN layers read each block's `full_degree`
    (`needs_degree`).
    """

    def __init__(
        self,
        conv: str,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int,
        dropout: float = 0.5,
        norm: str | None = None,
        residual: bool = False,
        heads: int = 4,
        input_dropout: float = 0.0,
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList(
            GNNLayer(
                conv,
                dims[i],
                dims[i + 1],
                heads=heads if conv == "gat" else 1,
                norm=norm if i < num_layers - 1 else None,
                residual=residual and i < num_layers - 1,
                dropout=dropout if i < num_layers - 1 else 0.0,
                activation=i < num_layers - 1,
                input_dropout=input_dropout if i == 0 else 0.0,
            )
            for i in range(num_layers)
        )

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def needs_degree(self) -> bool:
        """True when its blocks must carry `full_degree` (a GCN)."""
        return any(layer.needs_degree for layer in self.layers)

    def forward(self, x: torch.Tensor, blocks) -> torch.Tensor:
        """Logits of the last block's destination nodes."""
        if len(blocks) != len(self.layers):
            raise ValueError(f"got {len(blocks)} blocks for a {len(self.layers)}-layer model")
        h = x
        for layer, block in zip(self.layers, blocks):
            h = layer(h, block)
        return h
