"""`Dataset`: a prepared dataset loaded for training, and `load_dataset`."""

from __future__ import annotations

from pathlib import Path

import torch

from gnnsys.storage.table import RowTable

from .file_identity import LoadedDataset, LoadRecord
from .hetero_load import load_hetero_dataset
from .invariants import check_dataset
from .meta import HETERO, SPLITS, read_any_meta
from .open_arrays import load_int_array, open_row_table


class Dataset:
    """A node-classification graph: CSC tensors, features, labels, splits.

    indptr (int64) and indices (int32/int64) hold the in-neighbour lists;
    `features` is a RowTable (memory-mapped or in memory; a 2-D tensor is
    copied into one): `features[ids]` gives the exact stored values and it is
    the bottom FeatureSource of every placement (gnnsys.storage); `labels` is
    int64 with -1 for unlabelled nodes, or for a multi-label task (`task`
    "multilabel") [N, tasks] int8 of 0/1 with -1 for an entry without a
    label, num_classes then being the task count (one output per task);
    `edge_features` (None, or a RowTable of one row per stored edge, in CSC
    order: row i belongs to the edge at indices[i]); `split(name)` gives the
    ids of train/valid/test. Training never modifies a Dataset. The arrays'
    invariants (datasets.invariants.check_dataset) are checked when it is
    made: DatasetError names the array, or its file when loaded from `path`.
    """

    def __init__(
        self,
        *,
        name,
        indptr,
        indices,
        features,
        labels,
        splits,
        num_classes,
        meta=None,
        path=None,
        order=None,
        edge_features=None,
    ):
        self.name = name
        self.indptr = indptr
        self.indices = indices
        self.features = RowTable.from_tensor(features) if isinstance(features, torch.Tensor) else features
        self.labels = labels
        self.splits = splits
        self.num_classes = int(num_classes)
        self.meta = meta or {}
        self.path = path
        self.order = order
        self.edge_features = edge_features
        self.files = {}  # file name -> FileIdentity of what load_dataset opened (datasets/file_identity.py)
        check_dataset(self)

    @property
    def num_nodes(self) -> int:
        return self.indptr.shape[0] - 1

    @property
    def num_edges(self) -> int:
        return int(self.indptr[-1])

    @property
    def num_features(self) -> int:
        return self.features.shape[1]

    @property
    def task(self) -> str:
        """ "multilabel" when each node has a row of binary task labels, else "multiclass"."""
        return "multilabel" if self.labels.dim() == 2 else "multiclass"

    def split(self, name: str) -> torch.Tensor:
        """Node ids of split `name` ("train", "valid" or "test")."""
        if name not in self.splits:
            raise KeyError(f"unknown split {name!r}; have {sorted(self.splits)}")
        return self.splits[name]

    def edge_index(self) -> torch.Tensor:
        """[2, E] int64 (src, dst) of the stored edges."""
        dst = torch.repeat_interleave(torch.arange(self.num_nodes), self.indptr.diff())
        return torch.stack([self.indices.long(), dst])

    def __repr__(self):
        return (
            f"Dataset({self.name!r}, nodes={self.num_nodes:,}, edges={self.num_edges:,}, "
            f"features={self.num_features}, classes={self.num_classes})"
        )

    @classmethod
    def from_pyg(cls, data, name: str = "pyg", target: str | None = None):
        """An in-memory Dataset from a torch_geometric `Data` with x, y,
        edge_index and train/val/test masks (or `*_idx` tensors); from a
        `HeteroData`, a HeteroDataset (datasets/hetero_pyg.py: `target` names
        the labelled node type, default the only one with y)."""
        from .csc import build_csc
        from .hetero_pyg import from_pyg_hetero, is_hetero_data, pyg_splits
        from .source import array_edge_chunks

        if is_hetero_data(data):
            return from_pyg_hetero(data, name, target)
        if target is not None:
            raise ValueError("target names a node type of a HeteroData; data is a homogeneous Data")

        n = int(data.num_nodes)
        ei = data.edge_index.cpu().numpy()
        indptr, indices = build_csc(array_edge_chunks(ei[0], ei[1]), n, file="data.edge_index")
        y = data.y.cpu().long().view(-1)
        splits = pyg_splits(data, n, "data")
        return cls(
            name=name,
            indptr=torch.from_numpy(indptr),
            indices=torch.from_numpy(indices),
            features=RowTable.from_tensor(data.x.float()),
            labels=y,
            splits=splits,
            num_classes=int(y.max()) + 1,
        )


def open_features(path, meta, section: str = "features", record=None):
    """The memory-mapped rows of a prepared dataset's features (or, with
    `section` "edge_features", its edge features) as a RowTable; DatasetError
    unless the file is a regular file of num_nodes (num_edges) x row_stride
    bytes that can be read."""
    count = meta["num_nodes"] if section == "features" else meta["num_edges"]
    return open_row_table(path, meta[section], count, record)


def as_dataset(dataset):
    """`dataset` itself if it is a Dataset or HeteroDataset, else the dataset prepared at that path
    (for a LoadedDataset, the files its loader opened, or DatasetError naming one that was replaced)."""
    from .hetero_dataset import HeteroDataset

    if isinstance(dataset, LoadedDataset):
        return load_dataset(dataset.path, expect=dataset.files)
    return dataset if isinstance(dataset, (Dataset, HeteroDataset)) else load_dataset(dataset)


def load_dataset(path, expect: dict | None = None):
    """Open a prepared dataset directory.

    Features stay memory-mapped from features.bin (`dataset.features[ids]`
    reads just those rows), and so do the graph's indptr and indices (the
    sampler reads them through the page cache, so a graph larger than memory
    trains) and the labels (a batch reads its seeds'); the splits are read
    into memory. meta.json is checked against its schema and the arrays
    against their invariants (one vectorised pass, no checksums: that is
    `gnnsys info --verify`); a failure
    is a DatasetError naming the file. The identity of every file opened is
    kept in `files` (datasets/file_identity.py).

    Args:
        path: the directory `gnnsys prepare` (or a `prepare_*` function) wrote.
        expect: the file identities a parent process loaded (a worker's); files that are not those are refused.

    Returns:
        A Dataset, or a HeteroDataset when meta.json's kind is "hetero" (datasets/hetero_load.py).
    """
    path = Path(path)
    meta = read_any_meta(path)
    record = LoadRecord(path)
    record.before("meta.json")
    if meta.get("kind") == HETERO:
        hetero = load_hetero_dataset(path, meta, record)
        hetero.files = record.confirm(expect)
        return hetero
    tensor = lambda name, mmap=False: torch.from_numpy(load_int_array(path, name, mmap, record))  # noqa: E731
    ds = Dataset(
        name=meta["name"],
        indptr=tensor(meta["graph"]["indptr"], True),
        indices=tensor(meta["graph"]["indices"], True),
        features=open_features(path, meta, record=record),
        labels=tensor(meta["labels"]["file"], True),
        splits={name: tensor(meta["splits"][name]) for name in SPLITS},
        order=tensor(meta["order"]) if meta.get("order") else None,
        edge_features=open_features(path, meta, "edge_features", record) if "edge_features" in meta else None,
        num_classes=meta["labels"]["num_classes"],
        meta=meta,
        path=path,
    )
    ds.files = record.confirm(expect)
    return ds
