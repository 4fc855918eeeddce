"""Feature rows holding NaN or inf, wherever they are.

`scan_rows(table)` counts the rows of a RowTable (or of encoded row blocks)
whose values include a NaN or an inf, and finds the first, in one parallel
numba pass over the stored bits (all exponent bits set), block by block: a
memory-mapped features.bin streams through the page cache. `prepare` scans
the rows it writes and records the count in meta.json (`nonfinite_rows`,
with the file's size and mtime as `checked`); `info --verify` scans again;
`check_finite_features` is what training and prediction run once: it trusts
meta.json's count while features.bin is the file prepare checked (same size
and mtime), else scans.
"""

from __future__ import annotations

import os

import numba
import numpy as np
import torch

from gnnsys.errors import DatasetError

# the exponent bits of each stored dtype: all set means inf or NaN
EXPONENT = {
    torch.float32: (np.uint32, 0x7F800000),
    torch.float16: (np.uint16, 0x7C00),
    torch.bfloat16: (np.uint16, 0x7F80),
}
BLOCK_BYTES = 1 << 26  # rows scanned per block: a block's flags stay small


@numba.njit(parallel=True, nogil=True, cache=True)
def _flag_rows(words, dim, mask, out):
    for i in numba.prange(words.shape[0]):
        bad = False
        for j in range(dim):
            if words[i, j] & mask == mask:
                bad = True
                break
        out[i] = bad


class RowScan:
    """A running count of non-finite rows over consecutive blocks of rows
    (`add`), and the first of them (a row index, None while there is none)."""

    def __init__(self, dim: int, dtype: torch.dtype):
        self.dim, (self.word, mask) = dim, EXPONENT[dtype]
        self.mask = self.word(mask)
        self.rows = self.count = 0
        self.first: int | None = None

    def add(self, block: np.ndarray) -> np.ndarray:
        """Scan `block` ([rows, stride] uint8, the rows after those added
        before); returns it, so that a stream of blocks can pass through."""
        n = block.shape[0]
        if n and self.dim:
            flags = np.empty(n, np.bool_)
            _flag_rows(np.ascontiguousarray(block).view(self.word), self.dim, self.mask, flags)
            bad = np.flatnonzero(flags)
            if bad.shape[0]:
                self.count += int(bad.shape[0])
                if self.first is None:
                    self.first = self.rows + int(bad[0])
        self.rows += n
        return block


def scan_rows(table) -> RowScan:
    """The RowScan of every row of `table` (a RowTable), block by block."""
    scan = RowScan(table.shape[1], table.dtype)
    rows = table.table
    step = max(1, BLOCK_BYTES // max(rows.shape[1], 1))
    for start in range(0, rows.shape[0], step):
        scan.add(rows[start : start + step])
    return scan


def checked_stamp(path) -> dict:
    """What meta.json records of the file its `nonfinite_rows` count was taken over: {size, mtime_ns}."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def nonfinite_error(file, count: int, first) -> DatasetError | None:
    """The DatasetError naming `file`'s first non-finite row and how many there are (None when `count` is 0)."""
    if not count:
        return None
    what = "the only feature row" if count == 1 else f"the first of {count} feature rows"
    return DatasetError(
        file, f"{what} holding NaN or inf; prepare the dataset again with --nan-to-zero (or fix the values)", row=first
    )


def nonfinite_problem(table, file) -> str | None:
    """`info --verify`'s line for the rows of `table` (the file's) that hold NaN or inf, from a scan; None if none."""
    scan = scan_rows(table)
    error = nonfinite_error(file, scan.count, scan.first)
    return None if error is None else str(error)


def check_finite_features(dataset) -> None:
    """DatasetError naming the first row (and how many) of `dataset`'s
    features (every node type's, for a HeteroDataset) holding NaN or inf:
    from meta.json's `nonfinite_rows` while the file is the one it was
    counted over (same size and mtime), else one streaming scan; the verdict
    is kept on the table (one check per run)."""
    if isinstance(dataset.features, dict):  # a HeteroDataset
        from .hetero_meta import array_files

        files = array_files(dataset.meta, dataset.path)
        types = (dataset.meta or {}).get("node_types", {})
        for t, table in dataset.features.items():
            section = (types.get(t) or {}).get("features")
            _check_table(table, files.get(f"{t}.features", f"HeteroDataset.features[{t!r}]"), section, dataset.path)
        return
    from .invariants import files_of

    file = files_of(dataset.meta, dataset.path)["features"]
    _check_table(dataset.features, file, (dataset.meta or {}).get("features"), dataset.path)


def _check_table(table, file, section, path) -> None:
    verdict = getattr(table, "nonfinite", None)
    if verdict is None:
        verdict = _recorded(table, section, path)
        if verdict is None:
            scan = scan_rows(table)
            verdict = (scan.count, scan.first)
        table.nonfinite = verdict
    error = nonfinite_error(file, *verdict)
    if error is not None:
        raise error


def _recorded(table, section, path):
    """(count, first) from meta.json's `section` when its `checked` stamp is the file's now; else None."""
    if path is None or not section or "nonfinite_rows" not in section or not table.mapped:
        return None
    try:
        if checked_stamp(path / section["file"]) != section.get("checked"):
            return None
    except OSError:
        return None
    return section["nonfinite_rows"], section.get("first_nonfinite_row")
