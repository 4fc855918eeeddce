import pytest
import torch

from gnnsys.models import first_rows as first_rows_module
from gnnsys.models.dropout import relu_dropout
from gnnsys.models.first_rows import first_rows, padded_source


def test_first_rows_pass_the_gradient_and_zero_the_padding():
    out = torch.randn(10, 3, requires_grad=True)
    first = first_rows(out, 7)
    assert torch.equal(first, out[:7]) and first_rows(out, 10) is out
    grad = torch.randn(7, 3)
    first.backward(grad)
    assert torch.equal(out.grad, torch.cat([grad, torch.zeros(3, 3)]))


def test_only_first_rows_of_a_tracked_product_have_a_padded_source():
    out = torch.randn(10, 3, requires_grad=True) * 1
    assert padded_source(first_rows(out, 7))[0] is out and padded_source(first_rows(out, 7))[1] == 7
    for x in (out, out[:7], torch.randn(7, 3), first_rows(out.detach(), 7)):
        assert padded_source(x) == (x, x.shape[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("other_reader", [False, True])
def test_relu_dropout_of_first_rows_writes_the_padded_gradient_itself(monkeypatch, dtype, other_reader):
    """The product's gradient is the one through a plain slice, zero past the rows read; with
    relu_dropout the only reader, first_rows' own backward (a copy) never runs."""
    g = torch.Generator().manual_seed(0)
    product = torch.randn(40, 16, generator=g).to(dtype)
    bias = torch.randn(16, generator=g)
    grads = [torch.randn(33, 16, generator=g).to(dtype) for _ in range(2)]

    def run(take):
        out, b = product.clone().requires_grad_(), bias.clone().requires_grad_()
        rows = take(out * 1)
        loss = (relu_dropout(rows, 0.4, key=3, bias=b) * grads[0]).sum()
        if other_reader:
            loss = loss + (rows * grads[1]).sum()
        loss.backward()
        return out.grad, b.grad

    expect = run(lambda t: t[:33])
    if not other_reader:
        monkeypatch.setattr(first_rows_module._FirstRows, "backward", staticmethod(_never))
    got = run(lambda t: first_rows(t, 33))
    assert torch.equal(got[0], expect[0]) and not got[0][33:].any()
    torch.testing.assert_close(got[1], expect[1], rtol=1e-6, atol=1e-6)


def _never(ctx, grad):
    raise AssertionError("first_rows copied the gradient")
