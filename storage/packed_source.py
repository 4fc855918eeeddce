"""`PackedFeatures`: the packed tier, which trains from batches packed on
disk ahead of training (DiskGNN's offline sampling, with online sampling's
batches: storage/packer.py draws exactly the batches the loader will).

Training's batches are known in advance (every draw is a function of seed,
epoch, batch, layer and node), so a window of them is packed while the
previous window trains (storage/packed_jobs.py: drawn on one thread, its
rows written on another): its cache (the rows the window reads most)
and, per batch, its uncached rows in id order as one file (storage/packing.py).
A gather that is the next planned batch (its ids have the manifest's count
and ids_hash) reads that batch's file whole with large O_DIRECT reads,
`ahead` batches ahead on a reader thread, scatters the rows from the cache
and the file into the caller's order and deletes the file. A fixed stream
(sampled evaluation's: draws.fixed) is packed once and kept
(storage/packed_fixed.py); any other gather (an epoch the tier was not told
of) is served by `base`.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from gnnsys.errors import ConfigError
from gnnsys.ids import check_ids, distinct_inverse, gather_output

from .packed_cache import WindowCache, cached_ids
from .packed_fixed import FixedPack
from .packed_jobs import WindowJobs, packing_executor
from .packed_plan import DEFAULT_AHEAD
from .packed_reads import SegmentReads
from .packed_scratch import new_scratch, takes_direct
from .packer import Packer
from .packing import Manifest, ids_hash, read_sampled
from .source import CacheTier
from .ssd import SSDFeatures, rows_file

_COUNTERS = ("hits", "misses", "batches", "fixed", "unplanned", "bytes_read", "useful_bytes", "read_wait_s")
_COUNTERS += ("presampled", "windows_carried")
_PACKING = ("windows_packed", "windows_reused", "pack_s", "packed_bytes")


class _Window:
    """The window being trained: its first global batch, manifest and directory."""

    def __init__(self, first: int, manifest: Manifest, directory: Path):
        self.first, self.manifest, self.directory = first, manifest, directory


class PackedFeatures(CacheTier):
    """The rows of `table` (a memory-mapped RowTable) for the batches of
    `draws`, packed in windows under a scratch directory (see the module
    docstring); a cache tier, whose cache is the window's most read rows.

    base: the SSDFeatures over the same file, which serves the gathers
    that are no planned batch (and whose O_DIRECT mode the packer's scan
    takes). draws: the batches (storage.packer.Packer), with `fixed`, a
    fixed stream's draws to pack once (FixedPack), if it has one. capacity: the
    cache's rows. ahead: batches whose files are read ahead. window: batches
    a window holds (default: an epoch's). scratch_dir: where windows are
    written; None (default) makes a directory of its own (in the system's
    temporary directory where it takes O_DIRECT reads, else beside the
    dataset) and removes it at close; a given one that does not exist yet is
    made (its parent must exist) and removed at close when empty. scratch_bytes: the most the windows
    may hold on disk together (None: what the disk has free). `start_epoch(e)` says epoch e is next
    (packing starts from it; a run that resumes at e packs e); without it
    the first gather starts at epoch 0 and epochs follow in order, up to
    draws.epochs (None: no end).
    """

    name = "packed"

    def __init__(
        self,
        base,
        table,
        draws,
        *,
        capacity: int,
        ahead: int = DEFAULT_AHEAD,
        window=None,
        scratch_dir=None,
        scratch_bytes: int | None = None,
    ):
        path, self.shape, self.dtype, stride = rows_file(table)
        if not isinstance(base, SSDFeatures) or base.shape != self.shape or base.dtype != self.dtype:
            raise ConfigError("features", f"the packed tier's base {base!r} is not {path}'s rows")
        if ahead < 1:
            raise ConfigError("ahead", f"must be at least 1 batch, got {ahead}")
        self.base, self.per_epoch, self.ahead = base, int(draws.batches), int(ahead)
        self.window = self.per_epoch if window is None else int(window)
        self._end = None if draws.epochs is None else int(draws.epochs) * self.per_epoch  # no batch from here on
        if self.per_epoch < 1 or self.window < 1:
            raise ConfigError(
                "window", f"a window and an epoch need at least 1 batch, got {self.window}, {draws.batches}"
            )
        self.row_bytes = self.shape[1] * self.dtype.itemsize
        self._own = scratch_dir is None
        self._made = not self._own and not Path(scratch_dir).is_dir()  # a subdirectory made here, removed at close
        if self._made:
            Path(scratch_dir).mkdir()
        self.scratch, self.direct = new_scratch(path) if self._own else (Path(scratch_dir), takes_direct(scratch_dir))
        rows = (path, self.shape, self.dtype, stride)
        budget = None if scratch_bytes is None else scratch_bytes // 2  # two windows are held at a time
        self.packer = Packer(*rows, draws, capacity, self.scratch, base.direct, table.identity, self.direct, budget)
        self.scratch_bytes = scratch_bytes
        self._word = math.gcd(8, self.row_bytes)
        self._cache = WindowCache(self.shape[0], self.packer.capacity, self.row_bytes)
        self._packing = packing_executor("gnnsys-pack")
        self._reading = ThreadPoolExecutor(1, thread_name_prefix="gnnsys-packed-read")
        fixed = getattr(draws, "fixed", None)
        self.fixed = None if fixed is None else FixedPack(self, fixed)
        self._jobs = WindowJobs(self.packer, self._packing, self._count, self._planned)
        self._reads = SegmentReads(self._reading, self.direct)
        self._cursor: int | None = None
        self._start = 0
        self._current: _Window | None = None
        self._lock = threading.RLock()
        self.reset_stats()

    def start_epoch(self, epoch: int) -> None:
        """Epoch `epoch`'s batches are gathered next: packing restarts from
        it unless the tier is already there (the previous epoch just ended)."""
        first = int(epoch) * self.per_epoch
        with self._lock:
            if self._cursor == first:
                return
            self._drop_all()
            self._start = self._cursor = first
            self._ensure(first)
            self._jobs.plan(first + self.window)

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` as a [len(ids), dim] tensor (in `out` if given); IndexError for ids out of range."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        out = gather_output(out, ids.shape[0], self.shape[1], self.dtype)
        self._gather_to(ids, out, torch.arange(ids.shape[0]))
        return out

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        """Row ids[i] into out[at[i]], in place for a contiguous CPU `out` of this dtype."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        if out.device.type != "cpu" or out.dtype != self.dtype or not out.is_contiguous():
            return super().gather_into(ids, out, at)
        self._gather_to(ids, out, at.long())

    def _gather_to(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        with self._lock:  # an empty gather too: a node type a batch reads no row of is a planned batch
            raw = ids.numpy().astype(np.int64, copy=False)
            if self._cursor is None:
                self.start_epoch(0)
            assert self._cursor is not None
            window = self._enter(self._cursor) if self._planned(self._cursor) else None
            segment = window.manifest.segments[self._cursor - window.first] if window is not None else None
            if segment is not None and segment.unique == raw.shape[0] and segment.ids == ids_hash(raw):
                distinct, inverse = raw, np.arange(raw.shape[0])  # the planned batch (its ids distinct): no sort
            else:
                distinct, inverse = distinct_inverse(raw)
                fingerprint = ids_hash(distinct)
                if segment is None or segment.unique != distinct.shape[0] or segment.ids != fingerprint:
                    self._unplanned(ids, out, at, distinct, inverse, fingerprint)
                    return
            assert window is not None
            began = time.perf_counter()
            rows, buffer = self._take(self._cursor)
            self._stats["read_wait_s"] += time.perf_counter() - began
            path = window.directory / segment.file
            self._cache.scatter(distinct, inverse, rows, segment.rows, at.numpy(), self._words(out), path)
            self._reads.release(self._cursor, buffer)
            _remove(path)  # consumed
            hits, useful = distinct.shape[0] - segment.rows, segment.rows * self.row_bytes
            self._tally(hits=hits, misses=segment.rows, batches=1, bytes_read=segment.nbytes, useful_bytes=useful)
            self._cursor += 1
            self._read_ahead()

    def _unplanned(self, ids, out, at, distinct: np.ndarray, inverse: np.ndarray, fingerprint: int) -> None:
        """A gather that is no planned batch: from the fixed stream's pack
        where it is one of its batches, else from the base."""
        began, words = time.perf_counter(), self._words(out)
        served = None if self.fixed is None else self.fixed.serve(distinct, fingerprint, inverse, at.numpy(), words)
        if served is None:
            self._stats["unplanned"] += 1
            self.base.gather_into(ids, out, at)
            return
        waited, useful = time.perf_counter() - began, served.rows * self.row_bytes
        self._tally(read_wait_s=waited, fixed=1, bytes_read=served.nbytes, useful_bytes=useful)

    def _tally(self, **counts) -> None:
        """Add `counts` to the counters of stats()."""
        for name, value in counts.items():
            self._stats[name] += value

    def presampled(self, seeds: torch.Tensor, epoch: int, batch: int) -> dict | None:
        """Training batch `batch` of epoch `epoch` as the packer sampled it
        ({name: array}, storage/packing.py), its file then removed, when it is
        written and its seeds are `seeds`; else None (the caller samples it)."""
        g = int(epoch) * self.per_epoch + int(batch)
        # Without the lock, which a gather holds while it waits: a batch is written before its
        # window's scan, and a path from a cursor that moves meanwhile only finds no such file.
        cursor, start = self._cursor, self._start
        if cursor is None or not self._planned(g) or g < start:
            return None
        first = self._first(g, start)
        path = self.packer.sampled_path(first, self._count(first), g)
        arrays = read_sampled(path, self.packer.sampled_key)
        if arrays is None or not np.array_equal(arrays["seeds"], seeds.numpy()):
            return None
        _remove(path)
        self._stats["presampled"] += 1  # only this thread counts it
        return arrays

    def _words(self, out: torch.Tensor) -> np.ndarray:
        """`out`'s rows as [rows, words] of this tier's word width."""
        return out.view(torch.uint8).reshape(out.shape[0], self.row_bytes).numpy().view(f"u{self._word}")

    def _first(self, g: int, start: int | None = None) -> int:
        """The first global batch of the window holding global batch `g`
        (windows from global batch `start`, by default the tier's)."""
        start = self._start if start is None else start
        return start + (g - start) // self.window * self.window

    def _planned(self, g: int) -> bool:
        """Whether global batch `g` is one of the run's (before its last epoch's end)."""
        return self._end is None or g < self._end

    def _count(self, first: int) -> int:
        """The batches of the window from global batch `first` (the last one may be cut at the run's end)."""
        return self.window if self._end is None else min(self.window, self._end - first)

    def _ensure(self, first: int) -> Future | None:
        """The packing of the window from global batch `first` (submitted now
        if it was not); None past the run's last batch."""
        return self._jobs.window(first, self._pack)

    def _pack(self, first: int, stop: threading.Event, plan: Future):
        began = time.perf_counter()
        if self.fixed is not None and self.scratch_bytes is not None:  # packed before: its error, if any, is here
            held = self.fixed.nbytes() if self.fixed.done() else self.fixed.packer.window_bytes  # or may hold
            self.packer.window_bytes = (self.scratch_bytes - held) // 2
        into = self._cache.staging() if first == self._start else None  # nothing is held before the first window
        manifest, directory, packed = self.packer.pack(first, self._count(first), stop, plan.result(), into)
        if packed and manifest.cache_in_memory():
            self._cache.staged(manifest.key["cached"])
        self._packed["windows_packed" if packed else "windows_reused"] += 1
        self._packed["pack_s"] += time.perf_counter() - began
        if packed:
            self._packed["packed_bytes"] += manifest.nbytes()
        return manifest, directory

    def _enter(self, g: int) -> _Window:
        """The window of global batch `g`, made current (its cache loaded, the
        previous window's files removed, the next window's packing started)."""
        first = self._first(g)
        if self._current is not None and self._current.first == first:
            return self._current
        began = time.perf_counter()
        job = self._ensure(first)
        assert job is not None  # g is planned
        manifest, directory = job.result()
        ids, key = cached_ids(directory, manifest), manifest.key["cached"]
        if self._current is not None:  # done: its files go before the next cache is read
            self._close_window(self._current)
            self._current = None
        if self._cache.carries(manifest):
            assert manifest.incoming is not None
            rows, buffer = self._take(-1 - first)
            self._cache.carry(directory / manifest.incoming.file, rows, manifest.incoming.rows, ids, key)
            self._reads.release(-1 - first, buffer)
            read = manifest.incoming
            self._stats["windows_carried"] += 1
        else:
            self._reads.drop(-1 - first)
            read = self._cache.load(directory, manifest, self.direct, ids, key)
        self._current = _Window(first, manifest, directory)
        if read is not None:
            self._tally(bytes_read=read.nbytes, useful_bytes=read.rows * self.row_bytes)
        self._stats["read_wait_s"] += time.perf_counter() - began
        self._ensure(first + self.window)
        self._jobs.plan(first + 2 * self.window)  # drawn while the next one is scanned
        return self._current

    def _close_window(self, window: _Window) -> None:
        self._jobs.forget(window.first)
        self.packer.remove(window.first, self._count(window.first))

    def _take(self, g: int) -> tuple[memoryview, memoryview]:
        """(the content of global batch `g`'s file, or for g = -1 - first the
        incoming.seg of the window from `first`; the buffer it was read
        into), read now unless it was read ahead."""
        if g not in self._reads:
            self._submit_read(g)
        done = self._reads.take(g)
        assert done is not None  # g is in the current window, which is packed
        return done

    def _submit_read(self, g: int) -> bool:
        """Read global batch `g`'s file (g = -1 - first: the window's
        incoming.seg) on the reader thread, once its window is packed (whether
        it is); a window's incoming.seg is read with its first batch's file."""
        first = self._first(g) if g >= 0 else -1 - g
        job = self._jobs.windows.get(first)
        if job is None or not job.done() or job.exception() is not None:
            return False
        manifest, directory = job.result()
        segment = manifest.incoming if g < 0 else manifest.segments[g - first]
        assert segment is not None  # incoming.seg is asked for where the window carries the cache
        self._reads.submit(g, directory / segment.file, segment)
        entering = g == first and (self._current is None or self._current.first != first)
        if entering and self._cache.carries(manifest) and -1 - first not in self._reads:
            self._submit_read(-1 - first)
        return True

    def _read_ahead(self) -> None:
        """Read the files of the next `ahead` batches (those whose window is packed)."""
        assert self._cursor is not None
        for g in range(self._cursor, self._cursor + self.ahead):
            if not self._planned(g):
                return
            if g not in self._reads and not self._submit_read(g):
                return

    def _drop_all(self) -> None:
        """Stop packing and reading, and remove every window of this tier."""
        self._jobs.stop.set()
        self._reads.cancel()
        self._jobs.drop(keep=None if self._current is None else self._current.first)
        self._cache.clear()
        if self._current is not None:
            self._close_window(self._current)
        self._current, self._cursor = None, None

    def set_window(self, batches) -> None:
        """The loader's window of sampled batches: not needed (the batches are packed); passed down."""
        self.base.set_window(batches)

    def stats(self) -> dict:
        """Counters since the last reset: hits / misses (distinct rows from the
        cache / the packed files), hit_rate, batches (gathers served packed),
        fixed (served from the fixed stream's pack), unplanned (served by the
        base), presampled (batches the loader took as the packer sampled them),
        bytes_read (packed files and caches read), useful_bytes, read_amplification, file_fraction (bytes
        read / the rows file's size), read_wait_s (gathers waiting for a read or
        a window), and the packing done meanwhile: windows_packed,
        windows_reused, pack_s, packed_bytes."""
        s = {**self._stats, **self._packed}
        rows = s["hits"] + s["misses"]
        s["hit_rate"] = s["hits"] / rows if rows else 0.0
        s["read_amplification"] = s["bytes_read"] / s["useful_bytes"] if s["useful_bytes"] else 1.0
        s["file_fraction"] = s["bytes_read"] / max(1, self.shape[0] * self.packer.stride)
        return s

    def reset_stats(self) -> None:
        """Zero the counters of stats()."""
        self._stats = dict.fromkeys(_COUNTERS, 0)
        self._packed = dict.fromkeys(_PACKING, 0)

    def host_bytes(self) -> dict:
        """{part: bytes}: the window's cached rows, the row-to-slot map, the read buffers and incoming.seg's."""
        reads = self._reads.nbytes("batch") + (0 if self.fixed is None else self.fixed.host_bytes())
        held = {"cache": self._cache.nbytes(), "slots": self._cache.slot.nbytes, "read_buffers": reads}
        return {**held, "incoming": self._reads.nbytes("incoming")}

    def close(self) -> None:
        """Stop the threads, remove the windows (and the scratch directory the tier made), close the base."""
        if not hasattr(self, "_packing"):
            return
        with self._lock:
            self._drop_all()
        if self.fixed is not None:
            self.fixed.close()
        self._jobs.shutdown()
        self._packing.shutdown(wait=True)
        self._reading.shutdown(wait=True)
        if self._own:
            shutil.rmtree(self.scratch, ignore_errors=True)
        elif self._made:
            with contextlib.suppress(OSError):  # left when something else was put there
                self.scratch.rmdir()
        self.base.close()

    def __repr__(self):
        return f"PackedFeatures({self.packer.path}, windows of {self.window} batches in {self.scratch})"


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
