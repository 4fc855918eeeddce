"""`HeteroDataset`: a heterogeneous node-classification graph (ogbn-mag's
kind): several node types, one CSC graph per relation, features for the
node types that have them, labels and splits on one target type."""

from __future__ import annotations

import torch

from gnnsys.errors import DatasetError
from gnnsys.storage.table import RowTable

from .hetero_meta import array_files
from .invariants import check_csc, check_labels, check_splits
from .relations import Relation, relation_name

PYG_SPLIT_NAMES = (("train", "train"), ("valid", "val"), ("test", "test"))  # (ours, PyG's mask prefix)


class HeteroDataset:
    """A heterogeneous graph for node classification on one node type.

    node_types: {type: number of nodes}; relations: {(src, rel, dst):
    (indptr, indices)}, per relation a CSC over the destination type's nodes
    (indptr int64 [num_dst + 1], indices int32/int64 source ids in
    [0, num_src)); features: {type: RowTable or 2-D tensor} for the types
    that have features (a model gives the others learnable embeddings);
    target: the node type that is labelled and split; labels: int64
    [num target nodes], -1 for an unlabelled node; splits: {"train",
    "valid", "test"}: target node ids; num_classes; node_years: {type:
    int64 [num nodes]} for the types whose input had a year per node
    (ogbn-mag's papers). The invariants are checked when it is made:
    DatasetError names the relation, type or array (its file when loaded
    from `path`). `load_dataset` opens a prepared one (datasets/hetero_load.py);
    `Dataset.from_pyg` makes one from a PyG HeteroData, `to_pyg` gives one back.
    """

    def __init__(
        self,
        *,
        name,
        node_types: dict,
        relations: dict,
        features: dict,
        target: str,
        labels,
        splits: dict,
        num_classes: int,
        meta=None,
        path=None,
        node_years: dict | None = None,
    ):
        self.name = name
        self.node_types = {str(t): int(n) for t, n in node_types.items()}
        self.relations = {tuple(r): (indptr, indices) for r, (indptr, indices) in relations.items()}
        self.features = {t: RowTable.from_tensor(f) if isinstance(f, torch.Tensor) else f for t, f in features.items()}
        self.target = target
        self.labels = labels
        self.splits = splits
        self.num_classes = int(num_classes)
        self.meta = meta or {}
        self.path = path
        self.files = {}  # file name -> FileIdentity of what load_dataset opened (datasets/file_identity.py)
        self.node_years = dict(node_years or {})
        self._check()

    @property
    def edge_types(self) -> list[Relation]:
        """The relations, in the order they were given."""
        return list(self.relations)

    @property
    def task(self) -> str:
        """Always "multiclass" (one label per target node)."""
        return "multiclass"

    def num_nodes(self, node_type: str) -> int:
        """Nodes of `node_type`."""
        return self.node_types[node_type]

    def num_edges(self, relation: Relation) -> int:
        """Stored edges of `relation`."""
        return int(self.relations[relation][0][-1])

    def feature_dim(self, node_type: str) -> int | None:
        """The feature width of `node_type`, None for a type without features."""
        table = self.features.get(node_type)
        return None if table is None else table.shape[1]

    def split(self, name: str) -> torch.Tensor:
        """Target node ids of split `name` ("train", "valid" or "test")."""
        if name not in self.splits:
            raise KeyError(f"unknown split {name!r}; have {sorted(self.splits)}")
        return self.splits[name]

    def to_pyg(self):
        """A torch_geometric HeteroData holding this dataset: per node type
        num_nodes, x (when it has features) and year (node_years); per
        relation edge_index [2, E] (source ids, destination ids); on the
        target type y and train/val/test masks. Features are read in full;
        edge_index is int64."""
        from torch_geometric.data import HeteroData

        data = HeteroData()
        for t, n in self.node_types.items():
            data[t].num_nodes = n
            if t in self.features:
                data[t].x = self.features[t][torch.arange(n)]
            if t in self.node_years:
                data[t].year = self.node_years[t].clone()
        for relation, (indptr, indices) in self.relations.items():
            dst = torch.repeat_interleave(torch.arange(self.node_types[relation[2]]), indptr.diff())
            data[relation].edge_index = torch.stack([indices.long(), dst])
        n = self.node_types[self.target]
        data[self.target].y = self.labels.clone()
        for ours, theirs in PYG_SPLIT_NAMES:
            data[self.target][f"{theirs}_mask"] = torch.zeros(n, dtype=torch.bool).index_fill_(
                0, self.split(ours), True
            )
        return data

    def _file(self, key: str, fallback: str):
        """The file of array `key` (meta.json's name for it) when loaded from a path, else `fallback`."""
        return array_files(self.meta, self.path).get(key, fallback)

    def _check(self) -> None:
        where = f"HeteroDataset {self.name!r}"
        if self.target not in self.node_types:
            raise DatasetError(where, f"target node type {self.target!r} is not one of {sorted(self.node_types)}")
        for relation, (indptr, indices) in self.relations.items():
            name = relation_name(relation)
            if len(relation) != 3:
                raise DatasetError(where, f"relation {relation!r} is not (source type, name, destination type)")
            for role, node_type in (("source", relation[0]), ("destination", relation[2])):
                if node_type not in self.node_types:
                    raise DatasetError(name, f"names an unknown {role} node type {node_type!r}")
            num_src, num_dst = self.node_types[relation[0]], self.node_types[relation[2]]
            check_csc(
                indptr,
                indices,
                num_dst,
                num_src,
                self._file(f"{name}.indptr", f"{name}.indptr"),
                self._file(f"{name}.indices", f"{name}.indices"),
            )
        for attribute, tables in (("features", self.features), ("node_years", self.node_years)):
            for node_type, table in tables.items():
                if node_type not in self.node_types:
                    raise DatasetError(where, f"{attribute} for an unknown node type {node_type!r}")
                if table.shape[0] != self.node_types[node_type]:
                    raise DatasetError(
                        self._file(f"{node_type}.{attribute}", f"{attribute}[{node_type!r}]"),
                        f"holds {table.shape[0]} rows for {self.node_types[node_type]} nodes",
                    )
        n = self.node_types[self.target]
        check_labels(self, n, self._file("labels", "HeteroDataset.labels"))
        check_splits(self.splits, n, {s: self._file(s, f"HeteroDataset.splits[{s!r}]") for s in self.splits})

    def __repr__(self):
        types = ", ".join(f"{t}={n:,}" for t, n in self.node_types.items())
        return f"HeteroDataset({self.name!r}, {types}, relations={len(self.relations)}, classes={self.num_classes})"
