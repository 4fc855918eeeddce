"""`SSDFeatures`: the SSD tier, a FeatureSource that reads a prepared dataset's
rows straight from `features.bin` with aligned O_DIRECT reads (no page cache).

A gather sorts and deduplicates the ids, plans block-aligned reads that merge
rows sharing or adjoining a block (storage/direct_io.py), runs them on an
io_uring (storage/uring_io.py) or a pool of threads into a page-aligned
staging buffer bounded by `host_mem_budget` (a batch whose reads do not fit is
read in waves) and scatters the rows into the caller's order. With `pinned` (a
storage.staging.PinnedStaging, given by the stack builder when the rows are
used on a GPU), `gather_into` a tensor on that GPU (the rows a GPU cache
misses) scatters them into pinned buffers instead, sent by asynchronous copies
on a side stream; StagedFeatures over this tier does the same for a GPU stack
without a cache. The engine and
the gap merged between rows are chosen from the device's measured costs
(storage/io_probe.py `IOModel`) unless given.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from gnnsys.errors import ConfigError, DatasetError
from gnnsys.identity import check_identity
from gnnsys.ids import check_ids, distinct_inverse, gather_output
from gnnsys.storage.source import FeatureSource, GatherHandle
from gnnsys.storage.table import RowTable

from .direct_io import ReadPool, aligned, choose_gap, open_rows_file, plan_reads, row_blocks, scatter_rows
from .io_probe import IOModel
from .io_probe import io_model as measured_model
from .staging import PinnedStaging
from .uring_io import MAX_DEPTH, UringReader, uring_available

DEFAULT_STAGING = 64 << 20
DEFAULT_THREADS = 16
DEFAULT_DEPTH = 128
DEFAULT_MAX_READ = 128 << 10
ENGINES = ("auto", "uring", "threads")
_COUNTERS = ("bytes_read", "useful_bytes", "reads", "rows", "unique_rows", "gathers")
log = logging.getLogger(__name__)


def pick_engine(
    engine: str, model: IOModel | None = None, threads: int = DEFAULT_THREADS, depth: int = DEFAULT_DEPTH
) -> str:
    """ "uring" or "threads" for an `engine` option: auto takes the engine
    `model` measured faster with `depth` (ring) or `threads` (pool) in flight,
    else io_uring where uring_available(), and logs which and why; "uring"
    where it is not available is a ConfigError."""
    if engine not in ENGINES:
        raise ConfigError("engine", f"must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "threads":
        return engine
    ok, reason = uring_available()
    if engine == "uring" and not ok:
        raise ConfigError("engine", f"io_uring is not available here: {reason}")
    faster = model.faster_engine(threads, depth) if model is not None and ok else None
    if engine == "auto" and faster and model is not None:
        log.info(
            "SSD tier reads with %s: measured %.0f reads/s with io_uring depth %d, %.0f with %d threads",
            "io_uring" if faster == "uring" else "the thread pool",
            model.reads_per_s("uring", depth),
            depth,
            model.reads_per_s("threads", threads),
            threads,
        )
        return faster
    if engine == "auto":
        log.info(
            "SSD tier reads with %s: %s",
            "io_uring" if ok else "the thread pool",
            reason if ok else f"io_uring is not available ({reason})",
        )
    return "uring" if ok else "threads"


def rows_file(source) -> tuple[Path, tuple[int, int], torch.dtype, int]:
    """(file, (rows, dim), dtype, row stride) of the rows SSDFeatures reads:
    the file a memory-mapped RowTable maps (a prepared dataset's features.bin,
    or a node type's features file); ConfigError("features") for anything else."""
    if not isinstance(source, RowTable):
        raise ConfigError("features", f"'ssd' reads the file of a memory-mapped RowTable, got {type(source).__name__}")
    mapped = source.table.base  # RowTable keeps the memmap it was given as its array's base
    if not (source.mapped and isinstance(mapped, np.memmap) and mapped.offset == 0 and mapped.filename):
        raise ConfigError("features", f"'ssd' reads the file of a memory-mapped table; {source!r} is not one")
    return Path(mapped.filename), source.shape, source.dtype, source.table.shape[1]


class SSDFeatures(FeatureSource):
    """The rows of `table`, a memory-mapped RowTable (a prepared dataset's
    `features`), read from its file on every gather (a FeatureSource with no
    lower tier; rows come back on the CPU; `rows_file`).

    io_model: the device's measured costs (storage/io_probe.py IOModel);
    None (default) takes storage.io_probe.io_model's (cached, or probed for a
    few seconds) when the file is read with O_DIRECT and an option is "auto".
    engine: "uring" (reads on an io_uring, `depth` in flight from one thread),
    "threads" (`threads` blocking preads in flight) or "auto" (default: the
    one the model measured faster; without a model uring where
    uring_available(), else threads); max_read: the largest single read in
    bytes; max_gap: rows at most this many bytes apart share one read (the gap
    is read too: fewer, larger reads for more bytes), "auto" (default): per
    gather, the gap that minimises the model's time (choose_gap; 0 without a
    model); host_mem_budget: bytes of staging buffer (default 64 MiB), at
    least threads x max_read (threads) or max_read (uring), else ConfigError;
    direct: True requires O_DIRECT, False reads through the page cache, None (default)
    tries O_DIRECT and falls back with a RuntimeWarning. pinned: a
    PinnedStaging through which gather_into writes rows into a tensor on its
    device (None: no staging; the tier closes it). `stats()` gives the
    device bytes read, the useful bytes (unique rows x row bytes), the reads
    issued, their ratio `read_amplification`, how many times the file was
    read (`file_fraction`) and the gaps chosen.
    """

    name = "ssd"

    def __init__(
        self,
        table,
        *,
        threads: int = DEFAULT_THREADS,
        max_read: int = DEFAULT_MAX_READ,
        host_mem_budget: int | None = None,
        direct: bool | None = None,
        engine: str = "auto",
        depth: int = DEFAULT_DEPTH,
        max_gap: int | str = "auto",
        io_model: IOModel | None = None,
        pinned: PinnedStaging | None = None,
    ):
        self.path, self.shape, self.dtype, self.stride = rows_file(table)
        self.row_bytes = self.shape[1] * self.dtype.itemsize
        if pinned is not None and (pinned.dim, pinned.dtype) != (self.shape[1], self.dtype):
            table_rows = f"{self.shape[1]} x {self.dtype}"
            raise ConfigError("pinned", f"stages rows of {pinned.dim} x {pinned.dtype}, the table's are {table_rows}")
        if threads < 1:
            raise ConfigError("threads", f"must be at least 1, got {threads}")
        if max_gap != "auto" and (
            isinstance(max_gap, bool) or not isinstance(max_gap, (int, np.integer)) or max_gap < 0
        ):
            raise ConfigError("max_gap", f'must be "auto" or an int >= 0 bytes, got {max_gap!r}')
        self.max_gap = max_gap if max_gap == "auto" else int(max_gap)
        if not 1 <= depth <= MAX_DEPTH:
            raise ConfigError("depth", f"must be 1 to {MAX_DEPTH}, got {depth}")
        if engine not in ENGINES:
            pick_engine(engine)  # the ConfigError, before the file is opened
        budget = DEFAULT_STAGING if host_mem_budget is None else int(host_mem_budget)
        file = open_rows_file(self.path, direct)
        try:
            check_identity(self.path, table.identity, file.fd)  # the file its table's load mapped
            if file.size != self.shape[0] * self.stride:
                raise DatasetError(self.path, f"size {file.size} bytes, expected {self.shape[0]} rows x {self.stride}")
            if io_model is None and file.direct and "auto" in (engine, max_gap):
                io_model = measured_model(self.path, row_blocks(self.row_bytes, self.stride, file.block) * file.block)
            self.engine = pick_engine(engine, io_model, threads, depth)
        except BaseException:
            os.close(file.fd)
            raise
        self.io_model, self.pinned = io_model, pinned
        uring = self.engine == "uring"
        self._reader = UringReader(self.path, file, depth) if uring else ReadPool(self.path, file, threads)
        self._finalizer = weakref.finalize(self, self._reader.close)
        try:
            self._check(file, threads, max_read, budget)
        except BaseException:
            self.close()
            raise
        self.block, self.direct, self.threads, self.max_read = file.block, file.direct, threads, max_read
        self.depth = depth if uring else None
        self._staging = aligned(budget - budget % file.block)
        self._view = memoryview(self._staging)
        self._word = math.gcd(8, self.stride, self.row_bytes)
        self._words = np.frombuffer(self._staging, dtype=f"u{self._word}")
        self._lock = threading.Lock()
        self._async = ThreadPoolExecutor(1, thread_name_prefix="gnnsys-ssd-async")
        self.reset_stats()

    def _check(self, file, threads, max_read, budget):
        """ConfigError for a read size that cannot hold a row or a budget that
        cannot stage one read per thread (threads) or one read (uring: its ring
        keeps as many reads in flight as a wave holds, up to `depth`)."""
        span = row_blocks(self.row_bytes, self.stride, file.block) * file.block
        if max_read < span:
            raise ConfigError("max_read", f"{max_read} bytes cannot hold the blocks of one row ({span} bytes)")
        if self.engine == "threads" and budget < threads * max_read:
            raise ConfigError(
                "host_mem_budget",
                f"{budget} bytes cannot stage one read per thread "
                f"({threads} threads x {max_read} B = {threads * max_read} B)",
            )
        if budget < max_read:
            raise ConfigError("host_mem_budget", f"{budget} bytes cannot stage one read of max_read {max_read} B")

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` (exact stored values, any order, repeats allowed) as a
        [len(ids), dim] tensor, in `out` if given; IndexError for ids out of range."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        out = gather_output(out, ids.shape[0], self.shape[1], self.dtype)
        self._gather_to(ids, out, np.arange(ids.shape[0]))
        return out

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        """Row ids[i] into out[at[i]] straight from the staging buffer (no
        temporary) for a contiguous CPU `out` of this dtype; through the pinned
        staging for an `out` on its device."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        if self.pinned is not None and out.device == self.pinned.device:
            fill = lambda lo, hi, staged: self.gather(ids[lo:hi], out=staged)  # noqa: E731
            self.pinned.upload_into(ids.shape[0], fill, out, at)
            return
        if out.device.type != "cpu" or out.dtype != self.dtype or not out.is_contiguous():
            return super().gather_into(ids, out, at)
        self._gather_to(ids, out, at.numpy().astype(np.int64, copy=False))

    def _gather_to(self, ids: torch.Tensor, out: torch.Tensor, dest: np.ndarray):
        """Row ids[i] into out[dest[i]]."""
        if ids.shape[0]:
            rows, inverse = distinct_inverse(ids.numpy().astype(np.int64))
            words = out.view(torch.uint8).reshape(out.shape[0], self.row_bytes).numpy().view(self._words.dtype)
            with self._lock:
                self._read(rows, inverse, words, dest)

    def _read(self, rows: np.ndarray, inverse: np.ndarray, out: np.ndarray, dest: np.ndarray):
        """Read the sorted unique `rows` in waves that fit the staging buffer
        and scatter each wave to out[dest[p]] for every p with rows[inverse[p]] in it."""
        gap: int
        if self.max_gap != "auto":
            gap = int(self.max_gap)
        else:
            gap = 0 if self.io_model is None else choose_gap(rows, self.stride, self.row_bytes, self.block, self._cost)
        plan = plan_reads(rows, self.stride, self.row_bytes, self.block, self.max_read, self._reader.file.size, gap)
        order = np.argsort(inverse, kind="stable")
        row_start = np.append(0, np.cumsum(np.bincount(inverse, minlength=rows.shape[0])))
        first = np.append(plan.first, rows.shape[0])
        ends = plan.staged + plan.length
        count, r0 = len(plan.offset), 0
        while r0 < count:
            base = plan.staged[r0]
            r1 = int(np.searchsorted(ends, base + len(self._staging), side="right"))
            self._stats["bytes_read"] += self._reader.run(
                self._view, plan.offset[r0:r1], plan.length[r0:r1], plan.need[r0:r1], plan.staged[r0:r1] - base
            )
            positions = order[row_start[first[r0]] : row_start[first[r1]]]
            scatter_rows(self._words, (plan.src - base) // self._word, inverse, positions, dest, out)
            r0 = r1
        for key, value in zip(
            _COUNTERS[1:], (rows.shape[0] * self.row_bytes, count, inverse.shape[0], rows.shape[0], 1)
        ):
            self._stats[key] += value
        self._gap_sum += gap
        self._gap_last = gap

    def _cost(self, requests, nbytes):
        """The model's seconds for reads with this tier's engine and reads in flight."""
        return self.io_model.cost(self.engine, self.depth or self.threads, requests, nbytes)

    def gather_async(self, ids, out=None) -> GatherHandle:
        """gather on a background thread: a handle whose wait() gives the rows."""
        check_ids(torch.as_tensor(ids), self.shape[0])
        future: torch.futures.Future = torch.futures.Future()

        def done(job):
            error = job.exception()
            future.set_exception(error) if error else future.set_result(job.result())

        self._async.submit(self.gather, ids, out).add_done_callback(done)
        return GatherHandle(future=future)

    def stats(self) -> dict:
        """Counters since the last reset: bytes_read (from the device),
        useful_bytes, reads, rows, unique_rows, gathers (with rows), and
        read_amplification (bytes_read / useful_bytes, 1.0 before any read),
        file_fraction (bytes_read / the file's size: how many times the file
        was read), max_gap_mean and max_gap_last (bytes: the gaps merged)."""
        s = dict(self._stats)
        s["read_amplification"] = s["bytes_read"] / s["useful_bytes"] if s["useful_bytes"] else 1.0
        s["file_fraction"] = s["bytes_read"] / self._reader.file.size
        s["max_gap_mean"] = self._gap_sum / s["gathers"] if s["gathers"] else 0.0
        s["max_gap_last"] = self._gap_last
        return s

    def reset_stats(self):
        """Zero the counters of stats()."""
        self._stats = dict.fromkeys(_COUNTERS, 0)
        self._gap_sum = self._gap_last = 0

    def host_bytes(self) -> dict:
        """{part: bytes} of the host buffers the tier holds: the staging buffer
        the reads land in, the engine's own (io_uring's rings) and, with
        pinned staging, its pinned buffers ("pinned")."""
        pinned = {} if self.pinned is None else {"pinned": self.pinned.host_bytes()}
        return {"staging": len(self._staging), **self._reader.host_bytes(), **pinned}

    def close(self):
        """Stop the reader (threads or ring), close the file (also done when
        collected) and release the pinned staging, if any."""
        if hasattr(self, "_async"):
            self._async.shutdown(wait=True)
        self._finalizer()
        pinned = getattr(self, "pinned", None)  # unset when the constructor failed early
        if pinned is not None:
            pinned.close()

    def __repr__(self):
        mode = f"O_DIRECT, {self.block} B blocks" if self.direct else "buffered"
        engine = f"io_uring depth {self.depth}" if self.depth else f"{self.threads} threads"
        staged = "" if self.pinned is None else f", pinned staging to {self.pinned.device}"
        return f"SSDFeatures({self.path}, shape={self.shape}, dtype={self.dtype}, {mode}, {engine}{staged})"
