"""DGL baseline on a heterogeneous gnnsys dataset (ogbn-mag's kind): R-GCN
training epochs on sampled minibatches, then valid/test accuracy on
minibatches sampled with the same fanouts. Prints one JSON line.

Runs in the DGL peer environment (benchmarks/setup_peers.sh), never imports
gnnsys. The model is gnnsys's HeteroRGCN (OGB's R-GCN example for
ogbn-mag) written with DGL's modules: a layer is a HeteroGraphConv summing
one GraphConv per relation (norm "right": the mean over the sampled
in-neighbours, then the relation's weight; no bias), plus a Linear (with
bias) per node type of the layer's destinations; ReLU and dropout after the
hidden layer; nn.Embedding inputs for the node types without features.
DGL's NeighborSampler draws the same count from every relation and lists the
fanouts from the input layer outwards, so the PyG-order --fanouts 25,20
becomes [20, 25] here.
"""
from __future__ import annotations

import dgl
import torch
import torch.nn.functional as F
from dgl.dataloading import DataLoader, NeighborSampler
from dgl.nn import GraphConv, HeteroGraphConv

from common import PeerHeteroDataset, emit, machine, parse_args, seed_everything, timed_epoch


class RGCN(torch.nn.Module):
    """len(fanouts) R-GCN layers over DGL blocks for node classification on `target`."""

    def __init__(self, data: PeerHeteroDataset, hidden: int, layers: int, dropout: float, embedding_dim: int):
        super().__init__()
        self.target, self.dropout = data.target, dropout
        self.embeddings = torch.nn.ModuleDict(
            {t: torch.nn.Embedding(n, embedding_dim) for t, n in data.num_nodes.items() if t not in data.features})
        for e in self.embeddings.values():
            torch.nn.init.xavier_uniform_(e.weight)
        dims = {t: data.features[t].shape[1] if t in data.features else embedding_dim for t in data.num_nodes}
        self.convs, self.roots = torch.nn.ModuleList(), torch.nn.ModuleList()
        for i in range(layers):
            out = data.num_classes if i == layers - 1 else hidden
            types = [data.target] if i == layers - 1 else list(data.num_nodes)
            self.convs.append(HeteroGraphConv(
                {name: GraphConv(dims[s], out, norm="right", bias=False, allow_zero_in_degree=True)
                 for s, name, d in data.relations if d in types}, aggregate="sum"))
            self.roots.append(torch.nn.ModuleDict({t: torch.nn.Linear(dims[t], out) for t in types}))
            dims = dict.fromkeys(data.num_nodes, hidden)

    def forward(self, blocks, x: dict, input_nodes: dict):
        h = {t: self.embeddings[t](ids) if t in self.embeddings else x[t] for t, ids in input_nodes.items()}
        for i, (conv, roots, block) in enumerate(zip(self.convs, self.roots, blocks)):
            dst = {t: h[t][:block.num_dst_nodes(t)] for t in roots}
            summed = conv(block, (h, dst))
            h = {t: root(dst[t]) + summed[t] if t in summed else root(dst[t]) for t, root in roots.items()}
            if i < len(self.convs) - 1:
                h = {t: F.dropout(F.relu(v), self.dropout, self.training) for t, v in h.items()}
        return h[self.target]


@torch.no_grad()
def sampled_accuracy(model, graph, data, sampler, batch_size) -> dict:
    """{"valid", "test"}: accuracy of the logits of each split's nodes, drawn with `sampler`."""
    model.eval()
    scores = {}
    for split in ("valid", "test"):
        ids = data.splits[split]
        right = 0
        for input_nodes, seeds, blocks in DataLoader(graph, {data.target: ids}, sampler, batch_size=batch_size):
            logits = model(blocks, gather(data, input_nodes), input_nodes)
            right += int((logits.argmax(-1) == data.labels[seeds[data.target]]).sum())
        scores[split] = right / ids.shape[0]
    return scores


@torch.no_grad()
def check_logits(data: PeerHeteroDataset, graph, args) -> dict:
    """Load the weights gnnsys exported (bench_mag.py same-model: an npz of
    embedding/T, layerI/rel/NAME [out, in], layerI/root/T/weight and /bias,
    seeds, logits) into this RGCN and compute the seeds' logits in eval mode
    over full-neighbour blocks: {"max_abs_diff"} against gnnsys's."""
    import numpy as np
    from dgl.dataloading import MultiLayerFullNeighborSampler

    exported = np.load(args.check_logits)
    model = RGCN(data, args.hidden, len(args.fanouts), 0.0, args.embedding_dim).eval()
    tensor = lambda key: torch.from_numpy(exported[key])  # noqa: E731
    for t, e in model.embeddings.items():
        e.weight.copy_(tensor(f"embedding/{t}"))
    for i, (conv, roots) in enumerate(zip(model.convs, model.roots)):
        for name, graph_conv in conv.mods.items():
            graph_conv.weight.copy_(tensor(f"layer{i}/rel/{name}").T)
        for t, root in roots.items():
            root.weight.copy_(tensor(f"layer{i}/root/{t}/weight"))
            root.bias.copy_(tensor(f"layer{i}/root/{t}/bias"))
    seeds = tensor("seeds")
    sampler = MultiLayerFullNeighborSampler(len(args.fanouts))
    input_nodes, output, blocks = next(iter(DataLoader(graph, {data.target: seeds}, sampler, batch_size=len(seeds))))
    logits = model(blocks, gather(data, input_nodes), input_nodes)
    order = torch.argsort(output[data.target])  # DGL may order the seeds its own way: compare node by node
    expected = tensor("logits")[torch.argsort(seeds)]
    return {"system": "dgl", "max_abs_diff": float((logits[order] - expected).abs().max()),
            "relations": len(data.relations)}


def gather(data: PeerHeteroDataset, input_nodes: dict) -> dict:
    """The input feature rows of the featured node types of a minibatch."""
    return {t: x[input_nodes[t]] for t, x in data.features.items() if t in input_nodes}


def extra_arguments(p):
    p.add_argument("--embedding-dim", type=int, default=128)
    p.add_argument("--check-logits", help="npz of gnnsys's weights and logits: compare, do not train")


def main():
    args = parse_args(__doc__, extra_arguments)
    seed_everything(args.seed)
    dgl.seed(args.seed)
    data = PeerHeteroDataset(args.dataset)
    graph = dgl.heterograph({(s, name, d): edges for (s, name, d), edges in data.relations.items()},
                            num_nodes_dict=data.num_nodes)
    graph = graph.formats(["csc"])  # in-edge sampling reads CSC; build it before timing
    graph.create_formats_()
    if args.check_logits:
        emit(check_logits(data, graph, args))
        return
    sampler = NeighborSampler(list(reversed(args.fanouts)))
    train = DataLoader(graph, {data.target: data.splits["train"]}, sampler, batch_size=args.batch_size, shuffle=True,
                       drop_last=False, num_workers=0)
    model = RGCN(data, args.hidden, len(args.fanouts), args.dropout, args.embedding_dim)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step(batch, x):
        input_nodes, seeds, blocks = batch
        opt.zero_grad()
        loss = F.cross_entropy(model(blocks, x, input_nodes), data.labels[seeds[data.target]])
        loss.backward()
        opt.step()
        return loss.detach()

    record = {"system": "dgl", "dataset": data.name, "config": vars(args), "machine": machine(dgl=dgl.__version__),
              "epochs": []}
    for epoch in range(args.epochs):
        model.train()
        record["epochs"].append({"epoch": epoch, **timed_epoch(train, lambda batch: gather(data, batch[0]), step)})
    if args.eval and args.epochs:
        record["metric"] = "acc"
        record.update(sampled_accuracy(model, graph, data, sampler, args.batch_size))
    emit(record)


if __name__ == "__main__":
    main()
