"""Aligned direct reads of fixed-stride rows from a file (the engine under
`storage.ssd.SSDFeatures`).

`open_rows_file` opens a file with O_DIRECT and finds the alignment the kernel
enforces; `plan_reads` turns sorted row numbers into block-aligned reads,
merging rows that share or adjoin a block or lie at most a gap apart, and
`choose_gap` picks the gap that minimises a cost model's time; `ReadPool`
runs a plan on a pool of threads (os.preadv releases the GIL, so `threads`
reads are in flight) into a page-aligned staging buffer (storage/uring_io.py
is the io_uring engine with the same contract); `scatter_rows` copies the
staged rows into the caller's order.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import mmap
import os
import warnings
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import numba
import numpy as np

from gnnsys.errors import ConfigError, DatasetError

BLOCKS = (512, 1024, 2048, 4096)
HUGE_PAGE = 2 << 20  # the transparent huge page of x86-64 and most arm64 kernels
_CHUNK = 64  # the most reads a worker takes at a time from the shared counter


@dataclass
class RowsFile:
    """An open file descriptor, its size at open, the block its reads are
    aligned to, and whether it is read with O_DIRECT."""

    fd: int
    size: int
    block: int
    direct: bool


def _probe(fd: int, size: int, buf: memoryview) -> tuple[int | None, str | None]:
    """(block, None) for the smallest block the O_DIRECT fd accepts, or
    (None, reason) when O_DIRECT is not in effect."""

    def accepts(nbytes):
        try:
            os.preadv(fd, [buf[:nbytes]], nbytes)
            return True
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            return False

    # A file system that ignores O_DIRECT (tmpfs since Linux 6.6) accepts any
    # alignment: its reads are copies out of memory, not device reads.
    if size >= 2 and accepts(1):
        return None, "the file system ignores O_DIRECT (a 1-byte read at offset 1 succeeded, e.g. tmpfs)"
    for block in BLOCKS:
        if 2 * block > size:  # too small to probe: whole-file reads of the largest block are always legal
            return BLOCKS[-1], None
        if accepts(block):
            return block, None
    return None, f"no O_DIRECT read of {BLOCKS[-1]} bytes or less is accepted"


def open_rows_file(path, direct: bool | None) -> RowsFile:
    """Open `path` for aligned row reads.

    direct=True requires O_DIRECT (ConfigError if the file system refuses it),
    direct=False reads through the page cache, and None tries O_DIRECT and
    falls back to buffered reads with a one-line RuntimeWarning. The block is
    the smallest of 512..4096 bytes for which an O_DIRECT read of that length
    at that offset succeeds (the device's logical block); buffered reads use
    512-byte blocks so that both modes issue the same reads.
    """
    reason = None
    if direct is not False:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise DatasetError(path, f"cannot open ({e.strerror})") from None
            reason = "the file system refuses O_DIRECT"
        else:
            size = os.fstat(fd).st_size
            block, reason = _probe(fd, size, memoryview(aligned(BLOCKS[-1])))
            if block is not None:
                return RowsFile(fd, size, block, True)
            os.close(fd)
        if direct:
            raise ConfigError("direct", f"{path}: {reason}")
        warnings.warn(
            f"{path}: {reason}; reading through the page cache with posix_fadvise(DONTNEED) instead",
            RuntimeWarning,
            stacklevel=3,
        )
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise DatasetError(path, f"cannot open ({e.strerror})") from None
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    return RowsFile(fd, os.fstat(fd).st_size, BLOCKS[0], False)


def aligned(nbytes: int) -> mmap.mmap:
    """Page-aligned private anonymous memory of `nbytes` (pages are committed on
    first touch and counted in the process's RssAnon, as its other buffers are),
    asking for transparent huge pages where it spans one (`_ask_huge_pages`)."""
    buffer = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if nbytes >= HUGE_PAGE:
        _ask_huge_pages(buffer)
    return buffer


def _ask_huge_pages(buffer: mmap.mmap) -> None:
    """madvise(MADV_HUGEPAGE) where the system has it (Linux; the kernel gives huge
    pages to the regions that ask when transparent_hugepage is `madvise`). A
    direct read into 2 MiB pages pins a few large pages, not hundreds of small
    ones, and goes to the disk in fewer, larger requests: 8 MiB O_DIRECT reads
    ran 2.8x as fast on the development VM, at a tenth of the system time
    (benchmarks/README.md). Where the kernel refuses, the buffer keeps small pages."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):
            buffer.madvise(advice)


def row_blocks(row_bytes: int, stride: int, block: int) -> int:
    """The most blocks one row spans (rows start at multiples of `stride`, so
    at most block - gcd(stride, block) bytes into a block)."""
    return -(-(block - math.gcd(stride, block) + row_bytes) // block)


@dataclass
class Plan:
    """Reads for sorted unique rows: read i covers `length[i]` bytes from file
    offset `offset[i]` into staging offset `staged[i]`; `need[i]` is how many
    of them must exist in the file; row u starts at staging byte `src[u]`,
    `first[i]` is the first row of read i."""

    offset: np.ndarray
    length: np.ndarray
    need: np.ndarray
    staged: np.ndarray
    src: np.ndarray
    first: np.ndarray


def _row_span(rows: np.ndarray, stride: int, row_bytes: int, block: int):
    """(first byte, first block, end block) of each of `rows`."""
    start = rows * stride
    return start, start // block, (start + row_bytes + block - 1) // block


def choose_gap(rows: np.ndarray, stride: int, row_bytes: int, block: int, cost) -> int:
    """The max_gap (bytes, whole blocks) for plan_reads of the sorted unique
    `rows` that minimises cost(requests, bytes) (vectorised over arrays, e.g.
    IOModel.cost): every threshold from 0 to the largest gap between
    consecutive rows is evaluated at once (merging the gaps up to a threshold
    removes one request and reads the gap's bytes per gap). Requests count
    merged runs; the max_read split, which adds about one request per
    max_read bytes at any threshold, is not modelled."""
    _, lo, hi = _row_span(rows, stride, row_bytes, block)
    gaps = np.sort(lo[1:] - hi[:-1])
    gaps = gaps[gaps > 0]
    if not gaps.size:
        return 0
    # candidate k merges the k smallest gaps; only the ends of runs of equal gaps are thresholds
    ends = np.append(np.flatnonzero(gaps[1:] != gaps[:-1]) + 1, gaps.size)
    merged = np.append(0, ends)
    requests = gaps.size + 1 - merged
    span = int(hi[-1] - lo[0])
    nbytes = (span - (gaps.sum() - np.append(0, np.cumsum(gaps))[merged])) * block
    best = int(np.argmin(cost(requests, nbytes)))
    return 0 if best == 0 else int(gaps[merged[best] - 1]) * block


def plan_reads(
    rows: np.ndarray, stride: int, row_bytes: int, block: int, max_read: int, size: int, max_gap: int = 0
) -> Plan:
    """Block-aligned reads covering the sorted unique `rows` (int64): rows
    whose blocks overlap, adjoin or lie at most `max_gap` bytes (whole
    blocks) apart share one read (the gap is read and ignored: one request
    instead of two), and no read exceeds `max_read` bytes (callers ensure
    max_read >= row_blocks * block)."""
    start, lo, hi = _row_span(rows, stride, row_bytes, block)
    new_group = np.ones(rows.shape[0], dtype=bool)
    new_group[1:] = lo[1:] > hi[:-1] + max_gap // block  # a longer gap than max_gap before the row
    group_lo = lo[new_group][np.cumsum(new_group) - 1]
    # rows starting within the same window of max_read // block - row_blocks + 1 blocks
    # of their group share a read, which then ends at most max_read bytes on
    chunk = (lo - group_lo) // (max_read // block - row_blocks(row_bytes, stride, block) + 1)
    breaks = new_group.copy()
    breaks[1:] |= chunk[1:] != chunk[:-1]
    first = np.flatnonzero(breaks)
    read = np.cumsum(breaks) - 1
    last = np.append(first[1:], rows.shape[0]) - 1
    offset = lo[first] * block
    length = hi[last] * block - offset
    staged = np.cumsum(length) - length
    src = staged[read] + start - offset[read]
    need = np.minimum(length, size - offset)
    return Plan(offset, length, need, staged, src, first)


@numba.njit(parallel=True, nogil=True, cache=True)
def scatter_rows(staging, src, inverse, positions, dest, out):
    """out[dest[p], :] = staging[src[inverse[p]]:][:out.shape[1]] for p in
    positions (all in words of one width; offsets already divided by it)."""
    width = out.shape[1]
    for k in numba.prange(positions.shape[0]):
        p = positions[k]
        row = staging[src[inverse[p]] :]  # a slice, so that the copy's indices are known not to be negative
        d = dest[p]
        for j in range(width):
            out[d, j] = row[j]


def read_failed(path, length: int, offset: int, reason: str) -> DatasetError:
    """The DatasetError for a read of `length` bytes at `offset` that the kernel refused."""
    return DatasetError(path, f"read of {length} bytes at offset {offset} failed ({reason})")


def short_read(path, file: RowsFile, got: int, need: int, offset: int) -> DatasetError:
    """The DatasetError for a read at `offset` that returned `got` of the `need`
    bytes the file had when it was opened (it was truncated since)."""
    return DatasetError(
        path,
        f"truncated after opening: read {got} of {need} bytes at offset {offset} "
        f"(was {file.size} bytes, now {os.fstat(file.fd).st_size})",
    )


class ReadPool:
    """Runs reads of one file on `threads` threads into a staging buffer,
    raising DatasetError on a short read (a file truncated after open)."""

    def __init__(self, path, file: RowsFile, threads: int):
        self.path, self.file = path, file
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="gnnsys-ssd")
        self.threads = threads

    def run(self, staging: memoryview, offset, length, need, dest) -> int:
        """Read length[i] bytes at file offset[i] into staging[dest[i]:] for
        every i (arrays), on all threads; returns the bytes read."""
        args = [a.tolist() for a in (offset, length, need, dest)]
        chunk = max(1, min(_CHUNK, len(args[0]) // (4 * self.threads)))
        counter, stop = itertools.count(), []
        jobs = [
            self.pool.submit(self._work, staging, *args, chunk, counter, stop)
            for _ in range(min(self.threads, -(-len(args[0]) // chunk)))
        ]
        wait(jobs)  # all threads are done with `staging` before an error propagates
        return sum(job.result() for job in jobs)

    def _work(self, staging, offset, length, need, dest, chunk, counter, stop) -> int:
        """One thread's loop: take `chunk` reads at a time until none are left
        or another thread failed; returns the bytes it read."""
        fd, direct, n, total = self.file.fd, self.file.direct, len(offset), 0
        try:
            while not stop:
                k = next(counter) * chunk
                if k >= n:
                    return total
                for i in range(k, min(k + chunk, n)):
                    try:
                        got = os.preadv(fd, [staging[dest[i] : dest[i] + length[i]]], offset[i])
                    except OSError as e:
                        raise read_failed(self.path, length[i], offset[i], e.strerror) from None
                    if got < need[i]:
                        raise short_read(self.path, self.file, got, need[i], offset[i])
                    if not direct:
                        os.posix_fadvise(fd, offset[i], length[i], os.POSIX_FADV_DONTNEED)
                    total += got
            return total
        except BaseException:
            stop.append(True)
            raise

    def host_bytes(self) -> dict:
        """{} (the reads land in the caller's staging buffer)."""
        return {}

    def close(self):
        """Stop the threads and close the file."""
        self.pool.shutdown(wait=True)
        os.close(self.file.fd)
