"""gnnsys.models.linear: F.linear's products and gradients to fp32 rounding, on
oneDNN in fp32 on the CPU and by F.linear itself everywhere else."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.models import linear as linear_module
from gnnsys.models.linear import ONEDNN, linear

needs_onednn = pytest.mark.skipif(not ONEDNN, reason="torch without oneDNN")


def products(x, weight, bias, op):
    """op's output and the gradients of a weighted sum of it w.r.t. whichever inputs take one."""
    inputs = [t for t in (x, weight, bias) if t is not None and t.requires_grad]
    out = op(x, weight, bias)
    upstream = torch.linspace(-1, 1, out.numel()).view_as(out)
    return out, torch.autograd.grad(out, inputs, upstream) if inputs else ()


def leaves(m, k, n, bias, grads, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).requires_grad_(grads[0])
    weight = torch.randn(n, k, generator=g).requires_grad_(grads[1])
    b = torch.randn(n, generator=g).requires_grad_(grads[2]) if bias else None
    return x, weight, b


@needs_onednn
@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 70),
    k=st.integers(1, 40),
    n=st.integers(1, 40),
    bias=st.booleans(),
    grads=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_products_and_gradients_are_f_linears_to_rounding(m, k, n, bias, grads):
    x, weight, b = leaves(m, k, n, bias, grads)
    out, got = products(x, weight, b, linear)
    ref_out, ref = products(x, weight, b, F.linear)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    assert len(got) == len(ref)
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-4)


@needs_onednn
def test_fp32_on_the_cpu_runs_on_onednn(monkeypatch):
    def refused(*args):
        raise AssertionError("F.linear ran")

    monkeypatch.setattr(linear_module.F, "linear", refused)
    x, weight, b = leaves(8, 5, 3, True, (True, True, True))
    out, grads = products(x, weight, b, linear)
    assert out.shape == (8, 3) and [g.shape for g in grads] == [(8, 5), (3, 5), (3,)]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(lambda x, w, b: (x.bfloat16(), w.bfloat16(), b.bfloat16()), id="bf16"),
        pytest.param(lambda x, w, b: (x.double(), w.double(), b.double()), id="fp64"),
        pytest.param(lambda x, w, b: (x.view(2, 4, 5), w, b), id="3-d input"),
    ],
)
def test_other_inputs_are_f_linear_itself(monkeypatch, case):
    calls = []
    real = F.linear
    monkeypatch.setattr(linear_module.F, "linear", lambda *a: calls.append(1) or real(*a))
    x, weight, b = case(*leaves(8, 5, 3, True, (False, False, False)))
    assert torch.equal(linear(x, weight, b), real(x, weight, b)) and calls == [1]


def test_under_autocast_the_product_is_autocasts():
    x, weight, b = leaves(8, 5, 3, True, (False, False, False))
    with torch.autocast("cpu", torch.bfloat16):
        out = linear(x, weight, b)
        assert out.dtype == torch.bfloat16 and torch.equal(out, F.linear(x, weight, b))
