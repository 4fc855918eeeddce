"""Write a `GraphSource` in the gnnsys on-disk format, atomically."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from gnnsys.errors import DatasetError

from . import csc
from .atomic import atomic_directory
from .csc_file import write_csc
from .edge_features import EdgeFeaturePass, derived_nodes, edge_feature_dim, stage_edge_features
from .features_file import DTYPES, encoded_rows, open_rows, row_stride
from .host_memory import available_host_bytes
from .meta import FORMAT, SPLITS, VERSION, is_dataset_dir
from .output_file import BackgroundWriter, OutputFile, write_error, write_npy
from .source import GraphSource

DEFAULT_MEM_LIMIT_GB = 8.0
NODE_FEATURES_FROM_EDGES = ("none", "mean", "sum")
EDGE_PASS_EDGES = 1 << 20  # edges gathered into CSC order at a time
RAW_EDGE_FEATURES = ".edge-features.raw"  # scratch: the input's edge features as float32, in its row order


@dataclass
class PrepareOptions:
    """Options shared by every `gnnsys prepare` input kind."""

    to_undirected: bool = False
    self_loops: str = "keep"
    dedup: bool = False
    reorder: str = "none"
    align: int = 128
    dtype: str = "float32"
    overwrite: bool = False
    nan_to_zero: bool = False
    normalize_features: str = "none"
    remap_labels: bool = False
    mem_limit: float | None = None
    node_features_from_edges: str = "none"
    progress: bool = True

    def check(self):
        """DatasetError naming the option whose value is not one it takes."""
        if self.self_loops not in ("keep", "drop"):
            raise DatasetError("--self-loops", f"must be keep or drop, got {self.self_loops!r}")
        if self.normalize_features not in ("none", "row"):
            raise DatasetError("--normalize-features", f"must be none or row, got {self.normalize_features!r}")
        if self.node_features_from_edges not in NODE_FEATURES_FROM_EDGES:
            raise DatasetError(
                "--node-features-from-edges",
                f"must be one of {', '.join(NODE_FEATURES_FROM_EDGES)}, got {self.node_features_from_edges!r}",
            )
        if self.reorder not in ("none", "degree"):
            raise DatasetError("--reorder", f"must be none or degree, got {self.reorder!r}")
        if self.dtype not in DTYPES:
            raise DatasetError("--dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        row_stride(1, self.dtype, self.align)
        if self.mem_limit is not None and not (math.isfinite(self.mem_limit) and self.mem_limit > 0):
            raise DatasetError("--mem-limit", f"must be a number of GB > 0, got {self.mem_limit}")

    def mem_limit_bytes(self) -> int:
        """The memory limit in bytes: mem_limit GB, else the default
        min(DEFAULT_MEM_LIMIT_GB, half of the memory available now)."""
        if self.mem_limit is not None:
            return int(self.mem_limit * 1e9)
        return int(min(DEFAULT_MEM_LIMIT_GB * 1e9, available_host_bytes() / 2))


def _bar(opts, total, desc, unit):
    # disable=None: bars only on a terminal, so logs and captured stderr keep just the messages
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        disable=None if opts.progress else True,
        dynamic_ncols=True,
        leave=False,
    )


class _Phases:
    """One progress bar per phase of the edge passes; each call closes the last."""

    def __init__(self, opts):
        self.opts, self.bar = opts, None

    def __call__(self, desc, total):
        self.close()
        self.bar = _bar(self.opts, total, desc, "edges" if desc != "sort buckets" else "buckets")
        return self.bar.update

    def close(self):
        if self.bar is not None:
            self.bar.close()


def check_multilabel(src: GraphSource, remap: bool = False) -> np.ndarray:
    """Multi-label targets [num_nodes, tasks] as int8: 1, 0, or -1 for an
    entry without a label (NaN in a float input, -1 in an integer one);
    raises on another value or shape."""
    labels = np.asarray(src.labels)
    if remap:
        raise DatasetError("--remap-labels", "numbers classes of a single-label task; the labels are multi-label")
    if labels.shape[0] != src.num_nodes or labels.shape[1] < 1:
        raise DatasetError(src.label_file, f"expected {src.num_nodes} rows of task labels, got shape {labels.shape}")
    if labels.dtype.kind == "f":
        known = ~np.isnan(labels)
        bad = np.argwhere(known & (labels != 0) & (labels != 1))
        values = np.where(known, labels, -1)
    elif labels.dtype.kind in "iub":
        values = labels.astype(np.int64)
        bad = np.argwhere((values != 0) & (values != 1) & (values != -1))
    else:
        raise DatasetError(src.label_file, f"task labels must be numbers, got {labels.dtype}")
    if bad.size:
        row, task = (int(i) for i in bad[0])
        raise DatasetError(
            src.label_file,
            f"task {task} holds {labels[row, task]}, expected 0 or 1 (or {'NaN' if labels.dtype.kind == 'f' else -1} "
            "for no label)",
            row=row,
        )
    return values.astype(np.int8)


def check_labels(src: GraphSource, remap: bool = False) -> tuple[np.ndarray, int, list | None]:
    """Labels as int64 [N], the class count, and with `remap` the original
    label of each class (else None); raises on bad values.

    Labels are integers >= 0, or -1 for unlabelled nodes. Without `remap`,
    class c is label c: the count (the source's, else the largest label + 1)
    may not exceed the node count, and an inferred one must have at least
    half of its classes present. With `remap`, the distinct labels, sorted,
    become classes 0..C-1. Multi-label targets ([N, tasks], check_multilabel)
    come back as int8 with the task count as the class count (one output
    per task).
    """
    labels = np.asarray(src.labels)
    if labels.ndim == 2:
        labels = check_multilabel(src, remap)
        return labels, labels.shape[1], None
    if labels.shape != (src.num_nodes,):
        raise DatasetError(src.label_file, f"expected {src.num_nodes} labels, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DatasetError(src.label_file, f"labels must be integers, got {labels.dtype}")
    labels = labels.astype(np.int64, copy=remap)  # only --remap-labels writes to it
    below = np.flatnonzero(labels < -1)
    if below.size:
        raise DatasetError(
            src.label_file,
            f"label {labels[below[0]]} out of range (classes are >= 0; -1 marks an unlabelled node)",
            row=int(below[0]),
        )
    known = labels >= 0
    if remap:
        original, labels[known] = np.unique(labels[known], return_inverse=True)
        return labels, int(original.size), original.tolist()
    inferred = src.num_classes is None
    num_classes = (int(labels.max()) + 1 if known.any() else 0) if src.num_classes is None else int(src.num_classes)
    bad = np.flatnonzero(labels >= num_classes)
    if bad.size:
        raise DatasetError(src.label_file, f"label {labels[bad[0]]} out of range [0, {num_classes})", row=int(bad[0]))
    if num_classes > max(src.num_nodes, 1):
        raise DatasetError(
            src.label_file,
            f"{num_classes} classes (labels up to {num_classes - 1}) for "
            f"{src.num_nodes} nodes; use --remap-labels to number the distinct labels 0..C-1",
        )
    used = int(np.count_nonzero(np.bincount(labels[known], minlength=num_classes))) if inferred else num_classes
    if 2 * used < num_classes:
        raise DatasetError(
            src.label_file,
            f"only {used} of the {num_classes} classes 0..{num_classes - 1} "
            f"occur; use --remap-labels to number them 0..{used - 1}",
        )
    return labels, num_classes, None


def check_splits(src: GraphSource, labels: np.ndarray) -> dict:
    """Split ids as int64 arrays; raises if empty, out of range, repeated,
    overlapping or unlabelled."""
    seen = np.full(src.num_nodes, -1, np.int8)
    out = {}
    for i, name in enumerate(SPLITS):
        file = src.split_files.get(name, f"split {name}")
        if name not in src.splits:
            raise DatasetError(file, f"split {name!r} is missing")
        ids = np.asarray(src.splits[name])
        if ids.ndim != 1 or ids.size == 0:
            raise DatasetError(file, f"split {name!r} is empty")
        if not np.issubdtype(ids.dtype, np.integer):
            raise DatasetError(file, f"split ids must be integers, got {ids.dtype}")
        ids = ids.astype(np.int64)
        bad = np.flatnonzero((ids < 0) | (ids >= src.num_nodes))
        if bad.size:
            raise DatasetError(file, f"node id {ids[bad[0]]} out of range [0, {src.num_nodes})", row=int(bad[0]))
        taken = seen[ids]
        if (taken >= 0).any():
            j = int(np.flatnonzero(taken >= 0)[0])
            other = SPLITS[taken[j]]
            what = f"repeats node {ids[j]}" if other == name else f"overlaps split {other!r} at node {ids[j]}"
            raise DatasetError(file, f"split {name!r} {what}", row=j)
        if np.unique(ids).size != ids.size:
            raise DatasetError(file, f"split {name!r} repeats a node id")
        missing = labels[ids] < 0
        unlabelled = np.flatnonzero(missing if missing.ndim == 1 else missing.all(axis=1))
        if unlabelled.size:
            raise DatasetError(
                file, f"split {name!r} holds unlabelled node {ids[unlabelled[0]]}", row=int(unlabelled[0])
            )
        seen[ids] = i
        out[name] = ids
    return out


def _feature_rows(src: GraphSource, opts: PrepareOptions, stride: int):
    """The source's feature chunks checked, cleaned and encoded as [rows, stride] uint8."""
    start = 0
    for chunk in src.feature_chunks():
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[1] != src.feature_dim:
            raise DatasetError(
                src.feature_file, f"expected {src.feature_dim} feature columns, got shape {chunk.shape}", row=start
            )
        if start + chunk.shape[0] > src.num_nodes:
            raise DatasetError(src.feature_file, f"more feature rows than the {src.num_nodes} nodes")
        finite = np.isfinite(chunk)
        if not finite.all():
            if not opts.nan_to_zero:
                r = int(np.flatnonzero(~finite.all(axis=1))[0])
                raise DatasetError(
                    src.feature_file, "NaN or inf in features (use --nan-to-zero to replace them with 0)", row=start + r
                )
            chunk = np.where(finite, chunk, 0)
        if opts.normalize_features == "row":
            chunk = normalize_rows(chunk)
        yield encoded_rows(chunk, opts.dtype, stride)
        start += chunk.shape[0]
    if start != src.num_nodes:
        raise DatasetError(src.feature_file, f"{start} feature rows for {src.num_nodes} nodes")


def _write_rows(path: Path, blocks, size: int) -> str:
    """Write `blocks` (arrays of rows) to `path` on a writer thread, `size`
    bytes reserved first; the file's sha256."""
    out = BackgroundWriter(OutputFile(path, size))
    try:
        for block in blocks:
            out.write(block)
    except BaseException:
        out.abandon()
        raise
    return out.close()


def _write_features(src: GraphSource, path: Path, opts: PrepareOptions, order) -> tuple[int, str]:
    """Write features.bin (rows in `order` when given); its row stride and sha256."""
    stride = row_stride(src.feature_dim, opts.dtype, opts.align)
    size = src.num_nodes * stride
    with _bar(opts, src.num_nodes, "features", "rows") as bar:
        target = path if order is None else path.with_name("features.unordered.bin")
        digest = _write_rows(target, (bar.update(len(r)) or r for r in _feature_rows(src, opts, stride)), size)
    if order is None:
        return stride, digest
    step = max(1, (1 << 26) // stride)

    def permuted():
        rows = open_rows(target, src.num_nodes, stride)
        for v in range(0, src.num_nodes, step):
            wanted = order[v : v + step]
            by_position = np.argsort(wanted)
            block = np.empty((wanted.shape[0], stride), np.uint8)
            block[by_position] = rows[wanted[by_position]]
            yield block
            bar.update(wanted.shape[0])

    with _bar(opts, src.num_nodes, "reorder features", "rows") as bar:
        digest = _write_rows(path, permuted(), size)
    target.unlink()
    return stride, digest


def normalize_rows(chunk: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (`--normalize-features row`, the row
    normalisation of Kipf and Welling's GCN); rows summing to 0 stay as they are."""
    x = chunk.astype(np.float64 if chunk.dtype == np.float64 else np.float32)
    sums = x.sum(axis=1, keepdims=True)
    return np.divide(x, sums, out=x, where=sums != 0)


def check_output(out_dir, overwrite: bool):
    """DatasetError unless `out_dir` may be written: it does not exist, or
    `overwrite` is set and it is a gnnsys dataset or an empty directory (and
    not the current directory, which renaming would pull from under the shell)."""
    out_dir = Path(os.path.abspath(out_dir))
    if not out_dir.exists():
        return
    if not overwrite:
        raise DatasetError(out_dir, "output already exists (use --overwrite to replace it)")
    if not out_dir.is_dir():
        raise DatasetError(
            out_dir, "exists and is not a directory; --overwrite replaces only a gnnsys dataset or an empty directory"
        )
    if Path.cwd().resolve().is_relative_to(out_dir.resolve()):
        raise DatasetError(out_dir, "is the current directory or holds it; give an --out elsewhere")
    if not is_dataset_dir(out_dir) and any(out_dir.iterdir()):
        raise DatasetError(
            out_dir,
            "is neither a gnnsys dataset nor empty; --overwrite replaces only those, so its files are left alone",
        )


def write_dataset(src: GraphSource, out_dir, opts: PrepareOptions | None = None) -> Path:
    """Write `src` to `out_dir` (via a temporary sibling renamed into place)
    and return its absolute path. Raises DatasetError on bad input or an
    output it may not replace (check_output); writes nothing then."""
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
        phases = _Phases(opts)
        try:
            graph = write_csc(
                edges,
                tmp,
                dedup=opts.dedup,
                reorder=opts.reorder == "degree",
                mem_limit=mem_limit,
                check_space=_space_check(out_dir, tmp, src.num_nodes, stride, opts, edge_stride),
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
        stride, checksums["features.bin"] = _write_features(nodes, tmp / "features.bin", opts, feature_order)
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

    def check(scratch_bytes: int, indices_bytes: int):
        edge_features = (indices_bytes // itemsize) * (edge_stride + 8) if edge_stride else 0
        final = indices_bytes + features + node_arrays + edge_features
        need = max(scratch_bytes + indices_bytes, final + (features if opts.reorder == "degree" else 0))
        free = shutil.disk_usage(tmp).free
        if need > free:
            raise DatasetError(
                out_dir,
                f"needs {need / 1e9:.2f} GB of free space while it is written "
                f"({final / 1e9:.2f} GB when done), and {free / 1e9:.2f} GB are free",
            )

    return check


def tool_version() -> str:
    """The installed gnnsys version ("unknown" when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gnnsys")
    except PackageNotFoundError:
        return "unknown"
