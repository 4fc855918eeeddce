"""`gnnsys info`: the summary of a prepared dataset, and `--verify`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .class_balance import class_balance
from .dataset import load_dataset
from .file_checks import loaded_problems, padding_problem
from .finite_rows import nonfinite_problem
from .hetero_dataset import HeteroDataset
from .hetero_inspect import format_hetero_summary, summarize_hetero, verify_hetero
from .meta import HETERO, HOMOGENEOUS, SPLITS, read_any_meta


def summarize(path) -> dict:
    """Counts, degree statistics, feature layout, split sizes, class balance
    of the dataset at `path`, after every load-time check (`load_dataset`);
    a heterogeneous one's summary (kind "hetero") is datasets/hetero_inspect.py's."""
    ds = load_dataset(path)
    if isinstance(ds, HeteroDataset):
        return summarize_hetero(ds)
    meta = ds.meta
    degree = np.diff(ds.indptr.numpy())
    labels = ds.labels.numpy()
    n_cls = ds.num_classes
    if ds.task == "multilabel":  # counts: the positives of each task
        counts = (labels == 1).sum(axis=0)
        known = (labels >= 0).sum(axis=0)
    else:
        counts = np.bincount(labels[labels >= 0], minlength=n_cls)
        known = None
    splits = {s: int(ds.split(s).shape[0]) for s in SPLITS}
    return {
        "kind": HOMOGENEOUS,
        "name": meta["name"],
        "num_nodes": meta["num_nodes"],
        "num_edges": meta["num_edges"],
        "in_degree": {
            "mean": float(degree.mean()) if degree.size else 0.0,
            "median": float(np.median(degree)) if degree.size else 0.0,
            "max": int(degree.max()) if degree.size else 0,
            "zero": int((degree == 0).sum()),
        },
        "features": meta["features"],
        "splits": splits,
        "classes": {
            "num_classes": n_cls,
            "task": ds.task,
            "counts": counts.tolist(),
            "unlabelled": int((labels < 0).sum()),
            **({"labelled": known.tolist()} if known is not None else {}),
        },
        **({"edge_features": meta["edge_features"]} if "edge_features" in meta else {}),
        "reordered": bool(meta.get("order")),
        "source": meta.get("source", {}),
    }


def placement_table(summary: dict) -> tuple[dict | None, int]:
    """The feature table training places, as (its meta.json section, rows):
    the features of a homogeneous dataset, the target type's of a
    heterogeneous one ((None, 0) when the target has no features)."""
    if summary.get("kind") != HETERO:
        return summary["features"], summary["num_nodes"]
    section = summary["node_types"][summary["target"]]
    return section["features"], section["num_nodes"] if section["features"] else 0


def format_summary(s: dict) -> str:
    """The summary as aligned text lines."""
    if s.get("kind") == HETERO:
        return format_hetero_summary(s)
    f, d, c = s["features"], s["in_degree"], s["classes"]
    multilabel = c.get("task") == "multilabel"
    balance = class_balance(c)
    lines = [
        f"dataset      {s['name']}  ({s['source'].get('kind', '?')})",
        f"nodes        {s['num_nodes']:,}",
        f"edges        {s['num_edges']:,}",
        f"in-degree    mean {d['mean']:.2f}  median {d['median']:.0f}  max {d['max']:,}  zero {d['zero']:,}",
        f"features     {f['dim']} x {f['dtype']}, row stride {f['row_stride']} B (align {f['align']})",
        "splits       " + "  ".join(f"{k} {v:,}" for k, v in s["splits"].items()),
        (
            f"tasks        {c['num_classes']} binary (multilabel)  unlabelled entries {c['unlabelled']:,}"
            if multilabel
            else f"classes      {c['num_classes']}  unlabelled {c['unlabelled']:,}"
        ),
        f"{'positives' if multilabel else 'balance':<13}{balance}",
        f"reordered    {'by in-degree (order.npy)' if s['reordered'] else 'no'}",
    ]
    if "edge_features" in s:
        e = s["edge_features"]
        lines.insert(5, f"edge feats   {e['dim']} x {e['dtype']}, row stride {e['row_stride']} B, in CSC order")
    return "\n".join(lines)


def _data_files(meta: dict) -> set:
    """The names of every file meta.json describes (checksummed when prepared)."""
    names = {
        meta["graph"]["indptr"],
        meta["graph"]["indices"],
        meta["features"]["file"],
        meta["labels"]["file"],
        *meta["splits"].values(),
    }
    names |= {meta["edge_features"]["file"]} if "edge_features" in meta else set()
    return names | ({meta["order"]} if meta.get("order") else set())


def verify(path) -> list[str]:
    """Every checksum and invariant; returns the problems found (empty = ok):
    meta.json's checksums of every file it names, the load-time checks of
    `load_dataset`, and what only a full pass can tell (empty splits, zero
    padding after every feature row, order.npy a permutation). A
    heterogeneous dataset is checked by datasets/hetero_inspect.py."""
    path = Path(path)
    try:
        meta = read_any_meta(path)
    except DatasetError as e:
        return [str(e)]
    if meta.get("kind") == HETERO:
        return verify_hetero(path, meta)
    problems, ds = loaded_problems(path, meta, _data_files(meta))
    if ds is None:
        return problems
    for section, count in (("features", meta["num_nodes"]), ("edge_features", meta["num_edges"])):
        padding = padding_problem(path, meta[section], count) if section in meta else None
        if padding:
            problems.append(padding)
    nonfinite = nonfinite_problem(ds.features, path / meta["features"]["file"])
    if nonfinite:
        problems.append(nonfinite)
    if ds.order is not None and not np.array_equal(np.sort(ds.order.numpy()), np.arange(ds.num_nodes)):
        problems.append(f"{path / meta['order']}: not a permutation of the node ids")
    return problems
