"""Uniform neighbour sampling on the GPU: a Triton kernel over a CSC in GPU or
pinned host memory (read zero-copy), with torch ops for relabelling.

The kernel draws exactly what the CPU `NeighborSampler` draws: the same
splitmix64 counter-based hash (samplers/random_hash.py) keyed by (seed, epoch,
batch, layer, node, draw index), the same Floyd's algorithm for samples
without replacement. Relabelling keeps the destination nodes first and
appends new sources in order of first appearance, and rows are sorted, so the
MiniBatch equals the CPU sampler's bit for bit. `GPULaborSampler` does the
same for LABOR-0 (samplers/labor.py): a second kernel decides per edge, with
the same hash, which in-neighbours a layer keeps.

Host synchronisation: the kernel and the torch ops run in stream order on the
current stream; the host waits for the device only where a size must be known
before the next allocation: per layer, once to compact the sampled edges
(their number) and once in `torch.unique` (the number of distinct nodes); a
fanout -1 layer once more for its number of edges (a LABOR layer twice: its
edges, then the kept ones), and with `csc="pinned"`
copies the frontier to the host to index the pinned CSC. Seeds are checked
on the host before they are copied to the device (seeds given on the GPU are
copied to the host once for that check). Run the sampler on its own stream
(the loader does) and those waits hold up only the sampling thread.

What is verified where: the samples (equal to the CPU sampler's) in Triton's
interpreter on the CPU; the kernel's registers and spills in the PTX Triton
compiles for sm_90 (tests/storage/test_gather_ptx.py); speed only on a GPU
(benchmarks/bench_epoch_gpu.py; not measured yet).

Import this module only when a kernel is about to run (see gnnsys._capabilities);
`gnnsys.samplers.factory.make_sampler` does.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from gnnsys._capabilities import normalize_device, require_triton
from gnnsys.ids import check_ids

from .block import Block, MiniBatch
from .random_hash import stream_key

_BLOCK_S = 64  # destination nodes per program step
_BLOCK_E = 1024  # edges per program of the LABOR kernel


@triton.jit
def _mix64(z):
    """random_hash.mix64: the splitmix64 finaliser of a uint64 tensor."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return z ^ (z >> 31)


@triton.jit
def _node_key(stream, v):
    """random_hash.node_key: the key of node v's draws (int64 tensor) in the uint64 `stream`."""
    return _mix64(stream ^ _mix64(v.to(tl.uint64) + 0x9E3779B97F4A7C15))


@triton.jit
def _draw_below(key, counter, n):
    """random_hash.draw_below(key, counter - 1, n) as int64: uniform in [0, n), n > 0 an integer tensor."""
    h = _mix64(key + counter * 0x9E3779B97F4A7C15)
    return (((h >> 32) * n.to(tl.uint64)) >> 32).to(tl.int64)


@triton.jit(do_not_specialize=["stream_key"])
def _sample_kernel(
    indptr_ptr,
    indices_ptr,
    nodes_ptr,
    stream_key,
    out_ptr,
    counts_ptr,
    n_nodes,
    fanout,
    REPLACE: tl.constexpr,
    BLOCK_S: tl.constexpr,
    KP: tl.constexpr,
):
    """out[i, m] = global source m of nodes[i] (m < counts[i]); counts[i] = its sample size.
    stream_key: the draw stream's 64-bit key as a signed integer (an argument, not a
    tensor, so the launch copies nothing to the device)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    s_ar = tl.arange(0, BLOCK_S)
    k_ar = tl.arange(0, KP)
    stream = stream_key.to(tl.int64).to(tl.uint64, bitcast=True)
    num_tiles = (n_nodes + BLOCK_S - 1) // BLOCK_S
    for tile in range(pid, num_tiles, nprog):
        pos = (tile * BLOCK_S + s_ar).to(tl.int64)
        live = pos < n_nodes
        v = tl.load(nodes_ptr + pos, mask=live, other=0).to(tl.int64)
        start = tl.load(indptr_ptr + v, mask=live, other=0)
        deg = tl.load(indptr_ptr + v + 1, mask=live, other=0) - start
        if REPLACE:
            k = tl.where(deg > 0, fanout, 0)
        else:
            k = tl.minimum(deg, fanout)
        key = _node_key(stream, v)
        sel = tl.full((BLOCK_S, KP), -1, tl.int64)
        draw = tl.zeros((BLOCK_S,), tl.uint64)
        for m in range(0, fanout):
            j = deg - k + m  # Floyd: draw from [0, j], keep j itself if the draw was taken
            if REPLACE:
                n_draw = deg
            else:
                n_draw = j + 1
            draw += 1
            t = _draw_below(key, draw, tl.maximum(n_draw, 1))  # draw_below(key, m, n_draw)
            if not REPLACE:
                taken = tl.max(tl.where(sel == t[:, None], 1, 0), axis=1) > 0
                t = tl.where(k == deg, m, tl.where(taken, j, t))
            sel = tl.where(k_ar[None, :] == m, t[:, None], sel)
        keep = live[:, None] & (k_ar[None, :] < k[:, None])
        src = tl.load(indices_ptr + start[:, None] + sel, mask=keep, other=0)
        tl.store(
            out_ptr + pos[:, None] * fanout + k_ar[None, :], src.to(tl.int64), mask=keep & (k_ar[None, :] < fanout)
        )
        tl.store(counts_ptr + pos, k, mask=live)


@triton.jit(do_not_specialize=["stream_key"])
def _labor_kernel(sources_ptr, degrees_ptr, stream_key, keep_ptr, n_edges, fanout, BLOCK: tl.constexpr):
    """keep[e] = 1 when LABOR-0 keeps edge e: its source t = sources[e], its destination
    of in-degree degrees[e] > 0, and draw_below(node_key(stream, t), 0, degree) < fanout."""
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = e < n_edges
    t = tl.load(sources_ptr + e, mask=live, other=0)
    degree = tl.load(degrees_ptr + e, mask=live, other=1)
    key = _node_key(stream_key.to(tl.int64).to(tl.uint64, bitcast=True), t)
    r = _draw_below(key, tl.full((BLOCK,), 1, tl.uint64), degree)
    tl.store(keep_ptr + e, (r < fanout).to(tl.int8), mask=live)


class GPUNeighborSampler:
    """NeighborSampler's contract on a GPU: `sample(seeds, epoch, batch) -> MiniBatch`
    with every tensor on `device`, equal to the CPU sampler's for the same seed.

    indptr/indices: the CSC of in-neighbours; `csc` "gpu" copies them to the
    device, "pinned" pins them in host memory and the kernel reads them over
    PCIe (for graphs larger than GPU memory). fanouts as in NeighborSampler
    (-1: all neighbours, without replacement only). `max_programs` caps the kernel's grid.
    """

    def __init__(
        self,
        indptr,
        indices,
        fanouts,
        replace: bool = False,
        seed: int = 0,
        device="cuda",
        csc: str = "gpu",
        max_programs: int | None = None,
    ):
        self.device = normalize_device(device)
        require_triton("the GPU sampler", self.device)
        indptr, indices = torch.as_tensor(indptr), torch.as_tensor(indices)
        if indptr.dtype != torch.int64 or indices.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"indptr must be int64 and indices int32/int64, got {indptr.dtype}, {indices.dtype}")
        if indptr.dim() != 1 or indptr.shape[0] < 1 or int(indptr[0]) != 0 or int(indptr[-1]) != indices.shape[0]:
            raise ValueError(f"indptr must start at 0 and end at len(indices) = {indices.shape[0]}")
        fanouts = [int(f) for f in fanouts]
        if not fanouts or any(f < -1 for f in fanouts):
            raise ValueError(f"fanouts must be a non-empty list of counts >= 0 or -1 (all), got {fanouts}")
        if replace and -1 in fanouts:
            raise ValueError("fanout -1 (all neighbours) with replace=True is not supported by the GPU sampler")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        if csc not in ("gpu", "pinned"):
            raise ValueError(f"csc must be 'gpu' or 'pinned', got {csc!r}")
        if csc == "pinned" and self.device.type == "cuda":
            self.indptr, self.indices = indptr.pin_memory(), indices.pin_memory()
        else:
            self.indptr, self.indices = indptr.to(self.device), indices.to(self.device)
        self.fanouts, self.replace, self.seed, self.csc = fanouts, bool(replace), int(seed), csc
        self.num_nodes = indptr.shape[0] - 1
        self.max_programs = max_programs

    def __repr__(self):
        return (
            f"GPUNeighborSampler(nodes={self.num_nodes:,}, fanouts={self.fanouts}, replace={self.replace}, "
            f"seed={self.seed}, device={self.device}, csc={self.csc!r})"
        )

    def sample(self, seeds, epoch: int = 0, batch: int = 0) -> MiniBatch:
        """The MiniBatch of `seeds` (distinct node ids) for draw stream (epoch, batch)."""
        seeds = torch.as_tensor(seeds).reshape(-1)
        host = seeds.cpu()
        check_ids(host.long() if host.numel() == 0 else host, self.num_nodes, "seeds")
        if torch.unique(host).shape[0] != host.shape[0]:
            raise ValueError("seeds: a node appears more than once")
        seeds = seeds.to(self.device, torch.int64, non_blocking=True).contiguous()
        frontier, blocks = seeds, []
        for layer, fanout in enumerate(self.fanouts):
            counts, sources = self._sample_layer(frontier, fanout, stream_key(self.seed, epoch, batch, layer))
            frontier, local = _relabel(frontier, sources)
            indptr = torch.zeros(counts.shape[0] + 1, dtype=torch.int64, device=self.device)
            torch.cumsum(counts, 0, out=indptr[1:])
            blocks.append(
                Block(indptr, _sort_rows(counts, local, frontier.shape[0]), frontier.shape[0], counts.shape[0])
            )
        blocks.reverse()
        return MiniBatch(seeds=seeds, input_nodes=frontier, blocks=blocks)

    def _sample_layer(self, nodes, fanout, stream):
        """(counts [len(nodes)], flat global sources in node order) of one layer."""
        if fanout == -1:
            return self._all_neighbours(nodes)
        n = nodes.shape[0]
        out = torch.empty((n, fanout), dtype=torch.int64, device=self.device)
        counts = torch.empty(n, dtype=torch.int64, device=self.device)
        if n and fanout:
            grid, args, meta = sample_launch_args(
                self.indptr,
                self.indices,
                nodes,
                stream,
                out,
                counts,
                fanout,
                self.replace,
                self.max_programs or 4 * _sm_count(self.device),
            )
            _sample_kernel[grid](*args, **meta)
        else:
            counts.zero_()
        return counts, out[torch.arange(fanout, device=self.device)[None, :] < counts[:, None]]

    def _all_neighbours(self, nodes):
        host = lambda t: t.to(self.indptr.device)  # noqa: E731  (pinned CSC: index on the host)
        starts = self.indptr[host(nodes)].to(self.device)
        counts = self.indptr[host(nodes) + 1].to(self.device) - starts
        first = torch.cumsum(counts, 0) - counts
        total = int(counts.sum())  # the layer's number of edges: a host sync
        offsets = torch.arange(total, device=self.device) + torch.repeat_interleave(
            starts - first, counts, output_size=total
        )
        return counts, self.indices[host(offsets)].to(self.device, torch.int64)


class GPULaborSampler(GPUNeighborSampler):
    """LaborSampler's contract on a GPU (samplers/labor.py): LABOR-0 draws, equal to the
    CPU LaborSampler's for the same seed. Arguments as GPUNeighborSampler's, less
    `replace` (LABOR draws without) and `max_programs` (its grid covers the layer's edges).

    Per layer it reads every in-neighbour of the layer's nodes (as fanout -1
    does, so a pinned CSC is indexed on the host), one Triton program per
    _BLOCK_E edges decides which to keep, and torch ops compact them.
    """

    def __init__(self, indptr, indices, fanouts, seed: int = 0, device="cuda", csc: str = "gpu"):
        super().__init__(indptr, indices, fanouts, seed=seed, device=device, csc=csc)

    def __repr__(self):
        return (
            f"GPULaborSampler(nodes={self.num_nodes:,}, fanouts={self.fanouts}, seed={self.seed}, "
            f"device={self.device}, csc={self.csc!r})"
        )

    def _sample_layer(self, nodes, fanout, stream):
        counts, sources = self._all_neighbours(nodes)
        if fanout == -1 or sources.shape[0] == 0:
            return counts, sources
        total = sources.shape[0]
        keep = torch.empty(total, dtype=torch.int8, device=self.device)
        grid, args, meta = labor_launch_args(
            sources, torch.repeat_interleave(counts, counts, output_size=total), stream, keep, fanout
        )
        _labor_kernel[grid](*args, **meta)
        row = torch.repeat_interleave(torch.arange(counts.shape[0], device=self.device), counts, output_size=total)
        return torch.zeros_like(counts).index_add_(0, row, keep.long()), sources[keep.bool()]


def labor_launch_args(sources, degrees, stream: int, keep, fanout: int):
    """(grid, positional arguments, constexpr keywords) of one layer's LABOR kernel
    over the layer's edges; stream as in sample_launch_args."""
    grid = (triton.cdiv(sources.shape[0], _BLOCK_E),)
    key = int(np.uint64(stream).astype(np.int64))
    return grid, (sources, degrees, key, keep, sources.shape[0], fanout), dict(BLOCK=_BLOCK_E)


def sample_launch_args(indptr, indices, nodes, stream: int, out, counts, fanout: int, replace: bool, max_programs: int):
    """(grid, positional arguments, constexpr keywords) of one layer's sampling
    kernel: the one place a launch is described (the PTX test compiles exactly
    what would be launched). stream: the layer's unsigned 64-bit stream key."""
    grid = (min(triton.cdiv(nodes.shape[0], _BLOCK_S), max_programs),)
    key = int(np.uint64(stream).astype(np.int64))
    args = (indptr, indices, nodes, key, out, counts, nodes.shape[0], fanout)
    return grid, args, dict(REPLACE=replace, BLOCK_S=_BLOCK_S, KP=triton.next_power_of_2(fanout))


def _relabel(frontier: torch.Tensor, sources: torch.Tensor):
    """(grown frontier, local ids of sources): frontier nodes keep their positions,
    new sources are appended in order of first appearance."""
    seq = torch.cat([frontier, sources])
    uniq, inverse = torch.unique(seq, return_inverse=True)
    first = torch.full((uniq.shape[0],), seq.shape[0], dtype=torch.int64, device=seq.device)
    first.scatter_reduce_(0, inverse, torch.arange(seq.shape[0], device=seq.device), "amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.shape[0], device=seq.device)
    return uniq[order], rank[inverse[frontier.shape[0] :]]


def _sort_rows(counts: torch.Tensor, local: torch.Tensor, num_src: int) -> torch.Tensor:
    """Local source ids sorted within each destination row."""
    row = torch.repeat_interleave(
        torch.arange(counts.shape[0], device=local.device), counts, output_size=local.shape[0]
    )  # the size is known: no host sync
    return torch.sort(row * num_src + local).values - row * num_src


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
