"""`gnnsys prepare ogb` on OGB's heterogeneous raw layout (ogbn-mag), as
OGB's read_csv_heterograph_raw and read_node_label_hetero read it:

    raw/num-node-dict.csv.gz            a header row of node type names, one row of counts
    raw/triplet-type-list.csv.gz        one relation a row: source type, relation, destination type
    raw/relations/<src>___<rel>___<dst>/edge.csv.gz          src,dst per row (ids of each type)
                                        num-edge-list.csv.gz  the edge count
                                        edge_reltype.csv.gz   not read: one relation type per relation
    raw/node-feat/<type>/node-feat.csv.gz   the type's features, one row per node (optional per type)
    raw/node-feat/<type>/node_year.csv.gz   one year per node (optional)
    raw/node-label/<type>/node-label.csv.gz the labelled (target) type's labels, NaN for none
    split/<name>/<type>/{train,valid,test}.csv.gz   target ids

Every file may instead be plain (name.csv); one both gzipped and plain is
refused. raw/nodetype-has-label.csv.gz and split/<name>/nodetype-has-split.csv.gz
are not needed: the target is the one type under raw/node-label/. Every
relation, feature and label folder must name a node type of
num-node-dict.csv.gz, and every relation folder must be listed in
triplet-type-list.csv.gz (and the reverse); ids are checked against their
types' counts at their rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csv_reader import count_columns, csv_chunks, read_count, read_csv, read_text_rows
from .hetero_meta import check_name
from .hetero_source import HeteroSource, NodeFeatures, RelationSource
from .npy import integer_labels
from .ogb_csv import csv_file, edge_chunks, split_files, split_folder

SEPARATOR = "___"  # OGB's separator in relation folder names
MARKERS = (
    "num-node-dict.csv.gz",
    "num-node-dict.csv",
    "triplet-type-list.csv.gz",
    "triplet-type-list.csv",
    "relations",
)


def hetero_markers(raw: Path) -> list[str]:
    """The names in `raw` that belong to the heterogeneous layout."""
    return [name for name in MARKERS if (raw / name).exists()]


def _node_types(file: Path) -> dict:
    """{type: count} from num-node-dict: a header of names, one row of counts."""
    rows = read_text_rows(file)
    if len(rows) != 2:
        raise DatasetError(file, f"{len(rows)} lines, expected a header of node types and one row of counts")
    counts = {}
    for name, text in zip(*rows):
        check_name(name, "node type", file)
        if name in counts:
            raise DatasetError(file, f"node type {name!r} is listed twice")
        if not text.isdigit():
            raise DatasetError(file, f"count {text!r} of node type {name!r} is not a non-negative integer", row=0)
        counts[name] = int(text)
    return counts


def _triplets(file: Path, node_types: dict) -> list:
    """The relations listed in triplet-type-list, each naming known node types."""
    rows = read_text_rows(file)
    triplets = []
    for row, fields in enumerate(rows):
        if len(fields) != 3:
            raise DatasetError(file, f"{len(fields)} fields, expected source type, relation, destination type", row=row)
        src, rel, dst = fields
        check_name(rel, "relation", file, row)
        for role, node_type in (("source", src), ("destination", dst)):
            if node_type not in node_types:
                raise DatasetError(
                    file,
                    f"relation {SEPARATOR.join(fields)} names an unknown {role} node type {node_type!r} "
                    f"(num-node-dict has {', '.join(node_types)})",
                    row=row,
                )
        if (src, rel, dst) in triplets:
            raise DatasetError(file, f"relation {SEPARATOR.join(fields)} is listed twice", row=row)
        triplets.append((src, rel, dst))
    return triplets


def _type_folders(folder: Path, node_types: dict, what: str) -> list:
    """The subfolders of `folder` (none when it is missing), each named after a known node type."""
    if not folder.is_dir():
        return []
    subs = sorted(p for p in folder.iterdir() if p.is_dir())
    for sub in subs:
        if sub.name not in node_types:
            raise DatasetError(sub, f"{what} of an unknown node type (num-node-dict has {', '.join(node_types)})")
    return subs


def _relations(raw: Path, triplets: list, node_types: dict, inputs: list) -> dict:
    """A RelationSource per listed relation, from raw/relations/<src>___<rel>___<dst>/."""
    folder = raw / "relations"
    listed = {SEPARATOR.join(t): t for t in triplets}
    present = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    for name in present:
        if name not in listed:
            raise DatasetError(folder / name, "is a relation folder that triplet-type-list does not list")
    relations = {}
    for name, (src_type, rel, dst_type) in listed.items():
        sub = folder / name
        if not sub.is_dir():
            raise DatasetError(sub, "missing: triplet-type-list lists this relation")
        edge_file, count_file = csv_file(sub, "edge"), csv_file(sub, "num-edge-list")
        count = read_count(count_file)

        def pairs(f=edge_file):  # a relation may have no edges: its count file says how many
            return ((c[:, 0], c[:, 1]) for c in csv_chunks(f, columns=2, dtype=np.int64, allow_empty=True))

        chunks = edge_chunks(
            pairs, str(edge_file), node_types[dst_type], False, count, str(count_file), num_src=node_types[src_type]
        )
        relations[(src_type, rel, dst_type)] = RelationSource(chunks, str(edge_file), count)
        inputs += [edge_file, count_file]
    return relations


def _node_files(raw: Path, node_types: dict, inputs: list) -> tuple[dict, dict, dict]:
    """Features, node years and the node-year files of the types under raw/node-feat/."""
    features, years, year_files = {}, {}, {}
    for sub in _type_folders(raw / "node-feat", node_types, "a features folder"):
        n = node_types[sub.name]
        feat = csv_file(sub, "node-feat", required=False)
        if feat is not None:
            dim = count_columns(feat)
            chunks = lambda f=feat, d=dim: csv_chunks(f, columns=d, dtype=np.float32)  # noqa: E731
            features[sub.name] = NodeFeatures(n, dim, chunks, str(feat))
            inputs.append(feat)
        year = csv_file(sub, "node_year", required=False)
        if year is not None:
            values = read_csv(year)
            if values.shape[0] != n:
                raise DatasetError(year, f"{values.shape[0]} rows, but num-node-dict says {n} {sub.name} nodes")
            years[sub.name], year_files[sub.name] = values, str(year)
            inputs.append(year)
    return features, years, year_files


def _target_labels(raw: Path, node_types: dict) -> tuple[str, np.ndarray, Path]:
    """The labelled type, its labels (int64, -1 for NaN) and their file."""
    folder = raw / "node-label"
    subs = _type_folders(folder, node_types, "a label folder")
    if len(subs) != 1:
        have = ", ".join(p.name for p in subs) or "none"
        raise DatasetError(folder, f"expected the label folder of exactly one node type, found {have}")
    target = subs[0].name
    file = csv_file(subs[0], "node-label")
    labels = integer_labels(read_csv(file, dtype=np.float64), str(file), node_types[target])
    return target, labels, file


def read_ogb_hetero(root, *, split: str | None = None, name: str | None = None) -> HeteroSource:
    """A HeteroSource over an OGB directory in the heterogeneous layout
    (module docstring); `split` picks split/<split>/ (default: the only one)."""
    root = Path(root)
    raw = root / "raw"
    count_file, triplet_file = csv_file(raw, "num-node-dict"), csv_file(raw, "triplet-type-list")
    node_types = _node_types(count_file)
    triplets = _triplets(triplet_file, node_types)
    inputs = [count_file, triplet_file]
    relations = _relations(raw, triplets, node_types, inputs)
    features, years, year_files = _node_files(raw, node_types, inputs)
    target, labels, label_file = _target_labels(raw, node_types)
    split_name, folder = split_folder(root, split)
    files = split_files(folder / target)
    inputs += [label_file, *files.values()]
    return HeteroSource(
        name=name or root.resolve().name,
        kind="ogb",
        node_types=node_types,
        relations=relations,
        features=features,
        target=target,
        labels=labels,
        splits={s: read_csv(f) for s, f in files.items()},
        label_file=str(label_file),
        split_files={s: str(f) for s, f in files.items()},
        node_years=years,
        node_year_files=year_files,
        inputs=[str(Path(p).relative_to(root)) for p in inputs],
        extra={"split": split_name},
    )
