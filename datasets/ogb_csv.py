"""The files of an OGB directory, read alike by both layouts (datasets/ogb.py,
datasets/ogb_mag.py): a CSV file gzipped or plain, the split folder and its
files, and the checked edge chunks of an edge CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csc import check_edge_ids
from .meta import SPLITS


def csv_file(raw: Path, stem: str, required: bool = True) -> Path | None:
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


def split_folder(root: Path, split: str | None) -> tuple[str, Path]:
    """The split name and its folder root/split/<name> (`split`, else the only one)."""
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
    return split, folder / split


def split_files(folder: Path) -> dict:
    """The train/valid/test files of a split folder (gzipped or plain)."""
    return {s: csv_file(folder, s) for s in SPLITS}


def edge_chunks(
    pairs,
    file: str,
    num_nodes: int,
    inverse: bool,
    expected: int,
    count_file: str,
    rows: bool = False,
    num_src: int | None = None,
):
    """Edge chunks from `pairs()` (an iterator of (src, dst) in file order):
    ids checked against num_nodes (sources against num_src when given: a
    relation between two node types) at their file rows, the inverse of
    every edge added when `inverse`, and the row count checked against
    `expected`. With `rows`, chunks are (src, dst, row): each edge's file
    row, which an inverse edge shares (the row of its edge features)."""

    def chunks():
        row = 0
        for src, dst in pairs():
            src, dst = check_edge_ids(src, dst, num_nodes, file, row, num_src)
            at = np.arange(row, row + src.shape[0]) if rows else None
            row += src.shape[0]
            if inverse:
                src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
                at = np.concatenate([at, at]) if rows else None
            yield (src, dst, at) if rows else (src, dst)
        if row != expected:
            raise DatasetError(count_file, f"says {expected} edges, but {file} holds {row}")

    return chunks
