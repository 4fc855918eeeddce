"""Dropout whose mask is a hash of (key, element index), and ReLU + dropout fused.

`torch.nn.Dropout` on the CPU draws a Bernoulli tensor with `bernoulli_` and
keeps it for the backward pass; that draw costs more than a 256 x 256 matmul
over the same rows (figures in benchmarks/README.md, "Measurements behind
design choices"). Here a numba kernel decides each element from a
counter-based splitmix64 draw of (key, index) (`samplers.random_hash`) and
multiplies in the same pass:
- `hash_dropout`: backward recomputes the decisions from the key, so no mask
  is stored;
- `relu_dropout`: ReLU and dropout in one pass; backward passes the gradient
  where the output is positive, which needs only the output (kept anyway by
  the layer that reads it), not the key. Given the bias of the product before
  it (which then leaves it out), it adds the bias in the same pass and its
  backward sums the bias gradient too (`gnnsys.models.gnn.GNNLayer`). Given
  the leading rows of a padded product (`gnnsys.models.first_rows`), it reads
  the product itself and writes its gradient for every row of it, zero past
  the rows it read, so the padding costs no copy of the gradient.
The key is drawn from torch's default generator, so `torch.manual_seed` and the
checkpointed RNG state make runs reproducible as with `nn.Dropout`. The
kernels take float32, float64 and bfloat16 (as its bits, `gnnsys.models.bf16`; the
product is rounded once to bf16); CUDA tensors and other dtypes use torch's
own ops.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnsys.models.bf16 import as_numpy, load, store
from gnnsys.models.first_rows import padded_rows, padded_source
from gnnsys.samplers.random_hash import draw_below, mix64

_LEVELS = 1 << 31  # resolution of the keep decision
_CHUNK = 128  # rows per partial sum of the bias gradient


@numba.njit(parallel=True, nogil=True, cache=True)
def _masked_scale(x, bias, out, key, threshold, scale, relu):
    """x, out: [rows, d]. out[r, j] = v * scale where draw r * d + j of `key` (uniform
    below _LEVELS) >= threshold (and, with `relu`, v > 0), else 0; v = x[r, j] + bias[j]
    (x[r, j] when bias is empty)."""
    base = mix64(np.uint64(key))
    d, biased = x.shape[1], bias.shape[0] > 0
    for r in numba.prange(x.shape[0]):
        row, o = x[r], out[r]
        for j in range(d):
            v = load(row[j])
            if biased:
                v += bias[j]
            keep = draw_below(base, r * d + j, _LEVELS) >= threshold and (not relu or v > 0)
            store(o, j, v * scale if keep else 0.0)


@numba.njit(parallel=True, nogil=True, cache=True)
def _scale_where_positive(grad, out, grad_in, scale, sums):
    """grad, out, grad_in: [rows, d]. grad_in[r, j] = grad[r, j] * scale where out[r, j] > 0,
    else 0; when `sums` has rows, sums[c, j] = the sum of grad_in[:, j] over chunk c's
    _CHUNK rows (before rounding to grad_in's type): a fixed order, whatever the threads."""
    rows, d, summing = grad.shape[0], grad.shape[1], sums.shape[0] > 0
    for c in numba.prange((rows + _CHUNK - 1) // _CHUNK):
        for r in range(c * _CHUNK, min(rows, (c + 1) * _CHUNK)):
            g, o, gi = grad[r], out[r], grad_in[r]
            for j in range(d):
                v = load(g[j]) * scale if load(o[j]) > 0 else 0.0
                store(gi, j, v)
                if summing:
                    sums[c, j] += v


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x (contiguous) as [rows, last dim]: what the kernels walk; element r * d + j is x's flat element."""
    d = x.shape[-1] if x.dim() and x.shape[-1] else 1
    return x.detach().contiguous().view(x.numel() // d, d)


def _scale(x: torch.Tensor, p: float):
    """1 / (1 - p) in the type the kernels multiply x's elements in (float32 for bf16)."""
    return (np.float64 if x.dtype == torch.float64 else np.float32)(1.0 / (1.0 - p))


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _apply_mask(x: torch.Tensor, key: int, p: float, relu: bool, bias: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    bias = torch.empty(0) if bias is None else bias
    bias = bias.detach().to(_compute_dtype(x)).contiguous()
    threshold = round(p * _LEVELS)
    _masked_scale(as_numpy(_rows(x)), bias.numpy(), as_numpy(_rows(out)), np.uint64(key), threshold, _scale(x, p), relu)
    return out


class _HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, key, p):
        ctx.key, ctx.p = key, p
        return _apply_mask(x, key, p, relu=False)

    @staticmethod
    def backward(ctx, grad):
        return _apply_mask(grad, ctx.key, ctx.p, relu=False), None, None


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, key, p, rows):
        out = _apply_mask(x[:rows], key, p, relu=True, bias=bias)
        ctx.p, ctx.bias_dtype, ctx.padded = p, None if bias is None else bias.dtype, x.shape[0]
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        rows = _rows(grad)
        padded = padded_rows(out, ctx.padded)  # x's gradient
        summing = ctx.needs_input_grad[1]
        sums = torch.zeros(-(-rows.shape[0] // _CHUNK) if summing else 0, rows.shape[1], dtype=torch.float64)
        _scale_where_positive(
            as_numpy(rows),
            as_numpy(_rows(out)),
            as_numpy(_rows(padded[: out.shape[0]])),
            _scale(grad, ctx.p),
            sums.numpy(),
        )
        return padded, sums.sum(0).to(ctx.bias_dtype) if summing else None, None, None, None


def _hashable(x: torch.Tensor, p: float) -> bool:
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64, torch.bfloat16) and p < 1.0


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")


def _draw_key() -> int:
    return int(torch.randint(0, 2**63 - 1, (1,)).item())


def hash_dropout(x: torch.Tensor, p: float, training: bool = True, key: int | None = None) -> torch.Tensor:
    """Zero each element of `x` with probability `p` and scale the rest by
    1 / (1 - p), like `F.dropout`. `key` (a uint64) fixes the mask; by default
    it is drawn from torch's default generator."""
    _check_p(p)
    if not training or p == 0.0:
        return x
    if not _hashable(x, p):
        return F.dropout(x, p, True)
    return _HashDropout.apply(x, _draw_key() if key is None else key, p)


def relu_dropout(
    x: torch.Tensor, p: float, training: bool = True, key: int | None = None, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """`hash_dropout(torch.relu(x + bias), p, training, key)` in one pass forward and one
    backward (which also sums the bias gradient). `bias` ([x.shape[-1]], optional) is a
    linear map's bias that its product left out: adding it here saves the product
    writing it into its output first and a separate pass summing its gradient."""
    _check_p(p)
    if bias is not None and not (training and p > 0.0 and _hashable(x, p)):
        x = x + bias.to(x.dtype)
    if not training or p == 0.0:
        return torch.relu(x)
    if not _hashable(x, p):
        return F.dropout(torch.relu(x), p, True)
    source, rows = padded_source(x)
    return _ReluDropout.apply(source, bias, _draw_key() if key is None else key, p, rows)


class HashDropout(nn.Module):
    """Drop-in `nn.Dropout(p)` that stores no mask (see the module docstring)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        _check_p(p)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x with dropout applied in training mode, x itself in eval mode."""
        return hash_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
