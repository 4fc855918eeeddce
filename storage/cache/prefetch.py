"""`Prefetcher`: CachedFeatures' background reads of the rows a coming batch needs.

When the cache's `set_window` names the next K batches, the rows of the
farthest one that are neither cached nor already read are read from the
cache's base (a victim buffer first, then the tiers below) on one thread,
while the caller computes. The rows wait here, beside the cache, until the
gather of the batch they were read for; every gather before it serves its
misses from them too. They are not put into the cache early: the policy
decides on them when their batch is gathered, as on rows read then, so a
prefetch changes when rows are read, never which rows the cache holds, and
reads no row the batch would not have read (admitting rows K batches early
displaced rows still in use and raised device reads by 8 to 26% for hybrid
on the recorded trace of tests/storage/test_victim.py).

The thread holds the cache's lock (the condition shared with CachedFeatures)
only to pick up a request and to hand back rows, never while reading. Work
and memory are bounded: one read runs and at most one more waits (a newer
request replaces the waiting one), and rows are held for at most the K
batches of the window.
"""
from __future__ import annotations

import threading

import numpy as np
import torch


class Prefetcher:
    """Reads rows of `base` ahead of the batch that needs them.

    cond: the cache's lock (a threading.Condition) guarding `policy`, whose
    slot map says which rows are cached. It holds no reference to the cache,
    so a cache that is no longer used can be collected (and close() it).
    `rows_read`: rows read from the base (the cache's stats reset it).
    """

    def __init__(self, base, policy, cond: threading.Condition):
        self._base, self._policy, self._cond = base, policy, cond
        self._job = None  # (batch, ids) waiting to be read
        self._running = None  # the batch whose rows are being read
        self._ready: dict[int, tuple[np.ndarray, torch.Tensor]] = {}  # batch -> (ids, rows) read for it
        self._error = None
        self._closed = False
        self._thread = None
        self.rows_read = 0

    def request(self, batch: int, ids: np.ndarray) -> None:
        """Read the sorted distinct `ids` of gather number `batch` (call with
        the lock held); replaces a request still waiting."""
        if self._closed:
            return
        self._job = (batch, ids)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gnnsys-cache-prefetch", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def take(self, batch: int) -> tuple[np.ndarray, torch.Tensor | None]:
        """For gather number `batch` (lock held): wait for a read of rows for
        this batch or an earlier one, drop a waiting request for those,
        re-raise a failure of the thread, and return the rows read for this
        batch or a later one as (sorted ids, rows); those for this batch (and
        earlier) are released."""
        while self._running is not None and self._running <= batch:
            self._cond.wait()
        if self._job is not None and self._job[0] <= batch:
            self._job = None
        if self._error is not None:
            error, self._error = self._error, None
            self._thread.join()  # it has left the lock for good: it only returns
            raise error
        ready = [entry for b, entry in self._ready.items() if b >= batch]
        self._ready = {b: entry for b, entry in self._ready.items() if b > batch}
        if not ready:
            return np.empty(0, np.int64), None
        ids = np.concatenate([r[0] for r in ready])
        order = np.argsort(ids, kind="stable")
        return ids[order], torch.cat([r[1] for r in ready])[torch.from_numpy(order).to(ready[0][1].device)]

    def wait(self) -> None:
        """Block until no read runs or waits (lock not held). A failure is
        not raised here: the next gather raises it."""
        with self._cond:
            while self._job is not None or self._running is not None:
                self._cond.wait()

    def is_alive(self) -> bool:
        """True while the prefetch thread runs."""
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
                    ids = ids[~np.isin(ids, np.concatenate([r[0] for r in self._ready.values()]))]
                self._running = batch
            try:
                rows = self._base.gather(torch.from_numpy(ids)) if ids.shape[0] else None
            except BaseException as error:  # noqa: BLE001 - handed to the next gather
                error.add_note(f"(raised in the cache's prefetch thread, reading rows for gather {batch}; "
                               "prefetching has stopped)")
                with self._cond:
                    self._error, self._running, self._closed = error, None, True
                    self._cond.notify_all()
                return
            with self._cond:
                self._running = None
                self.rows_read += ids.shape[0]
                if rows is not None:
                    if batch in self._ready:  # a second request for this batch read only what the first did not
                        ids, rows = (np.concatenate([self._ready[batch][0], ids]),
                                     torch.cat([self._ready[batch][1], rows]))
                    self._ready[batch] = (ids, rows)
                self._cond.notify_all()
