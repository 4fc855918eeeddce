"""Pinned host placement, the staging copy and side-stream gathers.

Pinning needs CUDA; without it the tests check the clear error, the pure
logic (what can be pinned in place, chunked copies) and the stream code path
on CPU sources. The GPU tests are marked `gpu` and skip without one.
"""
import numpy as np
import pytest
import torch

from gnnsys.errors import GPUUnavailableError
from gnnsys.storage.cuda_stream import SideStreamGather, prefetch
from gnnsys.storage.gpu_features import copy_rows_into
from gnnsys.datasets import RowTable
from gnnsys.storage.pinned import PinnedFeatures, can_pin_in_place

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def test_what_can_be_pinned_in_place(tmp_path):
    a = np.zeros((4, 128), np.uint8)
    assert can_pin_in_place(a)
    assert not can_pin_in_place(a[:, :64])  # not contiguous
    ro = a.copy()
    ro.flags.writeable = False
    assert not can_pin_in_place(ro)
    mm = np.memmap(tmp_path / "f.bin", np.uint8, "w+", shape=(4, 128))
    assert not can_pin_in_place(mm) and not can_pin_in_place(np.asarray(mm)[1:])


@pytest.mark.parametrize("chunk_bytes", [1, 300, 1 << 20])
def test_chunked_copy(tmp_path, chunk_bytes):
    mm = np.memmap(tmp_path / "f.bin", np.uint8, "w+", shape=(9, 128))
    mm[:] = np.random.default_rng(1).integers(0, 256, mm.shape, dtype=np.uint8)
    mm.flush()
    ro = np.memmap(tmp_path / "f.bin", np.uint8, "r", shape=(9, 128))
    dest = torch.empty(9, 128, dtype=torch.uint8)
    copy_rows_into(ro, dest, chunk_bytes=chunk_bytes, progress=False)
    assert np.array_equal(dest.numpy(), ro)


@pytest.mark.skipif(HAS_CUDA, reason="checks the error without CUDA")
def test_pinned_needs_cuda():
    with pytest.raises(GPUUnavailableError, match="needs a CUDA GPU"):
        PinnedFeatures(torch.zeros(3, 2))


class Recording:
    """A CPU source that logs when gathers are issued."""

    def __init__(self, x):
        self.rows, self.log = RowTable.from_tensor(x), []
        self.shape, self.dtype, self.device = self.rows.shape, self.rows.dtype, self.rows.device

    def gather_async(self, ids, out=None):
        self.log.append(("gather", int(ids[0])))
        return self.rows.gather_async(ids, out)


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_prefetch_runs_ahead_and_keeps_order(depth):
    x = torch.arange(40, dtype=torch.float32).view(20, 2)
    src = Recording(x)
    batches = [torch.tensor([i, i + 1]) for i in range(0, 10, 2)]
    for k, rows in enumerate(prefetch(src, batches, depth=depth)):
        src.log.append(("use", k))
        assert torch.equal(rows, x[batches[k]])
    for k in range(len(batches)):  # batch k is used only after batch k + depth was issued
        issued = src.log.index(("gather", min(2 * (k + depth), 8)))
        assert issued < src.log.index(("use", k))


def test_side_stream_on_cpu_is_inline():
    x = torch.randn(6, 3)
    g = SideStreamGather(RowTable.from_tensor(x))
    assert g.stream is None and torch.equal(g.gather(torch.tensor([5, 0])), x[[5, 0]])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_pinned_zero_copy_gather(make_dataset, dtype):
    t = torch.randn(50, 13).to(dtype)
    ids = torch.tensor([49, 3, 3, 0], device="cuda")
    with PinnedFeatures(t) as in_place:  # a writable in-memory table: registered where it is
        assert in_place.pinned_in_place and in_place.table.is_pinned()
        assert torch.equal(in_place.gather(ids).cpu().view(torch.uint8), t[ids.cpu()].view(torch.uint8))
    assert in_place.closed
    ds, arrays = make_dataset(num_nodes=50, dim=13)
    with PinnedFeatures(ds.features) as copied:  # a read-only memmap: read into a pinned allocation
        assert not copied.pinned_in_place
        assert torch.equal(copied.gather(ids).cpu(), torch.from_numpy(arrays["x"][ids.cpu().numpy()]))


@pytest.mark.gpu
@gpu
def test_side_stream_gather_and_staging():
    from gnnsys.storage.staged import StagedFeatures

    t = torch.randn(100, 32)
    ids = [torch.randint(0, 100, (17,), device="cuda") for _ in range(4)]
    with PinnedFeatures(t.clone()) as pinned:
        for source in (pinned, StagedFeatures(t)):
            got = list(prefetch(source, ids, depth=1))
            assert all(torch.equal(g.cpu(), t[i.cpu()]) for g, i in zip(got, ids))
