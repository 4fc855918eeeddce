"""The on-disk format of packed batches (storage/packer.py writes it,
storage/packed_source.py reads it).

A window of consecutive batches (numbered globally: epoch x batches an
epoch + batch, so a window may cross epochs) lives in one directory:

- `bNNNNNNNN.seg` per batch: the batch's distinct rows that the window's
  cache does not hold, in id order, each `row_bytes` long with no per-row
  metadata (the reader recomputes the batch's sorted uncached ids), the file
  padded with zeros to a multiple of PAD bytes so it is read whole with
  O_DIRECT;
- `cache.ids`: the ids (int64, sorted) of the rows the window's cache holds,
  and either `cache.seg`: those rows, in id order, or, where the reader
  carries its cache over from the window planned before (it holds that
  window's cache when it enters this one), `incoming.seg`: the cached rows
  that cache lacks, in id order, or neither, where the packer put the
  cache straight into its reader's memory (the first window a reader
  reads: such a window is never reused);
- `manifest.json`, written last (atomically): the key the window was packed
  for (the dataset's identity and file, split, seed, batch size, fanouts,
  sampler, rank and world size, the window's batches, the cache's capacity
  and cached set), the [count, hash] of the cached set `incoming.seg`
  completes, and per file its rows, bytes and XXH3-64 digest
  (storage/digest.py), per batch also the hash (ids_hash) of its distinct ids
  (what tells the reader a gather is that batch's).

A window whose manifest is missing, unreadable or packed for another key is
stale (rebuilt); a file whose size or digest differs from its manifest is
refused (DatasetError), never read into a batch.

Beside it, `sampled-NNNNNNNNNN-K/sNNNNNNNNNN.batch` per batch: the batch as
the packer sampled it (its seeds, input nodes and blocks' arrays, raw, after
a JSON header of their names, dtypes and shapes and the XXH3-64 of their
bytes), tagged with the crc32 of what decides the draws, so the loader takes
it instead of sampling the batch again (a file for another key, other seeds
or other bytes is not taken).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numba
import numpy as np

from gnnsys.atomic import atomic_write_bytes
from gnnsys.errors import DatasetError

from .digest import Digest
from .direct_io import aligned, open_rows_file

FORMAT = 5  # 5: a cache packed into memory, ids_hash; 4: incoming.seg; 3: XXH3-64 digests
PAD = 4096  # segments end on a multiple of this: whole-file O_DIRECT reads on any logical block up to 4 KiB
READ_BYTES = 8 << 20  # the largest single read of a segment
MANIFEST = "manifest.json"
_SAMPLED, _ALIGN = b"gnnsys-sampled-1", 64  # a sampled batch's file: its magic, and its arrays' alignment


@dataclass(frozen=True)
class Segment:
    """One packed file: its name in the window's directory, the rows it
    holds, its size on disk (padded) and the XXH3-64 digest of its whole content; for
    a batch, `ids`: the ids_hash of the batch's distinct ids and `unique`
    their count."""

    file: str
    rows: int
    nbytes: int
    digest: int
    ids: int = 0
    unique: int = 0


@dataclass
class Manifest:
    """A packed window: its key, first global batch, its batches' segments in
    order, and the cache's segment, or where the cache is carried over from
    the window planned before it (`carried`: that cache's [count, hash]),
    the segment of the cached rows that cache lacks (`incoming`); neither
    where the cache was packed into its reader's memory."""

    key: dict
    first: int
    segments: list[Segment]
    cache: Segment | None
    carried: list[int] | None = None
    incoming: Segment | None = None

    def cache_in_memory(self) -> bool:
        """Whether the window names no cache file: its cache was packed into the memory of the reader that asked."""
        return self.cache is None and self.incoming is None

    def nbytes(self) -> int:
        """The bytes its files hold on disk."""
        return sum(s.nbytes for s in [*self.segments, self.cache, self.incoming] if s is not None)

    def write(self, directory: Path) -> None:
        """manifest.json in `directory`, written atomically (the last file of a window)."""
        payload = {"format": FORMAT, "key": self.key, "first": self.first}
        payload["segments"] = [asdict(s) for s in self.segments]
        payload["cache"] = None if self.cache is None else asdict(self.cache)
        payload["carried"] = self.carried
        payload["incoming"] = None if self.incoming is None else asdict(self.incoming)
        atomic_write_bytes(directory / MANIFEST, json.dumps(payload, sort_keys=True).encode())

    @classmethod
    def read(cls, directory: Path, key: dict) -> Manifest | None:
        """The manifest of `directory` if it was packed for `key` (None: stale,
        missing or unreadable: the window must be rebuilt)."""
        try:
            payload = json.loads((directory / MANIFEST).read_text())
            if payload.get("format") != FORMAT or payload.get("key") != key:
                return None
            segments = [Segment(**s) for s in payload["segments"]]
            cache, incoming = (None if payload[k] is None else Segment(**payload[k]) for k in ("cache", "incoming"))
            carried = None if payload["carried"] is None else [int(v) for v in payload["carried"]]
            return cls(payload["key"], int(payload["first"]), segments, cache, carried, incoming)
        except (OSError, ValueError, TypeError, KeyError):
            return None


def ids_hash(ids: np.ndarray) -> int:
    """The fingerprint of a set of distinct non-negative integer ids (a
    batch's, a cache's), in any order: the sum of their splitmix64 mixes
    modulo 2^64, so a batch's ids are recognised without sorting them."""
    return int(_mix_sum(np.asarray(ids)))


@numba.njit(nogil=True, cache=True)
def _mix_sum(ids):
    total = np.uint64(0)
    for v in ids:
        z = np.uint64(v) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        total += z ^ (z >> np.uint64(31))
    return total


def padded(nbytes: int) -> int:
    """`nbytes` rounded up to a multiple of PAD."""
    return -(-nbytes // PAD) * PAD


def read_buffer_bytes(nbytes: int) -> int:
    """The size of a buffer made to read a packed file of `nbytes`: a quarter
    larger, so that the next files, about as large, fit it too."""
    return padded(nbytes + nbytes // 4)


def read_segment(path: Path, segment: Segment, direct: bool, into=None) -> memoryview:
    """The content of the packed file `path` (padded), read with large
    O_DIRECT reads when `direct` into the page-aligned buffer `into` (at
    least segment.nbytes; None: a new one); DatasetError naming the file when
    it is missing or its size or digest is not the manifest's."""
    try:
        file = open_rows_file(path, direct and segment.nbytes >= PAD)
    except DatasetError:
        raise DatasetError(path, "packed segment is missing; refused (the window is rebuilt by a new run)") from None
    try:
        if file.size != segment.nbytes:
            raise _refused(path, f"size {file.size} bytes, its manifest says {segment.nbytes}")
        buffer = memoryview(aligned(segment.nbytes) if into is None else into)[: segment.nbytes]
        done, check = 0, Digest()
        while done < segment.nbytes:
            n = os.preadv(file.fd, [buffer[done : done + min(READ_BYTES, segment.nbytes - done)]], done)
            if n <= 0:
                raise _refused(path, f"ended after {done} of {segment.nbytes} bytes")
            check.update(buffer[done : done + n])  # while the piece just read is in cache
            done += n
    finally:
        os.close(file.fd)
    if check.value() != segment.digest:
        raise _refused(path, "content does not match its manifest's digest")
    return buffer


def write_sampled(path: Path, arrays: dict, key: int) -> int:
    """Write a sampled batch's arrays ({name: numeric numpy array}) to
    `path` (complete or not at all), tagged with `key`, with the XXH3-64 of
    their bytes; the bytes written. DatasetError naming the file when the
    disk refuses it."""
    arrays = {name: np.asarray(a, order="C") for name, a in arrays.items()}
    check = Digest()
    for a in arrays.values():
        check.update(a.reshape(-1).view(np.uint8))
    listed = [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()]
    header = json.dumps({"key": key, "digest": check.value(), "arrays": listed}).encode()
    header += b" " * (-(len(_SAMPLED) + 8 + len(header)) % _ALIGN)
    part = path.with_name(path.name + ".part")
    try:
        with open(part, "wb") as f:
            f.write(_SAMPLED + len(header).to_bytes(8, "little") + header)
            for a in arrays.values():
                f.write(a.reshape(-1).view(np.uint8))
                f.write(bytes(-a.nbytes % _ALIGN))
            written = f.tell()
        os.replace(part, path)  # from here a reader may consume (remove) it
        return written
    except OSError as e:
        part.unlink(missing_ok=True)
        raise DatasetError(path, f"cannot write the sampled batch ({e.strerror})") from None


def read_sampled(path: Path, key: int) -> dict | None:
    """The arrays write_sampled wrote to `path` for `key`; None when there is
    no such file (not written yet, or consumed), it was written for another
    key, or its bytes are not the ones written."""
    try:
        with open(path, "rb") as f:
            data = bytearray(os.fstat(f.fileno()).st_size)
            f.readinto(data)
        start = len(_SAMPLED) + 8
        if data[: len(_SAMPLED)] != _SAMPLED:
            return None
        size = int.from_bytes(data[len(_SAMPLED) : start], "little")
        header = json.loads(data[start : start + size])
        if header["key"] != key:
            return None
        arrays, at, check = {}, start + size, Digest()
        for name, dtype, shape in header["arrays"]:
            kind = np.dtype(dtype)
            count = math.prod(shape)
            arrays[name] = np.frombuffer(data, kind, count, offset=at).reshape(tuple(shape))
            check.update(arrays[name].reshape(-1).view(np.uint8))
            at += -(-count * kind.itemsize // _ALIGN) * _ALIGN
        return arrays if at == len(data) and check.value() == header["digest"] else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _refused(path: Path, problem: str) -> DatasetError:
    return DatasetError(path, f"packed segment {problem}; refused (changed since it was packed)")


@numba.njit(parallel=True, cache=True, nogil=True)
def scatter_packed(cache, segment, slot, seg_row, inverse, dest, out):
    """out[dest[p]] = the row of distinct id inverse[p]: cache row slot[u]
    when slot[u] >= 0, else segment row seg_row[u] (all [rows, words] arrays
    of one word width)."""
    width = out.shape[1]
    for p in numba.prange(inverse.shape[0]):
        u = inverse[p]
        d = dest[p]
        if slot[u] >= 0:
            s = slot[u]
            for j in range(width):
                out[d, j] = cache[s, j]
        else:
            s = seg_row[u]
            for j in range(width):
                out[d, j] = segment[s, j]
