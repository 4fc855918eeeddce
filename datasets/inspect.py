"""`gnnsys info`: the summary of a prepared dataset, and `--verify`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .atomic import sha256_file
from .dataset import load_dataset
from .features_file import DTYPES, open_rows
from .meta import SPLITS, read_meta


def summarize(path) -> dict:
    """Counts, degree statistics, feature layout, split sizes, class balance
    of the dataset at `path`, after every load-time check (`load_dataset`)."""
    ds = load_dataset(path)
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


def format_summary(s: dict) -> str:
    """The summary as aligned text lines."""
    f, d, c = s["features"], s["in_degree"], s["classes"]
    multilabel = c.get("task") == "multilabel"
    totals = [max(1, k) for k in c["labelled"]] if multilabel else [max(1, sum(c["counts"]))] * len(c["counts"])
    balance = ", ".join(f"{i}:{n / t:.1%}" for i, (n, t) in enumerate(zip(c["counts"][:20], totals)))
    if len(c["counts"]) > 20:
        balance += f", ... ({len(c['counts'])} {'tasks' if multilabel else 'classes'})"
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


def _padding_problem(path: Path, meta: dict, section: str = "features") -> str | None:
    """What is wrong when a row of `section` (features or edge_features) has
    a non-zero byte after its dim x itemsize bytes (the writer pads with
    zeros, so meta.json's dtype or dim does not describe the rows), else
    None. Reads the file in 64 MiB blocks."""
    f = meta[section]
    count = meta["num_nodes"] if section == "features" else meta["num_edges"]
    body = f["dim"] * DTYPES[f["dtype"]].itemsize
    if count == 0 or body == f["row_stride"]:
        return None
    rows = open_rows(path / f["file"], count, f["row_stride"])
    step = max(1, (64 << 20) // max(f["row_stride"], 1))
    for lo in range(0, count, step):
        bad = np.flatnonzero(rows[lo : lo + step, body:].any(axis=1))
        if bad.size:
            return str(
                DatasetError(
                    path / f["file"],
                    f"non-zero bytes after the {body} of {f['dim']} x {f['dtype']}: "
                    "meta.json's dtype or dim does not describe the rows",
                    row=lo + int(bad[0]),
                )
            )
    return None


def verify(path) -> list[str]:
    """Every checksum and invariant; returns the problems found (empty = ok):
    meta.json's checksums of every file it names, the load-time checks of
    `load_dataset`, and what only a full pass can tell (empty splits, zero
    padding after every feature row, order.npy a permutation)."""
    path = Path(path)
    try:
        meta = read_meta(path)
    except DatasetError as e:
        return [str(e)]
    checksums = meta.get("checksums")
    if checksums is None:
        return [f"{path / 'meta.json'}: has no checksums to verify"]
    problems = [f"{path / name}: has no checksum in meta.json" for name in sorted(_data_files(meta) - set(checksums))]
    for name, digest in checksums.items():
        file = path / name
        if not file.is_file():
            problems.append(f"{file}: missing")
        elif sha256_file(file) != digest:
            problems.append(f"{file}: checksum mismatch")
    try:
        ds = load_dataset(path)
    except DatasetError as e:
        return problems + [str(e)]
    problems += [f"{path / meta['splits'][s]}: empty split" for s in SPLITS if ds.split(s).numel() == 0]
    for section in ("features", "edge_features"):
        padding = _padding_problem(path, meta, section) if section in meta else None
        if padding:
            problems.append(padding)
    if ds.order is not None and not np.array_equal(np.sort(ds.order.numpy()), np.arange(ds.num_nodes)):
        problems.append(f"{path / meta['order']}: not a permutation of the node ids")
    return problems
