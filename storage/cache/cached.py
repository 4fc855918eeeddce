"""`CachedFeatures`: a software cache of feature rows over any FeatureSource.

The cache holds copies of `capacity` rows in a [capacity, dim] tensor on the
base's device (host memory for a CPU base; a GPU-resident cache over a host
or SSD tier is future work) and a policy (storage/cache/policy.py) decides
which. It is derived data: rows are only ever copied in from the base, never
written back.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from gnnsys.errors import ConfigError
from gnnsys.ids import check_ids, completed, gather_output

from .belady import BeladyPolicy
from .hybrid import HybridPolicy
from .lru import LRUPolicy
from .policy import CachePolicy
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
    Each gather is one batch: its distinct ids are looked up (in sorted
    order), hits are copied from the cache, misses are gathered from the base
    in one call, and the rows the policy admits are copied in; a batch with
    more distinct ids than the cache holds streams the rest from the base.
    The cache is warmed from the policy's score (if any) on construction.
    stats(): hits and misses (distinct ids per batch) and requested rows
    (every id, repeats included); reset_stats() zeroes them.
    """

    def __init__(self, base, capacity: int, policy="lru", **options):
        self.base = base
        self.shape = tuple(base.shape)
        self.dtype = base.dtype
        self.device = base.device
        if isinstance(policy, CachePolicy):
            if options:
                raise ConfigError("policy", "options go to make_policy, not with a policy object")
            if policy.num_nodes != self.shape[0]:
                raise ConfigError("policy", f"made for {policy.num_nodes} rows, the base has {self.shape[0]}")
            self.policy = policy
        else:
            self.policy = make_policy(policy, capacity, self.shape[0], **options)
        self._rows = torch.empty((self.policy.capacity, self.shape[1]), dtype=self.dtype, device=self.device)
        self._lock = threading.Lock()
        ids, slots = self.policy.warm()
        if ids.shape[0]:
            self._rows[torch.from_numpy(slots).to(self.device)] = base.gather(torch.from_numpy(ids))
        self.reset_stats()

    def set_window(self, batches) -> None:
        """Pass the ids of the batches sampled after the next gather (nearest
        first) to the policy; only lookahead policies (hybrid) use them."""
        with self._lock:
            self.policy.set_window([torch.as_tensor(b).cpu().numpy() for b in batches])

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` as a [len(ids), dim] tensor on `device`, in `out` if given."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        n = ids.shape[0]
        out = gather_output(out, n, self.shape[1], self.dtype, self.device)
        if n == 0:
            return out
        uniq, inverse = np.unique(ids.cpu().numpy().astype(np.int64, copy=False), return_inverse=True)
        with self._lock:
            hit, slot = self.policy.access(uniq)
            rows = torch.empty((uniq.shape[0], self.shape[1]), dtype=self.dtype, device=self.device)
            where_hit = torch.from_numpy(np.flatnonzero(hit)).to(self.device)
            rows[where_hit] = self._rows[torch.from_numpy(slot[hit]).to(self.device)]
            miss = np.flatnonzero(~hit)
            if miss.shape[0]:
                where_miss = torch.from_numpy(miss).to(self.device)
                rows[where_miss] = self.base.gather(torch.from_numpy(uniq[miss]))
                admit = miss[slot[miss] >= 0]
                self._rows[torch.from_numpy(slot[admit]).to(self.device)] = rows[torch.from_numpy(admit).to(self.device)]
            self._hits += int(hit.sum())
            self._misses += int(miss.shape[0])
            self._requested += n
        torch.index_select(rows, 0, torch.from_numpy(inverse.reshape(-1)).to(self.device), out=out)
        return out

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None):
        """gather, already complete (the cache gathers synchronously)."""
        return completed(self.gather(ids, out))

    def stats(self) -> dict:
        """{"hits", "misses", "requested", "hit_rate"} since the last reset_stats."""
        with self._lock:
            looked = self._hits + self._misses
            return {"hits": self._hits, "misses": self._misses, "requested": self._requested,
                    "hit_rate": self._hits / looked if looked else 0.0}

    def reset_stats(self) -> None:
        """Zero the counters."""
        self._hits = self._misses = self._requested = 0

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self):
        return (f"CachedFeatures({self.policy.name}, {self.policy.capacity:,} of {self.shape[0]:,} rows, "
                f"over {type(self.base).__name__})")
