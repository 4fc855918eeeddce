"""`gnnsys prepare planetoid`: the Planetoid files of Cora, CiteSeer and PubMed.

ind.<name>.{x,tx,allx} are pickled scipy sparse feature rows, {y,ty,ally}
one-hot label rows, graph a dict node -> neighbour list (both directions
listed), test.index the test node ids, one a line. As in PyG's reference
loader, the test rows tx/ty belong to the test.index ids: the rows are laid
out at the sorted ids and then moved to the ids in file order; the full range
min..max of the test ids gets a row, and ids with no tx row (CiteSeer's
isolated nodes) get a zero feature row and label -1. Split: train = the first
len(y) nodes, valid = the next 500, test = test.index. The graph is PyG's:
the files list some edges twice and some self-loops, which are removed unless
`raw_edges` (CiteSeer: 9,104 edges, not 9,464).

Only Cora is embedded in the package (gnnsys/data/cora); other datasets are
read from `root`. The pickles are loaded with an unpickler that admits only
the numpy, scipy.sparse and container types these files use.
"""

from __future__ import annotations

import importlib.resources
import pickle
import warnings
from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csc import check_edge_ids
from .input_paths import input_path
from .source import GraphSource

EMBEDDED = ("cora",)
NUM_VALID = 500
_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph")
_ALLOWED = {
    ("__builtin__", "list"),
    ("builtins", "list"),
    ("__builtin__", "set"),
    ("builtins", "set"),
    ("collections", "defaultdict"),
    ("collections", "OrderedDict"),
    ("copy_reg", "_reconstructor"),
    ("copyreg", "_reconstructor"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),
}
_SPARSE = ("csr_matrix", "csc_matrix", "coo_matrix", "lil_matrix", "dok_matrix")


class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickles only the numpy arrays, scipy sparse matrices and containers of
    the Planetoid files, so a crafted file cannot run code."""

    def find_class(self, module, name):
        if (module, name) in _ALLOWED or (module.startswith("scipy.sparse") and name in _SPARSE):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _default_root(name: str):
    if name not in EMBEDDED:
        raise DatasetError("--root", f"only {', '.join(EMBEDDED)} is embedded; give --root with the ind.{name}.* files")
    return importlib.resources.files("gnnsys") / "data" / name


def _load_pickle(file):
    try:
        with file.open("rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return _PlanetoidUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise DatasetError(file, "file not found") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
        OSError,
    ) as e:
        raise DatasetError(file, f"not a readable Planetoid pickle ({type(e).__name__}: {e})") from None


def _read_test_index(file) -> np.ndarray:
    try:
        lines = file.read_text().splitlines()
    except FileNotFoundError:
        raise DatasetError(file, "file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(file, f"cannot read ({e})") from None
    ids = []
    for row, line in enumerate(lines):
        try:
            ids.append(int(line))
        except ValueError:
            raise DatasetError(file, f"expected one node id, got {line.strip()!r}", row=row) from None
    if not ids:
        raise DatasetError(file, "no test ids")
    return np.array(ids, np.int64)


def _rows(obj, file, what: str):
    """A sparse matrix or array of rows as a scipy CSR matrix (features) or
    ndarray (labels); raises if it is neither."""
    import scipy.sparse as sp

    if what == "features":
        if not (sp.issparse(obj) or isinstance(obj, np.ndarray)) or obj.ndim != 2:
            raise DatasetError(file, f"expected a 2-D feature matrix, got {type(obj).__name__}")
        return sp.csr_matrix(obj, dtype=np.float32)
    arr = obj.toarray() if sp.issparse(obj) else np.asarray(obj)
    if arr.ndim != 2:
        raise DatasetError(file, f"expected one-hot label rows [n, classes], got shape {arr.shape}")
    return arr


def _edges(graph, file, num_nodes: int, raw: bool):
    """(src, dst) of the node -> neighbours dict, ids checked; unless `raw`,
    without self-loops and repeats, sorted by (src, dst) as PyG's coalesce."""
    if not isinstance(graph, dict):
        raise DatasetError(file, f"expected a dict node -> neighbours, got {type(graph).__name__}")
    try:
        src = np.concatenate([np.full(len(v), k, np.int64) for k, v in graph.items()])
        dst = np.concatenate([np.asarray(list(v), np.int64) for v in graph.values()])
    except (TypeError, ValueError, OverflowError) as e:
        raise DatasetError(file, f"node ids must be integers ({e})") from None
    src, dst = check_edge_ids(src, dst, num_nodes, str(file), 0)
    if raw:
        return src, dst
    keep = src != dst
    pairs = np.unique(src[keep] * num_nodes + dst[keep])
    return pairs // num_nodes, pairs % num_nodes


def read_planetoid(name: str = "cora", root=None, raw_edges: bool = False) -> GraphSource:
    """A GraphSource over ind.<name>.* in `root` (default: the embedded Cora);
    `raw_edges` keeps the duplicate edges and self-loops of the files."""
    import scipy.sparse as sp

    from .source import array_edge_chunks

    name = name.lower()
    root = _default_root(name) if root is None else Path(root)
    files = {part: root / f"ind.{name}.{part}" for part in _PARTS + ("test.index",)}
    obj = {part: _load_pickle(files[part]) for part in _PARTS}
    x, tx, allx = (_rows(obj[p], files[p], "features") for p in ("x", "tx", "allx"))
    y, ty, ally = (_rows(obj[p], files[p], "labels") for p in ("y", "ty", "ally"))
    test_index = _read_test_index(files["test.index"])
    for (a, fa), (b, fb) in (((x, "x"), (y, "y")), ((tx, "tx"), (ty, "ty")), ((allx, "allx"), (ally, "ally"))):
        if a.shape[0] != b.shape[0]:
            raise DatasetError(files[fb], f"{b.shape[0]} label rows for the {a.shape[0]} rows of {files[fa].name}")
    if len(test_index) != tx.shape[0]:
        raise DatasetError(files["test.index"], f"{len(test_index)} test ids for the {tx.shape[0]} rows of tx")
    if len({x.shape[1], tx.shape[1], allx.shape[1]}) != 1 or len({y.shape[1], ty.shape[1], ally.shape[1]}) != 1:
        raise DatasetError(files["tx"], "x, tx and allx (or y, ty, ally) differ in their number of columns")
    if np.unique(test_index).size != test_index.size:
        raise DatasetError(files["test.index"], "repeats a test id")

    # PyG's layout: tx/ty rows span min..max of the test ids, right after allx/ally.
    lo, sorted_ids = int(test_index.min()), np.sort(test_index)
    if lo != allx.shape[0]:
        raise DatasetError(
            files["test.index"],
            f"smallest test id is {lo}, expected {allx.shape[0]} (the first id after the allx rows)",
        )
    span = int(test_index.max()) - lo + 1
    slot = sorted_ids - lo
    tx_full = sp.csr_matrix((tx.data, tx.indices, tx.indptr), shape=tx.shape)
    tx_full = sp.vstack([tx_full, sp.csr_matrix((span - tx.shape[0], tx.shape[1]), dtype=np.float32)]).tocsr()
    place = np.empty(span, np.int64)
    gaps = np.setdiff1d(np.arange(span), slot)
    place[slot], place[gaps] = np.arange(tx.shape[0]), tx.shape[0] + np.arange(gaps.size)
    tx_full = tx_full[place]
    ty_full = np.zeros((span, ty.shape[1]), ty.dtype)
    ty_full[slot] = ty
    n = allx.shape[0] + span
    perm = np.arange(n)
    perm[test_index] = sorted_ids
    features = sp.vstack([allx, tx_full]).tocsr()[perm]
    labels = np.concatenate([ally.argmax(1), ty_full.argmax(1)]).astype(np.int64)
    labels[allx.shape[0] + gaps] = -1
    labels = labels[perm]

    src, dst = _edges(obj["graph"], files["graph"], n, raw_edges)
    chunk = 1 << 14

    def feature_chunks():
        for start in range(0, n, chunk):
            yield features[start : start + chunk].toarray()

    return GraphSource(
        name=name,
        kind="planetoid",
        num_nodes=n,
        feature_dim=allx.shape[1],
        edge_chunks=array_edge_chunks(src, dst),
        feature_chunks=feature_chunks,
        labels=labels,
        num_classes=int(ally.shape[1]),
        splits={
            "train": np.arange(y.shape[0]),
            "valid": np.arange(y.shape[0], y.shape[0] + NUM_VALID),
            "test": np.sort(test_index),
        },
        edge_file=str(files["graph"]),
        feature_file=str(files["allx"]),
        label_file=str(files["ally"]),
        split_files={"train": str(files["y"]), "valid": str(files["ally"]), "test": str(files["test.index"])},
        inputs=list(files.values()),
        extra={"raw_edges": raw_edges},
        expected_num_edges=int(src.shape[0]),
    )


def add_arguments(parser):
    """The planetoid kind's arguments."""
    parser.add_argument(
        "--name", default="cora", help="dataset name in the file names ind.<name>.* (default: %(default)s)"
    )
    parser.add_argument(
        "--root", type=input_path, help="folder with the ind.<name>.* files (default: the embedded Cora)"
    )
    parser.add_argument(
        "--raw-edges",
        action="store_true",
        help="keep the duplicate edges and self-loops the files list (without it they are "
        "removed, giving PyG's Planetoid graph)",
    )


def source_from_args(args) -> GraphSource:
    """read_planetoid from parsed arguments."""
    return read_planetoid(args.name, args.root, args.raw_edges)
