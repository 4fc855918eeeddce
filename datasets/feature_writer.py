"""Feature rows written like features.bin: checked, cleaned, encoded and
streamed to disk with their sha256 (both writers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .features_file import DTYPES, encoded_rows, open_rows, row_stride
from .finite_rows import RowScan, checked_stamp
from .output_file import BackgroundWriter, OutputFile
from .prepare_options import PrepareOptions
from .write_progress import progress_bar


def _feature_rows(src, opts: PrepareOptions, stride: int):
    """The source's feature chunks checked, cleaned and encoded as [rows, stride] uint8."""
    start, bad_rows, first_bad = 0, 0, None
    for chunk in src.feature_chunks():
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[1] != src.feature_dim:
            raise DatasetError(
                src.feature_file, f"expected {src.feature_dim} feature columns, got shape {chunk.shape}", row=start
            )
        if start + chunk.shape[0] > src.num_nodes:
            raise DatasetError(src.feature_file, f"more feature rows than the {src.num_nodes} nodes")
        finite = np.isfinite(chunk)
        if not finite.all():
            if not opts.nan_to_zero:  # counted to the end, then refused: the message says how many
                bad = np.flatnonzero(~finite.all(axis=1))
                first_bad = start + int(bad[0]) if first_bad is None else first_bad
                bad_rows += bad.shape[0]
            chunk = np.where(finite, chunk, 0)
        if bad_rows:
            start += chunk.shape[0]
            continue
        if opts.normalize_features == "row":
            chunk = normalize_rows(chunk)
        yield encoded_rows(chunk, opts.dtype, stride)
        start += chunk.shape[0]
    if bad_rows:
        raise DatasetError(
            src.feature_file,
            f"NaN or inf in features ({bad_rows} row{'s' if bad_rows > 1 else ''} in all; use --nan-to-zero to "
            "replace them with 0)",
            row=first_bad,
        )
    if start != src.num_nodes:
        raise DatasetError(src.feature_file, f"{start} feature rows for {src.num_nodes} nodes")


def _write_rows(path: Path, blocks, size: int) -> str:
    """Write `blocks` (arrays of rows) to `path` on a writer thread, `size`
    bytes reserved first; the file's sha256."""
    out = BackgroundWriter(OutputFile(path, size))
    try:
        for block in blocks:
            out.write(block)
    except BaseException:
        out.abandon()
        raise
    return out.close()


def write_features(src, path: Path, opts: PrepareOptions, order=None) -> tuple[int, str, dict]:
    """Write the feature rows of `src` (a GraphSource, or anything with its
    num_nodes, feature_dim, feature_chunks and feature_file: a node type's
    NodeFeatures) to `path` like features.bin (rows in `order` when given);
    its row stride, sha256, and the fields meta.json records of the check
    that no stored row is NaN or inf (a value beyond a 16-bit dtype's range
    would be stored as inf: DatasetError naming the first such row)."""
    stride = row_stride(src.feature_dim, opts.dtype, opts.align)
    size = src.num_nodes * stride
    scan = RowScan(src.feature_dim, DTYPES[opts.dtype])
    with progress_bar(opts, src.num_nodes, "features", "rows") as bar:
        target = path if order is None else path.with_name("features.unordered.bin")
        blocks = (scan.add(r) for r in _feature_rows(src, opts, stride))
        digest = _write_rows(target, _counted(blocks, bar), size)
    if scan.count:
        raise DatasetError(
            src.feature_file,
            f"values beyond {opts.dtype}'s range in {scan.count} feature rows, stored as inf; prepare with "
            "--dtype float32",
            row=scan.first,
        )
    if order is None:
        return stride, digest, _checked(path)
    step = max(1, (1 << 26) // stride)

    def permuted():
        rows = open_rows(target, src.num_nodes, stride)
        for v in range(0, src.num_nodes, step):
            wanted = order[v : v + step]
            by_position = np.argsort(wanted)
            block = np.empty((wanted.shape[0], stride), np.uint8)
            block[by_position] = rows[wanted[by_position]]
            yield block
            bar.update(wanted.shape[0])

    with progress_bar(opts, src.num_nodes, "reorder features", "rows") as bar:
        digest = _write_rows(path, permuted(), size)
    target.unlink()
    return stride, digest, _checked(path)


def _checked(path: Path) -> dict:
    """meta.json's record of the finite-rows check of the rows file at `path`: none is NaN or inf."""
    return {"nonfinite_rows": 0, "checked": checked_stamp(path)}


def _counted(chunks, bar):
    """`chunks` (arrays of rows), each counted on `bar` as it passes."""
    for rows in chunks:
        bar.update(len(rows))
        yield rows


def normalize_rows(chunk: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (`--normalize-features row`, the row
    normalisation of Kipf and Welling's GCN); rows summing to 0 stay as they are."""
    x = chunk.astype(np.float64 if chunk.dtype == np.float64 else np.float32)
    sums = x.sum(axis=1, keepdims=True)
    return np.divide(x, sums, out=x, where=sums != 0)
