"""The reading side of one layer of streaming inference
(gnnsys.inference.layerwise): `project_once` (a layer's input through its
projection into scratch files, in one sequential pass) and `passes` (a
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
    into one ScratchRows of `dtype` in `scratch` per part of
    stream.projection_parts() (named `name`-0.bin, ...; a progress bar
    `desc` "projection" when `progress`); their FileRows, or None
    (projecting per pass instead) when the scratch disk cannot hold them."""
    outs = []
    try:
        for i, width in enumerate(stream.projection_parts()):
            outs.append(ScratchRows(scratch, f"{name}-{i}.bin", source.num_rows, width, dtype))
    except ScratchSpaceError:
        for out in outs:
            out.remove()
        return None
    num_chunks = -(-source.num_rows // plan.chunk_rows)
    try:
        source.reserve(plan.chunk_rows)
        with progress_bar(num_chunks, f"{desc} projection", "chunk", progress) as bar:
            for c, x in _chunks(source, list(range(num_chunks)), plan.chunk_rows):
                for a in range(0, x.shape[0], plan.batch_size):
                    rows, lo = stream.project_rows(x[a : a + plan.batch_size]), 0
                    for out in outs:
                        out.write(c * plan.chunk_rows + a, rows[:, lo : lo + out.dim])
                        lo += out.dim
                bar.update()
        return [out.rows() for out in outs]
    except BaseException:
        for out in outs:
            out.remove()
        raise


def passes(stream, source, own, ids, tiles_of, plan, sink, progress, desc, began) -> int:
    """The passes of `plan` over `source`, one block of destinations each
    (its tiles from `tiles_of(k, block)`, the destinations' own rows from
    `own`: `source` itself, or the destinations' part of a projection),
    written to `sink`; the chunks read. A block's arrays and the stream's
    state for it are let go, and the freed memory handed back to the OS,
    before the next block's are made, so that one block's are held at a
    time, as the plan counts them."""
    num_chunks = -(-source.num_rows // plan.chunk_rows)
    source.reserve(plan.chunk_rows)
    if own is not source:
        own.share_buffers(source)  # read before or after a pass, never during one
    files = {source, own}
    read_before, chunks_read = sum(f.bytes_read for f in files), 0
    bar = progress_bar(max(len(plan.bounds) - 1, 1) * num_chunks, desc, "chunk", progress)

    def read():
        return sum(f.bytes_read for f in files) - read_before

    with bar:
        for k, (b0, b1) in enumerate(zip(plan.bounds[:-1], plan.bounds[1:])):
            block = range(b0, b1) if ids is None else ids[b0:b1]
            chunks_read += _block(stream, source, own, k, block, b0, tiles_of, plan, sink, bar, began, read)
            stream.end()
            release_freed_memory()  # else the heap keeps the block's freed arrays beside the next block's
            bar.set_postfix(_throughput(began, read(), b1))
    return chunks_read


class _Placement:
    """Where a block's destinations lie in the chunks of `chunk_rows` input
    rows: `positions(c)` (their places in the block) and `rows(c)` (their
    rows within chunk c), slices for a range of nodes, index arrays for ids."""

    def __init__(self, block, num_chunks: int, chunk_rows: int):
        self.block, self.chunk_rows = block, chunk_rows
        starts = np.arange(num_chunks + 1, dtype=np.int64) * chunk_rows
        if isinstance(block, range):
            self.order = None
            self.where = np.clip(starts - block.start, 0, len(block))
        else:
            self.order = np.argsort(block, kind="stable")
            self.where = np.searchsorted(block[self.order], starts)

    def has(self, c: int) -> bool:
        """Whether chunk c holds any of the block's own rows."""
        return self.where[c] < self.where[c + 1]

    def positions(self, c: int):
        """The block positions of chunk c's destinations."""
        if self.order is None:
            return slice(int(self.where[c]), int(self.where[c + 1]))
        return torch.from_numpy(self.order[self.where[c] : self.where[c + 1]])

    def rows(self, c: int):
        """Chunk c's rows of its destinations, in positions(c)'s order."""
        if self.order is None:
            lo = self.block.start - c * self.chunk_rows
            return slice(lo + int(self.where[c]), lo + int(self.where[c + 1]))
        return torch.from_numpy(self.block[self.order[self.where[c] : self.where[c + 1]]] - c * self.chunk_rows)


def _block(stream, source, own, k, block, b0, tiles_of, plan, sink, bar, began, read) -> int:
    """One pass: block k of destinations `block` (from target b0) through
    `stream`, written to `sink`; the chunks read. The block's own rows are
    held from before the pass (GAT's attention needs them up front, or they
    come from `own`, not the pass's chunks), taken from the pass's chunks,
    or read again after the pass (plan.rows_after), as the plan decided."""
    chunk_rows, chunks_read = plan.chunk_rows, 0
    num_chunks = -(-source.num_rows // chunk_rows)
    offsets, src, dst, count = tiles_of(k, block)
    place = _Placement(block, num_chunks, chunk_rows)
    own_chunks = [c for c in range(num_chunks) if place.has(c)]
    x_dst = None if plan.rows_after else torch.empty(len(block), stream.dst_width)

    def take_dst(c, x):
        x_dst[place.positions(c)] = stream.dst_rows(x[place.rows(c)])

    first = not plan.rows_after and (stream.dst_first or own is not source)
    if first:
        for c, x in _chunks(own, own_chunks, chunk_rows):
            take_dst(c, x)
            chunks_read += 1
    stream.begin(block, count, x_dst if stream.dst_first else None)
    during = not first and not plan.rows_after
    wanted = [c for c in range(num_chunks) if offsets[c] < offsets[c + 1] or (during and place.has(c))]
    bar.update(num_chunks - len(wanted))
    for c, x in _chunks(source, wanted, chunk_rows):
        if during and place.has(c):
            take_dst(c, x)
        stream.add(x, c * chunk_rows, src[offsets[c] : offsets[c + 1]], dst[offsets[c] : offsets[c + 1]])
        chunks_read += 1
        bar.update()
        bar.set_postfix(_throughput(began, read(), b0))
    if plan.rows_after:  # a range of nodes: each chunk's destinations are consecutive positions
        for c, x in _chunks(own, own_chunks, chunk_rows):
            at, rows = place.positions(c), place.rows(c)
            for a in range(at.start, at.stop, plan.batch_size):
                b = min(a + plan.batch_size, at.stop)
                xd = stream.dst_rows(x[rows.start + a - at.start : rows.start + b - at.start])
                sink.write(b0 + a, stream.finish(xd, a, b))
            chunks_read += 1
        return chunks_read
    for a in range(0, len(block), plan.batch_size):
        b = min(a + plan.batch_size, len(block))
        sink.write(b0 + a, stream.finish(x_dst[a:b], a, b))
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
