"""`lru`: least recently used, batch by batch (a numba kernel over the batch)."""

from __future__ import annotations

import numba

from .policy import QueuePolicy, admit, free_slot, look_up, push_head, unlink


@numba.njit(nogil=True, cache=True)
def _lru_access(ids, slot_of, id_of, prev, nxt, stamp, ends, state, hit, slot, gone):
    """Hits move to the front; then each miss takes a free slot or the least
    recently used one, unless that one is used by this batch (then it streams)."""
    cap = id_of.shape[0]
    batch = look_up(ids, slot_of, stamp, state, hit, slot)
    for i in range(ids.shape[0]):
        if hit[i]:
            unlink(slot[i], 0, ends, prev, nxt)
            push_head(slot[i], 0, ends, prev, nxt)
    for i in range(ids.shape[0]):
        if hit[i]:
            continue
        s = free_slot(state, cap)
        if s < 0:
            s = ends[1]
            if s < 0 or stamp[s] == batch:
                continue
            unlink(s, 0, ends, prev, nxt)
            slot_of[id_of[s]] = -1
        gone[i] = id_of[s]
        admit(s, ids[i], 0, slot_of, id_of, stamp, batch, ends, prev, nxt)
        slot[i] = s


class LRUPolicy(QueuePolicy):
    """Evicts the least recently used row; rows used by the current batch stay.
    Within a batch, ids count as used in the order given (sorted in CachedFeatures)."""

    name = "lru"

    def _kernel(self, ids, warm, hit, slot, gone):
        _lru_access(
            ids, self.slot_of, self.id_of, self._prev, self._nxt, self._stamp, self._ends, self._state, hit, slot, gone
        )
