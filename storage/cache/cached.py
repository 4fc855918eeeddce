"""`CachedFeatures`: a software cache of feature rows over any FeatureSource.

The cache holds copies of `capacity` rows in a [capacity, dim] tensor on its
`device` (the base's by default; a CUDA device over a host or SSD tier keeps
the hot rows in GPU memory, and rows come back on that device) and a policy (storage/cache/policy.py) decides
which. It is derived data: rows are only ever copied in from the base, never
written back. Rows it evicts that the lookahead window still needs go to the
first tier below with `offer` (a VictimBuffer, victim.py); with prefetch=True
a thread (prefetch.py) reads the rows of the farthest batch of the window
ahead of time.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from gnnsys.errors import ConfigError
from gnnsys.ids import completed, distinct_request

from ..base import tiers
from .belady import BeladyPolicy
from .hybrid import HybridPolicy
from .lru import LRUPolicy
from .policy import CachePolicy
from .prefetch import Prefetcher
from .s3fifo import S3FIFOPolicy
from .sieve import SievePolicy
from .static import StaticPolicy

POLICIES = {p.name: p for p in (StaticPolicy, LRUPolicy, SievePolicy, S3FIFOPolicy, HybridPolicy, BeladyPolicy)}


def make_policy(name: str, capacity: int, num_nodes: int, **options) -> CachePolicy:
    """The policy called `name` (a key of POLICIES) for `capacity` of `num_nodes`
    rows; options: `score` (static, hybrid, and warming lru/sieve/s3fifo),
    `trace` (belady), `prior_weight`/`decay` (hybrid)."""
    if name not in POLICIES:
        raise ConfigError("policy", f"unknown cache policy {name!r} (one of {', '.join(POLICIES)})")
    return POLICIES[name](capacity, num_nodes, **options)


class CachedFeatures:
    """A FeatureSource serving rows of `base` through a cache of `capacity` rows.

    policy: a name of POLICIES (options as for make_policy) or a CachePolicy.
    Each non-empty gather is one batch: its distinct ids are looked up (in
    sorted order), hits are copied from the cache, misses are gathered from
    the base in one call, and the rows the policy admits are copied in; a
    batch with more distinct ids than the cache holds streams the rest from
    the base. The cache is warmed from the policy's score (if any).

    set_window(batches) gives every policy each row's next use. A row the
    cache evicts whose next use lies in the window is copied out before its
    slot is overwritten and offered, with that use, to the first tier below
    that has `offer` (storage.base.tiers); rows not in the window are dropped.
    prefetch=True: see set_window. close() stops the prefetch thread (also
    when the cache is collected). device: where the cached rows live and
    gathered rows are returned (default the base's device); rows read from
    the base are copied there.

    stats(): hits and misses (distinct ids per batch), requested rows (every
    id, repeats included), hit_rate, prefetched (rows the prefetch read from
    the base) and prefetch_hits (misses served from prefetched rows instead
    of the base); reset_stats() zeroes them.
    """

    def __init__(self, base, capacity: int, policy="lru", *, prefetch: bool = False, device=None, **options):
        self.base = base
        self.shape = tuple(base.shape)
        self.dtype = base.dtype
        self.device = torch.device(device) if device is not None else base.device
        if isinstance(policy, CachePolicy):
            if options:
                raise ConfigError("policy", "options go to make_policy, not with a policy object")
            if policy.num_nodes != self.shape[0]:
                raise ConfigError("policy", f"made for {policy.num_nodes} rows, the base has {self.shape[0]}")
            self.policy = policy
        else:
            self.policy = make_policy(policy, capacity, self.shape[0], **options)
        self._rows = torch.empty((self.policy.capacity, self.shape[1]), dtype=self.dtype, device=self.device)
        self._victim = next((t for t in tiers(base) if callable(getattr(t, "offer", None))), None)
        self._lock = threading.Condition()
        self.prefetcher = Prefetcher(base, self.policy, self._lock) if prefetch else None
        self._finalizer = weakref.finalize(self, self.prefetcher.close) if prefetch else None
        ids, slots = self.policy.warm()
        if ids.shape[0]:
            self._rows[self._on_device(slots)] = base.gather(torch.from_numpy(ids)).to(self.device)
        self.reset_stats()

    def set_window(self, batches) -> None:
        """The ids of the K batches sampled after the next gather (nearest
        first), before each gather: the policy records each row's next use
        (hybrid also ranks by it). With prefetch, the rows of the farthest
        batch that are neither cached nor read already are read from the base
        on the prefetch thread (at most one read runs and one more waits; a
        newer window replaces the waiting one) and held beside the cache until
        that batch's gather; every gather serves its misses from them, and
        the policy then treats them as rows just read (prefetch.py says why
        they are not admitted early). A gather waits for a read only if that
        read is for this batch (or an earlier one); rows still being read for
        a later batch it reads itself. A failure of the thread is raised by
        the next gather (with a note saying so) and stops prefetching."""
        batches = [torch.as_tensor(b).cpu().numpy().astype(np.int64, copy=False).ravel() for b in batches]
        with self._lock:
            self.policy.set_window(batches)
            if self.prefetcher is not None and batches and batches[-1].shape[0]:
                self.prefetcher.request(self.policy.batches + 1 + len(batches), np.unique(batches[-1]))

    def wait_prefetch(self) -> None:
        """Block until the prefetch thread has read every requested row (a
        failure is raised by the next gather, not here)."""
        if self.prefetcher is not None:
            self.prefetcher.wait()

    def close(self) -> None:
        """Stop the prefetch thread and wait for it; gathers still work."""
        if self._finalizer is not None:
            self._finalizer()

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` as a [len(ids), dim] tensor on `device`, in `out` if given."""
        out, uniq, inverse = distinct_request(ids, out, self.shape, self.dtype, self.device)
        if uniq is None:
            return out
        n = inverse.shape[0]
        with self._lock:
            rows = self._batch(uniq)
            self._requested += n
        torch.index_select(rows, 0, self._on_device(inverse), out=out)
        return out

    def _batch(self, uniq: np.ndarray) -> torch.Tensor:
        """The rows of the distinct sorted `uniq`, as one batch (lock held)."""
        ahead_ids, ahead_rows = (self.prefetcher.take(self.policy.batches + 1) if self.prefetcher is not None
                                 else (np.empty(0, np.int64), None))
        rows = torch.empty((uniq.shape[0], self.shape[1]), dtype=self.dtype, device=self.device)
        miss = np.flatnonzero(self.policy.slot_of[uniq] < 0)
        self._read(uniq, miss, rows, ahead_ids, ahead_rows)  # before the policy changes: a failed read leaves it
        hit, slot = self.policy.access(uniq)
        rows[self._on_device(np.flatnonzero(hit))] = self._rows[self._on_device(slot[hit])]
        if self._victim is not None:
            self._victim.offer(*self._evicted())
        admit = miss[slot[miss] >= 0]
        self._rows[self._on_device(slot[admit])] = rows[self._on_device(admit)]
        self._hits += int(hit.sum())
        self._misses += int(miss.shape[0])
        return rows

    def _read(self, uniq, miss, rows, ahead_ids, ahead_rows) -> None:
        """Rows `miss` (positions in `uniq`) into `rows`: from the prefetched
        rows where there, the rest from the base in one gather."""
        if ahead_ids.shape[0] and miss.shape[0]:
            at = np.minimum(np.searchsorted(ahead_ids, uniq[miss]), ahead_ids.shape[0] - 1)
            found = ahead_ids[at] == uniq[miss]
            rows[self._on_device(miss[found])] = ahead_rows[torch.from_numpy(at[found])].to(self.device)
            self._prefetch_hits += int(found.sum())
            miss = miss[~found]
        if miss.shape[0]:
            rows[self._on_device(miss)] = self.base.gather(torch.from_numpy(uniq[miss])).to(self.device)

    def _evicted(self):
        """(ids, rows, next use) of the rows the last access evicted that the
        window still uses, copied out of the cache (an offer to the victim)."""
        ids, slots = self.policy.evicted
        d = self.policy.next_use(ids)
        keep = d > 0
        return ids[keep], self._rows[self._on_device(slots[keep])], d[keep]

    def _on_device(self, index: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(index).to(self.device)

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None):
        """gather, already complete (the cache gathers synchronously)."""
        return completed(self.gather(ids, out))

    def stats(self) -> dict:
        """{"hits", "misses", "requested", "hit_rate", "prefetched", "prefetch_hits"} since the last reset_stats."""
        with self._lock:
            looked = self._hits + self._misses
            return {"hits": self._hits, "misses": self._misses, "requested": self._requested,
                    "hit_rate": self._hits / looked if looked else 0.0,
                    "prefetched": self.prefetcher.rows_read if self.prefetcher is not None else 0,
                    "prefetch_hits": self._prefetch_hits}

    def reset_stats(self) -> None:
        """Zero the counters."""
        with self._lock:
            self._hits = self._misses = self._requested = self._prefetch_hits = 0
            if self.prefetcher is not None:
                self.prefetcher.rows_read = 0

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self):
        extra = ", prefetch" if self.prefetcher is not None else ""
        return (f"CachedFeatures({self.policy.name}, {self.policy.capacity:,} of {self.shape[0]:,} rows{extra}, "
                f"over {type(self.base).__name__})")
