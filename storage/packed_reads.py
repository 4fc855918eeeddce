"""`SegmentReads`: packed batch files (storage/packing.py) read whole on a
reader thread, ahead of their gathers, into page-aligned buffers that are
reused (a fresh buffer costs a page fault per page): the packed tier's
(storage/packed_source.py), spares kept by file kind, and a fixed stream's
pack's (storage/packed_fixed.py), one buffer per batch parity."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .direct_io import aligned
from .packing import Segment, read_buffer_bytes, read_segment


def file_kind(g: int) -> str:
    """The kind of the file read under key `g`: "incoming" (a window's incoming.seg, a negative key) or "batch"."""
    return "incoming" if g < 0 else "batch"


class SegmentReads:
    """The reads in flight, by global batch (a negative key: a window's
    incoming.seg), on the executor `reading` (with O_DIRECT when `direct`),
    and the spare buffers they reuse, kept apart by `kind(key)` (by default
    file_kind); a new buffer is `size(nbytes)` bytes for a file of `nbytes`
    (by default a quarter larger, packing.read_buffer_bytes)."""

    def __init__(
        self,
        reading: ThreadPoolExecutor,
        direct: bool,
        kind: Callable[[int], Hashable] = file_kind,
        size: Callable[[int], int] = read_buffer_bytes,
    ):
        self.reading, self.direct, self.kind, self.size = reading, direct, kind, size
        self._reads: dict[int, tuple[Future, memoryview]] = {}
        self._spare: dict[Hashable, list[memoryview]] = {}

    def __contains__(self, g: int) -> bool:
        return g in self._reads

    def submit(self, g: int, path: Path, segment: Segment) -> None:
        """Read batch `g`'s file `path` (its manifest's `segment`) into a spare buffer."""
        buffer = self._buffer(g, segment.nbytes)
        self._reads[g] = self.reading.submit(read_segment, path, segment, self.direct, buffer), buffer

    def read(self, g: int, path: Path, segment: Segment) -> tuple[memoryview, memoryview]:
        """(the content of batch `g`'s file `path`, the buffer it was read into;
        give it back with `release`), read now on this thread into a spare buffer."""
        buffer = self._buffer(g, segment.nbytes)
        return read_segment(path, segment, self.direct, buffer), buffer

    def take(self, g: int) -> tuple[memoryview, memoryview] | None:
        """(the content of batch `g`'s file, the buffer it was read into; give it
        back with `release`) once read, or None when it was not submitted."""
        pending = self._reads.pop(g, None)
        return None if pending is None else (pending[0].result(), pending[1])

    def drop(self, g: int) -> None:
        """Forget batch `g`'s read (waited out, its buffer kept as a spare), if one was submitted."""
        pending = self._reads.pop(g, None)
        if pending is not None:
            pending[0].cancel()
            quiet(pending[0])
            self.release(g, pending[1])

    def release(self, g: int, buffer: memoryview) -> None:
        """`buffer` (from take(g) or read(g)) may be reused."""
        self._spare.setdefault(self.kind(g), []).append(buffer)

    def cancel(self) -> None:
        """Cancel or wait out every read and drop every buffer."""
        for job, _ in self._reads.values():
            job.cancel()
            quiet(job)
        self._reads, self._spare = {}, {}

    def nbytes(self, kind: Hashable | None = None) -> int:
        """The bytes of every buffer held (in flight and spare) for keys of `kind` (None: of any)."""
        held = sum(len(b) for g, (_, b) in self._reads.items() if kind is None or self.kind(g) == kind)
        return held + sum(len(b) for k, spare in self._spare.items() if kind is None or k == kind for b in spare)

    def _buffer(self, g: int, nbytes: int) -> memoryview:
        """A spare buffer of key `g`'s kind of at least `nbytes` (a new one of
        size(nbytes), when none is, replacing the smaller spares)."""
        spare = self._spare.setdefault(self.kind(g), [])
        for i, buffer in enumerate(spare):
            if len(buffer) >= nbytes:
                return spare.pop(i)
        spare.clear()
        return memoryview(aligned(self.size(nbytes)))


def quiet(job: Future) -> bool:
    """Wait for `job`; whether it finished without an error (its error is not this caller's)."""
    try:
        job.result()
    except BaseException:  # noqa: BLE001 -- a cancelled or failed job is dropped
        return False
    return True
