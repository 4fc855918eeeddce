import numba
import pytest
import torch
from numba.core.caching import NullCache

from gnnsys.models.dropout import HashDropout, _masked_scale, _scale_where_positive, hash_dropout, relu_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_hash_dropout_drops_p_and_scales_the_rest(p):
    x = torch.rand(200, 300) + 0.5
    y = hash_dropout(x, p, key=7)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < 0.01
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))


def test_mask_is_a_function_of_the_key_not_of_threads():
    x = torch.randn(1000, 64)
    a = hash_dropout(x, 0.5, key=3)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        b = hash_dropout(x, 0.5, key=3)
    finally:
        numba.set_num_threads(threads)
    assert torch.equal(a, b)
    assert not torch.equal(a, hash_dropout(x, 0.5, key=4))


def test_default_key_follows_torch_manual_seed():
    x = torch.randn(100, 10)
    torch.manual_seed(0)
    a = hash_dropout(x, 0.5)
    b = hash_dropout(x, 0.5)
    torch.manual_seed(0)
    assert torch.equal(a, hash_dropout(x, 0.5))
    assert not torch.equal(a, b)


@pytest.mark.parametrize("op", [hash_dropout, relu_dropout])
def test_backward_uses_the_forward_mask(op):
    x = torch.randn(50, 40, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: op(t, 0.4, key=11), (x,))
    y = op(x, 0.4, key=11)
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad != 0, y != 0)


def test_relu_dropout_is_relu_then_hash_dropout():
    x = torch.randn(64, 33)
    torch.testing.assert_close(relu_dropout(x, 0.3, key=5), hash_dropout(torch.relu(x), 0.3, key=5), rtol=0, atol=0)


@pytest.mark.parametrize("op", [hash_dropout, relu_dropout])
def test_eval_mode_p0_noncontiguous_and_fallback_dtypes(op):
    x = torch.randn(30, 20)
    ref = torch.relu(x) if op is relu_dropout else x
    assert torch.equal(op(x, 0.5, training=False), ref)
    assert torch.equal(op(x, 0.0), ref)
    t = x.t()  # not contiguous
    assert torch.equal(op(t, 0.5, key=1), op(t.contiguous(), 0.5, key=1))
    half = op(x.to(torch.bfloat16), 0.5)  # not hashed: torch's dropout
    assert half.dtype == torch.bfloat16 and half.shape == x.shape
    assert torch.equal(op(x, 1.0), torch.zeros_like(x))


def test_invalid_probability_and_module():
    with pytest.raises(ValueError, match="dropout probability"):
        hash_dropout(torch.ones(2), 1.5)
    with pytest.raises(ValueError, match="dropout probability"):
        HashDropout(-0.1)
    m = HashDropout(0.5)
    x = torch.ones(100, 100)
    assert (m(x) == 0).any()
    m.eval()
    assert m(x) is x
    assert "p=0.5" in repr(m)


def test_kernels_are_cached_on_disk():
    for kernel in (_masked_scale, _scale_where_positive):
        assert not isinstance(kernel._cache, NullCache), kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_relu_dropout_with_bias_is_relu_of_the_sum_and_sums_its_gradient(dtype):
    """The bias a product left out, added in the same pass: the same output and input
    gradient as relu_dropout(x + bias), the bias gradient that one's column sums."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 24, generator=g).to(dtype).requires_grad_()
    bias = torch.randn(24, generator=g).requires_grad_()
    grad = torch.randn(300, 24, generator=g).to(dtype)
    out = relu_dropout(x, 0.4, key=9, bias=bias)
    out.backward(grad)
    x_ref, bias_ref = x.detach().float().requires_grad_(), bias.detach().requires_grad_()
    ref = relu_dropout(x_ref + bias_ref, 0.4, key=9)
    ref.backward(grad.float())
    assert out.dtype == dtype and bias.grad.dtype == torch.float32
    assert torch.equal(out, ref.to(dtype)) and torch.equal(x.grad, x_ref.grad.to(dtype))
    torch.testing.assert_close(bias.grad, bias_ref.grad, rtol=1e-5, atol=1e-5)


def test_relu_dropout_bias_gradient_is_the_same_whatever_the_threads():
    x = torch.randn(1000, 16, requires_grad=True)
    bias = torch.randn(16, requires_grad=True)
    grads = []
    threads = numba.get_num_threads()
    for n in (1, threads):
        numba.set_num_threads(n)
        try:
            bias.grad = None
            relu_dropout(x, 0.5, key=2, bias=bias).sum().backward()
        finally:
            numba.set_num_threads(threads)
        grads.append(bias.grad.clone())
    assert torch.equal(grads[0], grads[1])


def test_relu_dropout_bias_gradcheck_and_fallbacks():
    x = torch.randn(40, 8, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t, b: relu_dropout(t, 0.3, key=4, bias=b), (x, bias))
    plain = torch.randn(10, 8)
    b = torch.randn(8)
    assert torch.equal(relu_dropout(plain, 0.3, training=False, bias=b), torch.relu(plain + b))
    assert torch.equal(relu_dropout(plain, 0.0, bias=b), torch.relu(plain + b))
