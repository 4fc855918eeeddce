"""Uniform neighbour sampling over the CSC graph (numba, releases the GIL).

One layer, from its destination nodes: `_count` sizes each node's sample,
`_fill` draws the sources (parallel over nodes, counter-based randomness),
`_relabel` turns global source ids into local ones (the destination nodes keep
their positions, new sources are appended in order of first appearance), and
`_sort_rows` sorts each row's local ids. The next layer's destination nodes
are this layer's sources, so one global -> local map serves the whole batch
and `input_nodes` lists the seeds first. `LocalMaps` keeps a sampler's maps
(reused, one per concurrent caller; HeteroNeighborSampler's too) and claims
a batch's seeds in one.

The kernels never read outside their arrays, whatever the graph holds: seeds
are checked by `_claim_seeds`, each node's edge range by `_count` (inside
[0, len(indices)), not reversed) and each sampled id by `_relabel` (inside
[0, num_nodes)) before it indexes anything, so a corrupted graph raises
DatasetError. The checks cost a comparison per sampled node and edge; the
graph itself is never scanned (load_dataset checks it once, on loading).
"""

from __future__ import annotations

import functools
import threading

import numba
import numpy as np
import torch

from gnnsys.errors import DatasetError

from .block import Block, MiniBatch
from .random_hash import draw_below, node_key, stream_key


@numba.njit(parallel=True, nogil=True, cache=True)
def _count(indptr, nodes, fanout, replace, num_edges, counts, starts, degrees):
    """counts[i + 1] = number of sources drawn for nodes[i]; starts[i] and
    degrees[i] = its first edge and in-degree (indptr is read at random only
    here; the passes that follow read these arrays in order). A node whose
    edge range is not inside [0, num_edges) gets degree -1 and no sources;
    returns how many did."""
    bad = 0
    for i in numba.prange(nodes.shape[0]):
        v = nodes[i]
        start = indptr[v]
        end = indptr[v + 1]
        if start < 0 or end < start or end > num_edges:
            bad += 1
            starts[i] = 0
            degrees[i] = -1
            counts[i + 1] = 0
            continue
        deg = end - start
        starts[i] = start
        degrees[i] = deg
        if fanout < 0:
            counts[i + 1] = deg
        elif replace:
            counts[i + 1] = fanout if deg > 0 else 0
        else:
            counts[i + 1] = min(fanout, deg)
    return bad


@numba.njit(parallel=True, nogil=True, cache=True)
def _fill(indices, nodes, starts, degrees, offsets, replace, stream, out):
    """out[offsets[i]:offsets[i + 1]] = sampled global sources of nodes[i].

    All of them when the count equals the degree (and not `replace`), draws
    with repeats when `replace`, otherwise Floyd's algorithm: a uniform
    k-subset of the positions from k draws, with no repeats. Positions are
    drawn first and looked up in a second pass, whose independent loads the
    CPU overlaps (the graph is read at random).
    """
    for i in numba.prange(nodes.shape[0]):
        o = offsets[i]
        k = offsets[i + 1] - o
        if k == 0:
            continue
        deg = degrees[i]
        key = node_key(stream, nodes[i])
        if replace:
            for j in range(k):
                out[o + j] = draw_below(key, j, deg)
        elif k == deg:
            for j in range(k):
                out[o + j] = j
        else:
            for m in range(k):
                j = deg - k + m
                t = draw_below(key, m, j + 1)
                for q in range(m):
                    if out[o + q] == t:
                        t = j
                        break
                out[o + m] = t
    for i in numba.prange(nodes.shape[0]):
        start = starts[i]
        for e in range(offsets[i], offsets[i + 1]):
            out[e] = indices[start + out[e]]


@numba.njit(nogil=True, cache=True)
def _claim_seeds(seeds, local):
    """local[seeds[i]] = i. Returns (-1, -1) on success, else (i, why) for the
    first bad seed: why 0 = out of range, 1 = repeated; the entries claimed
    before it are reset."""
    for i in range(seeds.shape[0]):
        v = seeds[i]
        why = 0 if v < 0 or v >= local.shape[0] else (1 if local[v] >= 0 else -1)
        if why >= 0:
            for j in range(i):
                local[seeds[j]] = -1
            return i, why
        local[v] = i
    return -1, -1


@numba.njit(nogil=True, cache=True)
def _relabel(sources, local, frontier, size):
    """Local ids of `sources`; unseen nodes are appended to frontier[size:].
    Returns (local ids, new frontier size, -1), or stops at the first source
    outside [0, len(local)) and returns its position as the third value."""
    out = np.empty(sources.shape[0], np.int64)
    for e in range(sources.shape[0]):
        u = sources[e]
        if u < 0 or u >= local.shape[0]:
            return out, size, e
        lid = local[u]
        if lid < 0:
            lid = size
            local[u] = size
            frontier[size] = u
            size += 1
        out[e] = lid
    return out, size, -1


@numba.njit(parallel=True, nogil=True, cache=True)
def _sort_rows(indptr, ids):
    """Sort each row of the CSR in place (insertion sort for short rows)."""
    for i in numba.prange(indptr.shape[0] - 1):
        a, b = indptr[i], indptr[i + 1]
        if b - a > 32:
            ids[a:b].sort()
            continue
        for p in range(a + 1, b):
            x = ids[p]
            q = p - 1
            while q >= a and ids[q] > x:
                ids[q + 1] = ids[q]
                q -= 1
            ids[q + 1] = x


_ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _as_numpy(t, name: str, dtypes) -> np.ndarray:
    a = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if a.size == 0 and a.dtype not in dtypes:
        a = a.astype(dtypes[-1])  # an empty list
    if a.ndim != 1 or a.dtype not in dtypes:
        raise TypeError(f"{name} must be a 1-D array of {' or '.join(map(str, dtypes))}, got {a.ndim}-D {a.dtype}")
    return np.ascontiguousarray(a)


def new_map(num_nodes: int) -> np.ndarray:
    """A global -> local id map of `num_nodes` entries, all -1 (int32 below 2^31 nodes)."""
    return np.full(num_nodes, -1, np.int32 if num_nodes < 2**31 else np.int64)


class LocalMaps:
    """A sampler's global -> local id maps (new_map), made by `make()` and
    reused, one per concurrent caller: one map, or a dict of them by node
    type where `key` names the seeds' type."""

    def __init__(self, make, key=None):
        self._make, self._key = make, key
        self._free = []
        self._lock = threading.Lock()

    def claim(self, seeds, epoch: int, batch: int):
        """(`seeds` as int64, a map in which seed i maps to i) for draw
        stream (epoch, batch); give the map back with `release` once every
        entry it set is -1 again. ValueError for a negative epoch or batch
        or a repeated seed, IndexError for a seed outside the map."""
        if epoch < 0 or batch < 0:
            raise ValueError(f"epoch and batch must be non-negative, got epoch={epoch}, batch={batch}")
        seeds = _as_numpy(seeds, "seeds", _ID_DTYPES).astype(np.int64)
        maps = self._acquire()
        local = maps if self._key is None else maps[self._key]
        bad, why = _claim_seeds(seeds, local)
        if bad >= 0:
            self.release(maps)
            if why == 0:
                raise IndexError(f"seeds: id {seeds[bad]} out of range [0, {local.shape[0]}) at position {bad}")
            raise ValueError(f"seeds: node {seeds[bad]} appears more than once (position {bad})")
        return seeds, maps

    def release(self, maps) -> None:
        """`maps` (from claim, all -1 again) may be reused."""
        with self._lock:
            self._free.append(maps)

    def _acquire(self):
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._make()


class NeighborSampler:
    """Samples the multi-layer computation graph of a batch of seed nodes.

    indptr/indices: the CSC of in-neighbours (torch or numpy; int64 indptr,
    int32/int64 indices). fanouts: neighbours per node, from the output layer
    inwards as in PyG (`[15, 10, 5]`); -1 takes every neighbour. Sampling is
    without replacement unless `replace`. Each draw is a hash of (seed, epoch,
    batch, layer, node, draw index), so `sample` is reproducible and does not
    depend on the number of threads. Safe to call from several threads at once.
    """

    device = torch.device("cpu")  # where its MiniBatches come out (the Sampler protocol)

    def __init__(self, indptr, indices, fanouts, replace: bool = False, seed: int = 0):
        self.indptr = _as_numpy(indptr, "indptr", (np.dtype(np.int64),))
        self.indices = _as_numpy(indices, "indices", _ID_DTYPES)
        if self.indptr.shape[0] < 1 or self.indptr[0] != 0 or self.indptr[-1] != self.indices.shape[0]:
            raise ValueError(f"indptr must start at 0 and end at len(indices) = {self.indices.shape[0]}")
        fanouts = [int(f) for f in fanouts]
        if not fanouts or any(f < -1 for f in fanouts):
            raise ValueError(f"fanouts must be a non-empty list of counts >= 0 or -1 (all), got {fanouts}")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.fanouts = fanouts
        self.replace = bool(replace)
        self.seed = int(seed)
        self.num_nodes = self.indptr.shape[0] - 1
        self._maps = LocalMaps(functools.partial(new_map, self.num_nodes))

    def __repr__(self):
        return (
            f"NeighborSampler(nodes={self.num_nodes:,}, fanouts={self.fanouts}, "
            f"replace={self.replace}, seed={self.seed})"
        )

    def sample(self, seeds, epoch: int = 0, batch: int = 0) -> MiniBatch:
        """The MiniBatch of `seeds` (distinct node ids) for draw stream (epoch, batch)."""
        seeds, local = self._maps.claim(seeds, epoch, batch)
        blocks, frontier, size = self._sample(seeds, epoch, batch, local)  # on error the map is dropped
        local[frontier[:size]] = -1
        self._maps.release(local)
        return MiniBatch(seeds=torch.from_numpy(seeds), input_nodes=torch.from_numpy(frontier[:size]), blocks=blocks)

    def _sample(self, seeds, epoch, batch, local):
        frontier, size = seeds, seeds.shape[0]
        blocks = []
        for layer, fanout in enumerate(self.fanouts):
            num_dst = size
            stream = np.uint64(stream_key(self.seed, epoch, batch, layer))
            indptr, sources = self._draw(frontier[:num_dst], fanout, stream)
            grown = np.empty(num_dst + sources.shape[0], np.int64)
            grown[:num_dst] = frontier[:num_dst]
            ids, size, bad = _relabel(sources, local, grown, num_dst)
            if bad >= 0:
                v = int(frontier[np.searchsorted(indptr, bad, side="right") - 1])
                raise DatasetError(
                    "indices",
                    f"node {v}'s in-neighbour list holds node id {int(sources[bad])}, "
                    f"out of range [0, {self.num_nodes}): a corrupted graph",
                )
            frontier = grown
            _sort_rows(indptr, ids)
            blocks.append(Block(torch.from_numpy(indptr), torch.from_numpy(ids), size, num_dst))
        blocks.reverse()
        return blocks, frontier, size

    def _draw(self, nodes, fanout, stream):
        """(indptr, global sources) of one layer: nodes[i]'s sampled in-neighbours
        are sources[indptr[i]:indptr[i + 1]], in draw order."""
        counts, starts, degrees = self._edge_ranges(nodes, fanout)
        indptr = np.cumsum(counts)
        sources = np.empty(int(indptr[-1]), self.indices.dtype)
        _fill(self.indices, nodes, starts, degrees, indptr, self.replace, stream, sources)
        return indptr, sources

    def _edge_ranges(self, nodes, fanout):
        """(counts, first edges, in-degrees) of `nodes`, counts[i + 1] the sample
        size of nodes[i] (counts[0] = 0); DatasetError for an edge range outside the graph."""
        counts = np.zeros(nodes.shape[0] + 1, np.int64)
        starts, degrees = np.empty(nodes.shape[0], np.int64), np.empty(nodes.shape[0], np.int64)
        if _count(self.indptr, nodes, fanout, self.replace, self.indices.shape[0], counts, starts, degrees):
            v = int(nodes[np.flatnonzero(degrees < 0)[0]])
            raise DatasetError(
                "indptr",
                f"node {v}'s edge range [{self.indptr[v]}, {self.indptr[v + 1]}) "
                f"is not inside the {self.indices.shape[0]} edges: a corrupted graph",
            )
        return counts, starts, degrees
