"""The Triton neighbour sampler against the CPU NeighborSampler.

Without CUDA the kernel runs in Triton's interpreter (TRITON_INTERPRET=1 is
set before triton is first imported, see tests/storage/test_triton_gather.py);
with CUDA the same tests run compiled on the GPU.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("triton")  # interpreted on the CPU: tests/conftest.py sets TRITON_INTERPRET

from gnnsys._capabilities import HAS_CUDA, triton_interpreting  # noqa: E402
from gnnsys.samplers.factory import make_sampler  # noqa: E402
from gnnsys.samplers.neighbor import NeighborSampler  # noqa: E402

assert HAS_CUDA or triton_interpreting(), "without CUDA, Triton must run interpreted (tests/conftest.py)"

DEVICE = "cuda" if HAS_CUDA else "cpu"
ROOT = Path(__file__).resolve().parents[2]


def csc(src, dst, n, index_dtype=np.int32):
    order = np.argsort(dst, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    return torch.from_numpy(indptr), torch.from_numpy(src[order].astype(index_dtype))


def random_csc(n=40, m=300, seed=0, index_dtype=np.int32):
    rng = np.random.default_rng(seed)
    return csc(rng.integers(0, n, m), rng.integers(0, n, m), n, index_dtype)


@pytest.mark.parametrize(
    "fanouts,replace", [([3, 2], False), ([5, -1], False), ([0, 4], False), ([4, 3, 2], True), ([25], False)]
)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_same_minibatch_as_cpu_sampler(fanouts, replace, index_dtype):
    indptr, indices = random_csc(index_dtype=index_dtype)
    seeds = torch.tensor([5, 1, 30, 2, 17])
    want = NeighborSampler(indptr, indices, fanouts, replace=replace, seed=7).sample(seeds, epoch=1, batch=3)
    got = make_sampler("gpu", indptr, indices, fanouts, DEVICE, seed=7, replace=replace).sample(seeds, 1, 3)
    assert torch.equal(got.seeds.cpu(), want.seeds) and torch.equal(got.input_nodes.cpu(), want.input_nodes)
    for g, w in zip(got.blocks, want.blocks, strict=True):
        assert (g.num_src, g.num_dst) == (w.num_src, w.num_dst)
        assert torch.equal(g.indptr.cpu(), w.indptr) and torch.equal(g.indices.cpu(), w.indices)


@pytest.mark.parametrize("seeds", [torch.arange(40)[3::4], torch.tensor([[30, 1], [2, 17], [5, 8]]).t()[0]])
def test_strided_seeds_are_read_by_value(seeds):
    assert not seeds.is_contiguous()
    indptr, indices = random_csc()
    want = NeighborSampler(indptr, indices, [3, 2], seed=7).sample(seeds.contiguous(), epoch=0, batch=1)
    got = make_sampler("gpu", indptr, indices, [3, 2], DEVICE, seed=7).sample(seeds, 0, 1)
    assert torch.equal(got.input_nodes.cpu(), want.input_nodes)
    for g, w in zip(got.blocks, want.blocks, strict=True):
        assert torch.equal(g.indptr.cpu(), w.indptr) and torch.equal(g.indices.cpu(), w.indices)


def test_sample_statistics():
    # 300 destinations, each with the same 12 distinct in-neighbours 0..11 (a simple graph)
    n, deg, fanout = 312, 12, 5
    dst = np.repeat(np.arange(12, n), deg)
    indptr, indices = csc(np.tile(np.arange(deg), n - 12), dst, n)
    seeds = torch.arange(12, n)
    batch = make_sampler("gpu", indptr, indices, [fanout], DEVICE, seed=3).sample(seeds)
    block = batch.blocks[0]
    assert torch.equal(block.in_degree().cpu(), torch.full((n - 12,), fanout))  # min(fanout, degree)
    src = batch.input_nodes.cpu()[block.indices.cpu()].view(-1, fanout)
    assert bool((src < deg).all())  # every sampled edge exists
    assert all(len(set(row.tolist())) == fanout for row in src)  # no repeats
    freq = torch.bincount(src.flatten(), minlength=deg).float()
    expect = (n - 12) * fanout / deg  # 125 per neighbour
    assert float((freq - expect).abs().max()) < 0.25 * expect
    assert int(make_sampler("gpu", indptr, indices, [20], DEVICE).sample(seeds[:3]).blocks[0].num_edges) == 3 * deg


def test_bad_input():
    indptr, indices = random_csc()
    s = make_sampler("gpu", indptr, indices, [2], DEVICE)
    with pytest.raises(ValueError, match="more than once"):
        s.sample(torch.tensor([1, 1]))
    with pytest.raises(IndexError, match="seeds: id 40"):
        s.sample(torch.tensor([40]))
    with pytest.raises(ValueError, match="replace=True"):
        make_sampler("gpu", indptr, indices, [-1], DEVICE, replace=True)
    with pytest.raises(ValueError, match="sampler must be one of"):
        make_sampler("tpu", indptr, indices, [2], DEVICE)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_pinned_csc_matches_gpu_csc():
    indptr, indices = random_csc(n=500, m=8000)
    seeds = torch.arange(0, 500, 7)
    a = make_sampler("gpu", indptr, indices, [10, 5], "cuda", seed=1).sample(seeds)
    b = make_sampler("gpu-pinned", indptr, indices, [10, 5], "cuda", seed=1).sample(seeds)
    assert torch.equal(a.input_nodes, b.input_nodes)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_device_cuda_is_cuda_zero_everywhere():
    indptr, indices = random_csc()
    sampler = make_sampler("gpu", indptr, indices, [3, 2], "cuda")
    assert sampler.device == torch.device("cuda", torch.cuda.current_device())
    mb = sampler.sample(torch.tensor([5, 1, 30]))
    assert {t.device for b in mb.blocks for t in (b.indptr, b.indices)} | {mb.input_nodes.device} == {sampler.device}


def test_bench_epoch_gpu_parses_args():
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_epoch_gpu.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "--graph" in r.stdout
