"""A window's scan of the rows file and the writes of its packed files
(storage/packing.py's format), pipelined: `scan` reads the next chunk of the
rows file on a thread while the current one is staged, and `SegmentWrites`
copies each file's rows straight from the read buffer into that file's
staging buffer (a numba kernel that releases the GIL) and hands every full
buffer, once it is added to its file's digest (storage/digest.py), to a writer thread, which writes it (with
O_DIRECT when asked) while the scan goes on, then returns it to a pool the
files share. A file is written in multiples of PAD, its end padded with zeros.
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
        needed = []  # (first row, end row, each list's [start, end) in it) of the chunks some list reads
        bounds = np.minimum(np.arange(1, -(-num_rows // per_chunk) + 1, dtype=np.int64) * per_chunk, num_rows)
        # One search per list, its bounds in its own dtype: a scalar of another (a Python int) makes
        # numpy cast the whole list on every call, which costs seconds a window at papers100M's size.
        ends = np.zeros((len(lists), bounds.shape[0] + 1), np.int64)
        for j, ids in enumerate(lists):
            ends[j, 1:] = np.searchsorted(ids, bounds.astype(ids.dtype))
        for i in np.flatnonzero((ends[:, 1:] != ends[:, :-1]).any(axis=0)).tolist():
            spans = list(zip(ends[:, i].tolist(), ends[:, i + 1].tolist(), strict=True))
            needed.append((i * per_chunk, int(bounds[i]), spans))
        buffers = [np.frombuffer(aligned(per_chunk * stride + 2 * file.block), np.uint8) for _ in range(2)]
        with ThreadPoolExecutor(1, thread_name_prefix="gnnsys-pack-scan") as reading:

            def submit(i: int):
                r0, r1, _ = needed[i]
                offset = r0 * stride // file.block * file.block
                want = -(-(r1 * stride - offset) // file.block) * file.block
                return offset, reading.submit(_read, file.fd, memoryview(buffers[i % 2]), offset, want, path)

            pending = submit(0) if needed else None
            for i, (r0, r1, spans) in enumerate(needed):
                check()
                offset, job = pending
                got = job.result()
                if got < (r1 - 1) * stride + writes.row_bytes - offset:
                    raise DatasetError(path, f"ended at byte {offset + got} while packing row {r1 - 1}")
                pending = submit(i + 1) if i + 1 < len(needed) else None
                for j, (lo, hi) in enumerate(spans):
                    writes.add(j, buffers[i % 2], r0 * stride - offset, lists[j], lo, hi, r0)
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
    staged in buffers of `stage` bytes (a multiple of PAD) and written on a
    writer thread, keeping each file's rows, bytes and digest."""

    def __init__(self, paths: list[Path], direct: bool, stage: int, row_bytes: int, stride: int):
        self.paths, self.stage, self.row_bytes, self.stride = paths, stage, row_bytes, stride
        self.word = math.gcd(8, row_bytes, stride)  # rows are copied in words of this many bytes
        files = len(paths)
        self.rows, self.nbytes, self.fill = [0] * files, [0] * files, [0] * files
        self.digests = [Digest() for _ in range(files)]
        self.buffers: list[np.ndarray | None] = [None] * files
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._made, self._limit, self._error = 0, files + SPARE, None
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

    def add(self, j: int, chunk: np.ndarray, base: int, ids: np.ndarray, lo: int, hi: int, r0: int) -> None:
        """Append to file j the rows ids[lo:hi] (sorted) of `chunk` (bytes;
        row r0 + i at base + i * stride)."""
        w = self.word
        words, k, skip = chunk.view(f"u{w}"), lo, 0
        while k < hi:
            if self.buffers[j] is None:
                self.buffers[j] = self._take()
            stage = self.buffers[j].view(f"u{w}")
            k, skip, fill = _stage(
                words, base // w, self.stride // w, self.row_bytes // w, ids, k, hi, r0, skip, stage, self.fill[j] // w
            )
            self.fill[j] = fill * w
            if self.fill[j] == self.stage:
                self._submit(j, self.stage)
        self.rows[j] += hi - lo
        self.nbytes[j] += (hi - lo) * self.row_bytes

    def finish(self) -> list[tuple[str, int, int, int]]:
        """Pad every file to a multiple of PAD, write what is staged and wait
        for the writer; per file (name, rows, bytes, digest)."""
        for j, buffer in enumerate(self.buffers):
            if buffer is not None:
                end = padded(self.fill[j])
                buffer[self.fill[j] : end] = 0
                self._submit(j, end)
        self._stop()
        self._raise()
        return [
            (p.name, r, padded(n), d.value())
            for p, r, n, d in zip(self.paths, self.rows, self.nbytes, self.digests, strict=True)
        ]

    def close(self) -> None:
        """Stop the writer (after what it was given) and close the files."""
        self._stop()
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def _take(self) -> np.ndarray:
        """A free staging buffer: a spare, a new one while fewer than the limit are made, else the next one freed."""
        self._raise()
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        if self._made < self._limit:
            self._made += 1
            return np.frombuffer(aligned(self.stage), np.uint8)
        buffer = self._free.get()
        self._raise()
        return buffer

    def _submit(self, j: int, nbytes: int) -> None:
        """Add file j's staging buffer, its first `nbytes` (a multiple of PAD),
        to the file's digest and hand it to the writer."""
        self._raise()
        buffer = self.buffers[j]
        self.digests[j].update(buffer[:nbytes])
        self._jobs.put((j, buffer, nbytes))
        self.buffers[j], self.fill[j] = None, 0

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            j, buffer, nbytes = job
            try:
                if self._error is None:
                    data, done = memoryview(buffer)[:nbytes], 0
                    while done < nbytes:
                        done += os.write(self.fds[j], data[done:])
            except OSError as e:
                self._error = DatasetError(self.paths[j], f"cannot write the packed segment ({e.strerror})")
            except BaseException as e:  # noqa: BLE001 -- raised in the scan's thread
                self._error = e
            finally:
                self._free.put(buffer)

    def _stop(self) -> None:
        if hasattr(self, "_thread") and self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


@numba.njit(nogil=True, cache=True)
def _stage(chunk, base, stride, row_bytes, ids, k, end, r0, skip, stage, fill):
    """Copy rows ids[k:end] (row r at chunk[base + (r - r0) * stride:], row_bytes
    long; the first `skip` of row ids[k] staged already) into `stage` from
    `fill` until it is full or the rows end; (k, skip, fill) after. All in
    words of the arrays' item size (a byte loop copies several times slower)."""
    cap = stage.shape[0]
    while k < end and fill < cap:
        start = base + (ids[k] - r0) * stride + skip
        n = min(row_bytes - skip, cap - fill)
        for b in range(n):
            stage[fill + b] = chunk[start + b]
        fill += n
        skip += n
        if skip == row_bytes:
            k += 1
            skip = 0
    return k, skip, fill
