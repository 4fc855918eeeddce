"""`sieve` (NSDI'24): one FIFO with a visited bit and a hand that moves from
the oldest row towards the newest, clearing visited bits and evicting the
first unvisited row."""

from __future__ import annotations

import numba
import numpy as np

from .policy import QueuePolicy, admit, free_slot, look_up, unlink


@numba.njit(nogil=True, cache=True)
def _sieve_access(ids, slot_of, id_of, prev, nxt, visited, stamp, ends, state, hit, slot, gone):
    """Hits set their visited bit; each miss takes a free slot or the hand's
    victim. Rows used by this batch are skipped; when every row is, the rest
    of the batch streams. state: slots used, batches seen, hand."""
    cap = id_of.shape[0]
    batch = look_up(ids, slot_of, stamp, state, hit, slot)
    for i in range(ids.shape[0]):
        if hit[i]:
            visited[slot[i]] = 1
    full = False
    for i in range(ids.shape[0]):
        if hit[i]:
            continue
        s = free_slot(state, cap)
        if s < 0:
            if full or cap == 0:
                continue
            h = state[2] if state[2] >= 0 else ends[1]
            s = -1
            for _ in range(2 * cap + 1):
                if stamp[h] != batch:
                    if visited[h]:
                        visited[h] = 0
                    else:
                        s = h
                        break
                h = prev[h] if prev[h] >= 0 else ends[1]
            if s < 0:
                full = True
                continue
            state[2] = prev[s]
            unlink(s, 0, ends, prev, nxt)
            slot_of[id_of[s]] = -1
        gone[i] = id_of[s]
        visited[s] = 0
        admit(s, ids[i], 0, slot_of, id_of, stamp, batch, ends, prev, nxt)
        slot[i] = s


class SievePolicy(QueuePolicy):
    """SIEVE eviction, batch by batch; rows used by the current batch stay."""

    name = "sieve"
    initial_state = (0, 0, -1)  # slots used, batches seen, hand
    slot_bytes = QueuePolicy.slot_bytes + 1  # visited

    def __init__(self, capacity: int, num_nodes: int, score=None):
        super().__init__(capacity, num_nodes, score)
        self._visited = np.zeros(self.capacity, np.uint8)

    def _kernel(self, ids, warm, hit, slot, gone):
        _sieve_access(
            ids,
            self.slot_of,
            self.id_of,
            self._prev,
            self._nxt,
            self._visited,
            self._stamp,
            self._ends,
            self._state,
            hit,
            slot,
            gone,
        )
