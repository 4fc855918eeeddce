"""`CachedFeatures`: a software cache of feature rows over any FeatureSource.

The cache holds copies of `capacity` rows in a [capacity, dim] tensor on its
`device` (the base's by default; a CUDA device over a host or SSD tier keeps
the hot rows in GPU memory, and rows come back on that device) and a policy (storage/cache/policy.py) decides
which. It is derived data: rows are only ever copied in from the base, never
written back. Rows it evicts that the lookahead window still needs go to the
first tier below with `offer` (a VictimBuffer, victim.py); with lookahead_fill=True
a thread (lookahead_fill.py) reads the rows of the farthest batch of the window
ahead of time.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from gnnsys._capabilities import normalize_device
from gnnsys.errors import ConfigError
from gnnsys.ids import gather_distinct, indices_on, sorted_distinct
from gnnsys.storage.gather_cpu import copy_rows
from gnnsys.storage.source import CacheTier, FeatureSource, VictimTier

from ..base import check_roles
from ..cuda_stream import CudaStreams
from .belady import BeladyPolicy
from .hybrid import HybridPolicy
from .lookahead_fill import LookaheadFill
from .lru import LRUPolicy
from .policy import CachePolicy
from .s3fifo import S3FIFOPolicy
from .sieve import SievePolicy
from .static import PresamplePolicy, StaticPolicy

POLICIES = {  # the one registry of cache policies, by name
    p.name: p for p in (StaticPolicy, PresamplePolicy, LRUPolicy, SievePolicy, S3FIFOPolicy, HybridPolicy, BeladyPolicy)
}
RUN_POLICIES = tuple(name for name, p in POLICIES.items() if p.scored_by != "trace")  # what a training run may name


def run_policy(name: str) -> type[CachePolicy]:
    """The policy class a training run names (`cache_policy`: one of RUN_POLICIES), else ConfigError."""
    if name not in RUN_POLICIES:
        raise ConfigError("cache_policy", f"must be one of {', '.join(RUN_POLICIES)}, got {name!r}")
    return POLICIES[name]


def make_policy(name: str, capacity: int, num_nodes: int, **options) -> CachePolicy:
    """The policy called `name` (a key of POLICIES) for `capacity` of `num_nodes`
    rows; options: `score` (static, hybrid, and warming lru/sieve/s3fifo),
    `trace` (belady), `prior_weight`/`decay` (hybrid)."""
    if name not in POLICIES:
        raise ConfigError("policy", f"unknown cache policy {name!r} (one of {', '.join(POLICIES)})")
    return POLICIES[name](capacity, num_nodes, **options)


class CachedFeatures(CacheTier):
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
    that is a VictimBuffer; rows not in the window are dropped.
    lookahead_fill=True: see set_window; lookahead_fill_rows bounds the rows read ahead
    and held at once (None: the window's). close() stops the lookahead-fill thread
    (also when the cache is collected), then closes the base. device: where
    the cached rows live and gathered rows are returned (default the base's
    device, normalised: "cuda" is "cuda:<current>"); rows read from the base
    are copied there. On CUDA the warm-up's writes are ordered before every
    gather: the stream a gather runs on waits on the event recorded after
    them (`streams`: the stream API, default gnnsys.storage.cuda_stream.
    CudaStreams()). A cache over a stack that already holds one is refused
    (ConfigError).

    stats(): hits and misses (distinct ids per batch), requested rows (every
    id, repeats included), hit_rate, filled (rows the lookahead fill read from
    the base), fill_hits (misses served from rows filled ahead instead
    of the base), fill_skipped (rows not read ahead for lack of room),
    fill_capacity (rows; None: unbounded), and read_rate: the rows read
    from the base by gathers and by the lookahead fill per distinct row looked up,
    the share of the batches' rows the tiers below had to serve (with a
    lookahead fill it can differ from 1 - hit_rate); reset_stats() zeroes them.
    """

    base: FeatureSource

    def __init__(
        self,
        base,
        capacity: int,
        policy="lru",
        *,
        lookahead_fill: bool = False,
        lookahead_fill_rows: int | None = None,
        device=None,
        streams: CudaStreams | None = None,
        **options,
    ):
        self.base = base
        self.shape = tuple(base.shape)
        self.dtype = base.dtype
        check_roles(self)  # a cache over a stack that has one
        self.device = normalize_device(device) if device is not None else base.device
        if isinstance(policy, CachePolicy):
            if options:
                raise ConfigError("policy", "options go to make_policy, not with a policy object")
            if policy.num_nodes != self.shape[0]:
                raise ConfigError("policy", f"made for {policy.num_nodes} rows, the base has {self.shape[0]}")
            self.policy = policy
        else:
            self.policy = make_policy(policy, capacity, self.shape[0], **options)
        self._rows = torch.empty((self.policy.capacity, self.shape[1]), dtype=self.dtype, device=self.device)
        self._victim = base if isinstance(base, VictimTier) else None
        self._lock = threading.Condition()
        self.fill = LookaheadFill(base, self.policy, self._lock, lookahead_fill_rows) if lookahead_fill else None
        self._finalizer = weakref.finalize(self, self.fill.close) if self.fill is not None else None
        self._streams = streams if streams is not None else (CudaStreams() if self.device.type == "cuda" else None)
        self._warmed = self._warm()
        self.reset_stats()

    def _warm(self):
        """Copy the policy's warm rows in; on CUDA, the event recorded after
        those writes on the current stream (None elsewhere or with nothing to copy)."""
        ids, slots = self.policy.warm()
        if not ids.shape[0]:
            return None
        self.base.gather_into(torch.from_numpy(ids), self._rows, torch.from_numpy(slots))
        if self._streams is None:
            return None
        event = self._streams.new_event()
        event.record(self._streams.current(self.device))
        return event

    def set_window(self, batches) -> None:
        """The ids of the K batches sampled after the next gather (nearest
        first), before each gather: the policy records each row's next use
        (hybrid also ranks by it). With the lookahead fill, the rows of the farthest
        batch that are neither cached nor read already are read from the base
        on the lookahead-fill thread (at most one read runs and one more waits; a
        newer window replaces the waiting one) and held beside the cache until
        that batch's gather; every gather serves its misses from them, and
        the policy then treats them as rows just read (lookahead_fill.py says why
        they are not admitted early). A gather waits for a read only if that
        read is for this batch (or an earlier one); rows still being read for
        a later batch it reads itself. A failure of the thread is raised by
        the next gather (with a note saying so) and stops the lookahead fill."""
        batches = [torch.as_tensor(b).cpu().numpy().astype(np.int64, copy=False).ravel() for b in batches]
        with self._lock:
            self.policy.set_window(batches)
            if self.fill is not None and batches and batches[-1].shape[0]:
                self.fill.request(self.policy.batches + 1 + len(batches), sorted_distinct(batches[-1]))

    def wait_lookahead_fill(self) -> None:
        """Block until the lookahead-fill thread has read every requested row (a
        failure is raised by the next gather, not here)."""
        if self.fill is not None:
            self.fill.wait()

    def close(self) -> None:
        """Stop the lookahead-fill thread and wait for it, then close the base."""
        if self._finalizer is not None:
            self._finalizer()
        super().close()

    def host_bytes(self) -> dict:
        """{"rows", "policy", "lookahead_fill"}: bytes of the cached rows (when on the
        host), of the policy's arrays, and of the rows read ahead and held now."""
        with self._lock:
            return {
                "rows": self._rows.nbytes if self.device.type == "cpu" else 0,
                "policy": self.policy.host_bytes(),
                "lookahead_fill": self.fill.host_bytes() if self.fill is not None else 0,
            }

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` as a [len(ids), dim] tensor on `device`, in `out` if given
        (each distinct row written once, straight into `out`)."""
        n = torch.as_tensor(ids).shape[0]
        if self._warmed is not None and self._streams is not None:  # the warm-up wrote on another stream, perhaps
            self._streams.current(self.device).wait_event(self._warmed)
        out = gather_distinct(ids, out, self.shape, self.dtype, self.device, self._batch)
        with self._lock:
            self._requested += n
        return out

    def _batch(self, uniq_ids: torch.Tensor, out: torch.Tensor, positions: torch.Tensor) -> None:
        """The distinct sorted ids `uniq_ids`, as one batch, into out[positions]."""
        uniq, at = uniq_ids.numpy(), positions.numpy()
        with self._lock:
            ahead = self.fill.take(self.policy.batches + 1) if self.fill is not None else []
            miss = np.flatnonzero(self.policy.slot_of[uniq] < 0)
            self._read(uniq, miss, out, at, ahead)  # before the policy changes: a failed read leaves it
            hit, slot = self.policy.access(uniq)
            copy_rows(self._rows, slot[hit], out, at[hit])
            if self._victim is not None:
                self._victim.offer(*self._evicted())
            admit = miss[slot[miss] >= 0]
            copy_rows(out, at[admit], self._rows, slot[admit])
            self._hits += int(hit.sum())
            self._misses += int(miss.shape[0])

    def _read(self, uniq, miss, out, at, ahead) -> None:
        """Rows `miss` (positions in `uniq`) into out[at[miss]]: from the
        rows filled ahead `ahead` ((sorted ids, rows) each) where there, the
        rest from the base in one gather_into."""
        for ahead_ids, ahead_rows in ahead:
            if not miss.shape[0]:
                break
            where = np.minimum(np.searchsorted(ahead_ids, uniq[miss]), ahead_ids.shape[0] - 1)
            found = ahead_ids[where] == uniq[miss]
            copy_rows(ahead_rows, where[found], out, at[miss[found]])
            self._fill_hits += int(found.sum())
            miss = miss[~found]
        if miss.shape[0]:
            self.base.gather_into(torch.from_numpy(uniq[miss]), out, torch.from_numpy(at[miss]))
            self._base_reads += int(miss.shape[0])

    def _evicted(self):
        """(ids, rows, next use) of the rows the last access evicted that the
        window still uses, copied out of the cache (an offer to the victim)."""
        ids, slots = self.policy.evicted
        d = self.policy.next_use(ids)
        keep = d > 0
        return ids[keep], self._rows[self._on_device(slots[keep])], d[keep]

    def _on_device(self, index: np.ndarray) -> torch.Tensor:
        return indices_on(self.device, index)[0]

    def stats(self) -> dict:
        """The counters of the class doc since the last reset_stats."""
        with self._lock:
            looked = self._hits + self._misses
            p = self.fill
            filled = p.rows_read if p is not None else 0
            return {
                "hits": self._hits,
                "misses": self._misses,
                "requested": self._requested,
                "hit_rate": self._hits / looked if looked else 0.0,
                "filled": filled,
                "fill_hits": self._fill_hits,
                "fill_skipped": p.skipped if p is not None else 0,
                "fill_capacity": p.capacity if p is not None else 0,
                "read_rate": (self._base_reads + filled) / looked if looked else 0.0,
            }

    def reset_stats(self) -> None:
        """Zero the counters."""
        with self._lock:
            self._hits = self._misses = self._requested = self._fill_hits = self._base_reads = 0
            if self.fill is not None:
                self.fill.rows_read = self.fill.skipped = 0

    def __repr__(self):
        extra = ", lookahead fill" if self.fill is not None else ""
        return (
            f"CachedFeatures({self.policy.name}, {self.policy.capacity:,} of {self.shape[0]:,} rows{extra}, "
            f"over {type(self.base).__name__})"
        )
