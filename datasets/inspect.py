"""`gnnsys info`: the summary of a prepared dataset, and `--verify`."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .atomic import sha256_file
from .dataset import _load_array, load_dataset
from .meta import SPLITS, read_meta


def summarize(path) -> dict:
    """Counts, degree statistics, feature layout, split sizes, class balance."""
    path = Path(path)
    meta = read_meta(path)
    indptr = _load_array(path, meta["graph"]["indptr"])
    degree = np.diff(indptr)
    labels = _load_array(path, meta["labels"]["file"])
    n_cls = meta["labels"]["num_classes"]
    counts = np.bincount(labels[(labels >= 0) & (labels < n_cls)], minlength=n_cls)  # --verify reports the rest
    splits = {s: int(_load_array(path, meta["splits"][s]).shape[0]) for s in SPLITS}
    return {
        "name": meta["name"], "num_nodes": meta["num_nodes"], "num_edges": meta["num_edges"],
        "in_degree": {"mean": float(degree.mean()) if degree.size else 0.0,
                      "median": float(np.median(degree)) if degree.size else 0.0,
                      "max": int(degree.max()) if degree.size else 0,
                      "zero": int((degree == 0).sum())},
        "features": meta["features"], "splits": splits,
        "classes": {"num_classes": n_cls, "counts": counts.tolist(),
                    "unlabelled": int((labels < 0).sum())},
        "reordered": bool(meta.get("order")), "source": meta.get("source", {}),
    }


def format_summary(s: dict) -> str:
    """The summary as aligned text lines."""
    f, d, c = s["features"], s["in_degree"], s["classes"]
    total = max(1, sum(c["counts"]))
    balance = ", ".join(f"{i}:{n / total:.1%}" for i, n in enumerate(c["counts"][:20]))
    if len(c["counts"]) > 20:
        balance += f", ... ({len(c['counts'])} classes)"
    lines = [
        f"dataset      {s['name']}  ({s['source'].get('kind', '?')})",
        f"nodes        {s['num_nodes']:,}",
        f"edges        {s['num_edges']:,}",
        f"in-degree    mean {d['mean']:.2f}  median {d['median']:.0f}  max {d['max']:,}  zero {d['zero']:,}",
        f"features     {f['dim']} x {f['dtype']}, row stride {f['row_stride']} B (align {f['align']})",
        "splits       " + "  ".join(f"{k} {v:,}" for k, v in s["splits"].items()),
        f"classes      {c['num_classes']}  unlabelled {c['unlabelled']:,}",
        f"balance      {balance}",
        f"reordered    {'by in-degree (order.npy)' if s['reordered'] else 'no'}",
    ]
    return "\n".join(lines)


def verify(path) -> list[str]:
    """Every checksum and invariant; returns the problems found (empty = ok):
    the checksums, the load-time checks of `load_dataset`, and what only a
    full pass can tell (empty, repeated or overlapping splits; order.npy a
    permutation)."""
    path = Path(path)
    try:
        meta = read_meta(path)
    except DatasetError as e:
        return [str(e)]
    problems = []
    for name, digest in meta.get("checksums", {}).items():
        file = path / name
        if not file.is_file():
            problems.append(f"{file}: missing")
        elif sha256_file(file) != digest:
            problems.append(f"{file}: checksum mismatch")
    try:
        ds = load_dataset(path)
    except DatasetError as e:
        return problems + [str(e)]
    seen = np.zeros(ds.num_nodes, bool)
    for s in SPLITS:
        ids, file = ds.split(s).numpy(), path / meta["splits"][s]
        if ids.size == 0:
            problems.append(f"{file}: empty split")
        elif seen[ids].any() or np.unique(ids).size != ids.size:
            problems.append(f"{file}: overlaps another split or repeats a node")
        else:
            seen[ids] = True
    if ds.order is not None and not np.array_equal(np.sort(ds.order.numpy()), np.arange(ds.num_nodes)):
        problems.append(f"{path / meta['order']}: not a permutation of the node ids")
    return problems
