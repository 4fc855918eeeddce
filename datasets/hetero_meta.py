"""meta.json of a prepared heterogeneous dataset (kind "hetero"), its file
names and its schema.

One directory, written like a homogeneous one (a temporary sibling renamed
into place, sha256 of every file in "checksums"). Its meta.json:

```
format: "gnnsys-dataset", version: 1, kind: "hetero", name
node_types: {type: {num_nodes,
                    features: null | {file: "<type>.features.bin", dtype, dim, row_stride, align},
                    node_year?: "<type>.node_year.npy"}}
relations: [{src, rel, dst, num_edges,
             indptr: "<src>__<rel>__<dst>.indptr.npy", indices: "<src>__<rel>__<dst>.indices.npy",
             reverse_of: null | [src, rel, dst]  (an added reverse of that relation),
             undirected: bool  (a relation within one type, stored with the reverse of every edge),
             deduplicated: bool}]
target: the labelled node type
labels: {file: "labels.npy", num_classes, original_labels?}   (target ids, -1 = no label)
splits: {train: "train_idx.npy", valid: "valid_idx.npy", test: "test_idx.npy"}  (target ids)
reverse_relations: {added: bool, names: "ogb" | "pyg" | null}
checksums: {file name: sha256}
source: how it was produced
```

Each relation is a CSC over its destination type: the sources (ids of the
source type) of destination v's edges are indices[indptr[v]:indptr[v + 1]];
indptr is int64, indices int32 while the source type has fewer than 2**31
nodes. A node type's features are laid out like features.bin (aligned rows,
zero padding); a type without features has null (a model gives it learnable
embeddings). node_year (int64, one per node) is kept when the input has it.
"""

from __future__ import annotations

import re

from gnnsys.errors import DatasetError
from gnnsys.json_fields import check_fields, short_json

from .meta_schema import (
    FILE_FIELD,
    FORMAT,
    HETERO,
    ROWS_SCHEMA,
    SPLITS,
    VERSION,
    check_rows,
    is_count,
    is_file_name,
)
from .relations import relation_name

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
REVERSE_NAMES = ("ogb", "pyg")


def check_name(name, what: str, file, row=None) -> str:
    """`name` (a node type or relation name) if it can name files: letters,
    digits, '_', '.', '-', not starting with a punctuation mark and without
    '__' (the separator of relation file names); DatasetError(file) otherwise."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or "__" in name:
        raise DatasetError(
            file,
            f"{what} {short_json(name)} is not a usable name (letters, digits, '_', '.', '-', starting with a letter "
            "or digit, no '__')",
            row=row,
        )
    return name


def relation_files(relation) -> tuple[str, str]:
    """The indptr and indices file names of `relation` (src, rel, dst)."""
    stem = relation_name(relation)
    return f"{stem}.indptr.npy", f"{stem}.indices.npy"


def features_file(node_type: str) -> str:
    """The features file name of `node_type`."""
    return f"{node_type}.features.bin"


def node_year_file(node_type: str) -> str:
    """The node_year file name of `node_type`."""
    return f"{node_type}.node_year.npy"


_BOOL = ("true or false", lambda v: isinstance(v, bool))
_TRIPLE = (
    "null or [source type, relation, destination type]",
    lambda v: v is None or (isinstance(v, list) and len(v) == 3 and all(isinstance(x, str) for x in v)),
)
TOP_SCHEMA = (
    ("version", f"{VERSION}", lambda v: type(v) is int and v == VERSION),
    ("name", "a string", lambda v: isinstance(v, str)),
    ("node_types", "a non-empty object", lambda v: isinstance(v, dict) and len(v) > 0),
    ("relations", "a list", lambda v: isinstance(v, list)),
    ("target", "a string", lambda v: isinstance(v, str)),
    ("labels", "an object", lambda v: isinstance(v, dict)),
    ("splits", "an object", lambda v: isinstance(v, dict)),
    ("reverse_relations?", "an object", lambda v: isinstance(v, dict)),
    (
        "checksums?",
        "an object mapping file names to sha256 hex digests",
        lambda v: isinstance(v, dict) and all(is_file_name(k) and isinstance(d, str) for k, d in v.items()),
    ),
    ("source?", "an object", lambda v: isinstance(v, dict)),
)
NODE_TYPE_SCHEMA = (
    ("num_nodes", "a non-negative integer", is_count),
    ("features", "null or an object", lambda v: v is None or isinstance(v, dict)),
    ("node_year?", *FILE_FIELD),
)
RELATION_SCHEMA = (
    ("src", "a string", lambda v: isinstance(v, str)),
    ("rel", "a string", lambda v: isinstance(v, str)),
    ("dst", "a string", lambda v: isinstance(v, str)),
    ("num_edges", "a non-negative integer", is_count),
    ("indptr", *FILE_FIELD),
    ("indices", *FILE_FIELD),
    ("reverse_of", *_TRIPLE),
    ("undirected", *_BOOL),
    ("deduplicated", *_BOOL),
)
LABELS_SCHEMA = (("file", *FILE_FIELD), ("num_classes", "a non-negative integer", is_count))
SPLITS_SCHEMA = tuple((s, *FILE_FIELD) for s in SPLITS)


def check_hetero_meta(meta, file) -> dict:
    """`meta` itself if it is a heterogeneous dataset's meta.json that
    follows the schema above; else DatasetError(file) naming the first bad field."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("kind") != HETERO:
        raise DatasetError(file, f"is not a heterogeneous gnnsys dataset (format {FORMAT!r}, kind {HETERO!r})")
    check_fields(meta, TOP_SCHEMA, "meta", file)
    for node_type, section in meta["node_types"].items():
        check_name(node_type, "node type", file)
        where = f"node_types.{node_type}"
        check_fields(section, NODE_TYPE_SCHEMA, where, file)
        if section["features"] is not None:
            check_fields(section["features"], ROWS_SCHEMA, f"{where}.features", file)
            check_rows(section["features"], f"{where}.features", file)
    seen = set()
    for i, section in enumerate(meta["relations"]):
        where = f"relations[{i}]"
        check_fields(section, RELATION_SCHEMA, where, file)
        triple = (section["src"], section["rel"], section["dst"])
        check_name(section["rel"], "relation", file)
        for role in ("src", "dst"):
            if section[role] not in meta["node_types"]:
                raise DatasetError(
                    file, f"field '{where}.{role}' names an unknown node type {short_json(section[role])}"
                )
        if triple in seen:
            raise DatasetError(file, f"relation {short_json(list(triple))} is listed twice")
        seen.add(triple)
    for i, section in enumerate(meta["relations"]):
        forward = section["reverse_of"]
        if forward is not None and tuple(forward) not in seen:
            raise DatasetError(file, f"field 'relations[{i}].reverse_of' names no relation of the dataset")
    if meta["target"] not in meta["node_types"]:
        raise DatasetError(file, f"field 'target' names an unknown node type {short_json(meta['target'])}")
    check_fields(meta["labels"], LABELS_SCHEMA, "labels", file)
    check_fields(meta["splits"], SPLITS_SCHEMA, "splits", file)
    num_target = meta["node_types"][meta["target"]]["num_nodes"]
    if meta["labels"]["num_classes"] > max(num_target, 1):
        raise DatasetError(
            file,
            f"field 'labels.num_classes' is {meta['labels']['num_classes']}, more than the {num_target} "
            f"{meta['target']} nodes",
        )
    return meta


def data_files(meta: dict) -> set:
    """The names of every file a heterogeneous meta.json describes."""
    names = {meta["labels"]["file"], *meta["splits"].values()}
    for section in meta["node_types"].values():
        names |= {section["features"]["file"]} if section["features"] else set()
        names |= {section["node_year"]} if "node_year" in section else set()
    for section in meta["relations"]:
        names |= {section["indptr"], section["indices"]}
    return names


def array_files(meta: dict, path) -> dict:
    """The file of each array of a dataset loaded from `path` (empty when
    it was not loaded), keyed as HeteroDataset names them in messages:
    "<relation name>.indptr"/".indices", "<type>.features"/".node_years",
    "labels" and the split names."""
    if path is None or not meta:
        return {}
    files = {"labels": path / meta["labels"]["file"], **{s: path / f for s, f in meta["splits"].items()}}
    for node_type, section in meta["node_types"].items():
        if section["features"]:
            files[f"{node_type}.features"] = path / section["features"]["file"]
        if "node_year" in section:
            files[f"{node_type}.node_years"] = path / section["node_year"]
    for section in meta["relations"]:
        name = relation_name((section["src"], section["rel"], section["dst"]))
        files[f"{name}.indptr"], files[f"{name}.indices"] = path / section["indptr"], path / section["indices"]
    return files
