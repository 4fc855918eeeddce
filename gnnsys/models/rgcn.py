"""R-GCN over sampled heterogeneous blocks (gnnsys.samplers.hetero), as
OGB's R-GCN example for ogbn-mag builds it.

A layer computes, for every node type t with destination rows in the block,
root_t(h_t[:num_dst]) + the sum over the relations (s, r, t) into t of
lin_r(mean of the sampled in-neighbours' h_s): PyG's `HeteroConv` of one
`SAGEConv` per relation (mean aggregation, no root weight, no bias), summed,
plus a root `Linear` (with the bias) per node type, so a type that no
relation reaches is still updated. Hidden layers apply ReLU and dropout.

Inputs: a node type with features reads its rows; a type without features
gets a learnable `nn.Embedding(num_nodes, embedding_dim)` (default `hidden`),
as OGB's example gives authors, institutions and fields of study theirs;
with `sparse_embeddings` its gradient is sparse (the rows a batch read), for
SparseAdam (gnnsys.training.optimizer).

The interface, what the hetero trainer asks of a model:
- `forward(x_dict, blocks)`: blocks is one `HeteroBlock` per layer, input
  layer first; x_dict holds, for every node type of blocks[0].num_src, its
  input rows [num_src, dim] (float32 or the precision's input dtype) when the
  type has features, else its input node ids (int64 [num_src]: the
  embedding rows to read); `inputs(mb)` builds it from a HeteroMiniBatch.
  The result is [blocks[-1].num_dst[target], num_classes] logits.
- `embedding_types`: the node types read through embeddings.

Under bf16-mixed each relation aggregates with `gnnsys.models.aggregation` (bf16
rows summed in fp32), as the homogeneous SAGE layers do; fp32 runs take
PyG's path (HeteroConv, sparse-dense matmul) unchanged.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import HeteroConv, SAGEConv
from torch_geometric.nn.module_dict import ModuleDict  # keys may be any node type name (with dots, too)

from gnnsys.models.aggregation import Adjacency, aggregate
from gnnsys.models.gnn import low_precision


class RGCNLayer(nn.Module):
    """One R-GCN layer over a HeteroBlock (see the module docstring).

    in_dims: {node type: input width} for every node type; relations: the
    (src, rel, dst) relations; out_dim: the output width; out_types: the
    node types it computes (the last layer: the target's only).
    forward(h, block) -> {node type: [block.num_dst[type], out_dim]} for out_types.
    """

    def __init__(self, in_dims: dict, relations, out_dim: int, out_types):
        super().__init__()
        self.out_dim = out_dim
        convs = {
            r: SAGEConv((in_dims[r[0]], in_dims[r[2]]), out_dim, aggr="mean", root_weight=False, bias=False)
            for r in relations
            if r[2] in out_types
        }
        with warnings.catch_warnings():  # types no relation reaches: the root linear updates them
            warnings.filterwarnings("ignore", message="There exist node types")
            self.convs = HeteroConv(convs, aggr="sum")
        self.roots = ModuleDict({t: nn.Linear(in_dims[t], out_dim) for t in out_types})

    def forward(self, h: dict, block) -> dict:
        """The rows of every node type's destinations in `block` from the source rows `h`."""
        for t, n in block.num_src.items():
            if h[t].shape[0] != n:
                raise ValueError(f"{t}: got {h[t].shape[0]} input rows, the block has {n} source nodes")
        return self.rows(h, block, {t: h[t][: block.num_dst[t]] for t in self.roots})

    def rows(self, h: dict, block, dst: dict) -> dict:
        """The output rows of the destinations of `block` of each type in `dst`
        ({type: their input rows}; in a sampled block the first rows of h[type],
        in layer-wise inference any), from the source rows `h`."""
        out = {t: self.roots[t](x) for t, x in dst.items()}
        dtype = low_precision(next(iter(h.values())))
        if dtype is None:
            adjacency = {r: block.relations[r].adj_t() for r in self.convs.convs.keys() if r in block.relations}
            summed = self.convs(h, adjacency)
        else:
            summed = self._low(h, block, dtype)
        for t, rows in summed.items():
            out[t] = out[t] + rows
        return out

    def _low(self, h: dict, block, dtype) -> dict:
        """HeteroConv's sum, each relation's mean taken by `gnnsys.models.aggregation` in `dtype`."""
        summed = {}
        for r, conv in self.convs.convs.items():
            if r not in block.relations:
                continue
            b = block.relations[r]
            if "mean_adjacency" not in b.cache:
                b.cache["mean_adjacency"] = Adjacency.mean(b.indptr, b.indices, b.num_src)
            rows = conv.lin_l(aggregate(b.cache["mean_adjacency"], h[r[0]], dtype))
            summed[r[2]] = rows if r[2] not in summed else summed[r[2]] + rows
        return summed


class HeteroRGCN(nn.Module):
    """`num_layers` RGCNLayers for node classification on `target`.

    node_types: {type: number of nodes}; feature_dims: {type: feature width}
    for the types with features (the others get embeddings of
    `embedding_dim`, default `hidden`; with sparse gradients when
    `sparse_embeddings`); relations: the graph's (src, rel, dst); hidden:
    hidden width; num_classes; dropout after every hidden layer;
    input_dropout on every type's input rows. See the module docstring for
    forward's interface.
    """

    def __init__(
        self,
        node_types: dict,
        feature_dims: dict,
        relations,
        target: str,
        hidden: int,
        num_classes: int,
        num_layers: int,
        *,
        dropout: float = 0.5,
        input_dropout: float = 0.0,
        embedding_dim: int | None = None,
        sparse_embeddings: bool = False,
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if target not in node_types:
            raise ValueError(f"target {target!r} is not a node type ({', '.join(node_types)})")
        unknown = sorted(set(feature_dims) - set(node_types))
        if unknown:
            raise ValueError(f"feature_dims names unknown node types {unknown}")
        self.target, self.dropout, self.input_dropout = target, dropout, input_dropout
        width = embedding_dim or hidden
        self.embeddings = ModuleDict(
            {
                t: nn.Embedding(n, width, sparse=sparse_embeddings)
                for t, n in node_types.items()
                if t not in feature_dims
            }
        )
        dims = [{t: feature_dims.get(t, width) for t in node_types}]
        dims += [dict.fromkeys(node_types, hidden)] * (num_layers - 1)
        outs = [hidden] * (num_layers - 1) + [num_classes]
        every = list(node_types)
        self.layers = nn.ModuleList(
            RGCNLayer(d, list(relations), o, every if i < num_layers - 1 else [target])
            for i, (d, o) in enumerate(zip(dims, outs))
        )
        self.reset_parameters()

    @classmethod
    def for_dataset(cls, dataset, options) -> HeteroRGCN:
        """The R-GCN of a HeteroDataset with the shape `options` gives (a
        HeteroOptions: hidden, layers, dropout, input_dropout, embedding_dim,
        sparse_embeddings)."""
        return cls(
            dataset.node_types,
            {t: dataset.feature_dim(t) for t in dataset.features},
            dataset.edge_types,
            dataset.target,
            options.hidden,
            dataset.num_classes,
            options.layers,
            dropout=options.dropout,
            input_dropout=options.input_dropout,
            embedding_dim=options.embedding_dim,
            sparse_embeddings=options.sparse_embeddings,
        )

    @property
    def embedding_types(self) -> list:
        """The node types whose inputs are learnable embeddings."""
        return list(self.embeddings.keys())

    def reset_parameters(self):
        """Glorot-initialised embeddings (as OGB's example), PyG's init of the layers."""
        for emb in self.embeddings.values():
            nn.init.xavier_uniform_(emb.weight)
        for layer in self.layers:
            layer.convs.reset_parameters()
            for root in layer.roots.values():
                root.reset_parameters()

    def inputs(self, mb) -> dict:
        """forward's x_dict for a HeteroMiniBatch: its gathered rows of the
        featured types, the input node ids of the embedded ones."""
        return {t: mb.input_nodes[t] if t in self.embeddings else mb.x[t] for t in mb.input_nodes}

    def forward(self, x_dict: dict, blocks) -> torch.Tensor:
        """Logits of the target type's destinations of the last block."""
        if len(blocks) != len(self.layers):
            raise ValueError(f"got {len(blocks)} blocks for a {len(self.layers)}-layer model")
        h = {t: self.input_rows(t, x) for t, x in x_dict.items()}
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(h, block)
            if i < len(self.layers) - 1:
                h = {t: F.dropout(F.relu(x), self.dropout, self.training) for t, x in h.items()}
        return h[self.target]

    def input_rows(self, node_type: str, x: torch.Tensor) -> torch.Tensor:
        """The first layer's input rows of `node_type`: its embeddings of the
        ids `x` for a type without features, else the rows `x`; input dropout."""
        if node_type in self.embeddings:
            if x.dim() != 1 or x.dtype.is_floating_point:
                raise ValueError(f"{node_type} has no features: give its input node ids, got a {x.dim()}-D {x.dtype}")
            x = self.embeddings[node_type](x)
        return F.dropout(x, self.input_dropout, self.training)
