"""Node-id arrays, read and checked in one place: `read_node_ids` reads a
file of ids (.npy, or text with one id a line) and `node_ids` checks an
array of them (1-D integers of any width and byte order, in range, reported
with their true values) and returns them as native int64. Every reader of
node ids given by a user (predict's --nodes, prepare's split index files)
goes through them, so a bad file ends in one DatasetError naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csv_reader import read_csv
from .npy import NpyArray

_KINDS = {
    "b": "booleans",
    "f": "floats",
    "c": "complex numbers",
    "U": "strings",
    "S": "bytes",
    "V": "records",
    "M": "datetimes",
    "m": "time deltas",
    "O": "Python objects",
}


def read_node_ids(path) -> np.ndarray:
    """The node ids in file `path`: a .npy array, else text of one integer a
    line; checked by `node_ids` (without a range); DatasetError naming the file."""
    path = Path(path)
    if path.suffix != ".npy":
        return node_ids(read_csv(path), path)
    array = NpyArray(path)
    _check_layout(array.dtype, len(array.shape), path)  # before reading: numpy cannot read some dtypes into a buffer
    return node_ids(array.read(), path)


def node_ids(values, label, num_nodes: int | None = None) -> np.ndarray:
    """`values` (an array, list or tensor of node ids) as a native int64
    numpy array; DatasetError naming `label` unless it is 1-D, of an integer
    dtype, and every id is in [0, num_nodes) (only >= 0 and within int64
    without `num_nodes`); the first bad id is reported with its true value."""
    if hasattr(values, "numpy") and hasattr(values, "device"):  # a torch tensor
        values = values.detach().cpu().numpy()
    try:
        ids = np.asarray(values)
    except (ValueError, TypeError) as e:
        raise DatasetError(label, f"is not an array of node ids ({e})") from None
    if ids.shape == (0,):
        return np.empty(0, np.int64)  # no ids, of whatever dtype (np.asarray([]) is float64): callers judge
    _check_layout(ids.dtype, ids.ndim, label)
    high = np.iinfo(np.int64).max if num_nodes is None else num_nodes - 1
    if int(ids.min()) < 0 or int(ids.max()) > high:
        row = int(np.flatnonzero((ids < 0) | (ids > high))[0])
        where = f"[0, {num_nodes})" if num_nodes is not None else "[0, 2^63)"
        raise DatasetError(label, f"node id {int(ids[row])} out of range {where}", row=row)
    return ids.astype(np.int64)


def _check_layout(dtype: np.dtype, ndim: int, label) -> None:
    """DatasetError naming `label` unless an array of `dtype` and `ndim` dimensions is 1-D integers."""
    if dtype.kind not in "iu":
        raise DatasetError(label, f"node ids must be integers, got {_KINDS.get(dtype.kind, 'values')} ({dtype})")
    if ndim != 1:
        raise DatasetError(label, f"must be a 1-D array of node ids, got {ndim}-D {dtype}")
