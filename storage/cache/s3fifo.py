"""`s3fifo` (SOSP'23): a small FIFO (10% of the slots) that new rows enter, a
main FIFO for rows reused while in the small one, and a ghost list of ids
recently evicted from the small FIFO (a miss on a ghost id enters main)."""

from __future__ import annotations

import numba
import numpy as np

from .policy import QueuePolicy, admit, free_slot, look_up, push_head, unlink

_SMALL, _MAIN = 0, 1


@numba.njit(nogil=True, cache=True)
def _insert(s, x, q, slot_of, id_of, which, freq, stamp, batch, ends, prev, nxt, size):
    which[s] = q
    freq[s] = 0
    size[q] += 1
    admit(s, x, q, slot_of, id_of, stamp, batch, ends, prev, nxt)


@numba.njit(nogil=True, cache=True)
def _victim(slot_of, id_of, which, freq, stamp, batch, ends, prev, nxt, size, ghost, state):
    """Free one slot (S3-FIFO's evictS/evictM; rows used by this batch count
    as reused); -1 when every row is used by this batch."""
    cap = id_of.shape[0]
    small_target = max(1, cap // 10)
    for _ in range(5 * cap + 5):
        q = _SMALL if size[_SMALL] >= small_target or size[_MAIN] == 0 else _MAIN
        t = ends[2 * q + 1]
        if q == _SMALL and (freq[t] > 0 or stamp[t] == batch):
            unlink(t, _SMALL, ends, prev, nxt)
            size[_SMALL] -= 1
            which[t] = _MAIN
            freq[t] = 0
            size[_MAIN] += 1
            push_head(t, _MAIN, ends, prev, nxt)
        elif q == _MAIN and (freq[t] > 0 or stamp[t] == batch):
            if stamp[t] != batch:
                freq[t] -= 1
            unlink(t, _MAIN, ends, prev, nxt)
            push_head(t, _MAIN, ends, prev, nxt)
        else:
            unlink(t, q, ends, prev, nxt)
            size[q] -= 1
            if q == _SMALL:
                state[2] += 1
                ghost[id_of[t]] = state[2]
            slot_of[id_of[t]] = -1
            return t
    return -1


@numba.njit(nogil=True, cache=True)
def _s3fifo_access(ids, slot_of, id_of, prev, nxt, which, freq, stamp, ends, size, ghost, state, warm, hit, slot, gone):
    """Hits raise their frequency (at most 3); misses enter the small FIFO, or
    main when their id is in the ghost list (or when warming). state: slots
    used, batches seen, ghost insertions."""
    cap = id_of.shape[0]
    batch = look_up(ids, slot_of, stamp, state, hit, slot)
    for i in range(ids.shape[0]):
        if hit[i]:
            freq[slot[i]] = min(freq[slot[i]] + 1, 3)
    full = cap == 0
    for i in range(ids.shape[0]):
        if hit[i]:
            continue
        s = free_slot(state, cap)
        if s < 0:
            if full:
                continue
            s = _victim(slot_of, id_of, which, freq, stamp, batch, ends, prev, nxt, size, ghost, state)
            if s < 0:
                full = True
                continue
        x = ids[i]
        in_ghost = ghost[x] > 0 and state[2] - ghost[x] < cap
        if in_ghost:
            ghost[x] = 0
        q = _MAIN if warm or in_ghost else _SMALL
        gone[i] = id_of[s]
        _insert(s, x, q, slot_of, id_of, which, freq, stamp, batch, ends, prev, nxt, size)
        slot[i] = s


class S3FIFOPolicy(QueuePolicy):
    """S3-FIFO eviction, batch by batch; rows used by the current batch stay.
    A row moves from the small FIFO to main when hit at least once there; the
    ghost list remembers the last `capacity` ids evicted from the small FIFO."""

    name = "s3fifo"

    lists = 2  # small FIFO, main FIFO
    node_bytes = 8  # ghost
    slot_bytes = QueuePolicy.slot_bytes + 2  # which, freq
    initial_state = (0, 0, 0)  # slots used, batches seen, ghost insertions

    def __init__(self, capacity: int, num_nodes: int, score=None):
        super().__init__(capacity, num_nodes, score)
        self._which = np.zeros(self.capacity, np.int8)
        self._freq = np.zeros(self.capacity, np.int8)
        self._size = np.zeros(2, np.int64)
        self._ghost = np.zeros(self.num_nodes, np.int64)

    def _kernel(self, ids, warm, hit, slot, gone):
        _s3fifo_access(
            ids,
            self.slot_of,
            self.id_of,
            self._prev,
            self._nxt,
            self._which,
            self._freq,
            self._stamp,
            self._ends,
            self._size,
            self._ghost,
            self._state,
            warm,
            hit,
            slot,
            gone,
        )
