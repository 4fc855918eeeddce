"""placement="auto" and the named placements; GPU cases skip without CUDA."""

import logging

import numpy as np
import pytest
import torch

from gnnsys.errors import GPUUnavailableError
from gnnsys.storage.placement import PlacedTensor, choose_placement, place_features, unified

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def test_auto_on_cpu_keeps_the_table(make_dataset, caplog):
    ds, arrays = make_dataset(num_nodes=40, dim=6)
    with caplog.at_level(logging.INFO, logger="gnnsys.storage.placement"):
        x = place_features(ds, "auto", device="cpu")
    assert isinstance(x, PlacedTensor) and x.placement.kind == "cpu-gather"
    assert x.source is ds.features  # the memory map itself, no copy
    assert "cpu-gather" in caplog.text
    ids = torch.tensor([39, 0, 5, 5])
    assert torch.equal(x[ids], torch.from_numpy(arrays["x"][ids.numpy()]))


def test_unified_over_a_tensor():
    t = torch.randn(10, 3)
    x = unified(t, device="cpu")
    assert x.device == torch.device("cpu") and torch.equal(x[torch.tensor([9, 1])], t[[9, 1]])


def test_choose_placement_validates_budgets():
    assert choose_placement(10, "cpu").kind == "cpu-gather"
    with pytest.raises(ValueError, match="gpu_memory_budget"):
        choose_placement(10, "cpu", gpu_memory_budget=1.5)


def test_unknown_placement():
    with pytest.raises(ValueError, match="placement must be one of"):
        unified(torch.zeros(2, 2), "disk", device="cpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the error without CUDA")
@pytest.mark.parametrize("placement", ["gpu", "pinned"])
def test_gpu_placements_need_cuda(placement):
    with pytest.raises(GPUUnavailableError, match=f"placement '{placement}': needs a CUDA GPU") as e:
        unified(torch.zeros(4, 2), placement, device="cpu")
    assert "\n" not in str(e.value)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(
    "gpu_budget,host_budget,expect", [(1.0, 1.0, "gpu"), (0.0, 1.0, "pinned"), (0.0, 0.0, "cpu-gather")]
)
def test_auto_on_gpu_follows_the_budgets(make_dataset, gpu_budget, host_budget, expect):
    ds, arrays = make_dataset(num_nodes=64, dim=9)  # a read-only memmap: not pinnable in place
    x = place_features(ds, "auto", "cuda", gpu_memory_budget=gpu_budget, host_memory_budget=host_budget)
    assert x.placement.kind == expect
    ids = torch.tensor([63, 2, 2, 40], device="cuda")
    got = x[ids]
    assert got.is_cuda and torch.equal(got.cpu(), torch.from_numpy(arrays["x"][ids.cpu().numpy()]))


@pytest.mark.gpu
@gpu
def test_auto_pins_an_in_memory_table_in_place():
    t = torch.from_numpy(np.random.default_rng(0).standard_normal((32, 5)).astype(np.float32))
    x = unified(t, "auto", "cuda", gpu_memory_budget=0.0, host_memory_budget=0.0)
    assert x.placement.kind == "pinned" and "in place" in x.placement.reason
    x.source.close()


def test_tiers_walks_the_stack_to_the_dataset_table(make_dataset):
    from gnnsys.storage import FeatureSource, tiers

    ds, _ = make_dataset()
    x = unified(ds.features, "auto", device="cpu")
    assert list(tiers(x.source)) == [ds.features]
    assert isinstance(ds.features, FeatureSource)

    class Wrapper:
        def __init__(self, base):
            self.base = base

    top = Wrapper(Wrapper(ds.features))
    assert [type(t).__name__ for t in tiers(top)] == ["Wrapper", "Wrapper", "RowTable"]
