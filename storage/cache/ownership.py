"""Which rank of a shared cache holds which rows, and one owner's share of a step.

The rule (`Ownership`), for W ranks of `capacity` slots each and a per-node
score (higher = hotter) that every rank has identically:

1. R = round(replicate_frac x capacity) rows are replicated: the R top-scored
   rows, held by every rank (served locally, never exchanged). replicate_frac
   is the share of every rank's slots, hence of the W x capacity total, that
   holds replicas; 0 gives a purely partitioned cache, 1 W private copies of
   the same top rows.
2. The next W x (capacity - R) rows of the score ranking are striped
   round-robin: the j-th of them belongs to rank j % W, so every rank owns an
   equal share of the hottest rows and rank r's stripe is exactly what a
   static cache of its capacity - R free slots holds.
3. Every other row belongs to rank id % W.

Without a score only rule 3 applies (and replicate_frac must be 0). Ties in
the ranking go to the lower id, at the cut too (`policy.top_rows`), so every rank
computes the same owners whatever its numpy's selection algorithm. Each rank's cache runs its
policy over the rows it owns only (`shard_policy`: the policy sees a local id
space of those rows), so no dynamic admission can ever put a row in a cache
that does not own it. `SharedCachedFeatures` (shared.py) and
benchmarks/bench_shared_cache.py both route ids with `Ownership.route` and
serve a step with `serve_step`, so the benchmark simulates exactly what the
cache does.
"""

from __future__ import annotations

import numpy as np

from gnnsys.errors import ConfigError

from .cached import make_policy
from .policy import top_rows

REPLICATED = -1
ID_BYTES = 8  # ids travel as int64
HIT_COUNT_BYTES = 8  # an owner's count of hits, after the rows it returns to one peer


class Ownership:
    """The owner of every row of a `num_nodes`-row table in a cache shared by
    `world_size` ranks of `capacity` slots (the rule is in the module doc).

    owner[v]: the rank owning row v, or REPLICATED; replicated: the replicated
    ids, sorted; ranked: the rows of rules 1 and 2, hottest first."""

    def __init__(self, num_nodes: int, world_size: int, capacity: int, replicate_frac: float = 0.0, score=None):
        if not 1 <= world_size <= np.iinfo(np.int16).max:
            raise ConfigError("world_size", f"must be in [1, {np.iinfo(np.int16).max}], got {world_size}")
        if capacity < 0:
            raise ConfigError("capacity", f"must be >= 0 rows, got {capacity}")
        if not 0 <= replicate_frac <= 1:
            raise ConfigError("replicate_frac", f"must be in [0, 1], got {replicate_frac}")
        self.num_nodes, self.world_size = int(num_nodes), int(world_size)
        self.capacity = min(int(capacity), self.num_nodes)
        self.num_replicated = int(round(replicate_frac * self.capacity))
        if self.num_replicated and score is None:
            raise ConfigError("replicate_frac", "replicating the hottest rows needs a score")
        self.owner = np.resize(np.arange(self.world_size, dtype=np.int16), self.num_nodes)  # id % W
        if score is None:
            self.ranked = np.empty(0, np.int64)
        else:
            score = np.asarray(score, dtype=np.float64)
            if score.shape != (self.num_nodes,):
                raise ConfigError("score", f"needs one value per node ({self.num_nodes}), got shape {score.shape}")
            per_rank = self.capacity - self.num_replicated
            self.ranked = top_rows(score, self.num_replicated + self.world_size * per_rank)
            striped = self.ranked[self.num_replicated :]
            self.owner[striped] = np.arange(striped.shape[0]) % self.world_size
        self.owner[self.ranked[: self.num_replicated]] = REPLICATED
        self.replicated = np.sort(self.ranked[: self.num_replicated])

    def owned(self, rank: int) -> np.ndarray:
        """The sorted ids rank `rank` owns (replicated rows excluded)."""
        return np.flatnonzero(self.owner == rank).astype(np.int64)

    def route(self, ids: np.ndarray, rank: int):
        """Split the sorted distinct int64 `ids` of rank `rank`'s batch:
        (replicated, own, order, counts): masks of the ids served from the
        replica and from this rank's own shard; `order`, the positions of the
        other ids grouped by owner (rank 0's first, sorted within each); and
        `counts[r]`, how many of them rank r owns (0 for `rank` itself)."""
        who = self.owner[ids]
        replicated = who == REPLICATED
        own = who == rank
        remote = np.flatnonzero(~(replicated | own))
        order = remote[np.argsort(who[remote], kind="stable")]
        counts = np.bincount(who[remote], minlength=self.world_size).astype(np.int64)
        return replicated, own, order, counts


def shard_policy(shard: np.ndarray, name: str, capacity: int, **options):
    """The policy `name` over the rows `shard` (sorted global ids) only, as a
    local id space 0..len(shard)-1: a `score` option is restricted to them.
    belady's `trace` is refused: an owner's requests are its peers' too."""
    if "trace" in options:
        raise ConfigError("policy", "belady needs the trace of every owner's requests; the shared cache has none")
    if options.get("score") is not None:
        options["score"] = np.asarray(options["score"], dtype=np.float64)[shard]
    return make_policy(name, capacity, shard.shape[0], **options)


def serve_step(shard: np.ndarray, access, own_ids: np.ndarray, received: np.ndarray, recv_counts) -> tuple:
    """One owner's share of a step: its own ids and its peers' requests
    (`received`, grouped by peer, `recv_counts[r]` from rank r) looked up in
    its cache in one access of their union.

    access(local_ids) takes the sorted distinct local ids (positions in
    `shard`) and returns whether each was cached. Returns (union, inverse,
    own_hits, peer_hits, misses): the union's global ids, each request's
    position in it (own ids first, then `received`), the hits among the own
    ids and among each peer's requests (one count per rank), and the number
    of the union's rows that missed (read from the lower tiers)."""
    union, inverse = np.unique(np.concatenate([own_ids, received]), return_inverse=True)
    inverse = inverse.reshape(-1)
    hit = np.asarray(access(np.searchsorted(shard, union)), dtype=bool)
    request_hit = hit[inverse]
    bounds = np.cumsum(np.concatenate([[0, own_ids.shape[0]], np.asarray(recv_counts, np.int64)]))
    own_hits, *per_peer = (int(request_hit[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:]))
    return union, inverse, own_hits, np.array(per_peer, np.int64), int((~hit).sum())


def exchange_bytes(ids_out, rows_back, row_bytes: int) -> int:
    """Bytes one direction of a step carries: `ids_out[r]` ids requested from
    rank r, and `rows_back[r]` rows returned to r, each peer's rows followed
    by their hit count (only to peers that asked for something)."""
    ids_out, rows_back = np.asarray(ids_out, np.int64), np.asarray(rows_back, np.int64)
    return int(ID_BYTES * ids_out.sum() + row_bytes * rows_back.sum() + HIT_COUNT_BYTES * (rows_back > 0).sum())
