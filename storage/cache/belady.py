"""`belady`: the offline optimum over a recorded trace (evict the row whose
next use is farthest; a missed row needed later than every cached one is not
admitted). For tests and benchmarks only: it must be given the batches in
advance and then accessed with exactly those batches, in order."""

from __future__ import annotations

import numpy as np

from gnnsys.ids import sorted_distinct

from .policy import CachePolicy


class BeladyPolicy(CachePolicy):
    """Belady's MIN with bypass over `trace` (a list of id batches); the cache
    starts warm with the rows first used soonest."""

    name = "belady"
    scored_by = "trace"  # the offline bound: tests and benchmarks, never a run
    node_bytes = 8  # next use (the recorded trace is the caller's)

    def __init__(self, capacity: int, num_nodes: int, trace, score=None):
        super().__init__(capacity, num_nodes)
        self._trace = [sorted_distinct(np.asarray(b, dtype=np.int64)) for b in trace]
        never = len(self._trace)
        upcoming = np.full(self.num_nodes, never, np.int64)
        self._after = [None] * never  # per batch: next use of each of its ids
        for t in range(never - 1, -1, -1):
            ids = self._trace[t]
            if ids.size and (ids[0] < 0 or ids[-1] >= self.num_nodes):
                raise IndexError(f"trace batch {t}: id outside [0, {self.num_nodes})")
            self._after[t] = upcoming[ids]
            upcoming[ids] = t
        self._next_of = upcoming
        self._never = never

    def warm(self):
        """Fill the cache with the rows whose first use comes soonest."""
        order = np.argsort(self._next_of, kind="stable")[: self.capacity]
        ids = order[self._next_of[order] < self._never]
        return ids, self._place_direct(ids)

    def _access(self, ids):
        """(hit, slot) for batch number t of the trace (ValueError if `ids` differ from it)."""
        t = self.batches - 1
        if t >= self._never or not np.array_equal(ids, self._trace[t]):
            raise ValueError(f"belady: access {t} does not match batch {t} of the recorded trace")
        slot = self.slot_of[ids]
        hit = slot >= 0
        self._next_of[ids] = self._after[t]
        miss = np.flatnonzero(~hit)
        slot_keys = self._next_of[np.maximum(self.id_of, 0)].astype(np.float64)
        slot[miss] = self._replace_by_key(ids[miss], self._after[t][miss].astype(np.float64), slot_keys)
        return hit, slot
