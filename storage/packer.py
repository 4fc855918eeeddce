"""`Packer`: writes a window of batches in storage/packing.py's format.

For a window of consecutive batches (global numbers, so it may cross
epochs) it draws each batch's input ids (`draws`, the sampler run by
gnnsys.loading, exactly what the online loader draws), counts in how many of
the window's batches each row is read, gives the cache the `capacity` rows
read most (ties to the lower id), and scans the rows file sequentially once:
each chunk's rows go to the segments of the batches that read them and miss
the cache (in id order) and to the cache's segment. A window already on disk
whose manifest has this key is reused; any other is rebuilt.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnsys.errors import ConfigError, DatasetError
from gnnsys.ids import count_ids, count_if_distinct, sorted_distinct, take_most_counted

from .pack_scan import SegmentWrites, scan, stage_size
from .packed_cache import carry_bytes
from .packing import Manifest, Segment, ids_hash, padded, write_sampled

log = logging.getLogger(__name__)


class Cancelled(Exception):
    """The packing was stopped (the tier is closing or restarting)."""


@dataclass
class WindowPlan:
    """What a window holds: each batch's (count, hash) of its distinct
    ids (storage.packing.ids_hash), the sorted ids the cache holds,
    and each batch's sorted ids missing it (its segment; int32 below 2^31
    rows, so a window's ids take 4 bytes a row). `carried`: the [count,
    hash] of the cached set of the window planned before it, and
    `incoming`: the sorted cached ids that set lacks, where a reader carries
    the cache over (None: the cache is written whole)."""

    batches: list[tuple[int, int]]
    cached: np.ndarray
    uncached: list[np.ndarray]
    sampled_bytes: int = 0
    carried: list[int] | None = None
    incoming: np.ndarray | None = None


class Packer:
    """Packs windows of `draws`' batches of the rows file `path` ((rows, dim)
    `shape`, `dtype`, rows `stride` bytes apart) into directories under
    `scratch`, with a cache of `capacity` rows.

    draws: an object with `batches` (batches an epoch), `epochs` (the
    run's, or None), `draw(epoch, batch)`
    (the batch's input ids, an int64 array) and `key` (a JSON-able dict of
    what decides the draws), and optionally `sampled(epoch, batch)` (the
    sampled batch as {name: array}, its input ids "input_nodes"), which the
    packer then writes beside the window for the loader (storage/packing.py);
    `key` here adds the file's, the cache's and the window's own and the rows file's (its path and `identity`, the
    FileIdentity its table's load recorded, checked when the file is
    opened). direct: whether the rows file is read with O_DIRECT;
    write_direct: whether the packed files are written with O_DIRECT (from
    staging buffers, so a window does not fill the page cache).
    window_bytes: the most one window may hold on disk (None: what the disk has free).
    """

    def __init__(
        self,
        path,
        shape,
        dtype,
        stride: int,
        draws,
        capacity: int,
        scratch,
        direct: bool,
        identity=None,
        write_direct=False,
        window_bytes: int | None = None,
    ):
        self.path, self.shape, self.stride, self.draws = Path(path), tuple(shape), int(stride), draws
        self.identity = identity
        self.row_bytes = int(shape[1]) * dtype.itemsize
        self.capacity, self.scratch, self.direct = int(min(capacity, shape[0])), Path(scratch), direct
        self.write_direct, self.window_bytes = write_direct, window_bytes
        recorded = None if identity is None else [identity.dev, identity.ino, identity.size, identity.mtime_ns]
        self.key = {
            **draws.key,
            "file": str(self.path),
            "file_identity": recorded,
            "rows": list(self.shape),
            "dtype": str(dtype),
            "row_bytes": self.row_bytes,
            "stride": self.stride,
        }
        self.key["capacity"] = self.capacity
        self._last_cached: np.ndarray | None = None  # the cache of the window planned last (planning thread)
        self._carry_bytes = carry_bytes(self.capacity, self.row_bytes)
        self.sampled_key = zlib.crc32(json.dumps(draws.key, sort_keys=True, default=str).encode())

    def directory(self, first: int, count: int) -> Path:
        """Where the window of `count` batches from global batch `first` lives."""
        return self.scratch / f"window-{first:010d}-{count}"

    def sampled_path(self, first: int, count: int, g: int) -> Path:
        """Where the sampled global batch `g` of the window of `count` batches from `first` is written."""
        return self.scratch / f"sampled-{first:010d}-{count}" / f"s{g:010d}.batch"

    def remove(self, first: int, count: int) -> None:
        """Remove the window of `count` batches from `first` and its sampled batches."""
        shutil.rmtree(self.directory(first, count), ignore_errors=True)
        shutil.rmtree(self.sampled_path(first, count, first).parent, ignore_errors=True)

    def plan(self, first: int, count: int, stop: threading.Event | None = None) -> WindowPlan:
        """Draw the window's batches (writing them where draws has `sampled`)
        and decide its cache by exact counts; stopped early when `stop` is set
        (Cancelled), its sampled batches then removed."""
        try:
            return self._plan(first, count, stop)
        except BaseException:
            shutil.rmtree(self.sampled_path(first, count, first).parent, ignore_errors=True)
            raise

    def _plan(self, first: int, count: int, stop) -> WindowPlan:
        counts = np.zeros(self.shape[0], np.int32)
        narrow = np.int32 if self.shape[0] < 2**31 else np.int64
        batches, drawn, written = [], [], 0
        sampled = getattr(self.draws, "sampled", None)
        if sampled is not None:
            self.sampled_path(first, count, first).parent.mkdir(parents=True, exist_ok=True)
        for g in range(first, first + count):
            _check(stop)
            epoch, batch = divmod(g, self.draws.batches)
            if sampled is None:
                ids = self.draws.draw(epoch, batch)
            else:
                arrays = sampled(epoch, batch)
                written += write_sampled(self.sampled_path(first, count, g), arrays, self.sampled_key)
                ids = arrays["input_nodes"]
            ids = np.asarray(ids, dtype=np.int64)
            if not count_if_distinct(ids, counts):  # a sampler's input nodes are distinct: no sort then
                ids = sorted_distinct(ids)
                count_ids(ids, counts)
            batches.append((int(ids.shape[0]), ids_hash(ids)))
            drawn.append(ids.astype(narrow))
        cached = take_most_counted(counts, self.capacity)  # their counts become -1
        carried, incoming = self._incoming(cached, counts)
        for j, ids in enumerate(drawn):
            drawn[j] = np.sort(ids[counts[ids] >= 0])
        self._last_cached = cached
        return WindowPlan(batches, cached, drawn, written, carried, incoming)

    def restart(self) -> None:
        """The next window planned is read first (its cache written whole): no window is planned after it."""
        self._last_cached = None

    def _incoming(self, cached: np.ndarray, counts: np.ndarray) -> tuple[list[int] | None, np.ndarray | None]:
        """([count, hash] of the window planned last's cached set, the ids of
        `cached` it lacks), so that a reader holding that set loads only
        these; (None, None) for the first window, without a cache, or where
        they are more than the reader carries (storage.packed_cache.carry_bytes).
        `counts`: -1 at the cached ids, as take_most_counted leaves them."""
        previous = self._last_cached
        if previous is None or not self.capacity:
            return None, None
        was = counts[previous]
        counts[previous] = np.where(was == -1, -2, was)  # cached before and now
        incoming = cached[counts[cached] == -1]
        counts[previous] = was
        if padded(incoming.shape[0] * self.row_bytes) > self._carry_bytes:
            return None, None
        return [int(previous.shape[0]), ids_hash(previous)], incoming

    def window_key(self, first: int, count: int, plan: WindowPlan) -> dict:
        """The key of a window: this packer's and the window's batches and cached set."""
        return {**self.key, "window": [first, count], "cached": [int(plan.cached.shape[0]), ids_hash(plan.cached)]}

    def pack(
        self,
        first: int,
        count: int,
        stop: threading.Event | None = None,
        plan: WindowPlan | None = None,
        cache_into: np.ndarray | None = None,
    ) -> tuple[Manifest, Path, bool]:
        """(manifest, directory, whether it was packed now) of the window of
        `count` batches from global batch `first` (its `plan`, made now if
        not given): reused when its manifest has this key, else (re)built
        (stopped early, with the partial directory removed, when `stop` is
        set: Cancelled); ConfigError when it needs more than window_bytes,
        DatasetError when the scratch directory's disk has less free space.
        `cache_into`: a byte array of the cache's padded size that takes the
        cached rows (in id order) where the window's cache is written whole,
        instead of cache.seg; its manifest then names no cache file (its
        cache is in the memory of the reader that asked for it)."""
        try:
            return self._pack(first, count, stop, plan, cache_into)
        except BaseException:
            self.remove(first, count)
            raise

    def _pack(self, first: int, count: int, stop, plan: WindowPlan | None, cache_into) -> tuple[Manifest, Path, bool]:
        plan = self.plan(first, count, stop) if plan is None else plan
        _check(stop)
        key, directory = self.window_key(first, count, plan), self.directory(first, count)
        found = Manifest.read(directory, key)
        # a window whose cache was carried from another cache, or held in another reader's memory, is stale
        if found is not None and found.carried == plan.carried and not found.cache_in_memory():
            return found, directory, False
        staged = cache_into is not None and plan.incoming is None
        rows = sum(padded(ids.shape[0] * self.row_bytes) for ids in [*plan.uncached, *[plan.cached][: not staged]])
        need = rows + plan.sampled_bytes
        self.scratch.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.scratch).free
        ahead = plan.sampled_bytes  # room for the next window's sampled batches, drawn while this one is written
        if self.window_bytes is not None and need + ahead + plan.cached.nbytes > self.window_bytes:
            raise ConfigError(
                "scratch_gb",
                f"the packed batches {first} to {first + count - 1} need {need + plan.cached.nbytes:,} bytes "
                f"and {ahead:,} for the next window's sampled batches, more than a window's share of the budget "
                f"({self.window_bytes:,} bytes, half of it: two windows are held at a time); raise it or give "
                "the cache more rows",
            )
        if rows + plan.cached.nbytes > free:
            raise DatasetError(
                self.scratch,
                f"not enough scratch space for the packed batches {first} to {first + count - 1}: needs "
                f"{rows + plan.cached.nbytes:,} bytes, {free:,} free (free some, or give the cache more rows)",
            )
        if directory.exists():
            log.info("packed window %s is stale (packed for another run or incomplete): rebuilt", directory)
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        segments, cache, incoming = self._write(directory, first, plan, stop, cache_into if staged else None)
        manifest = Manifest(key, first, segments, cache, plan.carried, incoming)
        manifest.write(directory)
        return manifest, directory, True

    def _write(
        self, directory: Path, first: int, plan: WindowPlan, stop, cache_into
    ) -> tuple[list[Segment], Segment | None, Segment | None]:
        """Scan the rows file once, appending each chunk's rows to every segment
        that needs them: each batch's, and the cache's whole (to `cache_into`
        where given) or its incoming rows."""
        rest = plan.cached if plan.incoming is None else plan.incoming
        whole = rest is plan.cached
        lists = [*plan.uncached, rest]
        names = [f"b{first + j:010d}.seg" for j in range(len(plan.uncached))]
        names += [] if cache_into is not None else ["cache.seg" if whole else "incoming.seg"]
        (directory / "cache.ids").write_bytes(plan.cached.tobytes())
        paths, stage = [directory / n for n in names], stage_size(len(lists))
        writes = SegmentWrites(paths, self.write_direct, stage, self.row_bytes, self.stride, cache_into)
        try:
            scan(self.path, self.direct, self.identity, self.shape[0], lists, writes, lambda: _check(stop))
            done = writes.finish()
        finally:
            writes.close()
        batches = len(plan.uncached)
        segments = [
            Segment(n, r, b, d, fingerprint, unique)
            for (n, r, b, d), (unique, fingerprint) in zip(done[:batches], plan.batches, strict=True)
        ]
        last = None if cache_into is not None else Segment(*done[batches])
        return segments, last if whole else None, None if whole else last


def _check(stop) -> None:
    if stop is not None and stop.is_set():
        raise Cancelled
