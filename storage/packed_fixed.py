"""`FixedPack`: a fixed stream of batches (sampled evaluation's: the same
batches at every evaluation) packed once for the packed tier
(storage/packed_source.py) and kept until it closes.

Its one window (storage/packer.py, with no cache: each batch's file holds
all its distinct rows in id order) is packed on the tier's packing thread
when the first gather that is no planned training batch asks for it (the
first evaluation: training never waits for it), in at most half of the
scratch budget; later windows get what it leaves. A gather whose sorted distinct ids have one of its
batches' ids_hash and count reads that batch's file whole (the next batch's is
read ahead on the tier's reader thread) and is scattered into the caller's
order; the files stay for the next evaluation.
"""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import Future

import numpy as np

from gnnsys.errors import DatasetError

from .packed_reads import SegmentReads
from .packer import Packer
from .packing import Segment, scatter_packed


class FixedPack:
    """The fixed stream `draws` (one epoch of `draws.batches` batches) of the
    packed tier `tier` (a PackedFeatures): packed without a cache in
    tier.scratch/fixed, in at most half of tier.scratch_bytes, on its
    packing thread (from `start`, at the first gather that asks for it), read on its reader thread."""

    def __init__(self, tier, draws):
        p = tier.packer
        self.packer = Packer(
            p.path,
            tier.shape,
            tier.dtype,
            p.stride,
            draws,
            0,
            tier.scratch / "fixed",
            p.direct,
            p.identity,
            tier.direct,
            window_bytes=None if tier.scratch_bytes is None else tier.scratch_bytes // 2,
        )
        self.count = int(draws.batches)
        self._packing, self._stop = tier._packing, threading.Event()
        self._job: Future | None = None
        # Two buffers, by batch parity (the next batch is read into the other while one is scattered), kept
        # between evaluations and made anew only when smaller than the file: a fresh one costs its pages' first touch.
        self._reads = SegmentReads(tier._reading, tier.direct, kind=lambda batch: batch % 2, size=lambda nbytes: nbytes)
        self._ahead: int | None = None  # the batch read ahead

    def start(self) -> None:
        """Submit the packing (once): the first gather that asks for it does."""
        if self._job is None:
            self._job = self._packing.submit(self._pack)

    def _pack(self):
        manifest, directory, packed = self.packer.pack(0, self.count, self._stop)
        index = {(s.unique, s.ids): i for i, s in enumerate(manifest.segments)}
        return manifest, directory, index, packed

    def done(self) -> bool:
        """Whether its packing has finished (or failed)."""
        return self._job is not None and self._job.done()

    def ready(self):
        """(manifest, directory, {(count, hash): batch}, whether it was packed now), once packed (its error if
        the packing failed)."""
        self.start()
        assert self._job is not None
        return self._job.result()

    def nbytes(self) -> int:
        """The bytes its window holds on disk (once packed)."""
        manifest = self.ready()[0]
        return manifest.nbytes()

    def serve(
        self, distinct: np.ndarray, fingerprint: int, inverse: np.ndarray, at: np.ndarray, words: np.ndarray
    ) -> Segment | None:
        """Where the stream has a batch whose sorted distinct ids are
        `distinct` (ids_hash `fingerprint`), scatter its rows (distinct row
        inverse[p] into words[at[p]], rows as words of words' dtype), read the
        next batch ahead and return its segment; else None."""
        manifest, directory, index = self.ready()[:3]
        batch = index.get((int(distinct.shape[0]), fingerprint))
        if batch is None:
            return None
        segment = manifest.segments[batch]
        ahead, self._ahead = self._ahead, None
        done = self._reads.take(batch) if ahead == batch else None
        if done is None:
            if ahead is not None:
                self._reads.drop(ahead)  # it may be reading into the buffer this batch takes
            done = self._reads.read(batch, directory / segment.file, segment)
        rows, buffer = done
        if batch + 1 < self.count:
            nxt = manifest.segments[batch + 1]
            self._reads.submit(batch + 1, directory / nxt.file, nxt)
            self._ahead = batch + 1
        if segment.rows != segment.unique:
            raise DatasetError(directory / segment.file, "does not hold its batch's rows; refused")
        width = words.shape[1]
        packed = np.frombuffer(rows, dtype=words.dtype, count=segment.rows * width).reshape(segment.rows, width)
        none = np.full(segment.unique, -1, np.int32)
        scatter_packed(packed[:0], packed, none, np.arange(segment.unique), inverse, at, words)
        self._reads.release(batch, buffer)
        return segment

    def host_bytes(self) -> int:
        """The bytes of its two read buffers."""
        return self._reads.nbytes()

    def close(self) -> None:
        """Stop the packing and remove the window."""
        self._stop.set()
        try:
            if self._job is not None:
                self._job.result()
        except BaseException:  # noqa: BLE001 -- a cancelled or failed packing leaves nothing to keep
            pass
        self._reads.cancel()  # a read of a file being removed
        shutil.rmtree(self.packer.scratch, ignore_errors=True)
