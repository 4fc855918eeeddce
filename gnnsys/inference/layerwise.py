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

Host memory stays within `host_mem_budget`: a chunk of input rows, and for a
block of destinations their accumulators (gnnsys.inference.streaming.LayerStream) and
in-edges. When every destination fits, a layer is one pass over its input;
otherwise destinations are cut into blocks, one pass each. GAT reads each
block's own input rows first (its attention needs them before any edge),
which is a second read of those rows. GCN layers use the whole graph's
degrees, so a node's output does not depend on which nodes share its block.
`InferenceStats` records each layer's passes and bytes read.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from gnnsys.errors import ConfigError
from gnnsys.ids import check_ids
from gnnsys.inference.rows_io import OUTPUT_DTYPES, ArraySink, ScratchRows, done_with, input_rows, scratch_directory
from gnnsys.inference.streaming import LayerStream, bucket_edges
from gnnsys.samplers.block import gcn_degree
from gnnsys.training.loop import progress_bar

DEFAULT_BUDGET = 10**9  # bytes of host memory a layer may hold (1 GB, as --host-mem-budget counts)
MAX_CHUNK = 64 << 20  # bytes a chunk of input rows takes with its buffers, by default at most


@dataclass
class LayerStats:
    """What one layer of streaming inference did: destinations computed,
    passes over its input (one per block of destinations), chunks and bytes
    read, the input's size in bytes, and seconds taken."""

    layer: int
    nodes: int
    passes: int
    chunk_rows: int
    chunks_read: int
    bytes_read: int
    input_bytes: int
    seconds: float


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
    n = dataset.num_nodes
    nodes = torch.arange(n) if nodes is None else torch.as_tensor(nodes).long().view(-1)
    check_streaming(batch_size, host_mem_budget, dtype, chunk_bytes)
    out = np.empty((nodes.shape[0], model.layers[-1].out_dim), np.float32)
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
    nodes: torch.Tensor,
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
    `nodes`, written block by block to `sink` (`write(start, rows)`, e.g. an
    ArraySink); options as `layerwise_inference`. Returns the InferenceStats."""
    check_ids(nodes, dataset.num_nodes, "nodes")
    layers = list(model.layers)[:num_layers]
    everyone = torch.arange(dataset.num_nodes)
    stats = InferenceStats()
    with streaming(model, dataset, layers, features, scratch_dir) as run:
        for i, layer in enumerate(layers):
            last = i == len(layers) - 1
            out = sink if last else ScratchRows(run.tmp, f"layer{i + 1}.bin", dataset.num_nodes, layer.out_dim, dtype)
            stats.layers.append(
                stream_layer(
                    layer,
                    dataset,
                    run.source,
                    nodes if last else everyone,
                    out,
                    degree=run.degree,
                    batch_size=batch_size,
                    device=device,
                    progress=progress,
                    host_mem_budget=host_mem_budget,
                    chunk_bytes=chunk_bytes,
                    desc=f"inference layer {i + 1}/{len(layers)}",
                    index=i + 1,
                )
            )
            run.drop_input()
            if not last:
                run.source = out.rows()
    return stats


class _Run:
    """The state of one streaming inference: the degrees (GCN), the scratch
    directory, and the current layer's input rows (`source`)."""

    def __init__(self, degree, tmp, source):
        self.degree, self.tmp, self.source = degree, tmp, source

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
            yield run
    finally:
        run.source.close()
        model.train(was_training)


def stream_layer(
    layer,
    dataset,
    source,
    targets: torch.Tensor,
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
) -> LayerStats:
    """`layer`'s output (eval mode) for the nodes `targets`, from `source`
    (FileRows or SourceRows: every node's input rows), written to `sink` in
    targets' order; a block of destinations per pass over the source, as
    many as fit in host_mem_budget. Returns its LayerStats."""
    began = time.perf_counter()
    stream = LayerStream(layer, degree, device)
    budget = DEFAULT_BUDGET if host_mem_budget is None else int(host_mem_budget)
    n_rows = source.num_rows
    chunk_rows = _chunk_rows(source, stream, budget, chunk_bytes, n_rows)
    num_chunks = -(-n_rows // chunk_rows)
    ids = targets.numpy().astype(np.int64, copy=False)
    indptr, indices = dataset.indptr.numpy(), dataset.indices.numpy()
    dense_row = 4 * (layer.in_dim + 3 * layer.out_dim)  # a destination's temporaries in the dense maps
    batch_size = max(1, min(batch_size, ids.shape[0], budget // 8 // dense_row))
    bounds = _blocks(
        stream, ids, indptr, budget, chunk_rows * _chunk_row_bytes(source, stream) + batch_size * dense_row, chunk_rows
    )
    source.reserve(chunk_rows)
    read_before = source.bytes_read
    chunks_read = 0
    bar = progress_bar(max(len(bounds) - 1, 1) * num_chunks, desc, "chunk", progress)
    with bar:
        for b0, b1 in zip(bounds[:-1], bounds[1:]):
            block = ids[b0:b1]
            offsets, src, dst, count = bucket_edges(indptr, indices, block, chunk_rows, num_chunks, stream.drop_self)
            order = np.argsort(block, kind="stable")
            where = np.searchsorted(block[order], np.arange(num_chunks + 1) * chunk_rows)  # block rows per chunk
            x_dst = torch.empty(block.shape[0], stream.dst_width)

            def take_dst(c, x):
                sel = order[where[c] : where[c + 1]]
                if sel.shape[0]:
                    x_dst[torch.from_numpy(sel)] = stream.dst_rows(x[torch.from_numpy(block[sel] - c * chunk_rows)])

            if stream.dst_first:  # GAT: the block's own rows first
                for c, x in _chunks(source, [c for c in range(num_chunks) if where[c] < where[c + 1]], chunk_rows):
                    take_dst(c, x)
                    chunks_read += 1
                stream.begin(block, count, x_dst)
            else:
                stream.begin(block, count)
            wanted = [
                c
                for c in range(num_chunks)
                if offsets[c] < offsets[c + 1] or (not stream.dst_first and where[c] < where[c + 1])
            ]
            bar.update(num_chunks - len(wanted))
            for c, x in _chunks(source, wanted, chunk_rows):
                if not stream.dst_first:
                    take_dst(c, x)
                stream.add(x, c * chunk_rows, src[offsets[c] : offsets[c + 1]], dst[offsets[c] : offsets[c + 1]])
                chunks_read += 1
                bar.update()
                bar.set_postfix(_throughput(began, source.bytes_read - read_before, b0))
            for a in range(0, block.shape[0], batch_size):
                sink.write(b0 + a, stream.finish(x_dst, a, min(a + batch_size, block.shape[0])))
            bar.set_postfix(_throughput(began, source.bytes_read - read_before, b1))
    return LayerStats(
        layer=index,
        nodes=int(ids.shape[0]),
        passes=len(bounds) - 1,
        chunk_rows=chunk_rows,
        chunks_read=chunks_read,
        bytes_read=source.bytes_read - read_before,
        input_bytes=n_rows * source.row_bytes,
        seconds=time.perf_counter() - began,
    )


def _throughput(began: float, nbytes: int, nodes: int) -> dict:
    """A progress bar's postfix: input MB/s read and destinations/s finished since `began`."""
    elapsed = max(time.perf_counter() - began, 1e-9)
    return {"MB_s": f"{nbytes / 1e6 / elapsed:,.0f}", "nodes_s": f"{nodes / elapsed:,.0f}"}


def _chunks(source, chunks: list, chunk_rows: int):
    """(c, rows of chunk c) for the chunks in order, reading the next one while the caller works on this one."""

    def submit(c):
        return source.read_async(c * chunk_rows, min((c + 1) * chunk_rows, source.num_rows))

    pending = submit(chunks[0]) if chunks else None
    for k, c in enumerate(chunks):
        x = pending.result()
        pending = submit(chunks[k + 1]) if k + 1 < len(chunks) else None
        yield c, x  # (a read still in flight when the caller stops is waited for by source.close())


def _chunk_row_bytes(source, stream) -> int:
    """Host bytes per row of a chunk: two raw buffers (one read ahead), the float rows, the stream's extra."""
    return 2 * source.row_bytes + 4 * source.dim + stream.chunk_row_bytes()


def _chunk_rows(source, stream, budget: int, chunk_bytes, n_rows: int) -> int:
    """Rows read at a time, on the source's alignment grid: chunk_bytes of
    input rows, or by default as many as take min(budget / 16, MAX_CHUNK)
    bytes with their buffers (a pass reads the whole input whatever the
    chunk, so the budget goes to destinations)."""
    if chunk_bytes is None:
        rows = min(budget // 16, MAX_CHUNK) // _chunk_row_bytes(source, stream)
    else:
        rows = int(chunk_bytes) // max(source.row_bytes, 1)
    rows = max(source.align_rows, rows - rows % source.align_rows)
    return min(rows, -(-n_rows // source.align_rows) * source.align_rows)


def _blocks(stream, ids: np.ndarray, indptr: np.ndarray, budget: int, fixed: int, chunk_rows: int) -> list:
    """Boundaries of consecutive blocks of `ids` whose state (stream.dst_bytes
    per destination, 8 bytes per in-edge, 24 per destination for ids and order)
    fits in `budget` bytes beside the `fixed` ones; ConfigError when even one
    destination does not."""
    cost = stream.dst_bytes() + 24 + 8 * (indptr[ids + 1] - indptr[ids])
    need = fixed + (int(cost.max()) if ids.shape[0] else 0)
    if budget < need:
        raise ConfigError(
            "host_mem_budget",
            f"{budget:,} bytes cannot hold a chunk of {chunk_rows:,} input rows "
            f"and one destination ({need:,} bytes); raise it or lower chunk_bytes",
        )
    avail = budget - fixed
    total = np.cumsum(cost)
    bounds = [0]
    while bounds[-1] < ids.shape[0]:
        base = total[bounds[-1] - 1] if bounds[-1] else 0
        bounds.append(int(np.searchsorted(total, base + avail, side="right")))
    return bounds
