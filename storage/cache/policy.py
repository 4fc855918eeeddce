"""The cache-policy interface and the pieces the policies share.

A `CachePolicy` decides which rows a cache of `capacity` slots holds; it
stores no feature data (that is `CachedFeatures`, storage/cache/cached.py).
`access(ids)` takes the distinct ids of one batch and answers, for each, the
slot it is read from (a hit) or the slot the caller writes it into after
fetching it from the base (an admitted miss), or -1 (a miss that streams past
the cache). Admitted slots are distinct within one call, so a request larger
than the cache admits what fits and streams the rest, never waiting for space.
A policy may hand a slot hit in this batch to an admitted miss: the caller
reads every hit before writing any admitted row. After each `access`,
`evicted` holds (ids, slots) of the rows it evicted, so the caller can copy
them out (to a victim buffer) before writing the slots again.
`set_window` records each row's next use in the lookahead window for every
policy (`next_use`).
"""

from __future__ import annotations

import numba
import numpy as np

from gnnsys.errors import ConfigError


class CachePolicy:
    """Base of the policies: the id <-> slot maps, warming from a score, the
    lookahead window, and the rows evicted by the last access.

    capacity: slots (clamped to num_nodes); score: an optional per-node
    priority (higher = hotter) used to warm the cache before the first batch.
    `batches` counts the accesses. Subclasses implement `_access` (one
    batch) and `_place` (insert a warm set).
    """

    name = ""
    scored_by = "degree"  # what a run ranks rows by for it: "degree" (out-degree), "presample" (hotness), "trace"
    node_bytes = 0  # bytes of state per node beyond the base's (planned_bytes)
    slot_bytes = 0  # bytes of state per slot beyond the base's

    def __init__(self, capacity: int, num_nodes: int, score=None):
        if capacity < 0:
            raise ConfigError("capacity", f"must be >= 0 rows, got {capacity}")
        self.num_nodes = int(num_nodes)
        self.capacity = min(int(capacity), self.num_nodes)
        self.score = None if score is None else _check_score(score, self.num_nodes)  # dropped by warm()
        self.slot_of = np.full(self.num_nodes, -1, slot_dtype(self.capacity))
        self.id_of = np.full(self.capacity, -1, np.int64)
        self.batches = 0
        self.window_size = 0
        self.evicted = NO_EVICTIONS
        self._next = None  # per node: the batch number of its next use in the window (0: none)
        self._window_ids = np.empty(0, np.int64)

    @classmethod
    def planned_bytes(cls, capacity: int, num_nodes: int, *, scored: bool, window_ids: int = 0) -> int:
        """Bytes of state a policy of this class holds at most, for `capacity`
        of `num_nodes` rows, with a score or not, and a lookahead window of up
        to `window_ids` ids (0: no window): the id <-> slot maps, the score,
        each node's next use and the window's ids, and the class's own arrays
        (node_bytes, slot_bytes)."""
        per_node = np.dtype(slot_dtype(capacity)).itemsize + 8 * scored + 4 * (window_ids > 0) + cls.node_bytes
        return num_nodes * per_node + min(capacity, num_nodes) * (8 + cls.slot_bytes) + 8 * window_ids + 64

    def host_bytes(self) -> int:
        """Bytes of the arrays this policy holds now (what planned_bytes bounds)."""
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))

    def warm(self) -> tuple[np.ndarray, np.ndarray]:
        """Fill the cache with the top-scored rows; returns (ids, slots) to
        load. The score is not kept after (its per-node memory is freed)."""
        score, self.score = self.score, None
        if score is None or self.capacity == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        ids = top_rows(score, self.capacity)
        return ids, self._place(ids)

    def set_window(self, batches) -> None:
        """The ids of the K batches sampled after the one about to be accessed
        (nearest first), replacing the previous window; call it before each
        access. IndexError for an id outside [0, num_nodes)."""
        batches = [np.asarray(b, dtype=np.int64).ravel() for b in batches]
        for b in batches:
            if b.size and (b.min() < 0 or b.max() >= self.num_nodes):
                raise IndexError(f"window: id outside [0, {self.num_nodes})")
        self.window_size = len(batches)
        if self._next is None:
            if not any(b.size for b in batches):
                return
            self._next = np.zeros(self.num_nodes, np.int32)  # batch numbers
        self._next[self._window_ids] = 0
        for j in range(len(batches) - 1, -1, -1):
            self._next[batches[j]] = self.batches + 2 + j
        self._window_ids = np.concatenate(batches) if batches else np.empty(0, np.int64)

    def next_use(self, ids: np.ndarray) -> np.ndarray:
        """Per id, the batches from the last one accessed to its next use in
        the window (1: the next batch), 0 where the window does not use it."""
        if self._next is None:
            return np.zeros(ids.shape[0], np.int64)
        return np.maximum(self._next[ids] - self.batches, 0)

    def access(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hit, slot) for the distinct int64 `ids` of one batch (see module doc)."""
        self.batches += 1
        self.evicted = NO_EVICTIONS
        return self._access(ids)

    def _access(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _place(self, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _place_direct(self, ids: np.ndarray) -> np.ndarray:
        """Put `ids` into slots 0..len(ids)-1 of an empty cache."""
        slots = np.arange(ids.shape[0], dtype=np.int64)
        self.id_of[slots] = ids
        self.slot_of[ids] = slots
        return slots

    def _replace_by_key(self, miss_ids: np.ndarray, miss_keys: np.ndarray, slot_keys: np.ndarray) -> np.ndarray:
        """replace_by_key on this policy's slots; records what it evicted."""
        out, gone, freed = replace_by_key(self.slot_of, self.id_of, miss_ids, miss_keys, slot_keys)
        self.evicted = (gone, freed)
        return out


def slot_dtype(capacity: int):
    """The dtype of a slot number for a cache of `capacity` slots (-1: none)."""
    return np.int32 if capacity < 2**31 else np.int64


NO_EVICTIONS = (np.empty(0, np.int64), np.empty(0, np.int64))
NO_EVICTIONS[0].flags.writeable = NO_EVICTIONS[1].flags.writeable = False


def replace_by_key(
    slot_of: np.ndarray, id_of: np.ndarray, new_ids: np.ndarray, new_keys: np.ndarray, slot_keys: np.ndarray
):
    """Keep the len(id_of) rows of smallest key among the held rows
    (`slot_keys`, one per slot; empty slots count as infinite) and the new
    ones, updating the maps `slot_of` (id -> slot, -1) and `id_of` (slot ->
    id, -1). Returns (each new id's slot or -1, evicted ids, their slots)."""
    out = np.full(new_ids.shape[0], -1, np.int64)
    capacity = id_of.shape[0]
    if capacity == 0 or new_ids.shape[0] == 0:
        return out, NO_EVICTIONS[0], NO_EVICTIONS[1]
    empty = np.flatnonzero(id_of < 0)
    if empty.shape[0] >= new_ids.shape[0]:
        admitted, freed = np.arange(new_ids.shape[0]), empty[: new_ids.shape[0]]
        gone = np.zeros(freed.shape[0], bool)
    else:
        keys = np.concatenate([np.where(id_of >= 0, slot_keys, np.inf), new_keys])
        keep = np.argpartition(keys, capacity - 1)[:capacity]
        admitted = keep[keep >= capacity] - capacity
        kept = np.zeros(capacity, bool)
        kept[keep[keep < capacity]] = True
        freed = np.flatnonzero(~kept)
        gone = id_of[freed] >= 0
        slot_of[id_of[freed[gone]]] = -1
    evicted = (id_of[freed[gone]].copy(), freed[gone])
    id_of[freed] = new_ids[admitted]
    slot_of[new_ids[admitted]] = freed
    out[admitted] = freed
    return out, *evicted


class QueuePolicy(CachePolicy):
    """Base of the policies that keep their slots in linked lists (lru, sieve,
    s3fifo): the list arrays, a per-slot stamp of the last batch that used it,
    the kernel's state vector, and warming by accessing the warm set coldest
    first. Subclasses set `lists` and `initial_state` and run their numba
    kernel in `_kernel(ids, warm, hit, slot, gone)`; the kernel writes into
    gone[i] the id that the slot given to miss i held before (-1: none)."""

    lists = 1
    initial_state = (0, 0)  # slots used, batches seen
    slot_bytes = 24  # prev, nxt, stamp

    def __init__(self, capacity: int, num_nodes: int, score=None):
        super().__init__(capacity, num_nodes, score)
        self._prev = np.full(self.capacity, -1, np.int64)
        self._nxt = np.full(self.capacity, -1, np.int64)
        self._stamp = np.zeros(self.capacity, np.int64)
        self._ends = np.full(2 * self.lists, -1, np.int64)
        self._state = np.array(self.initial_state, np.int64)

    def _access(self, ids):
        return self._run(ids, False)

    def _place(self, ids):
        return self._run(np.ascontiguousarray(ids[::-1]), True)[1][::-1].copy()

    def _run(self, ids, warm: bool):
        hit = np.empty(ids.shape[0], np.bool_)
        slot = np.empty(ids.shape[0], np.int64)
        gone = np.full(ids.shape[0], -1, np.int64)
        self._kernel(ids, warm, hit, slot, gone)
        evicted = gone >= 0
        self.evicted = (gone[evicted], slot[evicted])
        return hit, slot

    def _kernel(self, ids, warm, hit, slot, gone):
        raise NotImplementedError


def _check_score(score, num_nodes: int) -> np.ndarray:
    score = np.asarray(score, dtype=np.float64)
    if score.shape != (num_nodes,):
        raise ConfigError("score", f"needs one value per node ({num_nodes}), got shape {score.shape}")
    if not np.isfinite(score).all() or (score < 0).any():
        raise ConfigError("score", "values must be finite and >= 0")
    return score


def top_rows(score: np.ndarray, k: int) -> np.ndarray:
    """The `k` ids of highest `score`, best first; ties go to the lower id,
    also among the rows tied at the k-th place (a rule, not an accident of
    the selection algorithm: ranks of a shared cache must agree on it)."""
    n = score.shape[0]
    k = min(k, n)
    if k == 0:
        return np.empty(0, np.int64)
    chosen = np.arange(n)
    if k < n:
        cut = np.partition(score, n - k)[n - k]
        above = np.flatnonzero(score > cut)
        chosen = np.concatenate([above, np.flatnonzero(score == cut)[: k - above.shape[0]]])
    return chosen[np.lexsort((chosen, -score[chosen]))].astype(np.int64)


# Doubly linked lists over slots, several lists in one pair of arrays: list q
# runs from ends[2q] (newest) to ends[2q+1] (oldest); prev points to the newer
# neighbour, nxt to the older one; -1 ends a list.
@numba.njit(nogil=True, cache=True)
def push_head(s, q, ends, prev, nxt):
    """Insert slot s as the newest of list q."""
    h = ends[2 * q]
    prev[s] = -1
    nxt[s] = h
    if h >= 0:
        prev[h] = s
    else:
        ends[2 * q + 1] = s
    ends[2 * q] = s


@numba.njit(nogil=True, cache=True)
def unlink(s, q, ends, prev, nxt):
    """Remove slot s from list q."""
    p, n = prev[s], nxt[s]
    if p >= 0:
        nxt[p] = n
    else:
        ends[2 * q] = n
    if n >= 0:
        prev[n] = p
    else:
        ends[2 * q + 1] = p
    prev[s] = -1
    nxt[s] = -1


@numba.njit(nogil=True, cache=True)
def free_slot(state, cap) -> int:
    """The next slot no row has held yet (state[0] counts them, of `cap`), or -1 when every one has."""
    if state[0] < cap:
        state[0] += 1
        return state[0] - 1
    return -1


@numba.njit(nogil=True, cache=True)
def admit(s, x, q, slot_of, id_of, stamp, batch, ends, prev, nxt):
    """Put id `x` into slot s (whose previous id, if any, the caller has
    unmapped) as the newest of list q, stamped with `batch`."""
    id_of[s] = x
    slot_of[x] = s
    stamp[s] = batch
    push_head(s, q, ends, prev, nxt)


@numba.njit(nogil=True, cache=True)
def look_up(ids, slot_of, stamp, state, hit, slot) -> int:
    """Start a batch: count it in state[1]; per id its slot (-1: not cached)
    and whether it hit; hits get the batch number as their stamp. Returns it."""
    batch = state[1] + 1
    state[1] = batch
    for i in range(ids.shape[0]):
        s = slot_of[ids[i]]
        slot[i] = s
        hit[i] = s >= 0
        if s >= 0:
            stamp[s] = batch
    return batch
