"""The reading side of one layer of streaming inference
(gnnsys.inference.layerwise): `project_once` (a layer's input through its
projection into a scratch file, in one sequential pass) and `passes` (a
pass over the input per block of destinations, each chunk read while the
previous one is worked on).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from gnnsys.inference.rows_io import ScratchRows, ScratchSpaceError
from gnnsys.runtime.allocator import release_freed_memory
from gnnsys.training.loop import progress_bar


def project_once(stream, source, plan, scratch, name: str, dtype: str, progress: bool = False, desc: str = "layer"):
    """Every input row of `source` through stream.project_rows, in one pass,
    into a ScratchRows of `dtype` in `scratch` (a progress bar `desc`
    "projection" when `progress`); its FileRows, or None (projecting per
    pass instead) when the scratch disk cannot hold it."""
    try:
        out = ScratchRows(scratch, name, source.num_rows, stream.projection_width(), dtype)
    except ScratchSpaceError:
        return None
    num_chunks = -(-source.num_rows // plan.chunk_rows)
    try:
        source.reserve(plan.chunk_rows)
        with progress_bar(num_chunks, f"{desc} projection", "chunk", progress) as bar:
            for c, x in _chunks(source, list(range(num_chunks)), plan.chunk_rows):
                for a in range(0, x.shape[0], plan.batch_size):
                    out.write(c * plan.chunk_rows + a, stream.project_rows(x[a : a + plan.batch_size]))
                bar.update()
        return out.rows()
    except BaseException:
        out.remove()
        raise


def passes(stream, source, ids, tiles_of, plan, sink, progress, desc, began) -> int:
    """The passes of `plan` over `source`, one block of destinations each
    (its tiles from `tiles_of(k, block)`), written to `sink`; the chunks read.
    A block's arrays and the stream's state for it are let go, and the freed
    memory handed back to the OS, before the next block's are made, so that
    one block's are held at a time, as the plan counts them."""
    num_chunks = -(-source.num_rows // plan.chunk_rows)
    source.reserve(plan.chunk_rows)
    read_before, chunks_read = source.bytes_read, 0
    bar = progress_bar(max(len(plan.bounds) - 1, 1) * num_chunks, desc, "chunk", progress)
    with bar:
        for k, (b0, b1) in enumerate(zip(plan.bounds[:-1], plan.bounds[1:])):
            block = np.arange(b0, b1, dtype=np.int64) if ids is None else ids[b0:b1]
            chunks_read += _block(stream, source, k, block, b0, tiles_of, plan, sink, bar, began, read_before)
            stream.end()
            release_freed_memory()  # else the heap keeps the block's freed arrays beside the next block's
            bar.set_postfix(_throughput(began, source.bytes_read - read_before, b1))
    return chunks_read


def _block(stream, source, k, block, b0, tiles_of, plan, sink, bar, began, read_before) -> int:
    """One pass: block k of destinations `block` (from target b0) through
    `stream`, written to `sink`; the chunks read."""
    chunk_rows, chunks_read = plan.chunk_rows, 0
    num_chunks = -(-source.num_rows // chunk_rows)
    offsets, src, dst, count = tiles_of(k, block)
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
    for a in range(0, block.shape[0], plan.batch_size):
        sink.write(b0 + a, stream.finish(x_dst, a, min(a + plan.batch_size, block.shape[0])))
    return chunks_read


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
