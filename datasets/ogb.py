"""`gnnsys prepare ogb`: an OGB node-property directory exactly as OGB ships it.

Two layouts, told apart by the files in raw/:

- CSV (ogbn-arxiv, ogbn-products): headerless gzipped CSV, edge.csv.gz
  (src,dst per row), node-feat.csv.gz, node-label.csv.gz, num-node-list.csv.gz,
  num-edge-list.csv.gz;
- binary (ogbn-papers100M): data.npz (edge_index [2, E], node_feat,
  num_nodes_list, num_edges_list) and node-label.npz (node_label, float with
  NaN for unlabelled nodes).

Splits are split/<name>/{train,valid,test}.csv.gz. Everything large is read in
chunks (CSV) or slices (npz members), so memory is bounded by the chunk size.
ogbn-products stores each undirected edge once and OGB adds the inverse edges
when loading (master.csv: add_inverse_edge); `add_inverse_edges="auto"` does
the same for a directory whose name contains "products".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csc import check_edge_ids
from .csv_reader import count_columns, csv_chunks, read_count, read_csv
from .npy import NpyArray, integer_labels
from .source import GraphSource

INVERSE_CHOICES = ("auto", "yes", "no")
_ADD_INVERSE = ("products",)  # OGB master.csv: add_inverse_edge True among node-property datasets


def _wants_inverse(choice, root: Path) -> bool:
    if isinstance(choice, bool):
        return choice
    if choice not in INVERSE_CHOICES:
        raise DatasetError("--add-inverse-edges", f"must be one of {', '.join(INVERSE_CHOICES)}, got {choice!r}")
    if choice == "auto":
        return any(word in root.resolve().name for word in _ADD_INVERSE)
    return choice == "yes"


def _edge_chunks(pairs, file: str, num_nodes: int, inverse: bool, expected: int, count_file: str):
    """Edge chunks from `pairs()` (an iterator of (src, dst) in file order):
    ids checked against num_nodes at their file rows, the inverse of every
    edge added when `inverse`, and the row count checked against `expected`."""

    def chunks():
        row = 0
        for src, dst in pairs():
            src, dst = check_edge_ids(src, dst, num_nodes, file, row)
            row += src.shape[0]
            yield (np.concatenate([src, dst]), np.concatenate([dst, src])) if inverse else (src, dst)
        if row != expected:
            raise DatasetError(count_file, f"says {expected} edges, but {file} holds {row}")

    return chunks


def _choose_split(root: Path, split: str | None) -> tuple[str, dict]:
    """The split name and its train/valid/test files under root/split."""
    folder = root / "split"
    names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if not names:
        raise DatasetError(folder, "no split folders (expected split/<name>/{train,valid,test}.csv.gz)")
    if split is None:
        if len(names) > 1:
            raise DatasetError(folder, f"several splits ({', '.join(names)}); choose one with --split")
        split = names[0]
    elif split not in names:
        raise DatasetError("--split", f"no split {split!r} in {folder} (has {', '.join(names)})")
    return split, {s: folder / split / f"{s}.csv.gz" for s in ("train", "valid", "test")}


def _single_count(arr: NpyArray) -> int:
    values = arr.read().reshape(-1)
    if values.shape != (1,) or values.dtype.kind not in "iu" or values[0] < 0:
        raise DatasetError(arr.label, f"holds {values.tolist()[:4]}, expected one count (a single graph)")
    return int(values[0])


def _csv_layout(raw: Path, inverse: bool) -> dict:
    n_file, e_file = raw / "num-node-list.csv.gz", raw / "num-edge-list.csv.gz"
    edge_file, feat_file, label_file = raw / "edge.csv.gz", raw / "node-feat.csv.gz", raw / "node-label.csv.gz"
    n, e = read_count(n_file), read_count(e_file)
    labels = read_csv(label_file, dtype=np.float64)
    if labels.shape[0] != n:
        raise DatasetError(label_file, f"{labels.shape[0]} rows, but {n_file.name} says {n} nodes")
    dim = count_columns(feat_file)
    pairs = lambda: ((c[:, 0], c[:, 1]) for c in csv_chunks(edge_file, columns=2, dtype=np.int64))  # noqa: E731
    return dict(
        num_nodes=n,
        feature_dim=dim,
        expected_num_edges=e * (2 if inverse else 1),
        labels=integer_labels(labels, str(label_file), n),
        edge_chunks=_edge_chunks(pairs, str(edge_file), n, inverse, e, str(e_file)),
        feature_chunks=lambda: csv_chunks(feat_file, columns=dim, dtype=np.float32),
        edge_file=str(edge_file),
        feature_file=str(feat_file),
        label_file=str(label_file),
        inputs=[edge_file, feat_file, label_file, n_file, e_file],
    )


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
        edge_chunks=_edge_chunks(
            lambda: edges.pair_chunks("columns"), edges.label, n, inverse, e, counts["num_edges_list"].label
        ),
        feature_chunks=lambda: (c.astype(np.float32, copy=False) for c in feats.row_chunks()),
        edge_file=edges.label,
        feature_file=feats.label,
        label_file=label_arr.label,
        inputs=[data, label_npz],
    )


def read_ogb(root, *, split: str | None = None, add_inverse_edges="auto", name: str | None = None) -> GraphSource:
    """A GraphSource over an OGB node-property directory (raw/ and split/).

    `split` picks split/<split>/ (default: the only one present);
    `add_inverse_edges` is "auto" (yes for products), "yes"/"no" or a bool.
    """
    root = Path(root)
    raw = root / "raw"
    if not raw.is_dir():
        raise DatasetError(root, "no raw/ folder; expected an OGB node-property directory (raw/ and split/)")
    inverse = _wants_inverse(add_inverse_edges, root)
    if (raw / "data.npz").exists():
        parts = _npz_layout(raw, inverse)
    elif (raw / "edge.csv.gz").exists():
        parts = _csv_layout(raw, inverse)
    else:
        raise DatasetError(raw, "holds neither edge.csv.gz (CSV layout) nor data.npz (binary layout)")
    split_name, split_files = _choose_split(root, split)
    splits = {s: read_csv(f) for s, f in split_files.items()}
    return GraphSource(
        name=name or root.resolve().name,
        kind="ogb",
        splits=splits,
        split_files={s: str(f) for s, f in split_files.items()},
        extra={"split": split_name, "add_inverse_edges": inverse},
        **parts,
    )


def add_arguments(parser):
    """The ogb kind's arguments."""
    parser.add_argument("root", help="OGB dataset directory holding raw/ and split/ (e.g. dataset/ogbn_arxiv)")
    parser.add_argument("--split", help="split folder under split/ (default: the only one, e.g. time)")
    parser.add_argument(
        "--add-inverse-edges",
        choices=INVERSE_CHOICES,
        default="auto",
        help="add the reverse of each stored edge as OGB does on loading (auto: yes for ogbn-products, no otherwise)",
    )
    parser.add_argument("--name", help="dataset name (default: the directory's name)")


def source_from_args(args) -> GraphSource:
    """read_ogb from parsed arguments."""
    return read_ogb(args.root, split=args.split, add_inverse_edges=args.add_inverse_edges, name=args.name)
