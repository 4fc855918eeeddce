"""`gnnsys prepare ogb`: an OGB node-property directory exactly as OGB ships it.

Two layouts, told apart by the files in raw/:

- CSV (ogbn-arxiv, ogbn-products, ogbn-proteins): headerless CSV, gzipped as
  OGB ships it or plain (name.csv), edge.csv.gz (src,dst per row),
  node-label.csv.gz (one column, or one per task: ogbn-proteins' 112 binary
  tasks make a multi-label dataset), num-node-list.csv.gz,
  num-edge-list.csv.gz, and node-feat.csv.gz and edge-feat.csv.gz when the
  dataset has them (ogbn-proteins has edge features, one row per edge row,
  and no node features: `--node-features-from-edges` derives them);
- binary (ogbn-papers100M): data.npz (edge_index [2, E], node_feat,
  num_nodes_list, num_edges_list) and node-label.npz (node_label, float with
  NaN for unlabelled nodes).

Splits are split/<name>/{train,valid,test}.csv.gz. Everything large is read in
chunks (CSV) or slices (npz members), so memory is bounded by the chunk size.
ogbn-products and ogbn-proteins store each undirected edge once and OGB adds
the inverse edges when loading (master.csv: add_inverse_edge), an inverse
edge taking its edge's features; `add_inverse_edges="auto"` does the same for
a directory whose name contains "products" or "proteins". A raw/ holding
files of both layouts, or one file both gzipped and plain, is refused.

The heterogeneous layout (ogbn-mag: raw/num-node-dict.csv.gz,
raw/triplet-type-list.csv.gz, raw/relations/...) is read by
datasets/ogb_mag.py into a HeteroSource.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csv_reader import count_columns, csv_chunks, read_count, read_csv
from .hetero_source import add_reverse_arguments, apply_reverse_choice, check_reverse_choice
from .input_paths import input_path
from .npy import NpyArray, integer_labels
from .ogb_csv import csv_file, edge_chunks, split_files, split_folder
from .ogb_mag import hetero_markers, read_ogb_hetero
from .source import GraphSource

INVERSE_CHOICES = ("auto", "yes", "no")
_ADD_INVERSE = ("products", "proteins")  # OGB master.csv: add_inverse_edge True among node-property datasets


def _wants_inverse(choice, root: Path) -> bool:
    if isinstance(choice, bool):
        return choice
    if choice not in INVERSE_CHOICES:
        raise DatasetError("--add-inverse-edges", f"must be one of {', '.join(INVERSE_CHOICES)}, got {choice!r}")
    if choice == "auto":
        return any(word in root.resolve().name for word in _ADD_INVERSE)
    return choice == "yes"


def _counted_rows(chunks, file: str, expected: int, count_file: str):
    """`chunks()` with its row count checked against `expected` at the end."""

    def counted():
        rows = 0
        for chunk in chunks():
            rows += chunk.shape[0]
            yield chunk
        if rows != expected:
            raise DatasetError(file, f"holds {rows} rows, but {Path(count_file).name} says {expected} edges")

    return counted


def _single_count(arr: NpyArray) -> int:
    values = arr.read().reshape(-1)
    if values.shape != (1,) or values.dtype.kind not in "iu" or values[0] < 0:
        raise DatasetError(arr.label, f"holds {values.tolist()[:4]}, expected one count (a single graph)")
    return int(values[0])


def _csv_layout(raw: Path, inverse: bool) -> dict:
    n_file, e_file = csv_file(raw, "num-node-list"), csv_file(raw, "num-edge-list")
    edge_file, label_file = csv_file(raw, "edge"), csv_file(raw, "node-label")
    edge_feat_file = csv_file(raw, "edge-feat", required=False)
    feat_file = csv_file(raw, "node-feat", required=edge_feat_file is None)  # none: derived from edge features
    n, e = read_count(n_file), read_count(e_file)
    tasks = count_columns(label_file)
    labels = read_csv(label_file, columns=tasks, dtype=np.float32 if tasks > 1 else np.float64)
    if labels.shape[0] != n:
        raise DatasetError(label_file, f"{labels.shape[0]} rows, but {n_file.name} says {n} nodes")
    dim = count_columns(feat_file) if feat_file else 0
    pairs = lambda: ((c[:, 0], c[:, 1]) for c in csv_chunks(edge_file, columns=2, dtype=np.int64))  # noqa: E731
    parts = dict(
        num_nodes=n,
        feature_dim=dim,
        expected_num_edges=e * (2 if inverse else 1),
        labels=labels if tasks > 1 else integer_labels(labels, str(label_file), n),
        edge_chunks=edge_chunks(pairs, str(edge_file), n, inverse, e, str(e_file), rows=edge_feat_file is not None),
        feature_chunks=(lambda: csv_chunks(feat_file, columns=dim, dtype=np.float32))
        if feat_file
        else (lambda: iter(())),
        edge_file=str(edge_file),
        feature_file=str(feat_file) if feat_file else f"{raw} (no node-feat.csv.gz)",
        label_file=str(label_file),
        inputs=[f for f in (edge_file, feat_file, edge_feat_file, label_file, n_file, e_file) if f is not None],
    )
    if edge_feat_file is not None:
        edge_dim = count_columns(edge_feat_file)
        parts.update(
            edge_feature_dim=edge_dim,
            edge_feature_chunks=_counted_rows(
                lambda: csv_chunks(edge_feat_file, columns=edge_dim, dtype=np.float32), str(edge_feat_file), e, e_file
            ),
            edge_feature_file=str(edge_feat_file),
        )
    return parts


def _npz_layout(raw: Path, inverse: bool) -> dict:
    data, label_npz = raw / "data.npz", raw / "node-label.npz"
    edges, feats = NpyArray(data, "edge_index"), NpyArray(data, "node_feat")
    counts = {key: NpyArray(data, key) for key in ("num_nodes_list", "num_edges_list")}
    n, e = (_single_count(c) for c in counts.values())
    if len(feats.shape) != 2 or feats.shape[0] != n:
        raise DatasetError(feats.label, f"shape {feats.shape}, but {counts['num_nodes_list'].label} says {n} nodes")
    if len(edges.shape) != 2 or edges.shape[0] != 2:
        raise DatasetError(edges.label, f"shape {edges.shape}, expected [2, E]")
    if edges.shape[1] != e:
        raise DatasetError(counts["num_edges_list"].label, f"says {e} edges, but {edges.label} holds {edges.shape[1]}")
    label_arr = NpyArray(label_npz, "node_label")
    return dict(
        num_nodes=n,
        feature_dim=feats.shape[1],
        expected_num_edges=e * (2 if inverse else 1),
        labels=integer_labels(label_arr.read(), label_arr.label, n),
        edge_chunks=edge_chunks(
            lambda: edges.pair_chunks("columns"), edges.label, n, inverse, e, counts["num_edges_list"].label
        ),
        feature_chunks=lambda: (c.astype(np.float32, copy=False) for c in feats.row_chunks()),
        edge_file=edges.label,
        feature_file=feats.label,
        label_file=label_arr.label,
        inputs=[data, label_npz],
    )


def read_ogb(
    root,
    *,
    split: str | None = None,
    add_inverse_edges="auto",
    name: str | None = None,
    add_reverse_relations="auto",
    reverse_names: str | None = None,
):
    """A GraphSource over an OGB node-property directory (raw/ and split/),
    or a HeteroSource over one in the heterogeneous layout (ogbn-mag:
    datasets/ogb_mag.py).

    `split` picks split/<split>/ (default: the only one present);
    `add_inverse_edges` is "auto" (yes for products), "yes"/"no" or a bool
    (a homogeneous layout only); `add_reverse_relations` ("auto": yes for
    the heterogeneous layout, "yes", "no" or a bool) and `reverse_names`
    ("ogb" or "pyg") are those of hetero_source.apply_reverse_choice.
    """
    root = Path(root)
    raw = root / "raw"
    if not raw.is_dir():
        raise DatasetError(root, "no raw/ folder; expected an OGB node-property directory (raw/ and split/)")
    binary = (raw / "data.npz").exists()
    csv = [p.name for p in (raw / "edge.csv.gz", raw / "edge.csv") if p.exists()]
    hetero = hetero_markers(raw)
    if hetero and (binary or csv):
        other = "the binary layout (data.npz)" if binary else f"the CSV layout ({csv[0]})"
        raise DatasetError(raw, f"mixes the heterogeneous layout ({hetero[0]}) with {other}; keep one")
    if hetero:
        if add_inverse_edges in ("yes", True):
            raise DatasetError(
                "--add-inverse-edges",
                "applies to a homogeneous OGB directory; a heterogeneous one takes --add-reverse-relations",
            )
        _wants_inverse(add_inverse_edges, root)  # refuses an unknown value
        source = read_ogb_hetero(root, split=split, name=name)
        return apply_reverse_choice(source, add_reverse_relations, reverse_names)
    check_reverse_choice(add_reverse_relations, reverse_names, hetero=False)
    inverse = _wants_inverse(add_inverse_edges, root)
    if binary and csv:
        raise DatasetError(raw, f"mixes the binary layout (data.npz) with the CSV layout ({csv[0]}); keep one")
    if binary:
        parts = _npz_layout(raw, inverse)
    elif csv:
        parts = _csv_layout(raw, inverse)
    else:
        raise DatasetError(
            raw,
            "holds neither edge.csv.gz (CSV layout) nor data.npz (binary layout) nor num-node-dict.csv.gz "
            "(heterogeneous layout)",
        )
    split_name, folder = split_folder(root, split)
    files = split_files(folder)
    splits = {s: read_csv(f) for s, f in files.items()}
    return GraphSource(
        name=name or root.resolve().name,
        kind="ogb",
        splits=splits,
        split_files={s: str(f) for s, f in files.items()},
        extra={"split": split_name, "add_inverse_edges": inverse},
        **parts,
    )


def add_arguments(parser):
    """The ogb kind's arguments."""
    parser.add_argument(
        "root", type=input_path, help="OGB dataset directory holding raw/ and split/ (e.g. dataset/ogbn_arxiv)"
    )
    parser.add_argument("--split", help="split folder under split/ (default: the only one, e.g. time)")
    parser.add_argument(
        "--add-inverse-edges",
        choices=INVERSE_CHOICES,
        default="auto",
        help="add the reverse of each stored edge (sharing its edge features) as OGB does on loading "
        "(auto: yes for ogbn-products and ogbn-proteins, no otherwise; a homogeneous layout only) "
        "(default: %(default)s)",
    )
    add_reverse_arguments(parser)
    parser.add_argument("--name", help="dataset name (default: the directory's name)")


def source_from_args(args):
    """read_ogb from parsed arguments."""
    return read_ogb(
        args.root,
        split=args.split,
        add_inverse_edges=args.add_inverse_edges,
        name=args.name,
        add_reverse_relations=args.add_reverse_relations,
        reverse_names=args.reverse_names,
    )
