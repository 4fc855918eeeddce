"""`linear(x, weight, bias)`: F.linear for the models' dense products, with fp32
products on the CPU computed by oneDNN instead of MKL.

torch multiplies fp32 matrices on the CPU with MKL's sgemm (bf16 ones already
with oneDNN). On the AMD EPYC that the benchmarks ran on, sgemm ran a SAGE
layer's product and its input gradient at about half the rate of oneDNN's fp32
inner product (`torch.ops.mkldnn._linear_pointwise`), and its weight gradient
(a product over the rows) at about 0.65x oneDNN's inner-product backward
(`aten.mkldnn_linear_backward_weights`, on oneDNN copies of its operands); the
figures are in benchmarks/README.md, "Measurements behind design choices". So
in fp32 on the CPU, outside autocast and where torch has oneDNN, `linear` runs
the product and both gradients on oneDNN, with results equal to F.linear's to
fp32 rounding (the sums run in another order). Anything else (other dtypes,
autocast, another device, inputs not 2-D) is F.linear itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

ONEDNN = torch.backends.mkldnn.is_available()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias), as F.linear (see the module docstring for where oneDNN computes it)."""
    if not _on_onednn(x, weight, bias):
        return F.linear(x, weight, bias)
    return _OneDNNLinear.apply(x, weight, bias)


def _on_onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    tensors = (x, weight) if bias is None else (x, weight, bias)
    return (
        ONEDNN
        and x.dim() == 2
        and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
        and not torch.is_autocast_enabled("cpu")
    )


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight.contiguous(), bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _product(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = _product(grad, weight.t()) if ctx.needs_input_grad[0] else None
        grad_weight = grad_bias = None
        bias_grad = ctx.has_bias and ctx.needs_input_grad[2]
        if ctx.needs_input_grad[1]:
            grad_weight, grad_bias = torch.ops.aten.mkldnn_linear_backward_weights(
                grad.contiguous().to_mkldnn(), x.contiguous().to_mkldnn(), weight, bias_grad
            )
        elif bias_grad:
            grad_bias = grad.sum(0)
        return grad_x, grad_weight, grad_bias if bias_grad else None
