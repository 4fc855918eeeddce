"""Exact layer-wise inference of an R-GCN (gnnsys.models.rgcn.HeteroRGCN)
on a HeteroDataset: every in-neighbour of every relation, as OGB's R-GCN
example evaluates ogbn-mag.

One layer at a time: a hidden layer computes every node of every type (the
next layer reads them all), the last one only the target nodes asked for;
each node type's destinations go `batch_size` at a time through the layer's
own `rows` with a block of their whole in-neighbourhoods, read straight from
the relations' CSC arrays. The layers' outputs are held on `device`
(nodes x hidden x 4 bytes for every type: 0.5 GB for ogbn-mag at hidden 64),
beside the input rows (the featured types' features as float32, read through
their feature sources, and the embedding tables).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gnnsys.samplers.block import Block
from gnnsys.samplers.hetero import HeteroBlock
from gnnsys.training.loop import progress_bar


@torch.no_grad()
def hetero_layerwise_logits(
    model,
    dataset,
    nodes,
    batch_size: int = 4096,
    device="cpu",
    features=None,
    progress: bool = False,
    num_layers: int | None = None,
) -> torch.Tensor:
    """Logits (float32 [len(nodes), classes], on the CPU) of the target nodes
    `nodes` (int64 ids) of the HeteroDataset `dataset` under the HeteroRGCN
    `model` (on `device`), over every neighbour; with num_layers, the output
    of that many layers instead (after the ReLU of a hidden layer).
    features: {featured node type: FeatureSource} to read the input rows
    from (default the dataset's tables). The model is put in eval mode and
    restored after."""
    was_training = model.training
    model.eval()
    try:
        return _logits(
            model,
            dataset,
            torch.as_tensor(nodes).long(),
            batch_size,
            torch.device(device),
            features or {},
            progress,
            num_layers or len(model.layers),
        )
    finally:
        model.train(was_training)


def _logits(model, dataset, nodes, batch_size, device, features, progress, num_layers) -> torch.Tensor:
    h = {t: _input_rows(model, dataset, t, features.get(t), batch_size, device) for t in dataset.node_types}
    last, target = num_layers - 1, dataset.target
    total = last * sum(dataset.node_types.values()) + nodes.shape[0]
    with progress_bar(total, "inference", "node", progress) as bar:
        for i, layer in enumerate(model.layers[:num_layers]):
            hidden = i < len(model.layers) - 1
            types = [target] if i == last else list(layer.roots)
            h = {
                t: _layer_rows(layer, dataset, h, t, nodes if i == last else None, batch_size, device, hidden, bar)
                for t in types
            }
    return h[target].float().cpu()


def _input_rows(model, dataset, node_type: str, source, batch_size: int, device) -> torch.Tensor:
    """Every node's input rows of `node_type`: its embedding table, or its features read `batch_size` rows at a time."""
    n = dataset.node_types[node_type]
    if node_type in model.embedding_types:
        return model.input_rows(node_type, torch.arange(n, device=device))
    table = dataset.features[node_type] if source is None else source
    out = torch.empty(n, table.shape[1], device=device)
    for start in range(0, n, batch_size):
        ids = torch.arange(start, min(start + batch_size, n))
        out[start : start + ids.shape[0]] = table.gather(ids).to(device).float()
    return model.input_rows(node_type, out)


def _layer_rows(layer, dataset, h, node_type, ids, batch_size, device, hidden, bar) -> torch.Tensor:
    """`layer`'s rows of the nodes `ids` of `node_type` (None: all), from `h`
    (every node's input rows of every type); ReLU after a hidden layer."""
    n = dataset.node_types[node_type]
    ids = torch.arange(n) if ids is None else ids
    relations = [r for r in layer.convs.convs.keys() if r[2] == node_type]
    out = torch.empty(ids.shape[0], layer.out_dim, device=device)
    empty = dict.fromkeys(dataset.node_types, 0)
    for start in range(0, ids.shape[0], batch_size):
        chunk = ids[start : start + batch_size]
        blocks = {r: in_edges(*dataset.relations[r], chunk, dataset.node_types[r[0]]).to(device) for r in relations}
        block = HeteroBlock(blocks, dict(dataset.node_types), {**empty, node_type: chunk.shape[0]})
        rows = layer.rows(h, block, {node_type: h[node_type][chunk.to(device)]})[node_type]
        out[start : start + chunk.shape[0]] = F.relu(rows) if hidden else rows
        bar.update(chunk.shape[0])
    return out


def in_edges(indptr, indices, nodes: torch.Tensor, num_src: int) -> Block:
    """A Block of every in-edge of `nodes` (int64 ids) in the CSC (indptr,
    indices): destination i is nodes[i], sources keep their global ids
    (num_src of them)."""
    indptr = np.asarray(indptr)
    at = nodes.numpy()
    starts, degrees = indptr[at], indptr[at + 1] - indptr[at]
    offsets = np.zeros(at.shape[0] + 1, np.int64)
    np.cumsum(degrees, out=offsets[1:])
    positions = np.repeat(starts - offsets[:-1], degrees) + np.arange(offsets[-1])
    sources = torch.from_numpy(np.asarray(indices)[positions].astype(np.int64, copy=False))
    return Block(torch.from_numpy(offsets), sources, num_src, at.shape[0])
