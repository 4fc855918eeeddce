"""Exact layer-by-layer inference over all neighbours (for valid/test metrics).

Sampled minibatch inference would be noisy and recompute shared neighbours
once per batch per layer. Instead each layer runs over every node in batches
of destination nodes with full-neighbour blocks (NeighborSampler fanout -1);
its inputs are the previous layer's outputs for all nodes (the dataset's
features for the first layer). Cost: each layer touches each edge once. GCN
layers get the whole graph's degrees on every block, so a node's output does
not depend on which nodes share its batch.
"""
from __future__ import annotations

import torch
from tqdm.auto import tqdm

from gnnsys.samplers.block import gcn_degree
from gnnsys.samplers.neighbor import NeighborSampler


@torch.no_grad()
def layerwise_inference(model, dataset, nodes=None, batch_size: int = 4096, device="cpu",
                        progress: bool = False, features=None) -> torch.Tensor:
    """Outputs of `model` (a GNN with `.layers`) for `nodes` (default: all)
    using every neighbour; [len(nodes), out_dim] float32 on the CPU.

    Layers before the last run over all nodes; the last one only over `nodes`.
    The first layer reads `features` (a FeatureSource, e.g. the placed table;
    default the dataset's own).
    The model is put in eval mode and restored to its previous mode after.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = dataset.num_nodes
    nodes = torch.arange(n) if nodes is None else torch.as_tensor(nodes).long().view(-1)
    was_training = model.training
    model.eval()
    try:
        return _layerwise(model, dataset, dataset.features if features is None else features, nodes, batch_size,
                          torch.device(device), progress)
    finally:
        model.train(was_training)


def _layerwise(model, dataset, features, nodes, batch_size, device, progress):
    sampler = NeighborSampler(dataset.indptr, dataset.indices, [-1])
    degree = gcn_degree(dataset.indptr, dataset.indices) if model.needs_degree else None
    everyone = torch.arange(dataset.num_nodes)
    layers = list(model.layers)
    h = None  # outputs of the previous layer for every node, on the CPU
    for i, layer in enumerate(layers):
        targets = nodes if i == len(layers) - 1 else everyone
        out = torch.empty(targets.shape[0], layer.out_dim)
        bar = tqdm(range(0, targets.shape[0], batch_size), desc=f"inference layer {i + 1}/{len(layers)}",
                   unit="batch", disable=not progress, leave=False)
        for b, start in enumerate(bar):
            mb = sampler.sample(targets[start:start + batch_size], 0, b)
            if degree is not None:
                mb.attach_degree(degree)
            x = features.gather(mb.input_nodes).float() if h is None else h[mb.input_nodes]
            out[start:start + batch_size] = layer(x.to(device), mb.blocks[0].to(device)).float().cpu()
        h = out
    return h
