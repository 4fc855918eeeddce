"""`SegmentReads`: packed batch files (storage/packing.py) read whole on a
reader thread, ahead of their gathers, into page-aligned buffers that are
reused (a fresh buffer costs a page fault per page)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .direct_io import aligned
from .packing import Segment, read_buffer_bytes, read_segment


class SegmentReads:
    """The reads in flight, by global batch (a negative key: a window's
    incoming.seg), on the executor `reading` (with O_DIRECT when `direct`),
    and the spare buffers they reuse, kept apart for the two kinds."""

    def __init__(self, reading: ThreadPoolExecutor, direct: bool):
        self.reading, self.direct = reading, direct
        self._reads: dict[int, tuple[Future, memoryview]] = {}
        self._spare: dict[bool, list[memoryview]] = {False: [], True: []}  # by whether the key is negative

    def __contains__(self, g: int) -> bool:
        return g in self._reads

    def submit(self, g: int, path: Path, segment: Segment) -> None:
        """Read batch `g`'s file `path` (its manifest's `segment`) into a spare buffer."""
        buffer = self._buffer(segment.nbytes, g < 0)
        self._reads[g] = self.reading.submit(read_segment, path, segment, self.direct, buffer), buffer

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
        """`buffer` (from take(g)) may be reused."""
        self._spare[g < 0].append(buffer)

    def cancel(self) -> None:
        """Cancel or wait out every read and drop every buffer."""
        for job, _ in self._reads.values():
            job.cancel()
            quiet(job)
        self._reads, self._spare = {}, {False: [], True: []}

    def nbytes(self, incoming: bool = False) -> int:
        """The bytes of every buffer held (in flight and spare) for batches' files, or for incoming.seg."""
        held = sum(len(b) for g, (_, b) in self._reads.items() if (g < 0) == incoming)
        return held + sum(len(b) for b in self._spare[incoming])

    def _buffer(self, nbytes: int, incoming: bool) -> memoryview:
        """A spare buffer of the kind (`incoming`) of at least `nbytes` (a new
        one a quarter larger, when none is, replacing the smaller spares)."""
        spare = self._spare[incoming]
        for i, buffer in enumerate(spare):
            if len(buffer) >= nbytes:
                return spare.pop(i)
        spare.clear()
        return memoryview(aligned(read_buffer_bytes(nbytes)))


def quiet(job: Future) -> bool:
    """Wait for `job`; whether it finished without an error (its error is not this caller's)."""
    try:
        job.result()
    except BaseException:  # noqa: BLE001 -- a cancelled or failed job is dropped
        return False
    return True
