"""What `gnnsys info --verify` checks in the files of either kind of prepared
dataset: meta.json's checksums, and the zero padding after each row of a
table of rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.atomic import sha256_file
from gnnsys.errors import DatasetError

from .features_file import DTYPES, open_rows


def padding_problem(path: Path, f: dict, count: int) -> str | None:
    """What is wrong when one of the `count` rows of the table meta.json's
    section `f` describes (features, edge_features, a node type's features)
    has a non-zero byte after its dim x itemsize bytes (the writer pads with
    zeros, so meta.json's dtype or dim does not describe the rows), else
    None. Reads the file in 64 MiB blocks."""
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


def checksum_problems(path: Path, meta: dict, files: set) -> list[str]:
    """The files of `files` (every file meta.json names) without a checksum,
    missing, or whose sha256 differs from meta.json's; only that, when
    meta.json has no checksums."""
    checksums = meta.get("checksums")
    if checksums is None:
        return [f"{path / 'meta.json'}: has no checksums to verify"]
    problems = [f"{path / name}: has no checksum in meta.json" for name in sorted(files - set(checksums))]
    for name, digest in checksums.items():
        file = path / name
        if not file.is_file():
            problems.append(f"{file}: missing")
        elif sha256_file(file) != digest:
            problems.append(f"{file}: checksum mismatch")
    return problems


def loaded_problems(path: Path, meta: dict, files) -> tuple[list[str], object]:
    """(problems, dataset) of a full check's first part: the checksums of
    `files`, then, where meta.json has checksums, the load-time checks of
    `load_dataset` and empty splits; dataset is None when it did not load."""
    from .dataset import load_dataset
    from .meta_schema import SPLITS

    problems = checksum_problems(path, meta, files)
    if "checksums" not in meta:
        return problems, None
    try:
        ds = load_dataset(path)
    except DatasetError as e:
        return problems + [str(e)], None
    problems += [f"{path / meta['splits'][s]}: empty split" for s in SPLITS if ds.split(s).numel() == 0]
    return problems, ds
