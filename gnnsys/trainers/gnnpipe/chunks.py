"""Chunk plans: the local graph of each chunk (own nodes first, then its halo
of out-of-chunk in-neighbours), and the chunk order of an epoch."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from gnnsys.samplers import Block
from gnnsys.samplers.block import gcn_degree


@dataclass
class ChunkPlan:
    """The local graph of one chunk: its own nodes `start:stop` come first
    (local ids 0..n-1), then its halo (out-of-chunk in-neighbours, global ids
    sorted, so grouped by owner chunk). groups: (owner, halo slice, rows in the
    owner chunk, global ids) per owner. train: local rows of training nodes."""

    start: int
    stop: int
    block: Block
    halo: torch.Tensor
    groups: list = field(default_factory=list)
    train: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.stop - self.start


def build_chunk_plans(indptr, indices, chunk_ptr, gcn: bool = False) -> list[ChunkPlan]:
    """One ChunkPlan per chunk of a relabelled CSC graph. With `gcn`, each
    chunk's block carries its source nodes' degrees in the whole graph
    (`Block.full_degree`), so its GCN rows are the whole graph's rows, not
    normalised by degrees within the chunk."""
    indptr, indices = indptr.long(), indices.long()
    degree = gcn_degree(indptr, indices) if gcn else None
    owner = torch.repeat_interleave(torch.arange(chunk_ptr.shape[0] - 1), chunk_ptr.diff())
    plans = []
    for c in range(chunk_ptr.shape[0] - 1):
        a, b = int(chunk_ptr[c]), int(chunk_ptr[c + 1])
        ip = indptr[a : b + 1] - indptr[a]
        src = indices[indptr[a] : indptr[b]]
        halo = torch.unique(src[(src < a) | (src >= b)])
        block = Block(*_local_csr(ip, src, a, b, halo), num_src=b - a + halo.shape[0], num_dst=b - a)
        if degree is not None:
            block.full_degree = torch.cat([degree[a:b], degree[halo]])
        groups = []
        if halo.numel():
            own = owner[halo]
            bounds = torch.searchsorted(own, torch.arange(chunk_ptr.shape[0]), right=False).tolist()
            bounds.append(halo.shape[0])
            for o in range(chunk_ptr.shape[0] - 1):
                if bounds[o + 1] > bounds[o]:
                    g = halo[bounds[o] : bounds[o + 1]]
                    groups.append((o, slice(bounds[o], bounds[o + 1]), g - int(chunk_ptr[o]), g))
        plans.append(ChunkPlan(a, b, block, halo, groups))
    return plans


def _local_csr(ip, src, a, b, halo):
    """Rows' sources renamed to local ids (own first, then halo), sorted per row."""
    inside = (src >= a) & (src < b)
    local = torch.where(inside, src - a, (b - a) + torch.searchsorted(halo, src))
    rows = torch.repeat_interleave(torch.arange(ip.shape[0] - 1), ip.diff())
    order = torch.argsort(rows * (b - a + halo.shape[0] + 1) + local)
    return ip, local[order]


def epoch_order(num_chunks: int, seed: int, epoch: int) -> list[int]:
    """The chunk order of an epoch: a permutation drawn from (seed, epoch),
    identical on every stage."""
    order = list(range(num_chunks))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order
