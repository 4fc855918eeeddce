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
    counts = np.bincount(labels[labels >= 0], minlength=n_cls)
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
        "classes": {"num_classes": n_cls, "counts": counts.tolist(), "unlabelled": int((labels < 0).sum())},
        "reordered": bool(meta.get("order")),
        "source": meta.get("source", {}),
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


def _data_files(meta: dict) -> set:
    """The names of every file meta.json describes (checksummed when prepared)."""
    names = {
        meta["graph"]["indptr"],
        meta["graph"]["indices"],
        meta["features"]["file"],
        meta["labels"]["file"],
        *meta["splits"].values(),
    }
    return names | ({meta["order"]} if meta.get("order") else set())


def _padding_problem(path: Path, meta: dict) -> str | None:
    """What is wrong when a feature row has a non-zero byte after its dim x
    itemsize bytes (the writer pads with zeros, so meta.json's dtype or dim
    does not describe the rows), else None. Reads the file in 64 MiB blocks."""
    f = meta["features"]
    body = f["dim"] * DTYPES[f["dtype"]].itemsize
    rows = open_rows(path / f["file"], meta["num_nodes"], f["row_stride"])
    step = max(1, (64 << 20) // max(f["row_stride"], 1))
    for lo in range(0, meta["num_nodes"], step):
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
    padding = _padding_problem(path, meta)
    if padding:
        problems.append(padding)
    if ds.order is not None and not np.array_equal(np.sort(ds.order.numpy()), np.arange(ds.num_nodes)):
        problems.append(f"{path / meta['order']}: not a permutation of the node ids")
    return problems
