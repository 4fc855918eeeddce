"""Both neighbour samplers satisfy the `Sampler` protocol and sample on their `device`."""

import numpy as np
import pytest
import torch

from gnnsys._capabilities import HAS_CUDA
from gnnsys.samplers import SAMPLERS, NeighborSampler, Sampler, make_sampler

DEVICE = "cuda" if HAS_CUDA else "cpu"  # without CUDA the Triton sampler runs interpreted (tests/conftest.py)


def random_csc(n=30, m=200, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    return torch.from_numpy(indptr), torch.from_numpy(src[np.argsort(dst, kind="stable")])


def check_sampler(sampler, device):
    assert isinstance(sampler, Sampler)
    assert sampler.device == torch.device(device)
    mb = sampler.sample(torch.tensor([3, 1, 4]), epoch=1, batch=2)
    tensors = [mb.seeds, mb.input_nodes, *(t for b in mb.blocks for t in (b.indptr, b.indices))]
    assert {t.device for t in tensors} == {sampler.device}


def test_cpu_sampler_is_a_sampler():
    sampler = make_sampler("cpu", *random_csc(), [3, 2])
    assert isinstance(sampler, NeighborSampler)
    check_sampler(sampler, "cpu")


@pytest.mark.parametrize("kind", [k for k in SAMPLERS if k != "cpu"])
def test_gpu_sampler_is_a_sampler(kind):
    pytest.importorskip("triton")
    check_sampler(make_sampler(kind, *random_csc(), [3, 2], DEVICE), DEVICE)


def test_not_a_sampler():
    assert not isinstance(object(), Sampler)
