"""Cut a graph into C chunks that are contiguous id ranges after a reorder.

GNNPipe streams chunks of nodes through the pipeline; the fewer in-neighbours
of a chunk lie outside it, the fewer historical (stale) embeddings a chunk
reads. `chunk_graph` finds the chunks with METIS (`pymetis.part_graph` on the
symmetrised graph, no vertex weights) when pymetis is installed, or else with a
locality-preserving heuristic: reverse Cuthill-McKee order of the symmetrised
graph (a BFS order that keeps neighbours close in id) cut into C equal ranges.
Both return a `Partition`: `perm[new] = old` and `chunk_ptr` (chunk c owns new
ids chunk_ptr[c]:chunk_ptr[c+1]). `relabel_csc` applies the permutation to a
CSC graph, and `halo_sizes` counts the out-of-chunk in-neighbours of every
chunk (graph-parallel communication per layer, locality of the chunking).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

METHODS = ("auto", "metis", "rcm", "range")


@dataclass
class Partition:
    """perm: int64 [N], new id -> old id; chunk_ptr: int64 [C + 1]; method used."""

    perm: torch.Tensor
    chunk_ptr: torch.Tensor
    method: str

    @property
    def num_chunks(self) -> int:
        return self.chunk_ptr.shape[0] - 1

    def chunk_sizes(self) -> torch.Tensor:
        """Number of nodes of every chunk."""
        return self.chunk_ptr.diff()

    def inverse(self) -> torch.Tensor:
        """old id -> new id."""
        inv = torch.empty_like(self.perm)
        inv[self.perm] = torch.arange(self.perm.shape[0])
        return inv


def metis_available() -> bool:
    """True when pymetis imports."""
    try:
        import pymetis  # noqa: F401
    except ImportError:
        return False
    return True


def chunk_graph(
    indptr: torch.Tensor, indices: torch.Tensor, num_chunks: int, method: str = "auto", seed: int = 0
) -> Partition:
    """Split the N nodes of a CSC graph into `num_chunks` contiguous ranges of
    a locality-preserving order. method: "metis", "rcm", "range" (identity
    order, for tests and baselines) or "auto" (metis if installed, else rcm)."""
    n = indptr.shape[0] - 1
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not 1 <= num_chunks <= max(n, 1):
        raise ValueError(f"num_chunks must be in 1..{n} (the number of nodes), got {num_chunks}")
    if method == "auto":
        method = "metis" if metis_available() else "rcm"
    if num_chunks == 1 or method == "range":
        return Partition(torch.arange(n), _even_ptr(n, num_chunks), "range" if num_chunks > 1 else method)
    sym = _symmetric(indptr, indices)
    if method == "metis":
        return _metis(sym, num_chunks, seed)
    return _rcm(sym, num_chunks)


def _even_ptr(n: int, c: int) -> torch.Tensor:
    return torch.from_numpy(np.linspace(0, n, c + 1).round().astype(np.int64))


def _symmetric(indptr, indices) -> sp.csr_matrix:
    """A + A^T without self-loops or repeats, as scipy CSR (a CSC of in-edges
    is the CSR of the transpose; symmetrising makes the difference vanish)."""
    n = indptr.shape[0] - 1
    a = sp.csr_matrix((np.ones(indices.shape[0], dtype=np.int8), indices.numpy(), indptr.numpy()), shape=(n, n))
    a = (a + a.T).tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    return a


def _metis(sym: sp.csr_matrix, c: int, seed: int) -> Partition:
    import pymetis

    opts = pymetis.Options(seed=seed)
    _, parts = pymetis.part_graph(c, pymetis.CSRAdjacency(sym.indptr, sym.indices), options=opts)
    return _from_labels(np.asarray(parts, dtype=np.int64), c, "metis")


def _rcm(sym: sp.csr_matrix, c: int) -> Partition:
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    perm = torch.from_numpy(reverse_cuthill_mckee(sym, symmetric_mode=True).astype(np.int64))
    return Partition(perm, _even_ptr(perm.shape[0], c), "rcm")


def _from_labels(parts: np.ndarray, c: int, method: str) -> Partition:
    """Renumber so that part p is a contiguous range (stable within a part).
    Empty parts (METIS may leave some on tiny graphs) become empty ranges."""
    perm = np.argsort(parts, kind="stable")
    counts = np.bincount(parts, minlength=c)
    ptr = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return Partition(torch.from_numpy(perm.astype(np.int64)), torch.from_numpy(ptr), method)


def relabel_csc(indptr: torch.Tensor, indices: torch.Tensor, perm: torch.Tensor):
    """The CSC graph with node `perm[i]` renamed i; neighbour lists sorted."""
    n = indptr.shape[0] - 1
    a = sp.csr_matrix(
        (np.ones(indices.shape[0], dtype=np.float32), indices.numpy(), indptr.numpy()), shape=(n, n), copy=False
    )  # row = dst, col = src
    p = perm.numpy()
    b = a[p][:, p].tocsr()
    b.sort_indices()
    return torch.from_numpy(b.indptr.astype(np.int64)), torch.from_numpy(b.indices.astype(np.int64))


def halo_sizes(indptr: torch.Tensor, indices: torch.Tensor, chunk_ptr: torch.Tensor) -> torch.Tensor:
    """For a relabelled CSC graph, the number of distinct in-neighbours of each
    chunk that lie outside it (its halo). Their sum is the number of remote
    rows graph-parallel training with this partition exchanges per layer."""
    n = indptr.shape[0] - 1
    owner = torch.repeat_interleave(torch.arange(chunk_ptr.shape[0] - 1), chunk_ptr.diff())
    dst_chunk = torch.repeat_interleave(owner, indptr.diff())
    src = indices.long()
    outside = owner[src] != dst_chunk
    pairs = torch.unique(dst_chunk[outside] * n + src[outside])
    return torch.bincount(pairs // n, minlength=chunk_ptr.shape[0] - 1)
