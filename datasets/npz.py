"""`gnnsys prepare npz`: one .npz in either of two layouts, told apart by its keys.

The heterophilous benchmark's (Platonov et al. 2023,
yandex-research/heterophilous-graphs; KEYS): node_features [N, F],
node_labels [N], edges [E, 2] and train_masks / val_masks / test_masks,
either [S, N] (S splits; `--split-index` picks one) or [N].

The gnn-benchmark CSR layout (Shchur et al. 2018, shchur/gnn-benchmark, read
by PyG's Amazon, Coauthor and CitationFull): the adjacency as
adj_data / adj_indices / adj_indptr / adj_shape (row i's edges go from i to
the columns listed), features as attr_data / attr_indices / attr_indptr /
attr_shape or a dense attr_matrix, labels [N]. It stores no split
(`--random-split`, `--seed`). Any other key (node_names, idx_to_class, ...,
often pickled Python objects) is never read, so never unpickled. A file
without features gets one-hot identity features, with a note. Feature values
are kept as stored (PyG's loader sets every non-zero to 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .input_paths import input_path
from .npy import NpyArray, integer_labels, mask_ids, npz_keys
from .random_split import parse_fractions, split_randomly
from .source import GraphSource

KEYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
_SPLIT_KEYS = {"train": "train_masks", "valid": "val_masks", "test": "test_masks"}


def _split_mask(arr: NpyArray, split_index: int, num_nodes: int) -> np.ndarray:
    masks = arr.read()
    if masks.ndim == 1:
        return mask_ids(masks, arr.label, num_nodes)
    if masks.ndim != 2:
        raise DatasetError(arr.label, f"shape {masks.shape}, expected [splits, {num_nodes}] or [{num_nodes}]")
    if not 0 <= split_index < masks.shape[0]:
        raise DatasetError("--split-index", f"{split_index} out of range: {arr.label} holds {masks.shape[0]} splits")
    return mask_ids(masks[split_index], arr.label, num_nodes)


def read_npz(
    path, *, split_index: int | None = None, random_split=None, seed: int = 0, name: str | None = None
) -> GraphSource:
    """A GraphSource over an .npz in the heterophilous layout (`split_index`
    picks a stored split, default 0) or the gnn-benchmark CSR layout (split
    at random by `random_split` fractions with `seed`), whichever it holds."""
    path = Path(path)
    if "adj_indptr" in npz_keys(path):
        if split_index is not None:
            raise DatasetError(
                "--split-index",
                f"{path} holds the gnn-benchmark CSR layout, which stores no split; give --random-split",
            )
        return _read_csr_layout(path, random_split, seed, name or path.stem)
    if random_split is not None:
        raise DatasetError(
            "--random-split", f"{path} holds the heterophilous layout with its own splits; give --split-index"
        )
    return _read_heterophilous(path, split_index or 0, name or path.stem)


def _read_heterophilous(path: Path, split_index: int, name: str) -> GraphSource:
    arrays = {key: NpyArray(path, key) for key in KEYS}
    feats, edges = arrays["node_features"], arrays["edges"]
    if len(feats.shape) != 2 or feats.dtype.kind not in "fiub":
        raise DatasetError(feats.label, f"shape {feats.shape} of {feats.dtype}, expected a numeric [N, F] array")
    n = feats.shape[0]
    layout = edges.pair_layout("rows")
    labels = integer_labels(arrays["node_labels"].read(), arrays["node_labels"].label, n)
    splits = {s: _split_mask(arrays[key], split_index, n) for s, key in _SPLIT_KEYS.items()}
    return GraphSource(
        name=name,
        kind="npz",
        num_nodes=n,
        feature_dim=feats.shape[1],
        edge_chunks=lambda: edges.pair_chunks(layout),
        feature_chunks=lambda: (c.astype(np.float32, copy=False) for c in feats.row_chunks()),
        labels=labels,
        splits=splits,
        edge_file=edges.label,
        feature_file=feats.label,
        label_file=arrays["node_labels"].label,
        split_files={s: arrays[key].label for s, key in _SPLIT_KEYS.items()},
        inputs=[path],
        extra={"layout": "heterophilous", "split_index": split_index},
        expected_num_edges=edges.shape[0] if layout == "rows" else edges.shape[1],
    )


def _csr(path: Path, prefix: str, rows: int | None = None):
    """(indptr, indices member, shape) of the CSR matrix stored as <prefix>_indptr,
    _indices, _shape, after checking that the lists lie inside the indices and
    hold column ids within the shape (`rows`: the row count it must have)."""
    shape = NpyArray(path, f"{prefix}_shape").read().reshape(-1)
    label = f"{path}[{prefix}_shape]"
    if shape.size != 2 or shape.dtype.kind not in "iu" or shape.min() < 0 or (rows is not None and shape[0] != rows):
        want = f"[{rows}, columns]" if rows is not None else "[rows, columns]"
        raise DatasetError(label, f"holds {shape.tolist()}, expected {want}")
    indices = NpyArray(path, f"{prefix}_indices")
    indptr = NpyArray(path, f"{prefix}_indptr").read()
    label = f"{path}[{prefix}_indptr]"
    if indptr.shape != (shape[0] + 1,) or indptr.dtype.kind not in "iu":
        raise DatasetError(label, f"shape {indptr.shape} of {indptr.dtype}, expected {shape[0] + 1} integers")
    if indptr[0] != 0 or (np.diff(indptr) < 0).any() or indptr[-1] != len(indices):
        raise DatasetError(label, f"must rise from 0 to the {len(indices)} entries of {prefix}_indices")
    return indptr.astype(np.int64), indices, (int(shape[0]), int(shape[1]))


def _csr_data(path: Path, prefix: str, entries: int) -> np.ndarray:
    """<prefix>_data after checking it holds one value per entry of <prefix>_indices."""
    data = NpyArray(path, f"{prefix}_data").read().reshape(-1)
    if data.shape[0] != entries:
        raise DatasetError(
            f"{path}[{prefix}_data]", f"holds {data.shape[0]} values for the {entries} entries of {prefix}_indices"
        )
    return data


def _features(path: Path, keys, n: int):
    """(feature_chunks, dim, label, notes) of the attributes, or of one-hot identity rows."""
    import scipy.sparse as sp

    if "attr_matrix" in keys:
        dense = NpyArray(path, "attr_matrix")
        if dense.shape[:1] != (n,) or len(dense.shape) != 2 or dense.dtype.kind not in "fiub":
            raise DatasetError(dense.label, f"shape {dense.shape} of {dense.dtype}, expected a numeric [{n}, F] array")
        return (lambda: (c.astype(np.float32, copy=False) for c in dense.row_chunks())), dense.shape[1], dense.label, []
    if "attr_indptr" in keys:
        indptr, indices, shape = _csr(path, "attr", rows=n)
        data = _csr_data(path, "attr", len(indices))
        if data.dtype.kind not in "fiub":
            raise DatasetError(f"{path}[attr_data]", f"holds {data.dtype} values; features must be real numbers")
        matrix = sp.csr_matrix((data, indices.read(), indptr), shape=shape)
        try:
            matrix.check_format(full_check=True)
        except ValueError as e:
            raise DatasetError(f"{path}[attr_indices]", f"not a valid CSR matrix ({e})") from None
        return (
            (lambda: (matrix[a : a + 4096].toarray().astype(np.float32, copy=False) for a in range(0, n, 4096))),
            shape[1],
            f"{path}[attr_data]",
            [],
        )
    if n * n * 4 > 4 << 30:
        raise DatasetError(
            path,
            f"holds no attribute arrays (attr_matrix or attr_data/attr_indices/attr_indptr/"
            f"attr_shape), and one-hot features for {n} nodes would take {n * n * 4 / 2**30:.0f} GiB",
        )

    def one_hot():
        for a in range(0, n, 4096):
            rows = np.zeros((min(4096, n - a), n), np.float32)
            rows[np.arange(rows.shape[0]), a + np.arange(rows.shape[0])] = 1
            yield rows

    return (
        one_hot,
        n,
        f"{path} (one-hot)",
        [f"{path.name} holds no attribute arrays: features are one-hot node ids ({n} x {n})"],
    )


def _read_csr_layout(path: Path, random_split, seed: int, name: str) -> GraphSource:
    if random_split is None:
        raise DatasetError(
            "--random-split",
            f"{path} holds the gnn-benchmark CSR layout, which stores no split: "
            "give --random-split TRAIN,VALID,TEST (and --seed)",
        )
    indptr, dst, (n, m) = _csr(path, "adj")
    if n != m:
        raise DatasetError(f"{path}[adj_shape]", f"holds [{n}, {m}], expected a square adjacency matrix")
    keys = npz_keys(path)
    feature_chunks, dim, feature_file, notes = _features(path, keys, n)
    if "adj_data" in keys and not (_csr_data(path, "adj", len(dst)) == 1).all():
        notes = [
            *notes,
            f"{path.name}'s adj_data holds values other than 1 (edge weights): gnnsys graphs are "
            "unweighted, so each stored entry is one edge and its value is dropped",
        ]
    label_arr = NpyArray(path, "labels")
    labels = integer_labels(label_arr.read(), label_arr.label, n)

    def edge_chunks():
        start = 0
        for targets in dst.row_chunks():
            sources = np.searchsorted(indptr, np.arange(start, start + len(targets)), side="right") - 1
            start += len(targets)
            yield sources, targets

    return GraphSource(
        name=name,
        kind="npz",
        num_nodes=n,
        feature_dim=dim,
        edge_chunks=edge_chunks,
        feature_chunks=feature_chunks,
        labels=labels,
        splits=split_randomly(labels, random_split, seed),
        edge_file=dst.label,
        feature_file=feature_file,
        label_file=label_arr.label,
        split_files={s: "--random-split" for s in _SPLIT_KEYS},
        inputs=[path],
        notes=notes,
        extra={"layout": "gnn-benchmark", "random_split": list(parse_fractions(random_split)), "seed": seed},
        expected_num_edges=len(dst),
    )


def add_arguments(parser):
    """The npz kind's arguments."""
    parser.add_argument(
        "path",
        type=input_path,
        help=".npz in the heterophilous layout (node_features, node_labels, edges, "
        "train/val/test_masks) or the gnn-benchmark CSR layout (adj_*, attr_* or attr_matrix, "
        "labels), told apart by its keys",
    )
    parser.add_argument(
        "--split-index", type=int, help="heterophilous layout: which of the stored splits to use (default: the first)"
    )
    parser.add_argument(
        "--random-split",
        metavar="TRAIN,VALID,TEST",
        help="gnn-benchmark layout (no stored split): random split of the labelled nodes by "
        "fractions, e.g. 0.6,0.2,0.2",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --random-split (default: %(default)s)")
    parser.add_argument("--name", help="dataset name (default: the file's stem)")


def source_from_args(args) -> GraphSource:
    """read_npz from parsed arguments."""
    return read_npz(
        args.path, split_index=args.split_index, random_split=args.random_split, seed=args.seed, name=args.name
    )
