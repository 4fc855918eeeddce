"""A window's scan of the rows file and the writes of its packed files
(storage/packing.py's format), pipelined: `scan` reads the next chunk of the
rows file on a thread while the current one is staged, and `SegmentWrites`
copies each file's rows straight from the read buffer into that file's
staging slot (one numba call a chunk, which releases the GIL and walks the
chunk in blocks of BLOCK_BYTES, copying every file's rows of a block while
it is in the core's cache) and hands every full slot, once it is added to
its file's digest (storage/digest.py), to a writer thread, which writes it
(with O_DIRECT when asked) while the scan goes on, then frees the slot for
any file. A file is written in multiples of PAD, its end padded with zeros.
"""

from __future__ import annotations

import math
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np

from gnnsys.errors import DatasetError
from gnnsys.identity import check_identity

from .digest import Digest
from .direct_io import aligned, open_rows_file
from .packing import PAD, READ_BYTES, padded

CHUNK_BYTES = 16 << 20  # the rows file is scanned in reads of about this size, two buffers of it (read, staged)
SCAN_BYTES = 2 * CHUNK_BYTES
STAGE_ALL, STAGE_MIN, STAGE_MAX = 64 << 20, 256 << 10, 2 << 20  # a window's write staging, shared by its files
SPARE = 2  # staging buffers beyond one a file: full ones queued for the writer while the scan goes on
BLOCK_BYTES = 128 << 10  # the rows of a chunk staged together, for every file, while they are in cache


def stage_size(files: int) -> int:
    """One staging buffer of a window of `files` packed files: STAGE_ALL shared, within [STAGE_MIN, STAGE_MAX]."""
    return min(STAGE_MAX, max(STAGE_MIN, STAGE_ALL // files)) // PAD * PAD


def staging_bytes(files: int) -> int:
    """The write staging of a window of `files` packed files while it is packed (SPARE buffers besides one a file)."""
    return (files + SPARE) * stage_size(files)


def scan(path: Path, direct: bool, identity, num_rows: int, lists: list[np.ndarray], writes, check) -> None:
    """Read the rows file `path` (`num_rows` rows, `writes.stride` bytes
    apart; O_DIRECT when `direct`; the FileIdentity `identity` checked) in
    chunks, in order, reading the next chunk while the rows of this one that
    list j (sorted ids) holds go to file j of `writes` (a SegmentWrites);
    `check()` between chunks (it raises to stop)."""
    file, stride = open_rows_file(path, direct), writes.stride
    try:
        check_identity(path, identity, file.fd)
        per_chunk = max(1, CHUNK_BYTES // stride)
        bounds = np.minimum(np.arange(1, -(-num_rows // per_chunk) + 1, dtype=np.int64) * per_chunk, num_rows)
        # One search per list, its bounds in its own dtype: a scalar of another (a Python int) makes
        # numpy cast the whole list on every call, which costs seconds a window at papers100M's size.
        ends = np.zeros((bounds.shape[0] + 1, len(lists)), np.int64)
        for j, ids in enumerate(lists):
            ends[1:, j] = np.searchsorted(ids, bounds.astype(ids.dtype))
        # (first row, end row, each list's start and end in it) of the chunks some list reads
        needed = [
            (i * per_chunk, int(bounds[i]), ends[i], ends[i + 1])
            for i in np.flatnonzero((ends[1:] != ends[:-1]).any(axis=1)).tolist()
        ]
        writes.lists(lists)
        buffers = [np.frombuffer(aligned(per_chunk * stride + 2 * file.block), np.uint8) for _ in range(2)]
        with ThreadPoolExecutor(1, thread_name_prefix="gnnsys-pack-scan") as reading:

            def submit(i: int):
                r0, r1 = needed[i][:2]
                offset = r0 * stride // file.block * file.block
                want = -(-(r1 * stride - offset) // file.block) * file.block
                return offset, reading.submit(_read, file.fd, memoryview(buffers[i % 2]), offset, want, path)

            pending = submit(0) if needed else None
            for i, (r0, r1, starts, stops) in enumerate(needed):
                check()
                offset, job = pending
                got = job.result()
                if got < (r1 - 1) * stride + writes.row_bytes - offset:
                    raise DatasetError(path, f"ended at byte {offset + got} while packing row {r1 - 1}")
                pending = submit(i + 1) if i + 1 < len(needed) else None
                writes.add(buffers[i % 2], r0 * stride - offset, r0, r1, starts, stops)
    finally:
        os.close(file.fd)


def _read(fd: int, buffer: memoryview, offset: int, want: int, path) -> int:
    """Read `want` bytes at `offset` into `buffer` in reads of at most READ_BYTES; the bytes read."""
    done = 0
    while done < want:
        try:
            n = os.preadv(fd, [buffer[done : done + min(READ_BYTES, want - done)]], offset + done)
        except OSError as e:
            raise DatasetError(path, f"cannot read {want} bytes at {offset} ({e.strerror})") from None
        if n <= 0:
            break
        done += n
    return done


class SegmentWrites:
    """The packed files `paths` (made new; O_DIRECT when `direct`) of the
    rows of a file whose rows are `row_bytes` long and `stride` bytes apart,
    staged in slots of `stage` bytes (a multiple of PAD; one a file and SPARE
    more, which the files share) and written on a writer thread, keeping each
    file's rows, bytes and digest. `into`: a byte array that takes the rows of
    one more list, after those of `paths`, in memory instead of a file (copied
    from the slots on the scan's thread; padded as a file, so it holds the
    padded size)."""

    def __init__(
        self, paths: list[Path], direct: bool, stage: int, row_bytes: int, stride: int, into: np.ndarray | None = None
    ):
        self.paths, self.stage, self.row_bytes, self.stride = paths, stage, row_bytes, stride
        self.word = math.gcd(8, row_bytes, stride)  # rows are copied in words of this many bytes
        self.into, self.into_at = into, 0
        files = len(paths) + (into is not None)
        self.rows = np.zeros(files, np.int64)
        self.digests = [Digest() for _ in paths]
        # per file: its slot (-1: none), the words staged in it, the words of its next row staged already
        self.slot, self.fill, self.skip = (
            np.full(files, -1, np.int64),
            np.zeros(files, np.int64),
            np.zeros(files, np.int64),
        )
        self.arena = np.frombuffer(aligned((files + SPARE) * stage), np.uint8).reshape(files + SPARE, stage)
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for slot in range(files + SPARE):
            self._free.put(slot)
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lists, self._error = None, None
        self.fds: list[int] = []
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | (os.O_DIRECT if direct else 0)
        try:
            for path in paths:
                self.fds.append(os.open(path, flags, 0o600))
        except BaseException:
            self.close()
            raise
        self._thread = threading.Thread(target=self._run, name="gnnsys-pack-write", daemon=True)
        self._thread.start()

    def lists(self, lists: list[np.ndarray]) -> None:
        """The sorted ids of each file's rows, before any `add` (all in the
        first list's dtype, which holds every id)."""
        self._lists = numba.typed.List(a.astype(lists[0].dtype, copy=False) for a in lists)

    def add(self, chunk: np.ndarray, base: int, r0: int, r1: int, starts: np.ndarray, stops: np.ndarray) -> None:
        """Append to every file j the rows lists[j][starts[j]:stops[j]] of
        `chunk` (bytes; rows r0 to r1, row r0 + i at base + i * stride)."""
        w, pos, block = self.word, starts.copy(), max(1, BLOCK_BYTES // self.stride)
        words, arena = chunk.view(f"u{w}"), self.arena.view(f"u{w}")
        at = r0
        while True:
            j, at = _stage(
                words,
                base // w,
                self.stride // w,
                self.row_bytes // w,
                self._lists,
                pos,
                stops,
                r0,
                r1,
                at,
                block,
                arena,
                self.slot,
                self.fill,
                self.skip,
            )
            if j < 0:
                break
            if self.slot[j] < 0:
                self.slot[j] = self._take()
            else:
                self._submit(j, self.stage)
        self.rows += stops - starts

    def finish(self) -> list[tuple[str, int, int, int]]:
        """Pad every file to a multiple of PAD, write what is staged and wait
        for the writer; per file (name, rows, bytes, digest), and for `into`
        ("", rows, bytes, 0)."""
        for j in np.flatnonzero(self.slot >= 0).tolist():
            fill = int(self.fill[j]) * self.word
            end = padded(fill)
            self.arena[self.slot[j], fill:end] = 0
            self._submit(j, end)
        self._stop()
        self._raise()
        names = [p.name for p in self.paths] + [""] * (self.into is not None)
        digests = [d.value() for d in self.digests] + [0] * (self.into is not None)
        rows = self.rows.tolist()
        return [(n, r, padded(r * self.row_bytes), d) for n, r, d in zip(names, rows, digests, strict=True)]

    def close(self) -> None:
        """Stop the writer (after what it was given) and close the files."""
        self._stop()
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def _take(self) -> int:
        """A free staging slot (the next one the writer frees, when none is)."""
        self._raise()
        slot = self._free.get()
        self._raise()
        return slot

    def _submit(self, j: int, nbytes: int) -> None:
        """Add file j's staging slot, its first `nbytes` (a multiple of PAD),
        to the file's digest and hand it to the writer."""
        self._raise()
        slot = int(self.slot[j])
        if j == len(self.paths):  # the rows that go to `into`
            assert self.into is not None
            self.into[self.into_at : self.into_at + nbytes] = self.arena[slot, :nbytes]
            self.into_at += nbytes
            self._free.put(slot)
        else:
            self.digests[j].update(self.arena[slot, :nbytes])
            self._jobs.put((j, slot, nbytes))
        self.slot[j], self.fill[j] = -1, 0

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            j, slot, nbytes = job
            try:
                if self._error is None:
                    data, done = memoryview(self.arena[slot]), 0
                    while done < nbytes:
                        done += os.write(self.fds[j], data[done:nbytes])
            except OSError as e:
                self._error = DatasetError(self.paths[j], f"cannot write the packed segment ({e.strerror})")
            except BaseException as e:  # noqa: BLE001 -- raised in the scan's thread
                self._error = e
            finally:
                self._free.put(slot)

    def _stop(self) -> None:
        if hasattr(self, "_thread") and self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


@numba.njit(nogil=True, cache=True)
def _stage(chunk, base, stride, row_words, lists, pos, stops, r0, r1, at, block, arena, slot, fill, skip):
    """Copy into each file j's slot the rows lists[j][pos[j]:stops[j]] of
    `chunk` (row r at chunk[base + (r - r0) * stride:], row_words long), the
    rows from `at` to r1 in blocks of `block` rows, every file's rows of a
    block before the next block; all in words. Stops early at a file j whose
    slot is full or that has none: (j, the block's first row to resume at),
    pos, fill and skip kept; (-1, r1) when the rows are staged."""
    cap = arena.shape[1]
    while at < r1:
        end = min(at + block, r1)
        for j in range(len(lists)):
            ids, k = lists[j], pos[j]
            while k < stops[j] and ids[k] < end:
                if slot[j] < 0 or fill[j] == cap:
                    pos[j] = k
                    return j, at
                s, f, done = slot[j], fill[j], skip[j]
                start = base + (ids[k] - r0) * stride + done
                n = min(row_words - done, cap - f)
                # slices, so that the copy's indices are known not to be negative and it vectorises
                src, dst = chunk[start : start + n], arena[s, f : f + n]
                for b in range(n):
                    dst[b] = src[b]
                fill[j] = f + n
                skip[j] = done + n
                if skip[j] == row_words:
                    k += 1
                    skip[j] = 0
            pos[j] = k
        at = end
    return -1, r1
