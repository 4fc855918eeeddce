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
import os
import shutil
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnsys.errors import ConfigError, DatasetError
from gnnsys.identity import check_identity
from gnnsys.ids import count_ids, sorted_distinct

from .direct_io import aligned, open_rows_file
from .packing import PAD, READ_BYTES, Manifest, Segment, ids_crc, padded, write_sampled

CHUNK_BYTES = 32 << 20  # the rows file is scanned in reads of about this size
STAGE_ALL, STAGE_MIN, STAGE_MAX = 64 << 20, 256 << 10, 4 << 20  # a window's write staging, shared by its files
log = logging.getLogger(__name__)


class Cancelled(Exception):
    """The packing was stopped (the tier is closing or restarting)."""


@dataclass
class WindowPlan:
    """What a window holds: each batch's (count, crc32) of its sorted
    distinct ids (storage.packing.ids_crc), the sorted ids the cache holds,
    and each batch's sorted ids missing it (its segment; int32 below 2^31
    rows, so a window's ids take 4 bytes a row)."""

    batches: list[tuple[int, int]]
    cached: np.ndarray
    uncached: list[np.ndarray]
    sampled_bytes: int = 0


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
        self.sampled_key = zlib.crc32(json.dumps(draws.key, sort_keys=True, default=str).encode())

    def directory(self, first: int, count: int) -> Path:
        """Where the window of `count` batches from global batch `first` lives."""
        return self.scratch / f"window-{first:010d}-{count}"

    def sampled_path(self, first: int, count: int, g: int) -> Path:
        """Where the sampled global batch `g` of the window of `count` batches from `first` is written."""
        return self.scratch / f"sampled-{first:010d}-{count}" / f"s{g:010d}.npz"

    def remove(self, first: int, count: int) -> None:
        """Remove the window of `count` batches from `first` and its sampled batches."""
        shutil.rmtree(self.directory(first, count), ignore_errors=True)
        shutil.rmtree(self.sampled_path(first, count, first).parent, ignore_errors=True)

    def plan(self, first: int, count: int, stop: threading.Event | None = None) -> WindowPlan:
        """Draw the window's batches (writing them where draws has `sampled`)
        and decide its cache by exact counts."""
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
            ids = sorted_distinct(np.asarray(ids, dtype=np.int64))
            count_ids(ids, counts)
            batches.append((int(ids.shape[0]), ids_crc(ids)))
            drawn.append(ids.astype(narrow))
        read = np.flatnonzero(counts)
        if read.shape[0] > self.capacity:
            read = np.sort(read[np.argsort(-counts[read], kind="stable")[: self.capacity]])
        del counts
        held = np.zeros(self.shape[0], np.bool_)
        held[read] = True
        for j, ids in enumerate(drawn):
            drawn[j] = ids[~held[ids]]
        return WindowPlan(batches, read, drawn, written)

    def window_key(self, first: int, count: int, plan: WindowPlan) -> dict:
        """The key of a window: this packer's and the window's batches and cached set."""
        return {**self.key, "window": [first, count], "cached": [int(plan.cached.shape[0]), ids_crc(plan.cached)]}

    def pack(self, first: int, count: int, stop: threading.Event | None = None) -> tuple[Manifest, Path, bool]:
        """(manifest, directory, whether it was packed now) of the window of
        `count` batches from global batch `first`: reused when its manifest
        has this key, else (re)built (stopped early, with the partial
        directory removed, when `stop` is set: Cancelled); DatasetError
        when the scratch directory's disk has less free space than it needs."""
        try:
            return self._pack(first, count, stop)
        except BaseException:
            self.remove(first, count)
            raise

    def _pack(self, first: int, count: int, stop) -> tuple[Manifest, Path, bool]:
        plan = self.plan(first, count, stop)
        key, directory = self.window_key(first, count, plan), self.directory(first, count)
        found = Manifest.read(directory, key)
        if found is not None:
            return found, directory, False
        rows = sum(padded(ids.shape[0] * self.row_bytes) for ids in [*plan.uncached, plan.cached])
        need = rows + plan.sampled_bytes
        self.scratch.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.scratch).free
        if self.window_bytes is not None and need + plan.cached.nbytes > self.window_bytes:
            raise ConfigError(
                "scratch_gb",
                f"the packed batches {first} to {first + count - 1} need {need + plan.cached.nbytes:,} bytes, more "
                f"than a window's share of the budget ({self.window_bytes:,} bytes, half of it: two windows are "
                "held at a time); raise it or give the cache more rows",
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
        segments, cache = self._write(directory, first, plan, stop)
        manifest = Manifest(key, first, segments, cache)
        manifest.write(directory)
        return manifest, directory, True

    def _write(self, directory: Path, first: int, plan: WindowPlan, stop) -> tuple[list[Segment], Segment]:
        """Scan the rows file once, appending each chunk's rows to every segment that needs them."""
        lists = [*plan.uncached, plan.cached]
        names = [f"b{first + j:010d}.seg" for j in range(len(plan.uncached))] + ["cache.seg"]
        writers = [_Writer(directory / name, self.write_direct, stage_size(len(names))) for name in names]
        try:
            (directory / "cache.ids").write_bytes(plan.cached.tobytes())
            self._scan(lists, writers, stop)
            done = [w.finish() for w in writers]
        finally:
            for w in writers:
                w.close()
        segments = [
            Segment(n, r, b, c, crc, unique)
            for (n, r, b, c), (unique, crc) in zip(done[:-1], plan.batches, strict=True)
        ]
        return segments, Segment(*done[-1])

    def _scan(self, lists: list[np.ndarray], writers: list, stop) -> None:
        """Read the rows file in chunks, in order, and hand each list's rows in a chunk to its writer."""
        file = open_rows_file(self.path, self.direct)
        try:
            check_identity(self.path, self.identity, file.fd)
            per_chunk = max(1, CHUNK_BYTES // self.stride)
            buffer = memoryview(aligned(per_chunk * self.stride + 2 * file.block))
            start = [0] * len(lists)
            for r0 in range(0, self.shape[0], per_chunk):
                _check(stop)
                r1 = min(self.shape[0], r0 + per_chunk)
                ends = [int(np.searchsorted(ids, r1)) for ids in lists]
                if all(e == s for e, s in zip(ends, start, strict=True)):
                    continue
                offset = r0 * self.stride // file.block * file.block
                want = -(-(r1 * self.stride - offset) // file.block) * file.block
                got = _read(file, buffer, offset, want, self.path)
                if got < (r1 - 1) * self.stride + self.row_bytes - offset:
                    raise DatasetError(self.path, f"ended at byte {offset + got} while packing row {r1 - 1}")
                rows = np.ndarray(
                    (r1 - r0, self.row_bytes), np.uint8, buffer, r0 * self.stride - offset, (self.stride, 1)
                )
                for j, ids in enumerate(lists):
                    if ends[j] > start[j]:
                        writers[j].write(rows[ids[start[j] : ends[j]] - r0])
                    start[j] = ends[j]
        finally:
            os.close(file.fd)


def stage_size(files: int) -> int:
    """The write staging of each of a window's `files` packed files: STAGE_ALL shared, within [STAGE_MIN, STAGE_MAX]."""
    return min(STAGE_MAX, max(STAGE_MIN, STAGE_ALL // files)) // PAD * PAD


def staging_bytes(files: int) -> int:
    """The write staging a window of `files` packed files holds while it is packed."""
    return files * stage_size(files)


def _read(file, buffer: memoryview, offset: int, want: int, path) -> int:
    """Read `want` bytes at `offset` into `buffer` in reads of at most READ_BYTES; the bytes read."""
    done = 0
    while done < want:
        try:
            n = os.preadv(file.fd, [buffer[done : done + min(READ_BYTES, want - done)]], offset + done)
        except OSError as e:
            raise DatasetError(path, f"cannot read {want} bytes at {offset} ({e.strerror})") from None
        if n <= 0:
            break
        done += n
    return done


class _Writer:
    """Appends rows to one packed file through a staging buffer written in
    multiples of PAD (with O_DIRECT when `direct`), keeping its rows, bytes and crc32."""

    def __init__(self, path: Path, direct: bool, stage: int):
        self.path, self.rows, self.nbytes, self.crc, self.fill = path, 0, 0, 0, 0
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | (os.O_DIRECT if direct else 0), 0o600)
        self.stage = memoryview(aligned(stage))

    def write(self, rows: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(rows)).cast("B")
        self.crc = zlib.crc32(data, self.crc)
        self.nbytes += len(data)
        self.rows += rows.shape[0]
        done = 0
        while done < len(data):
            take = min(len(data) - done, len(self.stage) - self.fill)
            self.stage[self.fill : self.fill + take] = data[done : done + take]
            self.fill, done = self.fill + take, done + take
            if self.fill == len(self.stage):
                self._flush(self.fill)

    def _flush(self, nbytes: int) -> None:
        """Write the first `nbytes` (a multiple of PAD) of the staging buffer."""
        try:
            done = 0
            while done < nbytes:
                done += os.write(self.fd, self.stage[done:nbytes])
        except OSError as e:
            raise DatasetError(self.path, f"cannot write the packed segment ({e.strerror})") from None
        self.fill = 0

    def finish(self) -> tuple[str, int, int, int]:
        """Pad to a multiple of PAD and write what is staged; (name, rows, bytes, crc32)."""
        end = padded(self.fill)
        pad = bytes(end - self.fill)
        self.stage[self.fill : end] = pad
        self.crc = zlib.crc32(pad, self.crc)
        self._flush(end)
        return self.path.name, self.rows, padded(self.nbytes), self.crc

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _check(stop) -> None:
    if stop is not None and stop.is_set():
        raise Cancelled
