"""meta.json of a prepared dataset, read and checked against one schema.

`SCHEMA` lists every field a reader relies on, with what it must be; a file
that breaks it gets one DatasetError naming meta.json and the field, before
any other file is opened (docs/architecture.md, "On-disk dataset format").
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from gnnsys.errors import DatasetError, PathError

from .features_file import DTYPES, strides_written

FORMAT = "gnnsys-dataset"
TASKS = ("multiclass", "multilabel")
VERSION = 1
SPLITS = ("train", "valid", "test")


def _count(v) -> bool:
    return type(v) is int and v >= 0


def _file_name(v) -> bool:
    return isinstance(v, str) and v not in ("", ".", "..") and "/" not in v and "\\" not in v


_FILE = ("a file name inside the dataset directory", _file_name)
_OBJECT = ("an object", lambda v: isinstance(v, dict))

# (field, what it must be, test); an object comes before its fields, and a
# field whose name ends in "?" may be missing.
SCHEMA = (
    ("version", f"{VERSION}", lambda v: type(v) is int and v == VERSION),
    ("name", "a string", lambda v: isinstance(v, str)),
    ("num_nodes", "a non-negative integer", _count),
    ("num_edges", "a non-negative integer", _count),
    ("graph", *_OBJECT),
    ("graph.layout", "'csc'", lambda v: v == "csc"),
    ("graph.indptr", *_FILE),
    ("graph.indices", *_FILE),
    ("features", *_OBJECT),
    ("features.file", *_FILE),
    ("features.dtype", f"one of {', '.join(DTYPES)}", lambda v: isinstance(v, str) and v in DTYPES),
    ("features.dim", "a non-negative integer", _count),
    ("features.align", "a positive power of two", lambda v: _count(v) and v > 0 and v & (v - 1) == 0),
    ("features.row_stride", "a non-negative integer", _count),
    ("labels", *_OBJECT),
    ("labels.file", *_FILE),
    ("labels.num_classes", "a non-negative integer", _count),
    ("labels.task?", f"one of {', '.join(TASKS)}", lambda v: v in TASKS),
    ("splits", *_OBJECT),
    *((f"splits.{s}", *_FILE) for s in SPLITS),
    ("order?", "null or a file name inside the dataset directory", lambda v: v is None or _file_name(v)),
    (
        "checksums?",
        "an object mapping file names to sha256 hex digests",
        lambda v: isinstance(v, dict) and all(_file_name(k) and isinstance(d, str) for k, d in v.items()),
    ),
    ("source?", *_OBJECT),
    ("edge_features?", *_OBJECT),
)

# The fields of edge_features, checked when it is present: rows in CSC order,
# laid out like features.bin.
EDGE_FEATURES_SCHEMA = (
    ("file", *_FILE),
    ("dtype", f"one of {', '.join(DTYPES)}", lambda v: isinstance(v, str) and v in DTYPES),
    ("dim", "a positive integer", lambda v: _count(v) and v > 0),
    ("align", "a positive power of two", lambda v: _count(v) and v > 0 and v & (v - 1) == 0),
    ("row_stride", "a non-negative integer", _count),
    ("order", "'csc'", lambda v: v == "csc"),
)


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_meta(meta, file) -> dict:
    """`meta` itself if it follows SCHEMA; else DatasetError(file) naming the first bad field."""
    if not isinstance(meta, dict):
        raise DatasetError(file, f"must hold a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise DatasetError(file, f"format is {meta.get('format')!r}, expected {FORMAT!r}")
    for field, what, ok in SCHEMA:
        optional = field.endswith("?")
        field = field.rstrip("?")
        *parents, key = field.split(".")
        holder = meta
        for p in parents:
            holder = holder[p]
        if key not in holder:
            if optional:
                continue
            raise DatasetError(file, f"field {field!r} is missing")
        if not ok(holder[key]):
            raise DatasetError(file, f"field {field!r} must be {what}, got {_short(holder[key])}")
    _check_rows(meta["features"], "features", file)
    if "edge_features" in meta:
        _check_edge_features(meta["edge_features"], file)
    labels = meta["labels"]
    if labels.get("task", "multiclass") == "multilabel":
        if not (_count(labels.get("num_tasks")) and labels["num_tasks"] > 0):
            raise DatasetError(
                file, f"field 'labels.num_tasks' must be a positive integer, got {_short(labels.get('num_tasks'))}"
            )
        if labels["num_classes"] != labels["num_tasks"]:
            raise DatasetError(
                file,
                f"field 'labels.num_classes' is {labels['num_classes']}, but a multilabel dataset has one output "
                f"per task: it must equal 'labels.num_tasks' ({labels['num_tasks']})",
            )
        return meta
    if meta["labels"]["num_classes"] > max(meta["num_nodes"], 1):
        raise DatasetError(
            file,
            f"field 'labels.num_classes' is {meta['labels']['num_classes']}, more than the {meta['num_nodes']} nodes",
        )
    return meta


def _check_rows(f: dict, section: str, file):
    """DatasetError unless the row stride of `section` (features or
    edge_features) is one the writer gives rows of its dim and dtype."""
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


def _check_edge_features(section: dict, file):
    """DatasetError naming the first field of edge_features that breaks EDGE_FEATURES_SCHEMA."""
    for key, what, ok in EDGE_FEATURES_SCHEMA:
        if key not in section:
            raise DatasetError(file, f"field 'edge_features.{key}' is missing")
        if not ok(section[key]):
            raise DatasetError(file, f"field 'edge_features.{key}' must be {what}, got {_short(section[key])}")
    _check_rows(section, "edge_features", file)


def read_meta(path) -> dict:
    """meta.json of the prepared dataset at `path`, checked against SCHEMA;
    DatasetError if it is missing, not JSON, not ours or breaks the schema."""
    path = Path(path)
    meta_file = path / "meta.json"
    try:
        regular_file_size(meta_file)
    except PathError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise DatasetError(path, "not a prepared gnnsys dataset (no meta.json)") from None
        raise
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as e:
        raise DatasetError(meta_file, f"not valid JSON ({e.msg})", row=e.lineno) from None
    except RecursionError:
        raise DatasetError(meta_file, "nested too deeply to be a dataset's meta.json") from None
    except OSError as e:
        raise PathError(meta_file, e, "read") from None
    except UnicodeDecodeError as e:
        raise DatasetError(meta_file, f"cannot read ({e})") from None
    return check_meta(meta, meta_file)


_KINDS = (
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "device"),
    (stat.S_ISBLK, "device"),
)


def regular_file_size(file) -> int:
    """The size of `file` (symlinks followed); DatasetError when it is a
    directory, FIFO, socket or device (which a read could block on or
    misread), PathError when it cannot be examined (missing, no
    permission, a symlink loop)."""
    try:
        st = os.stat(file)
    except OSError as e:
        raise PathError(file, e, "read") from None
    kind = next((name for test, name in _KINDS if test(st.st_mode)), None)
    if kind is not None:
        raise DatasetError(file, f"is a {kind}, not a regular file")
    return st.st_size


def is_dataset_dir(path) -> bool:
    """Whether `path` holds a meta.json that names itself a gnnsys dataset
    (whatever else it holds: a damaged dataset is still one)."""
    file = Path(path) / "meta.json"
    try:
        meta = json.loads(file.read_text()) if file.is_file() else None  # never read a FIFO
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT
