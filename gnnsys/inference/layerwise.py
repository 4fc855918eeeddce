"""Exact layer-by-layer inference over all neighbours, streaming its inputs.

Sampled minibatch inference would be noisy and recompute shared neighbours
once per batch per layer. Instead each layer runs over every node (the last
layer only over the requested nodes) with every in-edge, and reads its input
in sequential passes over row ranges: the first layer the dataset's
features.bin (large block-aligned O_DIRECT reads where the file system
allows them, so the page cache is not flushed; an in-memory table or another
feature source is gathered range by range), later layers the previous
layer's output, kept in a scratch file (`ScratchRows`, float32, bfloat16 or
float16, its space reserved up front and removed when done).

Host memory stays within `host_mem_budget`, counting everything a layer
holds (gnnsys.inference.plan): a chunk of input rows, and for a block of
destinations their accumulators (gnnsys.inference.streaming.LayerStream)
and in-edges, beside the fixed arrays (node ids, degrees, result rows).
When every destination fits, a layer is one pass over its input; otherwise
destinations are cut into blocks, one pass each. A layer of several passes
whose linear maps narrow its input projects the input once into a scratch
file, which its passes read instead (gnnsys.inference.passes). The edges of
each (block x chunk) tile are bucketed once and kept for the later layers
on the same grid (gnnsys.inference.tiles). GAT reads each block's own input
rows first (its attention needs them before any edge), which is a second
read of those rows. GCN layers use the whole graph's degrees, so a node's
output does not depend on which nodes share its block. `InferenceStats`
records each layer's passes, bytes read and what it held.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from gnnsys.errors import ConfigError
from gnnsys.ids import check_ids
from gnnsys.inference.passes import passes, project_once
from gnnsys.inference.plan import chunk_row_bytes, held_arrays, plan_layer
from gnnsys.inference.rows_io import (
    OUTPUT_DTYPES,
    ArraySink,
    ScratchRows,
    done_with,
    input_rows,
    planned_rows,
    scratch_directory,
)
from gnnsys.inference.streaming import LayerStream, bucket_edges
from gnnsys.inference.tiles import TileStore
from gnnsys.samplers.block import gcn_degree

DEFAULT_BUDGET = 10**9  # bytes of host memory a layer may hold (1 GB, as --host-mem-budget counts)


@dataclass
class LayerStats:
    """What one layer of streaming inference did: destinations computed,
    passes over its input (one per block of destinations), chunks and bytes
    read (the projection's read of the input included), the input's size in
    bytes, seconds taken, the width of the projected rows its passes read
    (0: none), the blocks whose edge tiles were read back rather than
    bucketed, the fixed arrays it held (bytes by name), and whether each
    block read its own rows again after its pass (rather than holding them)."""

    layer: int
    nodes: int
    passes: int
    chunk_rows: int
    chunks_read: int
    bytes_read: int
    input_bytes: int
    seconds: float
    projected_width: int = 0
    tiles_reused: int = 0
    host_bytes: dict = field(default_factory=dict)
    rows_after: bool = False


@dataclass
class InferenceStats:
    """Per-layer `LayerStats` of one streaming inference; `to_dict()` for JSON."""

    layers: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"layers": [asdict(s) for s in self.layers]}


def check_streaming(batch_size: int, host_mem_budget, dtype: str, chunk_bytes=None):
    """ConfigError naming the option when a streaming inference setting is out of range."""
    if batch_size < 1:
        raise ConfigError("batch_size", f"must be >= 1, got {batch_size}")
    if host_mem_budget is not None and not host_mem_budget > 0:
        raise ConfigError("host_mem_budget", f"must be a number of bytes > 0, got {host_mem_budget}")
    if dtype not in OUTPUT_DTYPES:
        raise ConfigError("dtype", f"must be one of {', '.join(OUTPUT_DTYPES)}, got {dtype!r}")
    if chunk_bytes is not None and chunk_bytes < 1:
        raise ConfigError("chunk_bytes", f"must be >= 1, got {chunk_bytes}")


@torch.no_grad()
def layerwise_inference(
    model,
    dataset,
    nodes=None,
    batch_size: int = 4096,
    device="cpu",
    progress: bool = False,
    features=None,
    *,
    host_mem_budget: int | None = None,
    chunk_bytes: int | None = None,
    scratch_dir=None,
    dtype: str = "float32",
    return_stats: bool = False,
):
    """Outputs of `model` (a GNN with `.layers`) for `nodes` (default: all)
    using every neighbour; [len(nodes), out_dim] float32 on the CPU, and the
    InferenceStats too when `return_stats`.

    Layers before the last run over all nodes, streaming (module docstring);
    the last one only over `nodes`. The first layer reads `features` (a
    FeatureSource, e.g. the placed table; default the dataset's own).
    host_mem_budget: bytes of host memory a layer may hold (default 1 GB);
    chunk_bytes: input bytes read at a time (default: rows whose buffers take
    a sixteenth of the budget, at most 64 MiB); batch_size: at most this
    many destinations go through the dense maps (linear layers, norm) at a
    time, on `device`; scratch_dir, dtype: where and how hidden layers'
    outputs are kept. The model is put in eval mode and
    restored to its previous mode after.
    """
    nodes = None if nodes is None else torch.as_tensor(nodes).long().view(-1)
    check_streaming(batch_size, host_mem_budget, dtype, chunk_bytes)
    out = np.empty((dataset.num_nodes if nodes is None else nodes.shape[0], model.layers[-1].out_dim), np.float32)
    stats = stream_inference(
        model,
        dataset,
        nodes,
        ArraySink(out),
        features=features,
        batch_size=batch_size,
        device=device,
        progress=progress,
        host_mem_budget=host_mem_budget,
        chunk_bytes=chunk_bytes,
        scratch_dir=scratch_dir,
        dtype=dtype,
    )
    return (torch.from_numpy(out), stats) if return_stats else torch.from_numpy(out)


@torch.no_grad()
def stream_inference(
    model,
    dataset,
    nodes: torch.Tensor | None,
    sink,
    *,
    num_layers: int | None = None,
    features=None,
    batch_size: int = 4096,
    device="cpu",
    progress: bool = False,
    host_mem_budget=None,
    chunk_bytes=None,
    scratch_dir=None,
    dtype: str = "float32",
) -> InferenceStats:
    """The output of layer `num_layers` (default the last) of `model` for
    `nodes` (None: every node), written block by block to `sink`
    (`write(start, rows)`, e.g. an ArraySink); options as
    `layerwise_inference`. Returns the InferenceStats."""
    if nodes is not None:
        check_ids(nodes, dataset.num_nodes, "nodes")
    layers = list(model.layers)[:num_layers]
    stats = InferenceStats()
    with streaming(model, dataset, layers, features, scratch_dir) as run:
        check_budget(layers, dataset, run, nodes, sink, device, host_mem_budget, chunk_bytes, batch_size, dtype)
        for i, layer in enumerate(layers):
            last = i == len(layers) - 1
            out = sink if last else ScratchRows(run.tmp, f"layer{i + 1}.bin", dataset.num_nodes, layer.out_dim, dtype)
            stats.layers.append(
                stream_layer(
                    layer,
                    dataset,
                    run.source,
                    nodes if last else None,
                    out,
                    degree=run.degree,
                    batch_size=batch_size,
                    device=device,
                    progress=progress,
                    host_mem_budget=host_mem_budget,
                    chunk_bytes=chunk_bytes,
                    desc=f"inference layer {i + 1}/{len(layers)}",
                    index=i + 1,
                    scratch=run.tmp,
                    dtype=dtype,
                    tiles=run.tiles,
                    keep_tiles=not last,
                )
            )
            run.drop_input()
            if not last:
                run.source = out.rows()
    return stats


def check_budget(layers, dataset, run, nodes, sink, device, host_mem_budget, chunk_bytes, batch_size, dtype):
    """Plan every layer before the first runs: the ConfigError (one line,
    naming each fixed array) of a layer whose budget cannot hold them comes
    before any work."""
    budget = DEFAULT_BUDGET if host_mem_budget is None else int(host_mem_budget)
    indptr, rows = dataset.indptr.numpy(), run.source
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        ids = nodes.numpy().astype(np.int64, copy=False) if last and nodes is not None else None
        count = dataset.num_nodes if ids is None else ids.shape[0]
        held = held_arrays(layer, run.degree, sink if last else None)
        stream = LayerStream(layer, run.degree, device)
        plan_layer(stream, rows, ids, count, indptr, budget, chunk_bytes, batch_size, held)
        rows = planned_rows(dataset.num_nodes, layer.out_dim, dtype)


class _Run:
    """The state of one streaming inference: the degrees (GCN), the scratch
    directory, the current layer's input rows (`source`) and the kept edge
    tiles (a TileStore)."""

    def __init__(self, degree, tmp, source):
        self.degree, self.tmp, self.source, self.tiles = degree, tmp, source, None

    def drop_input(self) -> None:
        """Close the finished layer's input, and remove it when it is a scratch
        file (not the dataset's features), before the next input is made."""
        done_with(self.source, self.tmp)


@contextlib.contextmanager
def streaming(model, dataset, layers, features, scratch_dir):
    """A `_Run` for streaming `layers` of `model` over `dataset` from
    `features` (input_rows): the model in eval mode and a scratch directory
    for the duration; afterwards the input is closed, the directory removed
    and the model's mode restored."""
    degree = gcn_degree(dataset.indptr, dataset.indices) if any(lay.needs_degree for lay in layers) else None
    was_training = model.training
    model.eval()
    run = _Run(degree, None, input_rows(dataset, features))
    try:
        with scratch_directory(scratch_dir) as run.tmp:
            run.tiles = TileStore(run.tmp, dataset.indptr.numpy(), dataset.indices.numpy())
            yield run
    finally:
        run.source.close()
        model.train(was_training)


def stream_layer(
    layer,
    dataset,
    source,
    targets: torch.Tensor | None,
    sink,
    *,
    degree=None,
    batch_size: int = 4096,
    device="cpu",
    progress: bool = False,
    host_mem_budget=None,
    chunk_bytes=None,
    desc: str = "layer",
    index: int = 1,
    scratch=None,
    dtype: str = "float32",
    tiles=None,
    keep_tiles: bool = False,
) -> LayerStats:
    """`layer`'s output (eval mode) for the nodes `targets` (None: every
    node), from `source` (FileRows or SourceRows: every node's input rows),
    written to `sink` in targets' order; a block of destinations per pass
    over the source, as many as fit in host_mem_budget (gnnsys.inference.plan
    counts what the layer holds). With a `scratch` directory, a layer that
    takes several passes and whose projected rows are narrower than its
    input (LayerStream.projection_width) projects the input once into a
    scratch file of `dtype` rows, which its passes read instead. `tiles`: a
    TileStore whose kept edge tiles a layer over every node reads back when
    it can adopt their grid (its own kept when `keep_tiles`). Returns its
    LayerStats."""
    began = time.perf_counter()
    stream = LayerStream(layer, degree, device)
    budget = DEFAULT_BUDGET if host_mem_budget is None else int(host_mem_budget)
    ids = None if targets is None else targets.numpy().astype(np.int64, copy=False)
    count = source.num_rows if ids is None else ids.shape[0]
    indptr, indices = dataset.indptr.numpy(), dataset.indices.numpy()
    held = held_arrays(layer, degree, sink)

    def plan_for(rows):
        return plan_layer(stream, rows, ids, count, indptr, budget, chunk_bytes, batch_size, held)

    plan, read_from, own = plan_for(source), source, source
    read_before, chunks_read, width = source.bytes_read, 0, 0
    if plan.passes > 1 and scratch is not None and stream.projection_width():
        projected = project_once(stream, source, plan, scratch, f"layer{index}-projected", dtype, progress, desc)
        if projected is not None:
            stream.use_projection()
            read_from, own = projected[0], projected[-1]
            width, chunks_read = stream.projection_width(), -(-source.num_rows // plan.chunk_rows)
            plan = plan_for(read_from)
    num_chunks, reused = -(-read_from.num_rows // plan.chunk_rows), 0
    if tiles is not None and ids is None:  # every node: the grid later layers may share
        tiles.adopt(plan, stream.drop_self, read_from.align_rows, chunk_row_bytes(read_from, stream), budget)
        num_chunks, reused = -(-read_from.num_rows // plan.chunk_rows), tiles.reused
        tiles.start(plan, stream.drop_self, keep_tiles)

        def tiles_of(k, block):
            return tiles.tiles(k, block, plan.chunk_rows, num_chunks, stream.drop_self, keep_tiles)
    else:

        def tiles_of(k, block):
            return bucket_edges(indptr, indices, block, plan.chunk_rows, num_chunks, stream.drop_self)

    try:
        chunks_read += passes(stream, read_from, own, ids, tiles_of, plan, sink, progress, desc, began)
    finally:
        for rows in {read_from, own} - {source}:
            done_with(rows, scratch)
    n_rows = source.num_rows
    read = source.bytes_read - read_before + sum(r.bytes_read for r in {read_from, own} - {source})
    return LayerStats(
        layer=index,
        nodes=int(count),
        passes=plan.passes,
        chunk_rows=plan.chunk_rows,
        chunks_read=chunks_read,
        bytes_read=read,
        input_bytes=n_rows * source.row_bytes,
        seconds=time.perf_counter() - began,
        projected_width=width,
        tiles_reused=0 if tiles is None or ids is not None else tiles.reused - reused,
        host_bytes=dict(plan.fixed),
        rows_after=plan.rows_after,
    )
