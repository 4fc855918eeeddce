"""gnnsys.models.aggregation: fp32 sums of bf16 rows over a CSR, forward and backward,
against a float64 reference (within one bf16 rounding); the bf16 helpers of
gnnsys.models.bf16 against torch's own conversion."""

import numba
import pytest
import torch

from gnnsys.models.aggregation import Adjacency, aggregate, aggregate_with_root
from gnnsys.models.bf16 import as_numpy, load, store

BF16_UNIT_ROUNDOFF = 2.0**-8  # one rounding to bf16 (8 significant bits) is off by at most this, relatively


def random_adjacency(num_dst=40, num_src=70, seed=0, weighted=True):
    """A CSR with empty rows, repeated sources and rows of very different lengths."""
    g = torch.Generator().manual_seed(seed)
    degree = torch.randint(0, 12, (num_dst,), generator=g)
    degree[::7] = 0
    degree[3] = 60
    indptr = torch.zeros(num_dst + 1, dtype=torch.long)
    indptr[1:] = torch.cumsum(degree, 0)
    indices = torch.cat([torch.randint(0, num_src, (int(d),), generator=g).sort()[0] for d in degree])
    if not weighted:
        return Adjacency.mean(indptr, indices, num_src)
    return Adjacency(indptr, indices, torch.rand(indices.shape[0], generator=g) + 0.1, num_src)


def dense(adj: Adjacency) -> torch.Tensor:
    """The float64 dense matrix of an Adjacency (repeated entries summed)."""
    rows = torch.repeat_interleave(torch.arange(adj.num_dst), adj.indptr.diff())
    out = torch.zeros(adj.num_dst, adj.num_src, dtype=torch.float64)
    out.index_put_((rows, adj.indices), adj.weights.double(), accumulate=True)
    return out


def assert_one_rounding(got: torch.Tensor, exact: torch.Tensor):
    """got is exact rounded once to bf16 (plus fp32 summation error, far below that)."""
    assert got.dtype == torch.bfloat16
    err = (got.double() - exact).abs()
    assert (err <= BF16_UNIT_ROUNDOFF * exact.abs() + 1e-6).all(), err.max()


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("dim", [1, 17, 64])
def test_forward_is_the_fp32_sum_rounded_once(x_dtype, weighted, dim):
    adj = random_adjacency(weighted=weighted)
    x = (torch.randn(adj.num_src, dim, generator=torch.Generator().manual_seed(1)) * 3 + 1).to(x_dtype)
    exact = dense(adj) @ x.double()
    assert_one_rounding(aggregate(adj, x), exact)
    fp32 = aggregate(adj, x, torch.float32)
    assert fp32.dtype == torch.float32
    torch.testing.assert_close(fp32.double(), exact, rtol=1e-5, atol=1e-5)


def test_long_rows_keep_fp32_accumulation():
    """500 terms of 1 + 2^-8 each: a bf16 running sum would stop growing at 256
    (its spacing there is 2, so adding ~1 rounds away); fp32 sums them exactly."""
    indptr = torch.tensor([0, 500])
    adj = Adjacency(indptr, torch.zeros(500, dtype=torch.long), torch.ones(500), 1)
    x = torch.full((1, 4), 1 + 2**-7, dtype=torch.bfloat16)
    exact = 500 * (1 + 2**-7)
    assert aggregate(adj, x).float().tolist() == [[torch.tensor(exact).bfloat16().item()] * 4]


@pytest.mark.parametrize("weighted", [True, False])
def test_backward_is_the_transposed_aggregation(weighted):
    adj = random_adjacency(weighted=weighted, seed=2)
    x = torch.randn(adj.num_src, 9, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(adj.num_dst, 9, generator=torch.Generator().manual_seed(3)).bfloat16()
    aggregate(adj, x).backward(grad)
    assert x.grad.dtype == torch.bfloat16
    assert_one_rounding(x.grad, dense(adj).T @ grad.double())


def split(both: torch.Tensor, dim: int):
    """aggregate_with_root's [aggregated | root] columns apart."""
    return both[:, :dim], both[:, dim:]


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_root_rows_sit_beside_the_sums_and_share_the_input_gradient(x_dtype, dtype):
    """aggregate_with_root writes x[:num_dst] (in dtype) beside the aggregation; the
    root columns' gradient is added to the aggregation's input gradient, as autograd
    would sum the two uses of x, in the same fp32 sum (rounded once)."""
    adj = random_adjacency(seed=6)
    x = torch.randn(adj.num_src, 4, dtype=x_dtype, requires_grad=True)
    both = aggregate_with_root(adj, x, dtype)
    assert both.shape == (adj.num_dst, 8) and both.dtype == dtype
    out, root = split(both, 4)
    assert torch.equal(root, x[: adj.num_dst].to(dtype)) and torch.equal(out, aggregate(adj, x, dtype))
    grad = torch.randn(adj.num_dst, 8).to(dtype)
    both.backward(grad)
    exact = dense(adj).T @ grad[:, :4].double()
    exact[: adj.num_dst] += grad[:, 4:].double()
    assert x.grad.dtype == x_dtype
    if x_dtype == torch.bfloat16:
        assert_one_rounding(x.grad, exact)
    else:
        torch.testing.assert_close(x.grad.double(), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("use_root", [True, False])
def test_padded_rows_are_zero_and_carry_no_gradient(use_root):
    """With rows > num_dst the first num_dst rows (and the gradient through them)
    are those of the unpadded aggregation, the rest zero; the root is x[:rows]."""
    adj = random_adjacency(seed=7)
    x = torch.randn(adj.num_src, 6, requires_grad=True)
    rows = adj.num_dst + 5
    got = aggregate_with_root(adj, x, torch.float32, rows) if use_root else aggregate(adj, x, rows=rows)
    out, root = split(got, 6) if use_root else (got, None)
    assert out.shape == (rows, 6) and not out[adj.num_dst :].any()
    assert root is None or torch.equal(root, x[:rows])
    torch.testing.assert_close(out[: adj.num_dst].float(), aggregate(adj, x.detach(), out.dtype).float())
    grad = torch.randn(rows, 6)
    got.backward(torch.cat([grad, grad], 1) if use_root else grad.to(got.dtype))
    expect = aggregate(adj.transposed(), grad[: adj.num_dst].to(out.dtype), torch.float32)
    if use_root:
        expect[:rows] += grad
    torch.testing.assert_close(x.grad, expect, rtol=2**-7, atol=1e-6)


def test_padding_beyond_the_rows_there_are_is_refused():
    adj = random_adjacency()
    with pytest.raises(ValueError, match="rows 39 is fewer than the adjacency's 40 destinations"):
        aggregate(adj, torch.zeros(adj.num_src, 2), rows=39)
    with pytest.raises(ValueError, match="rows 71 is more than the adjacency's 70 source nodes"):
        aggregate_with_root(adj, torch.zeros(adj.num_src, 2), rows=71)


def test_fp32_input_gets_an_fp32_gradient_from_a_bf16_output():
    adj = random_adjacency(seed=4)
    x = torch.randn(adj.num_src, 5, requires_grad=True)
    out = aggregate(adj, x)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert x.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad.double(), dense(adj).sum(0)[:, None].expand(-1, 5), rtol=1e-5, atol=1e-5)


def test_transposed_is_the_transpose_with_ordered_rows():
    adj = random_adjacency(seed=5)
    t = adj.transposed()
    assert (t.num_dst, t.num_src) == (adj.num_src, adj.num_dst)
    torch.testing.assert_close(dense(t), dense(adj).T)
    for r in range(t.num_dst):
        row = t.indices[t.indptr[r] : t.indptr[r + 1]]
        assert torch.equal(row, row.sort()[0])
    assert adj.transposed() is t


def test_mean_of_an_empty_row_is_zero_like_pyg():
    adj = Adjacency.mean(torch.tensor([0, 0, 2]), torch.tensor([0, 1]), 2)
    x = torch.tensor([[2.0], [4.0]], dtype=torch.bfloat16)
    assert aggregate(adj, x).float().tolist() == [[0.0], [3.0]]


def test_bad_inputs_are_refused_in_one_line():
    adj = random_adjacency()
    with pytest.raises(TypeError, match="float32 or bfloat16, got input torch.float16"):
        aggregate(adj, torch.zeros(adj.num_src, 2, dtype=torch.float16))
    with pytest.raises(ValueError, match="x has 3 rows, the adjacency has 70 source nodes"):
        aggregate(adj, torch.zeros(3, 2))


@numba.njit
def _round_trip(x, out):
    for i in range(x.shape[0]):
        store(out, i, load(x[i]))


def test_bf16_helpers_round_like_torch():
    x = torch.cat(
        [
            torch.randn(10_000) * 1000,
            torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1e-40, 1 + 2**-8, 1 + 3 * 2**-8, 3.4e38]),
        ]
    )
    out = torch.empty(x.shape[0], dtype=torch.bfloat16)
    _round_trip(x.numpy(), as_numpy(out))
    assert torch.equal(out.view(torch.int16), x.bfloat16().view(torch.int16))  # ties to even, overflow to inf
    back = torch.empty(x.shape[0])
    _round_trip(as_numpy(out), back.numpy())
    assert torch.equal(back, out.float())
    nan = torch.empty(1, dtype=torch.bfloat16)
    _round_trip(torch.tensor([float("nan")]).numpy(), as_numpy(nan))
    assert nan.isnan().all()


FP16_UNIT_ROUNDOFF = 2.0**-11


@pytest.fixture
def device_path(monkeypatch):
    """Route aggregation through the code it runs off the CPU (torch.sparse.mm in
    fp32, the device branches of Adjacency), here on CPU tensors."""
    import gnnsys.models.aggregation

    monkeypatch.setattr(gnnsys.models.aggregation, "_uses_kernel", lambda t: False)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
@pytest.mark.parametrize("weighted", [True, False])
def test_device_path_sums_in_fp32_under_autocast(device_path, precision, weighted):
    """What a GPU runs for bf16-mixed and 16-mixed: the layer's input in the
    autocast dtype, the output rounded once to it, the gradient the transposed
    sum; autocast (which would cast the product to half precision) is off inside."""
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    roundoff = BF16_UNIT_ROUNDOFF if dtype == torch.bfloat16 else FP16_UNIT_ROUNDOFF
    g = torch.Generator().manual_seed(8)
    if weighted:
        adj = random_adjacency(seed=9)
    else:
        indptr = torch.tensor([0, 0, 500, 503])  # an empty row, a long one (a half-precision sum would stall)
        adj = Adjacency.mean(indptr, torch.randint(0, 70, (503,), generator=g), 70)
    x = (torch.randn(adj.num_src, 6, generator=g) + 1).to(dtype).requires_grad_()
    grad = torch.randn(adj.num_dst, 6, generator=g).to(dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # on, as in training (CPU autocast stands in for CUDA's)
        both = aggregate_with_root(adj, x, dtype)
    out, root = split(both, 6)
    assert out.dtype == dtype and torch.equal(root, x[: adj.num_dst])
    exact = dense(adj) @ x.detach().double()
    assert ((out.double() - exact).abs() <= roundoff * exact.abs() + 1e-6).all()
    both.backward(torch.cat([grad, grad], 1))
    exact = dense(adj).T @ grad.double()
    exact[: adj.num_dst] += grad.double()
    assert x.grad.dtype == dtype and ((x.grad.double() - exact).abs() <= roundoff * exact.abs() + 1e-6).all()


def test_device_path_builds_the_same_mean_and_transpose(device_path):
    on_cpu = random_adjacency(weighted=False, seed=10)
    adj = Adjacency.mean(on_cpu.indptr, on_cpu.indices, on_cpu.num_src)
    torch.testing.assert_close(adj.weights, on_cpu.weights)
    torch.testing.assert_close(dense(adj.transposed()), dense(adj).T)
