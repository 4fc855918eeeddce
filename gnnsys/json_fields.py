"""Checks of a parsed JSON object's fields against a schema, for the files
gnnsys reads (meta.json, the machine caches) (a leaf)."""

from __future__ import annotations

import json

from gnnsys.errors import DatasetError


def short_json(value) -> str:
    """`value` as JSON, cut to 40 characters (for messages)."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_fields(section, schema, prefix: str, file):
    """DatasetError naming the first field of the object `section` (called
    `prefix` in messages; "" for a file's top level) that is missing or breaks
    `schema` ((key, what it must be, test) triples; a key ending in "?" may be missing)."""
    if not isinstance(section, dict):
        where = f"field {prefix!r}" if prefix else "the whole file"
        raise DatasetError(file, f"{where} must be an object, got {short_json(section)}")
    for key, what, ok in schema:
        optional, key = key.endswith("?"), key.rstrip("?")
        name = f"{prefix}.{key}" if prefix else key
        if key not in section:
            if optional:
                continue
            raise DatasetError(file, f"field {name!r} is missing")
        if not ok(section[key]):
            raise DatasetError(file, f"field {name!r} must be {what}, got {short_json(section[key])}")
