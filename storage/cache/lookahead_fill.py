"""`LookaheadFill`: CachedFeatures' background reads of the rows a coming batch needs.

When the cache's `set_window` names the next K batches, the rows of the
farthest one that are neither cached nor already read are read from the
cache's base (a victim buffer first, then the tiers below) on one thread,
while the caller computes. The rows wait here, beside the cache, until the
gather of the batch they were read for; every gather before it serves its
misses from them too. They are not put into the cache early: the policy
decides on them when their batch is gathered, as on rows read then, so a
lookahead fill changes when rows are read, never which rows the cache holds, and
reads no row the batch would not have read (admitting rows K batches early
displaced rows still in use and raised device reads by 8 to 26% for hybrid
on the recorded trace of tests/storage/test_victim.py).

The thread holds the cache's lock (the condition shared with CachedFeatures)
only to pick up a request and to hand back rows, never while reading. Work
and memory are bounded: one read runs and at most one more waits (a newer
request replaces the waiting one), rows are held for at most the K batches
of the window, and never more than `capacity` rows at once, those being read
included (the part of a host-memory budget left to it): rows beyond that are
not read ahead (counted in `skipped`) and their batch reads them itself.
"""

from __future__ import annotations

import threading

import numpy as np
import torch


class LookaheadFill:
    """Reads rows of `base` ahead of the batch that needs them.

    cond: the cache's lock (a threading.Condition) guarding `policy`, whose
    slot map says which rows are cached. It holds no reference to the cache,
    so a cache that is no longer used can be collected (and close() it).
    capacity: the most rows held at once (None: no bound beyond the window).
    `rows_read`: rows read from the base; `skipped`: rows not read ahead for
    lack of room (the cache's stats reset both).
    """

    def __init__(self, base, policy, cond: threading.Condition, capacity: int | None = None):
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0 rows, got {capacity}")
        self._base, self._policy, self._cond = base, policy, cond
        self.capacity = capacity
        self._row_bytes = base.shape[1] * base.dtype.itemsize
        self._job = None  # (batch, ids) waiting to be read
        self._running = None  # the batch whose rows are being read
        self._reading = 0  # rows of the read in progress
        self._ready: dict[int, list] = {}  # batch -> [(sorted ids, rows)] read for it
        self._error = None
        self._closed = False
        self._thread = None
        self.rows_read = self.skipped = 0

    def held_rows(self) -> int:
        """Rows held now, those being read included (lock held)."""
        return self._reading + sum(ids.shape[0] for _, ids, _ in self._entries())

    def _entries(self):
        """(batch, ids, rows) of every read held."""
        return ((b, ids, rows) for b, reads in self._ready.items() for ids, rows in reads)

    def host_bytes(self) -> int:
        """Bytes of the rows held now (lock held); host memory when the base is on the host."""
        return self.held_rows() * self._row_bytes if self._base.device.type == "cpu" else 0

    def request(self, batch: int, ids: np.ndarray) -> None:
        """Read the sorted distinct `ids` of gather number `batch` (call with
        the lock held); replaces a request still waiting."""
        if self._closed:
            return
        self._job = (batch, ids)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gnnsys-cache-lookahead-fill", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def take(self, batch: int) -> list[tuple[np.ndarray, torch.Tensor]]:
        """For gather number `batch` (lock held): wait for a read of rows for
        this batch or an earlier one, drop a waiting request for those,
        re-raise a failure of the thread, and return the rows read for this
        batch or a later one, as (sorted ids, rows) per batch they were read
        for; those for this batch (and earlier) are released."""
        while self._running is not None and self._running <= batch:
            self._cond.wait()
        if self._job is not None and self._job[0] <= batch:
            self._job = None
        if self._error is not None:
            error, self._error = self._error, None
            self._thread.join()  # it has left the lock for good: it only returns
            raise error
        ready = [(ids, rows) for b, ids, rows in self._entries() if b >= batch]
        self._ready = {b: reads for b, reads in self._ready.items() if b > batch}
        return ready

    def wait(self) -> None:
        """Block until no read runs or waits (lock not held). A failure is
        not raised here: the next gather raises it."""
        with self._cond:
            while self._job is not None or self._running is not None:
                self._cond.wait()

    def is_alive(self) -> bool:
        """True while the lookahead-fill thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop the thread (after a read in progress) and wait for it."""
        with self._cond:
            self._closed = True
            self._job = None
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self):
        while True:
            with self._cond:
                while self._job is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                batch, ids = self._job
                self._job = None
                ids = ids[self._policy.slot_of[ids] < 0]
                if self._ready:
                    ids = ids[~np.isin(ids, np.concatenate([held for _, held, _ in self._entries()]))]
                if self.capacity is not None:
                    room = max(self.capacity - self.held_rows(), 0)
                    self.skipped += max(ids.shape[0] - room, 0)
                    ids = ids[:room]
                self._running, self._reading = batch, ids.shape[0]
            try:
                rows = self._base.gather(torch.from_numpy(ids)) if ids.shape[0] else None
            except BaseException as error:  # noqa: BLE001 - handed to the next gather
                error.add_note(
                    f"(raised in the cache's lookahead-fill thread, reading rows for gather {batch}; "
                    "the lookahead fill has stopped)"
                )
                with self._cond:
                    self._error, self._running, self._reading, self._closed = error, None, 0, True
                    self._cond.notify_all()
                return
            with self._cond:
                self._running, self._reading = None, 0
                self.rows_read += ids.shape[0]
                if rows is not None:  # a second request for a batch reads only what the first did not
                    self._ready.setdefault(batch, []).append((ids, rows))
                self._cond.notify_all()
