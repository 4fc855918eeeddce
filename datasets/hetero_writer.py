"""Write a `HeteroSource` in the heterogeneous on-disk format
(datasets/hetero_meta.py), with the homogeneous writer's guarantees: a
temporary sibling directory renamed into place when complete, every file
streamed and hashed as it is written (sha256 in meta.json), feature rows
aligned like features.bin, and each relation's CSC built out of core by
write_csc within --mem-limit (spilling to bucket files when it does not fit).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from gnnsys.atomic import atomic_directory
from gnnsys.errors import DatasetError

from .csc import EdgeStream, index_dtype
from .csc_file import write_csc
from .feature_writer import write_features
from .features_file import row_stride
from .hetero_meta import features_file, node_year_file, relation_files
from .hetero_source import HeteroSource
from .meta import FORMAT, HETERO, SPLITS, VERSION
from .output_dir import check_output
from .output_file import write_error, write_npy
from .prepare_options import PrepareOptions
from .provenance import tool_version
from .relations import relation_name
from .source_checks import check_labels, check_splits
from .write_progress import Phases


def _refuse_options(opts: PrepareOptions):
    """DatasetError naming a prepare option that has no meaning for a heterogeneous graph."""
    if opts.to_undirected:
        raise DatasetError(
            "--to-undirected",
            "applies to a homogeneous graph; a heterogeneous one takes --add-reverse-relations (which makes each "
            "relation within one node type undirected and adds the reverse of the others)",
        )
    if opts.reorder != "none":
        raise DatasetError("--reorder", "relabelling by degree is not supported for a heterogeneous graph")
    if opts.node_features_from_edges != "none":
        raise DatasetError("--node-features-from-edges", "needs edge features, which a heterogeneous graph lacks here")


def _check_source(src: HeteroSource):
    """DatasetError naming the input that refers to an unknown node type or
    holds node years of another length than its type's count."""
    for relation, rel in src.relations.items():
        for role, node_type in (("source", relation[0]), ("destination", relation[2])):
            if node_type not in src.node_types:
                raise DatasetError(
                    rel.file, f"relation {relation_name(relation)} names an unknown {role} node type {node_type!r}"
                )
    for node_type, feats in src.features.items():
        if node_type not in src.node_types:
            raise DatasetError(feats.feature_file, f"features of an unknown node type {node_type!r}")
    for node_type, years in src.node_years.items():
        where = src.node_year_files.get(node_type, f"node years of {node_type}")
        if node_type not in src.node_types:
            raise DatasetError(where, f"node years of an unknown node type {node_type!r}")
        if np.shape(years) != (src.node_types[node_type],):
            raise DatasetError(where, f"shape {np.shape(years)}, expected [{src.node_types[node_type]}]")
    if src.target not in src.node_types:
        raise DatasetError(src.label_file, f"labels an unknown node type {src.target!r}")


def _relation_bytes(src: HeteroSource, relation) -> int:
    """The expected size of a relation's indices and indptr (0 edges when the input does not say)."""
    rel = src.relations[relation]
    edges = (rel.expected_num_edges or 0) * (2 if rel.undirected else 1)
    return edges * np.dtype(index_dtype(src.node_types[relation[0]])).itemsize + 8 * (src.node_types[relation[2]] + 1)


class _Space:
    """Refuses, before the first byte of each relation is written, an output
    the file system cannot hold at its fullest: the relation's scratch and
    indices, and the expected size of the relations still to come."""

    def __init__(self, out_dir: Path, tmp: Path, src: HeteroSource):
        self.out_dir, self.tmp = out_dir, tmp
        self.later = {relation: _relation_bytes(src, relation) for relation in src.relations}

    def features(self, src: HeteroSource, opts: PrepareOptions):
        """Refuse when the features and every relation's arrays do not fit."""
        rows = sum(f.num_nodes * row_stride(f.feature_dim, opts.dtype, opts.align) for f in src.features.values())
        self._check(rows + sum(self.later.values()))

    def relation(self, relation):
        """check_space for write_csc of `relation`."""
        self.later.pop(relation)
        rest = sum(self.later.values())
        return lambda scratch_bytes, indices_bytes: self._check(scratch_bytes + indices_bytes + rest)

    def _check(self, need: int):
        free = shutil.disk_usage(self.tmp).free
        if need > free:
            raise DatasetError(
                self.out_dir,
                f"needs {need / 1e9:.2f} GB more free space while it is written, and {free / 1e9:.2f} GB are free",
            )


def write_hetero_dataset(src: HeteroSource, out_dir, opts: PrepareOptions | None = None) -> Path:
    """Write `src` to `out_dir` (via a temporary sibling renamed into place)
    and return its absolute path. Raises DatasetError on bad input, an
    option that does not apply to a heterogeneous graph, or an output it may
    not replace; writes nothing then.

    Options: dtype, align, nan_to_zero and normalize_features apply to every
    node type's features; remap_labels to the target's labels; dedup to
    every relation (a relation made undirected is always deduplicated);
    self_loops "drop" to the relations within one node type; mem_limit to
    each relation's CSC build. to_undirected, reorder and
    node_features_from_edges are refused.
    """
    opts = opts or PrepareOptions()
    opts.check()
    _refuse_options(opts)
    out_dir = Path(os.path.abspath(out_dir))
    check_output(out_dir, opts.overwrite)
    _check_source(src)
    labelled = src.labelled_nodes()
    labels, num_classes, original_labels = check_labels(labelled, opts.remap_labels)
    if labels.ndim != 1:
        raise DatasetError(src.label_file, "multi-label targets are not supported for a heterogeneous graph")
    splits = check_splits(labelled, labels)
    mem_limit = opts.mem_limit_bytes()
    with atomic_directory(out_dir, overwrite=opts.overwrite) as tmp:
        space = _Space(out_dir, tmp, src)
        space.features(src, opts)
        checksums: dict = {}
        node_types = {}
        for node_type, count in src.node_types.items():
            node_types[node_type] = _write_node_type(src, node_type, count, tmp, opts, checksums)
        relations, builds = [], {}
        for relation in src.relations:
            section, builds[relation_name(relation)] = _write_relation(
                src, relation, tmp, opts, mem_limit, space.relation(relation), checksums
            )
            relations.append(section)
        checksums["labels.npy"] = write_npy(tmp / "labels.npy", labels)
        for name, ids in splits.items():
            checksums[f"{name}_idx.npy"] = write_npy(tmp / f"{name}_idx.npy", ids)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "kind": HETERO,
            "name": src.name,
            "node_types": node_types,
            "relations": relations,
            "target": src.target,
            "labels": {
                "file": "labels.npy",
                "num_classes": int(num_classes),
                **({"original_labels": original_labels} if original_labels is not None else {}),
            },
            "splits": {name: f"{name}_idx.npy" for name in SPLITS},
            "reverse_relations": src.extra.get("reverse_relations", {"added": False, "names": None}),
            "checksums": dict(sorted(checksums.items())),
            "source": {
                "kind": src.kind,
                "inputs": [str(p) for p in src.inputs],  # paths inside the input (many files share a name)
                "options": {k: v for k, v in asdict(opts).items() if k != "progress"},
                "tool": f"gnnsys {tool_version()}",
                **({"notes": src.notes} if src.notes else {}),
                "graph_build": {"relations": builds, "mem_limit_bytes": mem_limit},
                **{k: v for k, v in src.extra.items() if k != "reverse_relations"},
            },
        }
        try:
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        except OSError as e:
            raise write_error(tmp / "meta.json", e) from None
    return out_dir


def _write_node_type(src: HeteroSource, node_type: str, count: int, tmp: Path, opts, checksums: dict) -> dict:
    """Write a node type's features and node years (when it has them); its meta.json section."""
    section: dict = {"num_nodes": int(count), "features": None}
    feats = src.features.get(node_type)
    if feats is not None:
        name = features_file(node_type)
        stride, checksums[name], finite = write_features(feats, tmp / name, opts)
        section["features"] = {
            "file": name,
            "dtype": opts.dtype,
            "dim": int(feats.feature_dim),
            "row_stride": int(stride),
            "align": int(opts.align),
            **finite,
        }
    if node_type in src.node_years:
        name = node_year_file(node_type)
        checksums[name] = write_npy(tmp / name, np.asarray(src.node_years[node_type], np.int64))
        section["node_year"] = name
    return section


def _write_relation(src: HeteroSource, relation, tmp: Path, opts, mem_limit: int, check_space, checksums: dict):
    """Build one relation's CSC into its two files; its meta.json section and build statistics."""
    rel = src.relations[relation]
    within = relation[0] == relation[2]
    edges = EdgeStream(
        rel.edge_chunks,
        src.node_types[relation[2]],
        num_src=src.node_types[relation[0]],
        file=rel.file,
        to_undirected=rel.undirected,
        drop_self_loops=within and opts.self_loops == "drop",
        expected=rel.expected_num_edges,
    )
    dedup = opts.dedup or rel.undirected
    phases = Phases(opts, relation_name(relation))
    try:
        graph = write_csc(
            edges,
            tmp,
            dedup=dedup,
            mem_limit=mem_limit,
            check_space=check_space,
            bar=phases,
            names=relation_files(relation),
        )
    finally:
        phases.close()
    checksums.update(graph.checksums)
    indptr_name, indices_name = relation_files(relation)
    section = {
        "src": relation[0],
        "rel": relation[1],
        "dst": relation[2],
        "num_edges": int(graph.indptr[-1]),
        "indptr": indptr_name,
        "indices": indices_name,
        "reverse_of": list(rel.reverse_of) if rel.reverse_of is not None else None,
        "undirected": bool(rel.undirected),
        "deduplicated": bool(dedup),
    }
    return section, {"buckets": graph.buckets, "spill_bytes": graph.spill_bytes}
