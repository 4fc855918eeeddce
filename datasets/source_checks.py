"""The labels and splits of a source, checked before anything is written
(both writers: datasets/writer.py, datasets/hetero_writer.py)."""

from __future__ import annotations

import numpy as np

from gnnsys.errors import DatasetError

from .meta import SPLITS
from .node_ids import node_ids
from .source import GraphSource


def check_multilabel(src: GraphSource, remap: bool = False) -> np.ndarray:
    """Multi-label targets [num_nodes, tasks] as int8: 1, 0, or -1 for an
    entry without a label (NaN in a float input, -1 in an integer one);
    raises on another value or shape."""
    labels = np.asarray(src.labels)
    if remap:
        raise DatasetError("--remap-labels", "numbers classes of a single-label task; the labels are multi-label")
    if labels.shape[0] != src.num_nodes or labels.shape[1] < 1:
        raise DatasetError(src.label_file, f"expected {src.num_nodes} rows of task labels, got shape {labels.shape}")
    if labels.dtype.kind == "f":
        known = ~np.isnan(labels)
        bad = np.argwhere(known & (labels != 0) & (labels != 1))
        values = np.where(known, labels, -1)
    elif labels.dtype.kind in "iub":
        values = labels.astype(np.int64)
        bad = np.argwhere((values != 0) & (values != 1) & (values != -1))
    else:
        raise DatasetError(src.label_file, f"task labels must be numbers, got {labels.dtype}")
    if bad.size:
        row, task = (int(i) for i in bad[0])
        raise DatasetError(
            src.label_file,
            f"task {task} holds {labels[row, task]}, expected 0 or 1 (or {'NaN' if labels.dtype.kind == 'f' else -1} "
            "for no label)",
            row=row,
        )
    return values.astype(np.int8)


def check_labels(src: GraphSource, remap: bool = False) -> tuple[np.ndarray, int, list | None]:
    """Labels as int64 [N], the class count, and with `remap` the original
    label of each class (else None); raises on bad values.

    Labels are integers >= 0, or -1 for unlabelled nodes. Without `remap`,
    class c is label c: the count (the source's, else the largest label + 1)
    may not exceed the node count, and an inferred one must have at least
    half of its classes present. With `remap`, the distinct labels, sorted,
    become classes 0..C-1. Multi-label targets ([N, tasks], check_multilabel)
    come back as int8 with the task count as the class count (one output
    per task).
    """
    labels = np.asarray(src.labels)
    if labels.ndim == 2:
        labels = check_multilabel(src, remap)
        return labels, labels.shape[1], None
    if labels.shape != (src.num_nodes,):
        raise DatasetError(src.label_file, f"expected {src.num_nodes} labels, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DatasetError(src.label_file, f"labels must be integers, got {labels.dtype}")
    labels = labels.astype(np.int64, copy=remap)  # only --remap-labels writes to it
    below = np.flatnonzero(labels < -1)
    if below.size:
        raise DatasetError(
            src.label_file,
            f"label {labels[below[0]]} out of range (classes are >= 0; -1 marks an unlabelled node)",
            row=int(below[0]),
        )
    known = labels >= 0
    if remap:
        original, labels[known] = np.unique(labels[known], return_inverse=True)
        return labels, int(original.size), original.tolist()
    inferred = src.num_classes is None
    num_classes = (int(labels.max()) + 1 if known.any() else 0) if src.num_classes is None else int(src.num_classes)
    bad = np.flatnonzero(labels >= num_classes)
    if bad.size:
        raise DatasetError(src.label_file, f"label {labels[bad[0]]} out of range [0, {num_classes})", row=int(bad[0]))
    if num_classes > max(src.num_nodes, 1):
        raise DatasetError(
            src.label_file,
            f"{num_classes} classes (labels up to {num_classes - 1}) for "
            f"{src.num_nodes} nodes; use --remap-labels to number the distinct labels 0..C-1",
        )
    used = int(np.count_nonzero(np.bincount(labels[known], minlength=num_classes))) if inferred else num_classes
    if 2 * used < num_classes:
        raise DatasetError(
            src.label_file,
            f"only {used} of the {num_classes} classes 0..{num_classes - 1} "
            f"occur; use --remap-labels to number them 0..{used - 1}",
        )
    return labels, num_classes, None


def check_splits(src: GraphSource, labels: np.ndarray) -> dict:
    """Split ids as int64 arrays; raises if empty, out of range, repeated,
    overlapping or unlabelled."""
    seen = np.full(src.num_nodes, -1, np.int8)
    out = {}
    for i, name in enumerate(SPLITS):
        file = src.split_files.get(name, f"split {name}")
        if name not in src.splits:
            raise DatasetError(file, f"split {name!r} is missing")
        ids = node_ids(src.splits[name], file, src.num_nodes)
        if ids.size == 0:
            raise DatasetError(file, f"split {name!r} is empty")
        taken = seen[ids]
        if (taken >= 0).any():
            j = int(np.flatnonzero(taken >= 0)[0])
            other = SPLITS[taken[j]]
            what = f"repeats node {ids[j]}" if other == name else f"overlaps split {other!r} at node {ids[j]}"
            raise DatasetError(file, f"split {name!r} {what}", row=j)
        if np.unique(ids).size != ids.size:
            raise DatasetError(file, f"split {name!r} repeats a node id")
        missing = labels[ids] < 0
        unlabelled = np.flatnonzero(missing if missing.ndim == 1 else missing.all(axis=1))
        if unlabelled.size:
            raise DatasetError(
                file, f"split {name!r} holds unlabelled node {ids[unlabelled[0]]}", row=int(unlabelled[0])
            )
        seen[ids] = i
        out[name] = ids
    return out
