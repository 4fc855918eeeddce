"""PyG baseline: one sampling + feature-slicing epoch with NeighborLoader, then
GraphSAGE training epochs, on a gnnsys dataset directory. Prints one JSON line.

Runs in the PyG peer environment (benchmarks/setup_peers.sh: torch-sparse
built from source), never imports gnnsys. The loader is given the graph
without features and the rows of each batch's n_id are sliced here, exactly
what NeighborLoader's own filtering does, so sampling and slicing are timed
apart. The model is PyG's usual NeighborLoader GraphSAGE: every layer runs on
every sampled node and the first batch_size outputs are the seeds'. Accuracy
comes from PyG's usual exact layer-wise inference (NeighborLoader with
num_neighbors=[-1] over all nodes, one layer at a time).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torch_geometric
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import SAGEConv

from common import (PeerDataset, machine, parse_args, seed_everything, task_loss, timed_epoch, train_and_report,
                    warm_up)


class SAGE(torch.nn.Module):
    """GraphSAGE (mean) over a sampled subgraph: len(dims) - 1 layers, ReLU
    and dropout after every hidden layer."""

    def __init__(self, dims: list[int], dropout: float):
        super().__init__()
        self.layers = torch.nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def layer(self, i: int, h: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Layer i over the subgraph's edges: one row per subgraph node."""
        h = self.layers[i](h, edge_index)
        if i < len(self.layers) - 1:
            h = F.dropout(F.relu(h), self.dropout, self.training)
        return h

    def forward(self, x, edge_index):
        for i in range(len(self.layers)):
            x = self.layer(i, x, edge_index)
        return x


def loader(graph, ids, fanouts, batch_size, shuffle):
    """PyG's NeighborLoader over `ids` (0 workers)."""
    return NeighborLoader(graph, num_neighbors=fanouts, input_nodes=ids, batch_size=batch_size, shuffle=shuffle)


@torch.no_grad()
def layerwise_logits(model, graph, x, batch_size):
    """Exact logits of every node, one layer at a time over all nodes."""
    model.eval()
    batches = loader(graph, None, [-1], batch_size, shuffle=False)
    for i, conv in enumerate(model.layers):
        out = torch.empty(graph.num_nodes, conv.out_channels)
        for b in batches:
            out[b.n_id[:b.batch_size]] = model.layer(i, x[b.n_id], b.edge_index)[:b.batch_size]
        x = out
    return x


def main():
    import torch_sparse

    args = parse_args(__doc__)
    seed_everything(args.seed)
    data = PeerDataset(args.dataset)
    src, dst = data.src_dst()
    graph = Data(edge_index=torch.stack([src, dst]), num_nodes=data.num_nodes)
    x_all, y_all = data.features, data.labels
    gather = lambda batch: x_all[batch.n_id]  # noqa: E731
    train = loader(graph, data.splits["train"], args.fanouts, args.batch_size, shuffle=True)

    record = {"system": "pyg", "dataset": data.name, "config": vars(args),
              "machine": machine(torch_geometric=torch_geometric.__version__, torch_sparse=torch_sparse.__version__)}
    warm_up(train)
    record["sampling"] = timed_epoch(train, gather)

    model = SAGE([x_all.shape[1]] + [args.hidden] * (len(args.fanouts) - 1) + [data.num_classes], args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step(batch, x):
        opt.zero_grad()
        out = model(x, batch.edge_index)[:batch.batch_size]
        loss = task_loss(out, y_all[batch.n_id[:batch.batch_size]])
        loss.backward()
        opt.step()
        return loss.detach()

    train_and_report(record, args, model, train, gather, step,
                     lambda: layerwise_logits(model, graph, x_all, args.eval_batch_size), y_all, data.splits)


if __name__ == "__main__":
    main()
