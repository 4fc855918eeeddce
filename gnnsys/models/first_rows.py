"""`first_rows(out, rows)`: the leading rows of a product run at a padded row count,
and `padded_source`, which lets the op reading them take the whole product instead.

On the CPU a layer's products run at a rounded-up row count (`gnnsys.models.sage_gcn`,
`gemm_rows`) and the layer keeps the first `rows`. Autograd's slice backward would
zero-fill a padded gradient and copy the gradient into it; `first_rows`'s backward
zeroes only the rows past `rows`, but still copies the gradient into a new buffer,
a pass over every row (about 2.7 ms a step for the first SAGE layer on the arxiv
shape). The op that reads the rows (`gnnsys.models.dropout.relu_dropout`) asks
`padded_source` for the whole product and writes its gradient straight into a
buffer of the padded size, zero past `rows`, so the copy never happens. Any other
reader goes through `first_rows`'s own backward, and autograd sums the two gradients
when both read the same rows.
"""

from __future__ import annotations

import torch


class _FirstRows(torch.autograd.Function):
    """out[:rows], whose backward zeroes only the rows past `rows` of the padded gradient
    (autograd's slice backward zero-fills all of it, then copies the gradient in)."""

    @staticmethod
    def forward(ctx, out, rows):
        ctx.padded = out.shape[0]
        return out[:rows]

    @staticmethod
    def backward(ctx, grad):
        padded = padded_rows(grad, ctx.padded)
        padded[: grad.shape[0]] = grad
        return padded, None


def padded_rows(like: torch.Tensor, padded: int) -> torch.Tensor:
    """A new [padded, *like.shape[1:]] tensor of like's dtype and device whose rows past
    like.shape[0] are zero (the rows before are for the caller to write)."""
    buffer = like.new_empty(padded, *like.shape[1:])
    buffer[like.shape[0] :].zero_()
    return buffer


def first_rows(out: torch.Tensor, rows: int) -> torch.Tensor:
    """out's first `rows` rows (out itself when it has no more), differentiable in out."""
    return out if out.shape[0] == rows else _FirstRows.apply(out, rows)


def padded_source(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(out, rows) when `x` is `first_rows(out, rows)` of a product autograd tracks, else
    (x, x.shape[0]): what an op reading x's rows can read instead, giving its gradient
    for all of out's rows (zero past `rows`)."""
    if isinstance(x.grad_fn, _FirstRows._backward_cls) and x._base is not None:
        return x._base, x.shape[0]
    return x, x.shape[0]
