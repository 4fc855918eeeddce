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
  the layer that reads it), not the key.
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
from gnnsys.samplers.random_hash import draw_below, mix64

_LEVELS = 1 << 31  # resolution of the keep decision


@numba.njit(parallel=True, nogil=True, cache=True)
def _masked_scale(x, out, key, threshold, scale, relu):
    """out[i] = x[i] * scale where draw i of `key` (uniform below _LEVELS) >=
    threshold (and, with `relu`, x[i] > 0), else 0."""
    base = mix64(np.uint64(key))
    for i in numba.prange(x.shape[0]):
        v = load(x[i])
        keep = draw_below(base, i, _LEVELS) >= threshold and (not relu or v > 0)
        store(out, i, v * scale if keep else 0.0)


@numba.njit(parallel=True, nogil=True, cache=True)
def _scale_where_positive(grad, out, grad_in, scale):
    """grad_in[i] = grad[i] * scale where out[i] > 0, else 0."""
    for i in numba.prange(grad.shape[0]):
        store(grad_in, i, load(grad[i]) * scale if load(out[i]) > 0 else 0.0)


def _flat(x: torch.Tensor) -> np.ndarray:
    return as_numpy(x.detach().contiguous().view(-1))


def _scale(x: torch.Tensor, p: float):
    """1 / (1 - p) in the type the kernels multiply x's elements in (float32 for bf16)."""
    return (np.float64 if x.dtype == torch.float64 else np.float32)(1.0 / (1.0 - p))


def _apply_mask(x: torch.Tensor, key: int, p: float, relu: bool) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    flat = _flat(x)
    _masked_scale(flat, _flat(out), np.uint64(key), round(p * _LEVELS), _scale(x, p), relu)
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
    def forward(ctx, x, key, p):
        out = _apply_mask(x, key, p, relu=True)
        ctx.p = p
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        grad_in = torch.empty_like(out)
        _scale_where_positive(_flat(grad), _flat(out), _flat(grad_in), _scale(grad, ctx.p))
        return grad_in, None, None


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


def relu_dropout(x: torch.Tensor, p: float, training: bool = True, key: int | None = None) -> torch.Tensor:
    """`hash_dropout(torch.relu(x), p, training, key)` in one pass forward and one backward."""
    _check_p(p)
    if not training or p == 0.0:
        return torch.relu(x)
    if not _hashable(x, p):
        return F.dropout(torch.relu(x), p, True)
    return _ReluDropout.apply(x, _draw_key() if key is None else key, p)


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
