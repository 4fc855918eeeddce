"""The cheap invariants of a Dataset's arrays, checked whenever a Dataset is
made (so on every `load_dataset`): one vectorised pass over the graph, the
labels and the splits, no checksum. What they guarantee is what the kernels
that index with these arrays rely on: every node id is in range, every
neighbour list lies inside `indices`, every label fits the class count.
"""

from __future__ import annotations

import torch

from gnnsys.errors import DatasetError


def _is_integer(t: torch.Tensor) -> bool:
    return not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool)


def _vector(t, file, dtypes=None):
    """`t` if it is a 1-D tensor of integers (of `dtypes`, when given)."""
    if not isinstance(t, torch.Tensor) or t.dim() != 1:
        shape = tuple(t.shape) if hasattr(t, "shape") else type(t).__name__
        raise DatasetError(file, f"expected a 1-D integer tensor, got {shape}")
    if not _is_integer(t) or (dtypes and t.dtype not in dtypes):
        want = " or ".join(str(d).removeprefix("torch.") for d in dtypes) if dtypes else "integers"
        raise DatasetError(file, f"expected {want}, got {str(t.dtype).removeprefix('torch.')}")
    return t


def _in_range(t, lo: int, hi: int, file, what: str):
    """DatasetError naming the first value of `t` outside [lo, hi)."""
    if t.numel() == 0:
        return
    low, high = torch.aminmax(t)
    if int(low) < lo or int(high) >= hi:
        row = int(torch.nonzero((t < lo) | (t >= hi))[0])
        raise DatasetError(file, f"{what} {int(t[row])} out of range [{lo}, {hi})", row=row)


def files_of(meta: dict, path) -> dict:
    """The name each array has in error messages: its file when the dataset
    was loaded from `path`, else its attribute (Dataset.indices, ...)."""
    if path is None or not meta:
        names = {k: f"Dataset.{k}" for k in ("indptr", "indices", "labels", "features")}
        return {**names, **{s: f"Dataset.splits[{s!r}]" for s in ("train", "valid", "test")}}
    return {
        "indptr": path / meta["graph"]["indptr"],
        "indices": path / meta["graph"]["indices"],
        "labels": path / meta["labels"]["file"],
        "features": path / meta["features"]["file"],
        **({"edge_features": path / meta["edge_features"]["file"]} if "edge_features" in meta else {}),
        **{s: path / f for s, f in meta["splits"].items()},
    }


def check_dataset(ds) -> None:
    """Raise DatasetError naming the array (its file when loaded) whose
    invariant fails: indptr int64, starting at 0, never decreasing, ending at
    len(indices); indices int32/int64 in [0, N); labels N integers in
    [-1, num_classes), or multi-label [N, num_classes] in {-1, 0, 1};
    features N rows; edge features, when present, one row per edge; split
    ids in [0, N), none repeated or in two splits; the counts in meta.json,
    when there is one, equal to the arrays'."""
    file = files_of(ds.meta, ds.path)
    n = _vector(ds.indptr, file["indptr"]).shape[0] - 1
    if ds.meta and n != ds.meta["num_nodes"]:
        raise DatasetError(file["indptr"], f"holds {n + 1} entries, meta.json says {ds.meta['num_nodes']} nodes")
    indices = check_csc(ds.indptr, ds.indices, n, n, file["indptr"], file["indices"])
    if ds.meta and indices.shape[0] != ds.meta["num_edges"]:
        raise DatasetError(
            file["indices"], f"holds {indices.shape[0]} ids, meta.json says {ds.meta['num_edges']} edges"
        )
    check_labels(ds, n, file["labels"])
    if ds.features.shape[0] != n:
        raise DatasetError(file["features"], f"holds {ds.features.shape[0]} rows for {n} nodes")
    edge_features = getattr(ds, "edge_features", None)
    if edge_features is not None and edge_features.shape[0] != indices.shape[0]:
        where = file.get("edge_features", "Dataset.edge_features")
        raise DatasetError(where, f"holds {edge_features.shape[0]} rows for {indices.shape[0]} edges")
    check_splits(ds.splits, n, {name: file.get(name, f"Dataset.splits[{name!r}]") for name in ds.splits})


def check_csc(indptr, indices, num_dst: int, num_src: int, indptr_file, indices_file) -> torch.Tensor:
    """The checked `indices` of a CSC graph whose indptr (int64, num_dst + 1
    entries) starts at 0, never decreases and ends at len(indices), and
    whose indices (int32/int64) are source ids in [0, num_src); DatasetError
    naming the file (or attribute) otherwise."""
    indptr = _vector(indptr, indptr_file, (torch.int64,))
    indices = _vector(indices, indices_file, (torch.int32, torch.int64))
    if indptr.shape[0] != num_dst + 1:
        raise DatasetError(indptr_file, f"holds {indptr.shape[0]} entries for {num_dst} destination nodes")
    if int(indptr[0]) != 0:
        raise DatasetError(indptr_file, "must start with 0")
    falls = indptr[1:] < indptr[:-1]
    if bool(falls.any()):
        row = int(torch.nonzero(falls)[0]) + 1
        raise DatasetError(indptr_file, f"decreases from {int(indptr[row - 1])} to {int(indptr[row])}", row=row)
    if int(indptr[-1]) != indices.shape[0]:
        raise DatasetError(indptr_file, f"ends at {int(indptr[-1])}, but indices holds {indices.shape[0]} ids")
    _in_range(indices, 0, num_src, indices_file, "node id")
    return indices


def check_splits(splits: dict, n: int, files: dict) -> None:
    """Each split's ids (`files` names them) in [0, n), none repeated or in two splits."""
    seen, marked = torch.zeros(n, dtype=torch.bool), 0
    for name, ids in splits.items():
        where = files[name]
        _in_range(_vector(ids, where), 0, n, where, "node id")
        seen[ids] = True
        if int(seen.sum()) != marked + ids.shape[0]:  # fewer new ids than given: a repeat or an overlap
            raise DatasetError(where, "repeats a node id, or shares one with another split")
        marked += ids.shape[0]


def check_labels(ds, n: int, file):
    """Labels: N integers in [-1, num_classes), or [N, num_classes] task labels in {-1, 0, 1}."""
    labels = ds.labels
    if isinstance(labels, torch.Tensor) and labels.dim() == 2 and _is_integer(labels):
        if tuple(labels.shape) != (n, ds.num_classes):
            raise DatasetError(
                file,
                f"expected a 1-D integer tensor, or multi-label task labels of shape [{n}, {ds.num_classes}], "
                f"got {tuple(labels.shape)}",
            )
        bad = torch.nonzero((labels < -1) | (labels > 1))
        if bad.shape[0]:
            row, task = (int(i) for i in bad[0])
            raise DatasetError(file, f"task {task} label {int(labels[row, task])} out of range [-1, 2)", row=row)
        return
    labels = _vector(labels, file)
    if labels.shape[0] != n:
        raise DatasetError(file, f"holds {labels.shape[0]} labels for {n} nodes")
    _in_range(labels, -1, ds.num_classes, file, "label")
