"""Weighted sums over a block's CSR, in fp32 or bf16: what SAGE (mean) and GCN
(normalised sum) aggregate with (`gnnsys.models.sage_gcn`).

PyG aggregates with `torch.sparse.mm(adj_t, x, reduce)`, which on the CPU
needs the adjacency's values in x's dtype and then rounds in bf16 along the
way. `aggregate(adj, x, dtype)` instead reads x's rows (bf16 or fp32), sums
`weight * row` in fp32 and rounds each output once to `dtype`: within one
bf16 rounding of the fp32 result; in fp32, PyG's own sums to rounding (a mean
multiplies each row by 1/degree instead of dividing the sum). On the CPU a numba kernel does it, parallel
over destination rows and without the GIL; its backward is the same kernel
over the transposed adjacency (built once per adjacency, on first backward).
On other devices (a GPU) the same sums are `torch.sparse.mm` of the fp32
weights and the rows widened to fp32, with autocast off inside (autocast
would cast the product to its own dtype), rounded once to `dtype`; the
backward is the same product over the transposed adjacency. So bf16-mixed
and 16-mixed (fp16) aggregate as on the CPU, whatever cuSPARSE supports in
half precision, at the cost of an fp32 copy of the rows.

The kernel needs no bf16 instructions (`gnnsys.models.bf16` widens and rounds with
integer shifts), so it runs as fast on an AVX2-only CPU as on one with
AVX512-BF16, in bf16 as in fp32 (benchmarks/README.md, "Mixed precision").
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import torch
import torch.nn.functional as F
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from gnnsys.models.bf16 import as_numpy, load, store

KERNEL_DTYPES = (torch.float32, torch.bfloat16)  # what the CPU kernel reads and writes
_AHEAD = 6  # edges between prefetching a source row and summing it: the gather is latency-bound
_TASK_ROWS = 64  # output rows per parallel task


@intrinsic
def _prefetch(typingctx, row, offset):
    """Hint the CPU to bring the cache line `offset` bytes into array `row`'s data into its caches (LLVM's prefetch)."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [byte, ir.IntType(32), ir.IntType(32), ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        i32 = lambda v: ir.Constant(ir.IntType(32), v)  # noqa: E731
        builder.call(fn, [builder.gep(builder.bitcast(data, byte), [args[1]]), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(row, types.intp), codegen


@numba.njit(parallel=True, nogil=True, cache=True)
def _weighted_sum(indptr, indices, weights, x, out, d, copy_rows, add_rows):
    """out[r, :d] = sum over e in indptr[r]:indptr[r+1] of weights[e] * x[indices[e], :d], summed in
    fp32 (zero for r past indptr's rows), plus x[r, d:2d] for r < add_rows; out[r, d:2d] = x[r, :d]
    for r < copy_rows. Each row of x read is prefetched _AHEAD edges before it is summed."""
    num_dst, num_edges, rows = indptr.shape[0] - 1, indices.shape[0], out.shape[0]
    line = 64 // x.itemsize
    for task in numba.prange((rows + _TASK_ROWS - 1) // _TASK_ROWS):
        acc = np.empty(d, np.float32)  # one per task: an allocation per row cost up to a third of the time
        for r in range(task * _TASK_ROWS, min(rows, (task + 1) * _TASK_ROWS)):
            acc[:] = 0
            if r < num_dst:
                for e in range(indptr[r], indptr[r + 1]):
                    if e + _AHEAD < num_edges:
                        ahead = x[indices[e + _AHEAD]]
                        for j in range(0, d, line):
                            _prefetch(ahead, j * x.itemsize)
                    w = weights[e]
                    row = x[indices[e]]
                    for j in range(d):
                        acc[j] += w * load(row[j])
            o = out[r]
            if r < add_rows:
                own = x[r]
                for j in range(d):
                    acc[j] += load(own[d + j])
            for j in range(d):
                store(o, j, acc[j])
            if r < copy_rows:
                own = x[r]
                for j in range(d):
                    store(o, d + j, load(own[j]))


@numba.njit(parallel=True, nogil=True, cache=True)
def _mean_weights(indptr, weights):
    """weights[e] = 1 / (number of entries of e's row)."""
    for r in numba.prange(indptr.shape[0] - 1):
        start, stop = indptr[r], indptr[r + 1]
        for e in range(start, stop):
            weights[e] = np.float32(1.0) / np.float32(stop - start)


@numba.njit(nogil=True, cache=True)
def _transpose(indptr, indices, weights, t_indptr, t_indices, t_weights):
    """The transposed CSR by a counting sort (t_indptr zeroed on entry); each row's entries stay ordered."""
    for e in range(indices.shape[0]):
        t_indptr[indices[e] + 1] += 1
    for c in range(t_indptr.shape[0] - 1):
        t_indptr[c + 1] += t_indptr[c]
    pos = t_indptr[:-1].copy()
    for r in range(indptr.shape[0] - 1):
        for e in range(indptr[r], indptr[r + 1]):
            c = indices[e]
            t_indices[pos[c]] = r
            t_weights[pos[c]] = weights[e]
            pos[c] += 1


class Adjacency:
    """A weighted CSR [num_dst, num_src]: row r sums weights[e] * x[indices[e]]
    over e in indptr[r]:indptr[r+1]. indptr, indices int64; weights float32."""

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_src: int):
        self.indptr, self.indices, self.weights, self.num_src = indptr, indices, weights.float(), num_src
        self._transposed = None
        self._csr = {}

    @classmethod
    def from_csr(cls, csr: torch.Tensor) -> Adjacency:
        """The Adjacency of a torch sparse CSR tensor (its values as weights)."""
        return cls(csr.crow_indices(), csr.col_indices(), csr.values(), csr.shape[1])

    @classmethod
    def mean(cls, indptr: torch.Tensor, indices: torch.Tensor, num_src: int) -> Adjacency:
        """Mean over each row's entries (a row without any gives zeros, as PyG's mean)."""
        if _uses_kernel(indptr):
            weights = torch.empty(indices.shape[0])
            _mean_weights(indptr.numpy(), weights.numpy())
        else:
            degree = indptr.diff()
            weights = (1.0 / degree.float()).repeat_interleave(degree)
        return cls(indptr, indices, weights, num_src)

    @property
    def num_dst(self) -> int:
        return self.indptr.shape[0] - 1

    def transposed(self) -> Adjacency:
        """The transpose [num_src, num_dst] (what the backward sums over); built once."""
        if self._transposed is None:
            device = self.indptr.device
            indptr = torch.zeros(self.num_src + 1, dtype=torch.long, device=device)
            if _uses_kernel(self.indptr):
                rows, weights = torch.empty_like(self.indices), torch.empty_like(self.weights)
                _transpose(
                    self.indptr.numpy(),
                    self.indices.numpy(),
                    self.weights.numpy(),
                    indptr.numpy(),
                    rows.numpy(),
                    weights.numpy(),
                )
            else:
                indptr[1:] = torch.cumsum(torch.bincount(self.indices, minlength=self.num_src), 0)
                order = torch.argsort(self.indices, stable=True)
                rows = torch.repeat_interleave(torch.arange(self.num_dst, device=device), self.indptr.diff())[order]
                weights = self.weights[order]
            self._transposed = Adjacency(indptr, rows, weights, self.num_dst)
        return self._transposed

    def csr(self, dtype: torch.dtype) -> torch.Tensor:
        """This adjacency as a torch sparse CSR tensor with `dtype` values; built once per dtype."""
        if dtype not in self._csr:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's beta warning for sparse CSR
                self._csr[dtype] = torch.sparse_csr_tensor(
                    self.indptr, self.indices, self.weights.to(dtype), size=(self.num_dst, self.num_src)
                )
        return self._csr[dtype]

    def to(self, device, non_blocking: bool = False) -> Adjacency:
        """This adjacency on `device` (self when it is there already), as `Block.to` moves its cache."""
        if self.indptr.device == torch.device(device):
            return self
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Adjacency(move(self.indptr), move(self.indices), move(self.weights), self.num_src)


def _run_kernel(adj: Adjacency, x: torch.Tensor, dtype: torch.dtype, rows: int, d: int, copy_rows: int, add_rows: int):
    """`rows` rows: the weighted sums of x[:, :d] (those past adj.num_dst zero) plus x[r, d:2d] for r < add_rows,
    then, when copy_rows (0 or rows), x[r, :d] as columns d:2d; in `dtype` (`_weighted_sum`)."""
    for what, t in (("input", x.dtype), ("output", dtype)):
        if t not in KERNEL_DTYPES:
            raise TypeError(f"aggregation on the CPU takes float32 or bfloat16, got {what} {t}")
    out = torch.empty(rows, 2 * d if copy_rows else d, dtype=dtype)
    indptr, indices, weights = adj.indptr.numpy(), adj.indices.numpy(), adj.weights.numpy()
    _weighted_sum(indptr, indices, weights, as_numpy(x.contiguous()), as_numpy(out), d, copy_rows, add_rows)
    return out


def _run_sparse(adj: Adjacency, x: torch.Tensor, dtype: torch.dtype, rows: int, d: int, copy_rows: int, add_rows: int):
    """`_run_kernel`'s rows with `torch.sparse.mm` in fp32 (autocast off), rounded once to `dtype`."""
    with torch.autocast(x.device.type, enabled=False):
        out = torch.sparse.mm(adj.csr(torch.float32), x[: adj.num_src, :d].float())
        if add_rows:
            out[:add_rows] += x[:add_rows, d : 2 * d].float()
        out = out.to(dtype)
        out = F.pad(out, (0, 0, 0, rows - adj.num_dst)) if rows > adj.num_dst else out
        return torch.cat([out, x[:rows, :d].to(dtype)], 1) if copy_rows else out


def _uses_kernel(x: torch.Tensor) -> bool:
    """Whether the numba kernels serve tensor `x` (on the CPU); elsewhere torch's ops do."""
    return x.device.type == "cpu"


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, adj, dtype, root, rows):
        if x.shape[0] != adj.num_src:
            raise ValueError(f"x has {x.shape[0]} rows, the adjacency has {adj.num_src} source nodes")
        ctx.adj, ctx.x_dtype, ctx.root, ctx.dim = adj, x.dtype, root, x.shape[1]
        ctx.run = _run_kernel if _uses_kernel(x) else _run_sparse
        return ctx.run(adj, x, dtype, rows, ctx.dim, root, 0)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        # the transposed sums of grad's first dim columns, plus (with a root) its root columns on the first rows
        grad_x = ctx.run(ctx.adj.transposed(), grad, ctx.x_dtype, ctx.adj.num_src, ctx.dim, 0, ctx.root)
        return grad_x, None, None, None, None


def aggregate(
    adj: Adjacency, x: torch.Tensor, dtype: torch.dtype = torch.bfloat16, rows: int | None = None
) -> torch.Tensor:
    """[adj.num_dst, dim] rows sum(weight * x[source]) of `dtype`, summed in fp32
    (see the module docstring); differentiable in x. x: [adj.num_src, dim],
    float32 or bfloat16 on the CPU (any float type elsewhere), on adj's device.
    With `rows` (>= adj.num_dst) the result has `rows` rows, those past
    adj.num_dst zero (a GEMM's row count rounded up, `gnnsys.models.sage_gcn`)."""
    return _Aggregate.apply(x, adj, dtype, 0, _rows(adj, rows))


def aggregate_with_root(adj: Adjacency, x: torch.Tensor, dtype: torch.dtype = torch.bfloat16, rows: int | None = None):
    """[rows, 2 * dim]: aggregate(adj, x, dtype, rows) beside x[:rows] in `dtype` (rows: adj.num_dst
    by default, at most adj.num_src), written in one kernel pass. A layer that also reads its
    destination rows (SAGE's root weight) multiplies this by its two weights side by side in one
    product; the root columns' gradient is added into the aggregation's input gradient by the same
    pass that sums the transposed aggregation (no slice gradient, no add)."""
    rows = _rows(adj, rows)
    if rows > adj.num_src:
        raise ValueError(f"rows {rows} is more than the adjacency's {adj.num_src} source nodes")
    return _Aggregate.apply(x, adj, dtype, rows, rows)


def _rows(adj: Adjacency, rows: int | None) -> int:
    if rows is None:
        return adj.num_dst
    if rows < adj.num_dst:
        raise ValueError(f"rows {rows} is fewer than the adjacency's {adj.num_dst} destinations")
    return rows
