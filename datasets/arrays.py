"""`gnnsys prepare arrays`: a user's own edges, features, labels and split.

Edges are a .npy ([E, 2] or [2, E]) or a CSV of two columns (optional header,
plain or gzipped); features a .npy [N, F]; labels a .npy [N] (-1 or NaN for
unlabelled). The split is given one of three ways: index files for train,
valid and test (.npy or text, one id a line), a .npz of boolean masks (keys
train, valid or val, test), or a random split of the labelled nodes by
fractions. From Python every input may also be an in-memory array.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csv_reader import csv_chunks, has_header
from .input_paths import input_path
from .meta import SPLITS
from .node_ids import read_node_ids
from .npy import NpyArray, integer_labels, mask_ids, npz_keys, pair_layout
from .random_split import parse_fractions, split_randomly
from .source import GraphSource, array_edge_chunks, array_feature_chunks


def _is_array(value) -> bool:
    return hasattr(value, "__array__") and not isinstance(value, (str, Path))


def _npy(value, what: str) -> NpyArray:
    path = Path(value)
    if path.suffix != ".npy":
        raise DatasetError(path, f"{what} must be a .npy file")
    return NpyArray(path)


def _edges(edges):
    """(edge_chunks, label) for an array, a .npy or a 2-column CSV."""
    if _is_array(edges):
        arr = np.asarray(edges)
        pairs = arr if pair_layout(arr.shape, "edges") == "rows" else arr.T
        return array_edge_chunks(pairs[:, 0], pairs[:, 1]), "edges"
    path = Path(edges)
    if path.suffix == ".npy":
        arr = NpyArray(path)
        layout = arr.pair_layout()
        return (lambda: arr.pair_chunks(layout)), arr.label
    header = has_header(path)
    return (lambda: ((c[:, 0], c[:, 1]) for c in csv_chunks(path, columns=2, dtype=np.int64, header=header))), str(path)


def _features(features):
    """(feature_chunks, num_nodes, dim, label) for an array or a .npy."""
    if _is_array(features):
        arr, label = np.asarray(features), "features"
    else:
        arr = _npy(features, "features")
        label = arr.label
    if len(arr.shape) != 2 or arr.dtype.kind not in "fiub":
        raise DatasetError(label, f"shape {tuple(arr.shape)} of {arr.dtype}, expected a numeric [N, F] array")
    if isinstance(arr, np.ndarray):
        return array_feature_chunks(arr), arr.shape[0], arr.shape[1], label
    return (lambda: (c.astype(np.float32, copy=False) for c in arr.row_chunks())), arr.shape[0], arr.shape[1], label


def _labels(labels, num_nodes: int):
    if _is_array(labels):
        return integer_labels(np.asarray(labels), "labels", num_nodes), "labels"
    arr = _npy(labels, "labels")
    return integer_labels(arr.read(), arr.label, num_nodes), arr.label


def _ids(value, name: str):
    """Node ids from an array, a .npy or a text file of one id a line."""
    if _is_array(value):
        return np.asarray(value), name
    return read_node_ids(value), str(value)


def _masks(masks, num_nodes: int):
    if isinstance(masks, dict):
        get, label = masks.get, lambda key: f"masks[{key}]"
    else:
        path = Path(masks)
        stored = npz_keys(path)
        get = lambda key: NpyArray(path, key).read() if key in stored else None  # noqa: E731
        label = lambda key: f"{path}[{key}]"  # noqa: E731
    splits, files = {}, {}
    for name, names in (("train", ("train",)), ("valid", ("valid", "val")), ("test", ("test",))):
        found = [(key, value) for key in names if (value := get(key)) is not None]
        if not found:
            raise DatasetError(label(name), f"no {' or '.join(names)} mask")
        key, value = found[0]
        splits[name], files[name] = mask_ids(np.asarray(value), label(key), num_nodes), label(key)
    return splits, files


def _splits(labels, num_nodes, train, valid, test, masks, random_fractions, seed):
    given = [
        train is not None or valid is not None or test is not None,
        masks is not None,
        random_fractions is not None,
    ]
    if sum(given) != 1:
        raise DatasetError(
            "--train/--masks/--random-split",
            "give exactly one way to split: index files (--train, --valid, --test), --masks, or --random-split",
        )
    if masks is not None:
        return _masks(masks, num_nodes)
    if random_fractions is not None:
        return split_randomly(labels, random_fractions, seed), {s: "--random-split" for s in SPLITS}
    splits, files = {}, {}
    for name, value in zip(SPLITS, (train, valid, test)):
        if value is None:
            raise DatasetError(f"--{name}", "missing: give --train, --valid and --test together")
        splits[name], files[name] = _ids(value, name)
    return splits, files


def read_arrays(
    edges,
    features,
    labels,
    *,
    train=None,
    valid=None,
    test=None,
    masks=None,
    random_split=None,
    seed: int = 0,
    name: str | None = None,
) -> GraphSource:
    """A GraphSource over user arrays (paths or in-memory arrays), split by
    index files (train/valid/test), `masks`, or `random_split` fractions."""
    feature_chunks, n, dim, feature_file = _features(features)
    label_ids, label_file = _labels(labels, n)
    edge_chunks, edge_file = _edges(edges)
    splits, split_files = _splits(label_ids, n, train, valid, test, masks, random_split, seed)
    if name is None:
        name = Path(features).stem if not _is_array(features) else "arrays"
    inputs = [v for v in (edges, features, labels, train, valid, test, masks) if isinstance(v, (str, Path))]
    extra = {} if random_split is None else {"random_split": list(parse_fractions(random_split)), "seed": seed}
    return GraphSource(
        name=name,
        kind="arrays",
        num_nodes=n,
        feature_dim=dim,
        edge_chunks=edge_chunks,
        feature_chunks=feature_chunks,
        labels=label_ids,
        splits=splits,
        edge_file=edge_file,
        feature_file=feature_file,
        label_file=label_file,
        split_files=split_files,
        inputs=inputs,
        extra=extra,
    )


def add_arguments(parser):
    """The arrays kind's arguments."""
    parser.add_argument(
        "--edges", type=input_path, required=True, help=".npy [E,2] or [2,E], or a 2-column CSV (header optional)"
    )
    parser.add_argument("--features", type=input_path, required=True, help=".npy [N,F] float")
    parser.add_argument("--labels", type=input_path, required=True, help=".npy [N] int (-1 = unlabelled)")
    parser.add_argument("--train", type=input_path, help="train node ids (.npy or text, one id a line)")
    parser.add_argument("--valid", type=input_path, help="validation node ids")
    parser.add_argument("--test", type=input_path, help="test node ids")
    parser.add_argument("--masks", type=input_path, help=".npz with boolean train, valid (or val) and test masks")
    parser.add_argument(
        "--random-split",
        metavar="TRAIN,VALID,TEST",
        help="random split of the labelled nodes by fractions, e.g. 0.6,0.2,0.2",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --random-split (default: %(default)s)")
    parser.add_argument("--name", help="dataset name (default: the features file's stem)")


def source_from_args(args) -> GraphSource:
    """read_arrays from parsed arguments."""
    return read_arrays(
        args.edges,
        args.features,
        args.labels,
        train=args.train,
        valid=args.valid,
        test=args.test,
        masks=args.masks,
        random_split=args.random_split,
        seed=args.seed,
        name=args.name,
    )
