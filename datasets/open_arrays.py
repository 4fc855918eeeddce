"""The arrays of a prepared dataset directory, opened and checked: its
integer .npy arrays and its tables of rows (features.bin's layout), for both
kinds of dataset (datasets/dataset.py, datasets/hetero_load.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError, PathError, naming
from gnnsys.storage.table import RowTable

from .features_file import DTYPES, open_rows
from .meta import regular_file_size


def load_int_array(path: Path, name: str, mmap: bool = False, record=None) -> np.ndarray:
    """The signed-integer .npy array `name` of the dataset at `path`, in
    native byte order; DatasetError if it cannot be read or holds anything
    else. With `mmap` it is memory-mapped copy-on-write: pages are read from
    the file on first use and stay in the page cache, not in the process's
    anonymous memory. `record` (a file_identity.LoadRecord) records the file's identity."""
    regular_file_size(path / name)
    if record is not None:
        record.before(name)
    try:
        arr = np.load(path / name, mmap_mode="c" if mmap else None)
    except OSError as e:
        raise PathError(path / name, e, "read") from None
    except (ValueError, EOFError) as e:
        raise DatasetError(path / name, f"cannot read ({e})") from None
    if not isinstance(arr, np.ndarray):
        arr.close()
        raise DatasetError(path / name, "expected a .npy array, got an npz archive")
    if arr.dtype.kind != "i":
        raise DatasetError(path / name, f"expected a .npy array of signed integers, got {arr.dtype}")
    return arr.astype(arr.dtype.newbyteorder("="), copy=False)


def open_row_table(path, f: dict, count: int, record=None) -> RowTable:
    """The memory-mapped table of `count` rows that meta.json's section `f`
    (file, dim, dtype, row_stride) describes, in the dataset at `path`; with
    `record` (a file_identity.LoadRecord) the table's `file` and `identity`
    are the file's, for readers that open it again."""
    file = Path(path) / f["file"]
    size = regular_file_size(file)
    if record is not None:
        record.before(f["file"])
    if size != count * f["row_stride"]:
        raise DatasetError(file, f"size {size} bytes, expected {count} rows x {f['row_stride']}")
    if count == 0:
        return RowTable(np.zeros((0, f["row_stride"]), np.uint8), f["dim"], DTYPES[f["dtype"]])
    with naming(file, "read"):
        rows = open_rows(file, count, f["row_stride"])
    table = RowTable(rows, f["dim"], DTYPES[f["dtype"]])
    if record is not None:
        table.file, table.identity = file, record.files[f["file"]]
    return table
