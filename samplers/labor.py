"""LABOR-0 layer-neighbour sampling over the CSC graph (numba, releases the GIL).

Balin and Catalyurek, "Layer-Neighbor Sampling -- Defusing Neighborhood
Explosion in GNNs" (NeurIPS 2023), the variant without importance sampling
(DGL's `LaborSampler(importance_sampling=0)`). In each layer every source
node t draws one uniform variate r_t, shared by all the destinations it
neighbours; destination s with in-degree d and fanout k keeps its in-edge
from t iff r_t < k / d. Each edge is kept with probability min(1, k/d), as
with uniform sampling, and s keeps k neighbours in expectation (all of them
when d <= k; the count varies, Poisson sampling), but destinations that share
neighbours keep largely the same ones, so a layer has fewer distinct sources:
fewer feature rows to gather.

r_t is the top 32 bits of source t's first draw in the layer's stream
(random_hash: `node_key(stream_key(seed, epoch, batch, layer), t)`) over
2**32, and the test is `draw_below(key, 0, d) < k`, which is floor(r_t d) < k,
that is r_t < k / d: integer arithmetic that the Triton sampler
(gpu_sampler.GPULaborSampler) repeats bit for bit.

No edge weights: every in-neighbour of s is kept with the same probability
min(1, k/d), so the unbiased estimator's weights 1 / min(1, k/d), normalised
over the kept neighbours of s, are all 1, and a mean over them (SAGE's mean
aggregation) is that estimator already. DGL returns weights only with
importance sampling (LABOR-i, i > 0), which is not implemented here.

Blocks, relabelling and the checks on seeds and the graph are NeighborSampler's.
"""

from __future__ import annotations

import numba
import numpy as np

from .neighbor import NeighborSampler
from .random_hash import draw_below, node_key


@numba.njit(inline="always", nogil=True, cache=True)
def _kept(stream, source, degree, fanout):
    """Whether a destination of in-degree `degree` > `fanout` keeps its edge from `source`."""
    return draw_below(node_key(stream, source), 0, degree) < fanout


@numba.njit(parallel=True, nogil=True, cache=True)
def _count_kept(indices, starts, degrees, fanout, stream, counts):
    """counts[i + 1] = how many in-neighbours node i keeps (all when fanout < 0
    or its degree is at most fanout)."""
    for i in numba.prange(starts.shape[0]):
        deg = degrees[i]
        if fanout < 0 or deg <= fanout:
            counts[i + 1] = deg
            continue
        c = 0
        for e in range(starts[i], starts[i] + deg):
            if _kept(stream, indices[e], deg, fanout):
                c += 1
        counts[i + 1] = c


@numba.njit(parallel=True, nogil=True, cache=True)
def _fill_kept(indices, starts, degrees, offsets, fanout, stream, out):
    """out[offsets[i]:offsets[i + 1]] = the kept in-neighbours of node i, in edge order."""
    for i in numba.prange(starts.shape[0]):
        deg = degrees[i]
        every = fanout < 0 or deg <= fanout
        o = offsets[i]
        for e in range(starts[i], starts[i] + deg):
            if every or _kept(stream, indices[e], deg, fanout):
                out[o] = indices[e]
                o += 1


class LaborSampler(NeighborSampler):
    """NeighborSampler's contract (MiniBatch layout, determinism under (seed,
    epoch, batch), range checks, thread safety) with LABOR-0 draws: node s of
    in-degree d keeps each in-neighbour with probability min(1, k/d), k its
    layer's fanout (-1: all), the draws of one layer shared by all its nodes.
    """

    def __init__(self, indptr, indices, fanouts, seed: int = 0):
        super().__init__(indptr, indices, fanouts, seed=seed)

    def __repr__(self):
        return f"LaborSampler(nodes={self.num_nodes:,}, fanouts={self.fanouts}, seed={self.seed})"

    def _draw(self, nodes, fanout, stream):
        counts, starts, degrees = self._edge_ranges(nodes, -1)  # checks every edge range
        _count_kept(self.indices, starts, degrees, fanout, stream, counts)
        indptr = np.cumsum(counts)
        sources = np.empty(int(indptr[-1]), self.indices.dtype)
        _fill_kept(self.indices, starts, degrees, indptr, fanout, stream, sources)
        return indptr, sources
