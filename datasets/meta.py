"""meta.json of a prepared dataset, read and checked against one schema.

`SCHEMA` lists every field a reader relies on, with what it must be; a file
that breaks it gets one DatasetError naming meta.json and the field, before
any other file is opened (docs/architecture.md, "On-disk dataset format").
"""
from __future__ import annotations

import json
from pathlib import Path

from gnnsys.errors import DatasetError

from .features_file import DTYPES

FORMAT = "gnnsys-dataset"
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
    ("features.dtype", f"one of {', '.join(DTYPES)}", lambda v: v in DTYPES),
    ("features.dim", "a non-negative integer", _count),
    ("features.align", "a positive power of two", lambda v: _count(v) and v > 0 and v & (v - 1) == 0),
    ("features.row_stride", "a non-negative integer", _count),
    ("labels", *_OBJECT),
    ("labels.file", *_FILE),
    ("labels.num_classes", "a non-negative integer", _count),
    ("splits", *_OBJECT),
    *((f"splits.{s}", *_FILE) for s in SPLITS),
    ("order?", "null or a file name inside the dataset directory", lambda v: v is None or _file_name(v)),
    ("checksums?", "an object mapping file names to sha256 hex digests",
     lambda v: isinstance(v, dict) and all(_file_name(k) and isinstance(d, str) for k, d in v.items())),
    ("source?", *_OBJECT),
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
    f = meta["features"]
    body = f["dim"] * DTYPES[f["dtype"]].itemsize
    if f["row_stride"] < body:
        raise DatasetError(file, f"field 'features.row_stride' is {f['row_stride']} bytes, less than the "
                           f"{body} bytes of {f['dim']} x {f['dtype']}")
    if meta["labels"]["num_classes"] > max(meta["num_nodes"], 1):
        raise DatasetError(file, f"field 'labels.num_classes' is {meta['labels']['num_classes']}, more than "
                           f"the {meta['num_nodes']} nodes")
    return meta


def read_meta(path) -> dict:
    """meta.json of the prepared dataset at `path`, checked against SCHEMA;
    DatasetError if it is missing, not JSON, not ours or breaks the schema."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise DatasetError(path, "not a prepared gnnsys dataset (no meta.json)")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as e:
        raise DatasetError(meta_file, f"not valid JSON ({e.msg})", row=e.lineno)
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(meta_file, f"cannot read ({e})")
    return check_meta(meta, meta_file)


def is_dataset_dir(path) -> bool:
    """Whether `path` holds a meta.json that names itself a gnnsys dataset
    (whatever else it holds: a damaged dataset is still one)."""
    try:
        meta = json.loads((Path(path) / "meta.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT
