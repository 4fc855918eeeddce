"""Feature rows written like features.bin: checked, cleaned, encoded and
streamed to disk with their sha256 (both writers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .features_file import encoded_rows, open_rows, row_stride
from .output_file import BackgroundWriter, OutputFile
from .prepare_options import PrepareOptions
from .write_progress import progress_bar


def _feature_rows(src, opts: PrepareOptions, stride: int):
    """The source's feature chunks checked, cleaned and encoded as [rows, stride] uint8."""
    start = 0
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
            if not opts.nan_to_zero:
                r = int(np.flatnonzero(~finite.all(axis=1))[0])
                raise DatasetError(
                    src.feature_file, "NaN or inf in features (use --nan-to-zero to replace them with 0)", row=start + r
                )
            chunk = np.where(finite, chunk, 0)
        if opts.normalize_features == "row":
            chunk = normalize_rows(chunk)
        yield encoded_rows(chunk, opts.dtype, stride)
        start += chunk.shape[0]
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


def write_features(src, path: Path, opts: PrepareOptions, order=None) -> tuple[int, str]:
    """Write the feature rows of `src` (a GraphSource, or anything with its
    num_nodes, feature_dim, feature_chunks and feature_file: a node type's
    NodeFeatures) to `path` like features.bin (rows in `order` when given);
    its row stride and sha256."""
    stride = row_stride(src.feature_dim, opts.dtype, opts.align)
    size = src.num_nodes * stride
    with progress_bar(opts, src.num_nodes, "features", "rows") as bar:
        target = path if order is None else path.with_name("features.unordered.bin")
        digest = _write_rows(target, _counted(_feature_rows(src, opts, stride), bar), size)
    if order is None:
        return stride, digest
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
    return stride, digest


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
