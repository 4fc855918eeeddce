"""`WindowCache`: the cached rows of the packed tier's current window
(storage/packed_source.py), in one buffer of the cache's capacity that
every window reuses, and the slot of each row in it.

A window's cache is loaded whole from its `cache.seg`; or it is already in
the buffer, where the packer put it there (`staging`: the first window the
tier reads, packed while nothing is held); or, where the rows
held are the set its manifest says `incoming.seg` completes (the cache of
the window planned before it, which shares most of its rows: the hottest
rows stay hot), by putting the incoming rows in the slots of the rows the
new set drops. The second reads a small file, which the tier reads ahead,
instead of the whole cache at the window's first batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .direct_io import aligned
from .packing import Manifest, Segment, ids_hash, padded, read_segment, scatter_packed

CARRY_SHARE = 4  # incoming rows are carried when they take at most 1/CARRY_SHARE of the cache's bytes


def carry_bytes(cache_rows: int, row_bytes: int) -> int:
    """The largest incoming.seg a cache of `cache_rows` rows of `row_bytes` carries (its read buffer)."""
    return padded(cache_rows * row_bytes) // CARRY_SHARE


def cached_ids(directory: Path, manifest: Manifest) -> np.ndarray:
    """The sorted ids of the window's cache (`cache.ids` in `directory`);
    DatasetError naming it when they are not the set `manifest` keys."""
    ids = np.fromfile(directory / "cache.ids", dtype=np.int64)
    if [ids.shape[0], ids_hash(ids)] != manifest.key["cached"]:
        raise DatasetError(directory / "cache.ids", "is not the cached set of its manifest; refused")
    return ids


class WindowCache:
    """Up to `capacity` rows of `row_bytes` of a table of `num_nodes` rows:
    `slot[id]` is the row's place in the buffer (-1: not held), `ids` the
    sorted ids held and `key` their [count, ids_hash] (None: nothing loaded)."""

    def __init__(self, num_nodes: int, capacity: int, row_bytes: int):
        self.capacity, self.row_bytes = int(capacity), int(row_bytes)
        self.slot = np.full(num_nodes, -1, np.int32)
        self.ids = np.empty(0, np.int64)
        self.key: list[int] | None = None
        self._buffer: memoryview | None = None
        self._staged: list[int] | None = None  # the cached set a packer put in the buffer, not yet held

    def staging(self) -> np.ndarray:
        """The buffer as bytes, for a packer to put a window's cached rows in
        (in id order, then `staged`); only while nothing is held."""
        assert self.key is None, "the buffer holds the current window's cache"
        self._staged = None
        return np.frombuffer(self._whole(), np.uint8)

    def staged(self, key: list[int]) -> None:
        """The buffer now holds the cached set `key` ([count, hash]), put there by a packer."""
        self._staged = key

    def load(
        self, directory: Path, manifest: Manifest, direct: bool, ids: np.ndarray, key: list[int]
    ) -> Segment | None:
        """Hold the rows `ids` (sorted) of the window in `directory` whole,
        from its cache.seg (the segment read), or as staged (None).
        DatasetError where `manifest` has no cache.seg and the buffer was not
        staged with its set (its cache is carried over from a cache not held,
        or was packed into another reader's memory)."""
        if manifest.cache is None and not (manifest.cache_in_memory() and self._staged == key):
            why = "is carried over from a window this reader did not read"
            why = why if manifest.incoming is not None else "was packed into another reader's memory"
            raise DatasetError(directory, f"its cache {why}; refused")
        self.clear()
        if manifest.cache is not None:
            read_segment(directory / manifest.cache.file, manifest.cache, direct, self._whole())
        self.slot[ids] = np.arange(ids.shape[0], dtype=np.int32)
        self.ids, self.key, self._staged = ids, key, None
        return manifest.cache

    def carries(self, manifest: Manifest) -> bool:
        """Whether `manifest`'s incoming.seg completes the rows held into its cache (and is small enough to read)."""
        incoming = manifest.incoming
        return (
            incoming is not None
            and self.key is not None
            and manifest.carried == self.key
            and incoming.nbytes <= carry_bytes(self.capacity, self.row_bytes)
        )

    def carry(self, path: Path, rows: memoryview, count: int, ids: np.ndarray, key: list[int]) -> None:
        """Hold the rows `ids` (sorted): those held stay in their slots, the
        others are the `count` rows of `rows` (the content of incoming.seg
        `path`, in id order), put in the slots of the rows `ids` drops.
        DatasetError naming `path` when it does not hold exactly the rows missing."""
        slots = self.slot[ids]
        kept = slots >= 0
        arriving = ids[~kept]
        if arriving.shape[0] != count or count * self.row_bytes > len(rows):
            raise DatasetError(path, f"holds {count} rows, its window's cache lacks {arriving.shape[0]}; refused")
        used = np.zeros(self.capacity, bool)
        used[slots[kept]] = True
        free = np.flatnonzero(~used)[: arriving.shape[0]].astype(np.int32)
        self.slot[self.ids] = -1
        self.slot[ids[kept]] = slots[kept]
        self.slot[arriving] = free
        size = arriving.shape[0] * self.row_bytes
        incoming = np.frombuffer(rows, np.uint8, count=size).reshape(-1, self.row_bytes)
        self.rows(1)[free] = incoming
        self.ids, self.key = ids, key

    def scatter(self, distinct, inverse, content, rows: int, at: np.ndarray, out: np.ndarray, path) -> None:
        """out[at[p]] = the row of distinct id distinct[inverse[p]] (the ids
        in any order): from the buffer where held, else from `content` (the
        batch's file `path`, whose `rows` rows are the rows not held, in id
        order); `out`'s rows as words of its dtype. DatasetError naming
        `path` when the file does not hold exactly the rows not held."""
        slot = self.slot[distinct]
        missed = np.flatnonzero(slot < 0)
        if missed.shape[0] != rows:
            raise DatasetError(path, "does not hold its batch's rows; refused")
        packed = np.frombuffer(content, out.dtype, count=rows * out.shape[1]).reshape(rows, out.shape[1])
        in_file = np.full(distinct.shape[0], -1, np.int64)
        in_file[missed[np.argsort(distinct[missed])]] = np.arange(missed.shape[0])
        scatter_packed(self.rows(out.dtype.itemsize), packed, slot, in_file, inverse, at, out)

    def clear(self) -> None:
        """Hold nothing (the buffer is kept for the next window)."""
        self.slot[self.ids] = -1
        self.ids, self.key = np.empty(0, np.int64), None

    def rows(self, word: int) -> np.ndarray:
        """The buffer as [capacity, row_bytes / word] words of `word` bytes."""
        flat = np.frombuffer(self._whole(), np.uint8, count=self.capacity * self.row_bytes)
        return flat.reshape(self.capacity, self.row_bytes).view(f"u{word}")

    def nbytes(self) -> int:
        """The bytes of its buffer (once made; the slots are `slot.nbytes`)."""
        return 0 if self._buffer is None else len(self._buffer)

    def _whole(self) -> memoryview:
        if self._buffer is None:
            nbytes = padded(self.capacity * self.row_bytes)
            self._buffer = memoryview(aligned(nbytes))[:nbytes]
        return self._buffer
