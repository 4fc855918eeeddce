"""Block.to and MiniBatch.to keep the cached adjacencies, moved with the block."""

import pytest
import torch

from gnnsys.samplers import Block, MiniBatch

DEVICES = ["cpu", torch.device("cpu"), pytest.param("cuda", marks=pytest.mark.gpu)]


def cached_block():
    """A 3-destination, 5-source block with its unit adjacency and a GCN-like one cached."""
    block = Block(torch.tensor([0, 2, 3, 5]), torch.tensor([1, 3, 0, 2, 4]), num_src=5, num_dst=3)
    block.adj_t()
    block.cache["gcn_self_loops"] = torch.sparse_csr_tensor(
        torch.tensor([0, 3, 5, 7]), torch.tensor([0, 1, 3, 0, 1, 2, 4]), torch.rand(7), size=(3, 5)
    )
    return block


def check_moved(moved, block, device):
    assert moved.cache.keys() == {"ones", "gcn_self_loops"}
    assert moved.cache is not block.cache
    for key, t in moved.cache.items():
        assert t.device.type == torch.device(device).type
        assert torch.equal(t.cpu().to_dense(), block.cache[key].to_dense())
    assert moved.adj_t() is moved.cache["ones"]


@pytest.mark.parametrize("device", DEVICES)
def test_block_to_keeps_cache(device):
    block = cached_block()
    check_moved(block.to(device), block, device)


@pytest.mark.parametrize("device", DEVICES)
def test_minibatch_to_keeps_block_caches(device):
    block = cached_block()
    mb = MiniBatch(torch.arange(3), torch.arange(5), [block]).to(device, non_blocking=True)
    check_moved(mb.blocks[0], block, device)
