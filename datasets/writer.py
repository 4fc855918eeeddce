"""Write a `GraphSource` in the gnnsys on-disk format, atomically."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from gnnsys.atomic import atomic_directory
from gnnsys.errors import DatasetError

from . import csc
from .csc_file import write_csc
from .edge_features import EdgeFeaturePass, derived_nodes, edge_feature_dim, stage_edge_features
from .feature_writer import write_features
from .features_file import row_stride
from .hetero_source import HeteroSource
from .hetero_writer import write_hetero_dataset
from .meta import FORMAT, HOMOGENEOUS, SPLITS, VERSION
from .output_dir import check_output
from .output_file import write_error, write_npy
from .prepare_options import PrepareOptions
from .provenance import tool_version
from .source import GraphSource
from .source_checks import check_labels, check_splits
from .write_progress import Phases

RAW_EDGE_FEATURES = ".edge-features.raw"  # scratch: the input's edge features as float32, in its row order


def write_dataset(src: GraphSource, out_dir, opts: PrepareOptions | None = None) -> Path:
    """Write `src` to `out_dir` (via a temporary sibling renamed into place)
    and return its absolute path. Raises DatasetError on bad input or an
    output it may not replace (check_output); writes nothing then. A
    HeteroSource is written by datasets/hetero_writer.py."""
    if isinstance(src, HeteroSource):
        return write_hetero_dataset(src, out_dir, opts)
    opts = opts or PrepareOptions()
    opts.check()
    out_dir = Path(os.path.abspath(out_dir))
    check_output(out_dir, opts.overwrite)
    edge_dim = edge_feature_dim(src, opts)
    labels, num_classes, original_labels = check_labels(src, opts.remap_labels)
    splits = check_splits(src, labels)
    derive = opts.node_features_from_edges != "none"
    stride = row_stride(edge_dim if derive else src.feature_dim, opts.dtype, opts.align)
    edge_stride = row_stride(edge_dim, opts.dtype, opts.align) if edge_dim else 0
    mem_limit = opts.mem_limit_bytes()
    with atomic_directory(out_dir, overwrite=opts.overwrite) as tmp:
        check_space = _space_check(out_dir, tmp, src.num_nodes, stride, opts, edge_stride)
        check_space(0, _known_indices_bytes(src, opts), at_least=True)  # before any pass over the input
        edge_rows = stage_edge_features(src, tmp / RAW_EDGE_FEATURES, opts.nan_to_zero) if edge_dim else None
        edges = csc.EdgeStream(
            src.edge_chunks,
            src.num_nodes,
            file=src.edge_file,
            to_undirected=opts.to_undirected,
            drop_self_loops=opts.self_loops == "drop",
            expected=src.expected_num_edges,
            edge_rows=edge_rows,
            edge_row_file=src.edge_feature_file,
        )
        phases = Phases(opts)
        try:
            graph = write_csc(
                edges,
                tmp,
                dedup=opts.dedup,
                reorder=opts.reorder == "degree",
                mem_limit=mem_limit,
                check_space=check_space,
                bar=phases,
            )
        finally:
            phases.close()
        indptr, order, checksums = graph.indptr, graph.order, dict(graph.checksums)
        if order is not None:
            inverse = np.empty_like(order)
            inverse[order] = np.arange(src.num_nodes)
            labels = labels[order]
            splits = {k: np.sort(inverse[v]) for k, v in splits.items()}
            del inverse
            checksums["order.npy"] = write_npy(tmp / "order.npy", order.astype(np.int64))
        num_edges = int(indptr[-1])
        nodes, feature_order = src, order
        if edge_dim:
            edge_rows_file = graph.edge_rows_file
            assert edge_rows is not None and edge_rows_file is not None  # staged above, carried by write_csc
            edge_scratch = [edge_rows_file, tmp / RAW_EDGE_FEATURES]
            edge_pass = EdgeFeaturePass(
                indptr,
                edge_rows_file,
                tmp / RAW_EDGE_FEATURES,
                edge_rows,
                edge_dim,
                tmp / "edge_features.bin",
                opts.dtype,
                edge_stride,
            )
            if derive:  # derived in CSC order, so already in the new ids
                nodes, feature_order = derived_nodes(src, edge_pass, opts.node_features_from_edges), None
            else:
                edge_pass.run()
        stride, checksums["features.bin"], finite = write_features(nodes, tmp / "features.bin", opts, feature_order)
        del indptr
        if edge_dim:
            checksums["edge_features.bin"] = edge_pass.digest
            del edge_pass  # its memory maps of the scratch files
            for scratch in edge_scratch:
                scratch.unlink()
        checksums["labels.npy"] = write_npy(tmp / "labels.npy", labels)
        for name, ids in splits.items():
            checksums[f"{name}_idx.npy"] = write_npy(tmp / f"{name}_idx.npy", ids)
        checksums = dict(sorted(checksums.items()))
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "kind": HOMOGENEOUS,
            "name": src.name,
            "num_nodes": int(src.num_nodes),
            "num_edges": num_edges,
            "graph": {"layout": "csc", "indptr": "indptr.npy", "indices": "indices.npy"},
            "features": {
                "file": "features.bin",
                "dtype": opts.dtype,
                "dim": int(nodes.feature_dim),
                "row_stride": int(stride),
                "align": int(opts.align),
                **finite,
            },
            "labels": {
                "file": "labels.npy",
                "num_classes": int(num_classes),
                **({"original_labels": original_labels} if original_labels is not None else {}),
                **({"task": "multilabel", "num_tasks": int(num_classes)} if labels.ndim == 2 else {}),
            },
            "splits": {name: f"{name}_idx.npy" for name in SPLITS},
            "order": "order.npy" if order is not None else None,
            **(
                {
                    "edge_features": {
                        "file": "edge_features.bin",
                        "dtype": opts.dtype,
                        "dim": int(edge_dim),
                        "row_stride": int(edge_stride),
                        "align": int(opts.align),
                        "order": "csc",
                    }
                }
                if edge_dim
                else {}
            ),
            "checksums": checksums,
            "source": {
                "kind": src.kind,
                "inputs": [Path(p).name for p in src.inputs],
                "options": {k: v for k, v in asdict(opts).items() if k != "progress"},
                "tool": f"gnnsys {tool_version()}",
                **({"notes": src.notes} if src.notes else {}),
                "graph_build": {
                    "buckets": graph.buckets,
                    "spill_bytes": graph.spill_bytes,
                    "mem_limit_bytes": mem_limit,
                },
                **src.extra,
            },
        }
        try:
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        except OSError as e:
            raise write_error(tmp / "meta.json", e) from None
    return out_dir


def _space_check(out_dir: Path, tmp: Path, num_nodes: int, stride: int, opts: PrepareOptions, edge_stride: int = 0):
    """check_space for write_csc: refuse with one line, before the first byte
    is written, an output the file system cannot hold at its fullest
    (spilled edges beside indices.npy, or the finished dataset, with an
    unordered copy of the features while they are reordered, and the edge
    features with their scratch row numbers)."""
    features = num_nodes * stride
    node_arrays = 8 * (num_nodes + 1) + 8 * num_nodes * (2 if opts.reorder == "degree" else 1) + (1 << 20)
    itemsize = np.dtype(csc.index_dtype(num_nodes)).itemsize

    def check(scratch_bytes: int, indices_bytes: int, at_least: bool = False):
        edge_features = (indices_bytes // itemsize) * (edge_stride + 8) if edge_stride else 0
        final = indices_bytes + features + node_arrays + edge_features
        need = max(scratch_bytes + indices_bytes, final + (features if opts.reorder == "degree" else 0))
        free = shutil.disk_usage(tmp).free
        if need > free:
            bound = "at least " if at_least else ""
            raise DatasetError(
                out_dir,
                f"needs {bound}{need / 1e9:.2f} GB of free space while it is written "
                f"({bound}{final / 1e9:.2f} GB when done), and {free / 1e9:.2f} GB are free",
            )

    return check


def _known_indices_bytes(src: GraphSource, opts: PrepareOptions) -> int:
    """A lower bound on the bytes of indices.npy known before the edges are
    read: the edge count the input states (its header, count file or
    generator parameters) when nothing may remove edges, else none."""
    if src.expected_num_edges is None or opts.dedup or opts.self_loops == "drop":
        return 0
    return src.expected_num_edges * np.dtype(csc.index_dtype(src.num_nodes)).itemsize
