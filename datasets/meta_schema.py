"""The pieces both kinds of meta.json are checked with: the format's
constants, field tests, the schema of a table of rows, and the checks that
walk a schema (datasets/meta.py: homogeneous; datasets/hetero_meta.py:
heterogeneous)."""

from __future__ import annotations

import hashlib
import json

from gnnsys.atomic import DATASET_FORMAT
from gnnsys.errors import DatasetError

from .features_file import DTYPES, strides_written

FORMAT = DATASET_FORMAT
VERSION = 1
SPLITS = ("train", "valid", "test")
HOMOGENEOUS, HETERO = "homogeneous", "hetero"  # meta.json's "kind"; a file without one is homogeneous


def is_count(v) -> bool:
    """Whether `v` is a JSON integer >= 0."""
    return type(v) is int and v >= 0


def is_file_name(v) -> bool:
    """Whether `v` names a file inside the dataset directory (no path separators)."""
    return isinstance(v, str) and v not in ("", ".", "..") and "/" not in v and "\\" not in v


FILE_FIELD = ("a file name inside the dataset directory", is_file_name)  # (what it must be, test)

# The fields of a table of rows laid out like features.bin (a node type's
# features in a heterogeneous dataset), and of edge_features, checked when it
# is present: such rows in CSC order.
ROWS_SCHEMA = (
    ("file", *FILE_FIELD),
    ("dtype", f"one of {', '.join(DTYPES)}", lambda v: isinstance(v, str) and v in DTYPES),
    ("dim", "a positive integer", lambda v: is_count(v) and v > 0),
    ("align", "a positive power of two", lambda v: is_count(v) and v > 0 and v & (v - 1) == 0),
    ("row_stride", "a non-negative integer", is_count),
    *(
        # the finite-rows check prepare ran (datasets/finite_rows.py); absent in datasets prepared before it
        ("nonfinite_rows?", "a non-negative integer", is_count),
        ("first_nonfinite_row?", "null or a non-negative integer", lambda v: v is None or is_count(v)),
        (
            "checked?",
            "an object {size, mtime_ns} of non-negative integers",
            lambda v: isinstance(v, dict) and all(is_count(v.get(k)) for k in ("size", "mtime_ns")),
        ),
    ),
)


def identity(meta: dict) -> str | None:
    """The identity of a prepared dataset's data: a hash of the sha256 of
    every file meta.json lists in "checksums" (the same data prepared again,
    moved or copied keeps it; any other data has another); None without
    checksums (a Dataset made in memory)."""
    checksums = meta.get("checksums") if isinstance(meta, dict) else None
    if not checksums:
        return None
    return hashlib.sha256(json.dumps(checksums, sort_keys=True).encode()).hexdigest()[:16]


def check_rows(f: dict, section: str, file):
    """DatasetError unless the row stride of `section` (features,
    edge_features, a node type's features) is one the writer gives rows of
    its dim and dtype."""
    body = f["dim"] * DTYPES[f["dtype"]].itemsize
    if f["row_stride"] < body:
        raise DatasetError(
            file,
            f"field '{section}.row_stride' is {f['row_stride']} bytes, less than the "
            f"{body} bytes of {f['dim']} x {f['dtype']}",
        )
    strides = strides_written(f["dim"], f["dtype"], f["align"])
    if f["row_stride"] not in strides:
        raise DatasetError(
            file,
            f"field '{section}.row_stride' is {f['row_stride']} bytes, but rows of {f['dim']} x "
            f"{f['dtype']} ({body} bytes) aligned to {f['align']} take "
            f"{' or '.join(map(str, strides))}: the dtype, dim, align or row_stride is wrong",
        )
