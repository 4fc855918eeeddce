"""DGL baseline: one sampling + feature-slicing epoch, then GraphSAGE training
epochs, on a gnnsys dataset directory. Prints one JSON line.

Runs in the DGL peer environment (benchmarks/setup_peers.sh), never imports
gnnsys. DGL's NeighborSampler lists fanouts from the input layer outwards, so
the PyG-order --fanouts 15,10,5 becomes [5, 10, 15] here.
"""
from __future__ import annotations

import dgl
import torch
import torch.nn.functional as F
from dgl.dataloading import DataLoader, NeighborSampler
from dgl.nn import SAGEConv

from common import PeerDataset, accuracy, emit, machine, parse_args, seed_everything, timed_epoch


class SAGE(torch.nn.Module):
    """GraphSAGE (mean) over DGL blocks: len(dims) - 1 layers."""

    def __init__(self, dims: list[int], dropout: float):
        super().__init__()
        self.layers = torch.nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = F.dropout(F.relu(h), self.dropout, self.training)
        return h


def loader(graph, ids, fanouts, batch_size, shuffle):
    """DGL's DataLoader over `ids` with 0 workers, on the CPU."""
    sampler = NeighborSampler(list(reversed(fanouts)))
    return DataLoader(graph, ids, sampler, batch_size=batch_size, shuffle=shuffle, drop_last=False,
                      num_workers=0)


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
    train = loader(graph, data.splits["train"], args.fanouts, args.batch_size, shuffle=True)

    record = {"system": "dgl", "dataset": data.name, "config": vars(args),
              "machine": machine(dgl=dgl.__version__)}
    record["sampling"] = timed_epoch(train, gather)

    model = SAGE([x_all.shape[1]] + [args.hidden] * (len(args.fanouts) - 1) + [data.num_classes], args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step(batch, x):
        _, seeds, blocks = batch
        opt.zero_grad()
        loss = F.cross_entropy(model(blocks, x), y_all[seeds])
        loss.backward()
        opt.step()
        return loss.detach()

    epochs = []
    for epoch in range(args.epochs):
        model.train()
        epochs.append({"epoch": epoch, **timed_epoch(train, gather, step)})
    record["epochs"] = epochs
    if args.eval:
        model.eval()
        with torch.no_grad():
            for split in ("valid", "test"):
                batches = loader(graph, data.splits[split], args.fanouts, args.batch_size, shuffle=False)
                record[split] = accuracy((model(b, x_all[i]), y_all[s]) for i, s, b in batches)
    emit(record)


if __name__ == "__main__":
    main()
