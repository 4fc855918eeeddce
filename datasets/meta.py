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
from gnnsys.json_fields import check_fields, short_json

from .features_file import DTYPES
from .hetero_meta import check_hetero_meta
from .input_paths import NO_SUCH_PATH, is_missing
from .meta_schema import (
    FILE_FIELD,
    FORMAT,
    HETERO,
    HOMOGENEOUS,
    ROWS_SCHEMA,
    SPLITS,
    VERSION,
    check_rows,
    is_count,
    is_file_name,
)

TASKS = ("multiclass", "multilabel")

_OBJECT = ("an object", lambda v: isinstance(v, dict))

# (field, what it must be, test); an object comes before its fields, and a
# field whose name ends in "?" may be missing.
SCHEMA = (
    ("version", f"{VERSION}", lambda v: type(v) is int and v == VERSION),
    ("kind?", f"{HOMOGENEOUS!r}", lambda v: v == HOMOGENEOUS),
    ("name", "a string", lambda v: isinstance(v, str)),
    ("num_nodes", "a non-negative integer", is_count),
    ("num_edges", "a non-negative integer", is_count),
    ("graph", *_OBJECT),
    ("graph.layout", "'csc'", lambda v: v == "csc"),
    ("graph.indptr", *FILE_FIELD),
    ("graph.indices", *FILE_FIELD),
    ("features", *_OBJECT),
    ("features.file", *FILE_FIELD),
    ("features.dtype", f"one of {', '.join(DTYPES)}", lambda v: isinstance(v, str) and v in DTYPES),
    ("features.dim", "a non-negative integer", is_count),
    ("features.align", "a positive power of two", lambda v: is_count(v) and v > 0 and v & (v - 1) == 0),
    ("features.row_stride", "a non-negative integer", is_count),
    *((f"features.{key}", *rest) for key, *rest in ROWS_SCHEMA if key.endswith("?")),
    ("labels", *_OBJECT),
    ("labels.file", *FILE_FIELD),
    ("labels.num_classes", "a non-negative integer", is_count),
    ("labels.task?", f"one of {', '.join(TASKS)}", lambda v: v in TASKS),
    ("splits", *_OBJECT),
    *((f"splits.{s}", *FILE_FIELD) for s in SPLITS),
    ("order?", "null or a file name inside the dataset directory", lambda v: v is None or is_file_name(v)),
    (
        "checksums?",
        "an object mapping file names to sha256 hex digests",
        lambda v: isinstance(v, dict) and all(is_file_name(k) and isinstance(d, str) for k, d in v.items()),
    ),
    ("source?", *_OBJECT),
    ("edge_features?", *_OBJECT),
)

EDGE_FEATURES_SCHEMA = (*ROWS_SCHEMA, ("order", "'csc'", lambda v: v == "csc"))


def check_meta(meta, file) -> dict:
    """`meta` itself if it follows SCHEMA; else DatasetError(file) naming the first bad field."""
    if not isinstance(meta, dict):
        raise DatasetError(file, f"must hold a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise DatasetError(file, f"format is {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("kind") == HETERO:
        raise DatasetError(
            file, "describes a heterogeneous dataset (kind 'hetero'); this reader takes a homogeneous one"
        )
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
            raise DatasetError(file, f"field {field!r} must be {what}, got {short_json(holder[key])}")
    check_rows(meta["features"], "features", file)
    if "edge_features" in meta:
        check_fields(meta["edge_features"], EDGE_FEATURES_SCHEMA, "edge_features", file)
        check_rows(meta["edge_features"], "edge_features", file)
    labels = meta["labels"]
    if labels.get("task", "multiclass") == "multilabel":
        if not (is_count(labels.get("num_tasks")) and labels["num_tasks"] > 0):
            raise DatasetError(
                file, f"field 'labels.num_tasks' must be a positive integer, got {short_json(labels.get('num_tasks'))}"
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


def read_meta(path) -> dict:
    """meta.json of the prepared (homogeneous) dataset at `path`, checked
    against SCHEMA; DatasetError if it is missing, not JSON, not ours or
    breaks the schema."""
    path = Path(path)
    return check_meta(load_meta_json(path), path / "meta.json")


def read_any_meta(path) -> dict:
    """meta.json of the prepared dataset at `path`, of either kind, checked
    against its kind's schema (a heterogeneous one: datasets/hetero_meta.py)."""
    path = Path(path)
    meta = load_meta_json(path)
    if isinstance(meta, dict) and meta.get("format") == FORMAT and meta.get("kind") == HETERO:
        return check_hetero_meta(meta, path / "meta.json")
    return check_meta(meta, path / "meta.json")


def load_meta_json(path):
    """The parsed, unchecked meta.json of the dataset at `path`; DatasetError
    if it is missing or not JSON."""
    path = Path(path)
    meta_file = path / "meta.json"
    try:
        regular_file_size(meta_file)
    except PathError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            if is_missing(path):
                raise DatasetError(path, NO_SUCH_PATH) from None
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
    return meta


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
