"""A HeteroDataset from a torch_geometric `HeteroData` (`HeteroDataset.to_pyg` gives one back).

PyG keeps a heterogeneous graph as HeteroData: per node type `num_nodes`
and optionally `x` (and `year`, as PyG's OGB_MAG names ogbn-mag's node
years); per edge type (src, rel, dst) an `edge_index` [2, E] of source and
destination ids; on the labelled type `y` and the split as
train/val/test masks or `*_idx` tensors. torch_geometric is imported only
when a conversion is asked for.
"""

from __future__ import annotations

import torch

from gnnsys.storage.table import RowTable

from .csc import build_csc
from .hetero_dataset import PYG_SPLIT_NAMES, HeteroDataset
from .source import array_edge_chunks


def is_hetero_data(data) -> bool:
    """Whether `data` is a torch_geometric HeteroData (without importing torch_geometric for anything else)."""
    try:
        from torch_geometric.data import HeteroData
    except ImportError:
        return False
    return isinstance(data, HeteroData)


def _target(data, target: str | None) -> str:
    """The labelled node type: `target`, else the only type holding y."""
    if target is not None:
        if target not in data.node_types:
            raise ValueError(f"target {target!r} is not a node type of the HeteroData (has {sorted(data.node_types)})")
        if getattr(data[target], "y", None) is None:
            raise ValueError(f"node type {target!r} has no y")
        return target
    labelled = [t for t in data.node_types if getattr(data[t], "y", None) is not None]
    if len(labelled) != 1:
        have = ", ".join(labelled) if labelled else "none"
        raise ValueError(f"give target=: the node types holding y are {have}, expected exactly one")
    return labelled[0]


def pyg_splits(store, n: int, owner: str) -> dict:
    """Split ids of a PyG store of `n` nodes (`owner` names it in errors: "data",
    or "node type 'paper'") from its train/val/test masks, or *_idx tensors."""
    splits = {}
    for ours, theirs in PYG_SPLIT_NAMES:
        mask = getattr(store, f"{theirs}_mask", None)
        idx = getattr(store, f"{theirs}_idx", getattr(store, f"{ours}_idx", None))
        if mask is not None:
            if tuple(mask.shape) != (n,):
                raise ValueError(f"{owner}: {theirs}_mask has shape {tuple(mask.shape)}, expected ({n},)")
            splits[ours] = mask.cpu().bool().nonzero().view(-1)
        elif idx is not None:
            splits[ours] = idx.cpu().long().view(-1)
        else:
            raise ValueError(f"{owner} has neither {theirs}_mask nor {theirs}_idx")
    return splits


def from_pyg_hetero(data, name: str = "pyg", target: str | None = None) -> HeteroDataset:
    """An in-memory HeteroDataset from a HeteroData: each edge type's
    edge_index becomes a CSC over its destination type, each x_dict entry a
    RowTable (as float32), year a node-year array; the target (`target`, or
    the only node type with y) gives labels (-1 = no label) and the split."""
    target = _target(data, target)
    node_types = {}
    for t in data.node_types:
        n = data[t].num_nodes
        if n is None:
            raise ValueError(f"node type {t!r} has neither num_nodes nor x")
        node_types[t] = int(n)
    relations = {}
    for edge_type in data.edge_types:
        src_type, _, dst_type = edge_type
        ei = data[edge_type].edge_index.cpu().numpy()
        indptr, indices = build_csc(
            array_edge_chunks(ei[0], ei[1]),
            node_types[dst_type],
            num_src=node_types[src_type],
            file=f"data[{edge_type!r}].edge_index",
        )
        relations[tuple(edge_type)] = (torch.from_numpy(indptr), torch.from_numpy(indices))
    features = {t: RowTable.from_tensor(data[t].x.float()) for t in data.node_types if "x" in data[t]}
    years = {t: data[t].year.cpu().long().view(-1) for t in data.node_types if "year" in data[t]}
    y = data[target].y.cpu().long().view(-1)
    return HeteroDataset(
        name=name,
        node_types=node_types,
        relations=relations,
        features=features,
        target=target,
        labels=y,
        splits=pyg_splits(data[target], node_types[target], f"node type {target!r}"),
        num_classes=int(y.max()) + 1 if y.numel() else 0,
        node_years=years,
    )
