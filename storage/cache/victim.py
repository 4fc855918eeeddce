"""`VictimBuffer`: rows a cache evicted that the lookahead window still needs.

LSM-GNN's victim buffer: when the cache above (CachedFeatures) evicts a row
that one of the next K sampled batches uses, it offers the row here instead
of dropping it, with the number of batches until that use; a later gather
(the batch that needs it, or the cache's lookahead fill) then reads it from this
buffer instead of the tier below (an SSD read). The buffer holds at most
`capacity` rows in pageable host memory allocated once (exactly that size,
no CUDA context: its rows reach a GPU cache through the same synchronous
copies as the tiers below) and keeps the rows needed soonest.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from gnnsys.errors import ConfigError
from gnnsys.ids import check_ids, gather_distinct
from gnnsys.storage.gather_cpu import copy_rows
from gnnsys.storage.source import VictimTier

from .policy import replace_by_key


class VictimBuffer(VictimTier):
    """A FeatureSource over `base` that also serves up to `capacity` rows
    offered to it by the cache above (`offer`).

    Time is counted in offers: the cache above offers once per batch (with
    no rows when it evicted none), so a row offered with next use d is due
    d offers later. When full, the rows whose use is farthest, or already
    past, are dropped first; an offered row that would be the farthest is
    not kept. A row served by a gather stays until its slot is needed, as
    the first to go (its known use has come): the cache above may not have
    admitted it. gather: the distinct ids held come from the buffer (hits),
    the rest from `base` in one gather (misses). Thread-safe; the base is
    read without holding the buffer's lock. stats(): hits, misses (distinct
    ids per gather), requested (every id), hit_rate, offered (rows offered)
    and kept (offered rows taken in).
    """

    @staticmethod
    def planned_bytes(capacity: int, num_nodes: int, row_bytes: int) -> int:
        """Host bytes a buffer of `capacity` rows of `row_bytes` over `num_nodes` rows holds."""
        capacity = min(capacity, num_nodes)
        return capacity * (row_bytes + 16) + num_nodes * (4 if num_nodes < 2**31 else 8)

    def __init__(self, base, capacity: int):
        if capacity < 0:
            raise ConfigError("victim_rows", f"must be >= 0 rows, got {capacity}")
        self.base = base
        self.shape = tuple(base.shape)
        self.dtype = base.dtype
        self.device = base.device
        self.capacity = min(int(capacity), self.shape[0])
        self._rows = torch.empty((self.capacity, self.shape[1]), dtype=self.dtype)
        self._slot_of = np.full(self.shape[0], -1, np.int32 if self.shape[0] < 2**31 else np.int64)
        self._id_of = np.full(self.capacity, -1, np.int64)
        self._due = np.zeros(self.capacity, np.int64)  # the offer count at which each row is needed
        self._clock = 0
        self._lock = threading.Lock()
        self.reset_stats()

    def offer(self, ids, rows: torch.Tensor, next_use) -> None:
        """One batch of the cache above: take rows `rows` ([n, dim]) of the n
        `ids`, each needed `next_use` batches from now (>= 1; of an id given
        twice, the first counts)."""
        ids = torch.as_tensor(ids).cpu().numpy().astype(np.int64, copy=False).ravel()
        next_use = torch.as_tensor(next_use).cpu().numpy().astype(np.int64, copy=False).ravel()
        if rows.shape != (ids.shape[0], self.shape[1]) or next_use.shape != ids.shape:
            raise ValueError(
                f"offer: {ids.shape[0]} ids need rows of shape {(ids.shape[0], self.shape[1])} and "
                f"as many next uses, got {tuple(rows.shape)} and {next_use.shape[0]}"
            )
        check_ids(torch.from_numpy(ids), self.shape[0])
        if next_use.size and next_use.min() < 1:
            raise ValueError("offer: next_use must be >= 1 (batches from now)")
        offered = ids.shape[0]
        ids, first = np.unique(ids, return_index=True)
        next_use = next_use[first]
        with self._lock:
            self._clock += 1
            self._offered += offered
            if not ids.shape[0] or not self.capacity:
                return
            due = self._clock + next_use
            held = self._slot_of[ids]
            self._due[held[held >= 0]] = due[held >= 0]
            new = np.flatnonzero(held < 0)
            slot_keys = np.where(self._due > self._clock, self._due - self._clock, np.inf)
            slots, _, _ = replace_by_key(
                self._slot_of, self._id_of, ids[new], next_use[new].astype(np.float64), slot_keys
            )
            kept = slots >= 0
            self._due[slots[kept]] = due[new[kept]]
            self._rows[torch.from_numpy(slots[kept])] = rows[torch.from_numpy(first[new[kept]]).to(rows.device)].cpu()
            self._kept += int((held >= 0).sum()) + int(kept.sum())

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` as a [len(ids), dim] tensor on `device`, in `out` if given."""
        n = torch.as_tensor(ids).shape[0]
        out = gather_distinct(ids, out, self.shape, self.dtype, self.device, self.gather_into)
        with self._lock:
            self._requested += n
        return out

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        """Rows of the distinct `ids` into out[at]: those held from the buffer,
        the rest from the base in one gather_into."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0]).numpy().astype(np.int64, copy=False)
        at = at.numpy()
        with self._lock:
            slot = self._slot_of[ids].astype(np.int64)
            hit = slot >= 0
            copy_rows(self._rows, slot[hit], out, at[hit])
            self._due[slot[hit]] = self._clock
            self._hits += int(hit.sum())
            self._misses += int(ids.shape[0] - hit.sum())
        miss = np.flatnonzero(~hit)
        if miss.shape[0]:
            self.base.gather_into(torch.from_numpy(ids[miss]), out, torch.from_numpy(at[miss]))

    def host_bytes(self) -> dict:
        """{"rows", "index"}: bytes of the held rows and of the id/slot/due arrays."""
        return {"rows": self._rows.nbytes, "index": self._slot_of.nbytes + self._id_of.nbytes + self._due.nbytes}

    def held(self) -> np.ndarray:
        """The sorted ids the buffer holds now."""
        with self._lock:
            return np.sort(self._id_of[self._id_of >= 0])

    def stats(self) -> dict:
        """{"hits", "misses", "requested", "hit_rate", "offered", "kept"} since the last reset_stats."""
        with self._lock:
            looked = self._hits + self._misses
            return {
                "hits": self._hits,
                "misses": self._misses,
                "requested": self._requested,
                "hit_rate": self._hits / looked if looked else 0.0,
                "offered": self._offered,
                "kept": self._kept,
            }

    def reset_stats(self) -> None:
        """Zero the counters."""
        self._hits = self._misses = self._requested = self._offered = self._kept = 0

    def __repr__(self):
        return f"VictimBuffer({self.capacity:,} of {self.shape[0]:,} rows, over {type(self.base).__name__})"
