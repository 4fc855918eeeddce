"""`Block` (one bipartite layer of a sampled computation graph) and `MiniBatch`.

Layout (DGL's "blocks"): the destination nodes of a block are the first
`num_dst` of its source nodes, so `x_dst = x_src[:num_dst]`. blocks[0]
consumes the features of `input_nodes`; blocks[-1] produces the seeds' rows.
A block stores its edges as CSR over destination rows with local source ids,
sorted within each row: the `adj_t` of shape [num_dst, num_src] that PyG conv
layers aggregate with a sparse-dense matmul (their fast path on the CPU).
GCN also needs each source node's degree in the whole graph (`full_degree`):
a block made by `full_graph` counts it, a sampled one gets it from
`MiniBatch.attach_degree`, since its source nodes are a prefix of
`input_nodes`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numba
import numpy as np
import torch


@numba.njit(parallel=True, nogil=True, cache=True)
def _gcn_degree(indptr, indices, out):
    """out[v] = 1 + the number of v's in-edges whose source is not v."""
    for v in numba.prange(out.shape[0]):
        d = 1
        for e in range(indptr[v], indptr[v + 1]):
            if indices[e] != v:
                d += 1
        out[v] = d


def gcn_degree(indptr: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Each node's degree as GCN normalises by it (PyG's `gcn_norm`): its
    in-edges from other nodes, a repeated edge counted as often as it appears,
    plus one for its single self-loop. indptr/indices: a CSC of in-neighbours;
    float32 [num_nodes] on indptr's device. One parallel pass over the edges."""
    out = np.empty(indptr.shape[0] - 1, np.float32)
    _gcn_degree(indptr.cpu().numpy(), indices.cpu().numpy(), out)
    return torch.from_numpy(out).to(indptr.device)


@dataclass
class Block:
    """Edges from `num_src` source nodes into the first `num_dst` of them.

    indptr: int64 [num_dst + 1]; indices: int64 local source ids, sorted per row.
    cache: tensors derived from the block (its adjacencies), keyed by name, so
    each is built once however many layers or passes use it. full_degree:
    float32 [num_src], each source node's `gcn_degree` in the whole graph
    (None until set; only GCN reads it).
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    num_src: int
    num_dst: int
    cache: dict = field(default_factory=dict, repr=False, compare=False)
    full_degree: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @classmethod
    def full_graph(cls, indptr: torch.Tensor, indices: torch.Tensor) -> Block:
        """The whole graph (CSC of in-neighbours) as one square block, with its degrees."""
        n = indptr.shape[0] - 1
        return cls(indptr.long(), indices.long(), n, n, full_degree=gcn_degree(indptr, indices))

    @property
    def num_edges(self) -> int:
        return self.indices.shape[0]

    @property
    def size(self) -> tuple[int, int]:
        """(num_src, num_dst), the `size` argument of PyG's message passing."""
        return self.num_src, self.num_dst

    def in_degree(self) -> torch.Tensor:
        """Number of sampled in-edges of each destination node."""
        return self.indptr.diff()

    def edge_index(self) -> torch.Tensor:
        """[2, E] local (src, dst) ids, PyG's bipartite edge_index."""
        dst = torch.repeat_interleave(torch.arange(self.num_dst, device=self.indptr.device), self.in_degree())
        return torch.stack([self.indices, dst])

    def adj_t(self) -> torch.Tensor:
        """Sparse CSR [num_dst, num_src] adjacency with unit weights, the input
        PyG's SAGEConv aggregates with a sparse-dense matmul; cached."""
        if "ones" not in self.cache:
            values = torch.ones(self.num_edges, device=self.indices.device)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's beta warning for sparse CSR
                self.cache["ones"] = torch.sparse_csr_tensor(
                    self.indptr, self.indices, values, size=(self.num_dst, self.num_src)
                )
        return self.cache["ones"]

    def to(self, device, non_blocking: bool = False) -> Block:
        """This block on `device`, its cached adjacencies and degrees moved with it."""
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Block(
            self.indptr.to(device, non_blocking=non_blocking),
            self.indices.to(device, non_blocking=non_blocking),
            self.num_src,
            self.num_dst,
            {key: move(t) for key, t in self.cache.items()},
            move(self.full_degree),
        )


@dataclass
class MiniBatch:
    """One sampled minibatch.

    seeds: global ids of the nodes whose outputs are trained on;
    input_nodes: global ids of every node whose features are needed, seeds first;
    blocks: one per layer, input layer first; x / y: gathered features of
    input_nodes and labels of seeds once the loader has filled them in;
    timings: seconds spent on this batch per stage ("sample_s", "gather_s", ...).
    """

    seeds: torch.Tensor
    input_nodes: torch.Tensor
    blocks: list
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    timings: dict = field(default_factory=dict)

    def attach_degree(self, degree: torch.Tensor) -> MiniBatch:
        """Give every block the `full_degree` of its source nodes, which are the
        first `num_src` of input_nodes. degree: `gcn_degree` of the whole
        graph, on this batch's device. Returns self."""
        mine = degree[self.input_nodes]
        for block in self.blocks:
            block.full_degree = mine[: block.num_src]
        return self

    def tensors(self):
        """Every tensor the batch holds (what a consumer's stream must record)."""
        yield from (t for t in (self.seeds, self.input_nodes, self.x, self.y) if t is not None)
        for block in self.blocks:
            yield from (block.indptr, block.indices, *block.cache.values())

    def to(self, device, non_blocking: bool = False) -> MiniBatch:
        """This minibatch (blocks with their caches and degrees, x, y) on `device`."""
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return MiniBatch(
            self.seeds.to(device, non_blocking=non_blocking),
            self.input_nodes.to(device, non_blocking=non_blocking),
            [b.to(device, non_blocking) for b in self.blocks],
            move(self.x),
            move(self.y),
            dict(self.timings),
        )
