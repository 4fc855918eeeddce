"""Open a prepared heterogeneous dataset (meta.json kind "hetero") as a HeteroDataset."""

from __future__ import annotations

from pathlib import Path

import torch

from gnnsys.errors import DatasetError

from .hetero_dataset import HeteroDataset
from .meta import SPLITS
from .open_arrays import load_int_array, open_row_table


def load_hetero_dataset(path, meta: dict, record=None) -> HeteroDataset:
    """The dataset at `path` whose checked meta.json is `meta`: every
    relation's indptr and indices and every feature table memory-mapped
    (features as RowTables), labels, splits and node years read into memory;
    the HeteroDataset invariants checked (DatasetError naming the file), and
    each relation's edge count against meta.json. `record` (a
    file_identity.LoadRecord) records every file's identity."""
    path = Path(path)
    tensor = lambda name, mmap=False: torch.from_numpy(load_int_array(path, name, mmap, record))  # noqa: E731
    relations = {}
    for section in meta["relations"]:
        relation = (section["src"], section["rel"], section["dst"])
        indices = tensor(section["indices"], True)
        if indices.shape[0] != section["num_edges"]:
            raise DatasetError(
                path / section["indices"], f"holds {indices.shape[0]} ids, meta.json says {section['num_edges']} edges"
            )
        relations[relation] = (tensor(section["indptr"], True), indices)
    types = meta["node_types"]
    return HeteroDataset(
        name=meta["name"],
        node_types={t: s["num_nodes"] for t, s in types.items()},
        relations=relations,
        features={
            t: open_row_table(path, s["features"], s["num_nodes"], record) for t, s in types.items() if s["features"]
        },
        target=meta["target"],
        labels=tensor(meta["labels"]["file"]),
        splits={name: tensor(meta["splits"][name]) for name in SPLITS},
        num_classes=meta["labels"]["num_classes"],
        meta=meta,
        path=path,
        node_years={t: tensor(s["node_year"]) for t, s in types.items() if "node_year" in s},
    )
