"""DGL baseline: one sampling + feature-slicing epoch, then GraphSAGE training
epochs, on a gnnsys dataset directory. Prints one JSON line.

Runs in the DGL peer environment (benchmarks/setup_peers.sh), never imports
gnnsys. DGL's NeighborSampler lists fanouts from the input layer outwards, so
the PyG-order --fanouts 15,10,5 becomes [5, 10, 15] here. Accuracy comes from
DGL's usual exact layer-wise inference (MultiLayerFullNeighborSampler(1)).
On a multi-label dataset (ogbn-proteins) the loss is binary cross entropy over
the labelled entries and the score OGB's ROC-AUC (common.task_loss, split_scores).
"""
from __future__ import annotations

import dgl
import torch
import torch.nn.functional as F
from dgl.dataloading import DataLoader, MultiLayerFullNeighborSampler, NeighborSampler
from dgl.nn import SAGEConv

from common import (PeerDataset, machine, parse_args, seed_everything, task_loss, timed_epoch, train_and_report,
                    warm_up)


class SAGE(torch.nn.Module):
    """GraphSAGE (mean) over DGL blocks: len(dims) - 1 layers, ReLU and
    dropout after every hidden layer."""

    def __init__(self, dims: list[int], dropout: float):
        super().__init__()
        self.layers = torch.nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def layer(self, i: int, block, h: torch.Tensor) -> torch.Tensor:
        """Layer i on one block: rows of its destination nodes."""
        h = self.layers[i](block, h)
        if i < len(self.layers) - 1:
            h = F.dropout(F.relu(h), self.dropout, self.training)
        return h

    def forward(self, blocks, x):
        for i, block in enumerate(blocks):
            x = self.layer(i, block, x)
        return x


def loader(graph, ids, sampler, batch_size, shuffle):
    """DGL's DataLoader over `ids` with 0 workers, on the CPU."""
    return DataLoader(graph, ids, sampler, batch_size=batch_size, shuffle=shuffle, drop_last=False, num_workers=0)


@torch.no_grad()
def layerwise_logits(model, graph, x, batch_size):
    """Exact logits of every node, one layer at a time over all nodes."""
    model.eval()
    batches = loader(graph, torch.arange(graph.num_nodes()), MultiLayerFullNeighborSampler(1), batch_size, False)
    for i, conv in enumerate(model.layers):
        out = torch.empty(graph.num_nodes(), conv._out_feats)
        for input_nodes, output_nodes, blocks in batches:
            out[output_nodes] = model.layer(i, blocks[0], x[input_nodes])
        x = out
    return x


def main():
    args = parse_args(__doc__)
    seed_everything(args.seed)
    dgl.seed(args.seed)
    data = PeerDataset(args.dataset)
    src, dst = data.src_dst()
    graph = dgl.graph((src, dst), num_nodes=data.num_nodes)
    graph = graph.formats(["csc"])  # in-edge sampling reads CSC; build it before timing
    graph.create_formats_()
    x_all, y_all = data.features, data.labels
    gather = lambda batch: x_all[batch[0]]  # noqa: E731  (input_nodes, output_nodes, blocks)
    train = loader(graph, data.splits["train"], NeighborSampler(list(reversed(args.fanouts))), args.batch_size,
                   shuffle=True)

    record = {"system": "dgl", "dataset": data.name, "config": vars(args),
              "machine": machine(dgl=dgl.__version__)}
    warm_up(train)
    record["sampling"] = timed_epoch(train, gather)

    model = SAGE([x_all.shape[1]] + [args.hidden] * (len(args.fanouts) - 1) + [data.num_classes], args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step(batch, x):
        _, seeds, blocks = batch
        opt.zero_grad()
        loss = task_loss(model(blocks, x), y_all[seeds])
        loss.backward()
        opt.step()
        return loss.detach()

    train_and_report(record, args, model, train, gather, step,
                     lambda: layerwise_logits(model, graph, x_all, args.eval_batch_size), y_all, data.splits)


if __name__ == "__main__":
    main()
