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
_ADD_INVERSE = ("products", "proteins")  # OGB master.csv: add_inverse_edge True among node-property datasets


def _wants_inverse(choice, root: Path) -> bool:
    if isinstance(choice, bool):
        return choice
    if choice not in INVERSE_CHOICES:
        raise DatasetError("--add-inverse-edges", f"must be one of {', '.join(INVERSE_CHOICES)}, got {choice!r}")
    if choice == "auto":
        return any(word in root.resolve().name for word in _ADD_INVERSE)
    return choice == "yes"


def _edge_chunks(pairs, file: str, num_nodes: int, inverse: bool, expected: int, count_file: str, rows: bool = False):
    """Edge chunks from `pairs()` (an iterator of (src, dst) in file order):
    ids checked against num_nodes at their file rows, the inverse of every
    edge added when `inverse`, and the row count checked against `expected`.
    With `rows`, chunks are (src, dst, row): each edge's file row, which an
    inverse edge shares (the row of its edge features)."""

    def chunks():
        row = 0
        for src, dst in pairs():
            src, dst = check_edge_ids(src, dst, num_nodes, file, row)
            at = np.arange(row, row + src.shape[0]) if rows else None
            row += src.shape[0]
            if inverse:
                src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
                at = np.concatenate([at, at]) if rows else None
            yield (src, dst, at) if rows else (src, dst)
        if row != expected:
            raise DatasetError(count_file, f"says {expected} edges, but {file} holds {row}")

    return chunks


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


def _csv_file(raw: Path, stem: str, required: bool = True) -> Path | None:
    """raw/<stem>.csv.gz or raw/<stem>.csv (None when neither and not `required`);
    DatasetError when both are there or a required one is missing."""
    gz, plain = raw / f"{stem}.csv.gz", raw / f"{stem}.csv"
    if gz.exists() and plain.exists():
        raise DatasetError(raw, f"holds both {gz.name} and {plain.name}; keep one")
    if gz.exists() or plain.exists():
        return gz if gz.exists() else plain
    if required:
        raise DatasetError(gz, "file not found (nor a plain .csv)")
    return None


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
    return split, {s: _csv_file(folder / split, s) for s in ("train", "valid", "test")}


def _single_count(arr: NpyArray) -> int:
    values = arr.read().reshape(-1)
    if values.shape != (1,) or values.dtype.kind not in "iu" or values[0] < 0:
        raise DatasetError(arr.label, f"holds {values.tolist()[:4]}, expected one count (a single graph)")
    return int(values[0])


def _csv_layout(raw: Path, inverse: bool) -> dict:
    n_file, e_file = _csv_file(raw, "num-node-list"), _csv_file(raw, "num-edge-list")
    edge_file, label_file = _csv_file(raw, "edge"), _csv_file(raw, "node-label")
    edge_feat_file = _csv_file(raw, "edge-feat", required=False)
    feat_file = _csv_file(raw, "node-feat", required=edge_feat_file is None)  # none: derived from edge features
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
        edge_chunks=_edge_chunks(pairs, str(edge_file), n, inverse, e, str(e_file), rows=edge_feat_file is not None),
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
    binary = (raw / "data.npz").exists()
    csv = [p.name for p in (raw / "edge.csv.gz", raw / "edge.csv") if p.exists()]
    if binary and csv:
        raise DatasetError(raw, f"mixes the binary layout (data.npz) with the CSV layout ({csv[0]}); keep one")
    if binary:
        parts = _npz_layout(raw, inverse)
    elif csv:
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
        help="add the reverse of each stored edge (sharing its edge features) as OGB does on loading "
        "(auto: yes for ogbn-products and ogbn-proteins, no otherwise)",
    )
    parser.add_argument("--name", help="dataset name (default: the directory's name)")


def source_from_args(args) -> GraphSource:
    """read_ogb from parsed arguments."""
    return read_ogb(args.root, split=args.split, add_inverse_edges=args.add_inverse_edges, name=args.name)
