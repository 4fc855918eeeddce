"""Pinned host placement and the staging copy.

Pinning needs CUDA; without it the tests check the clear error, the pure
logic (what can be pinned in place, chunked copies), every pinning decision
through a stand-in for the CUDA runtime (tests/storage/fakes.py). The GPU
tests are marked `gpu` and skip without one.
"""

import gc
import logging

import numpy as np
import pytest
import torch

from gnnsys.errors import GPUUnavailableError
from gnnsys.storage import pinned as pinned_module
from gnnsys.storage.gpu_features import PendingGather, TableFeatures, copy_rows_into
from gnnsys.storage.pinned import PinnedFeatures, can_pin_in_place, in_place_refusal, pin_table, release_pin
from gnnsys.storage.table import RowTable
from tests.storage.fakes import FakePinning

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def on_line(shape, offset: int = 0, fill=None) -> np.ndarray:
    """A writable uint8 array of `shape` starting `offset` bytes past a 128-byte line (holding `fill`)."""
    n = int(np.prod(shape))
    buf = np.zeros(n + 256, np.uint8)
    skip = (-buf.ctypes.data) % 128 + offset
    a = buf[skip : skip + n].reshape(shape)
    if fill is not None:
        a[:] = fill
    assert a.ctypes.data % 128 == offset
    return a


def test_what_can_be_pinned_in_place(tmp_path):
    a = on_line((4, 128))
    assert can_pin_in_place(a)
    assert not can_pin_in_place(a[:, :64])  # not contiguous
    ro = a.copy()
    ro.flags.writeable = False
    assert not can_pin_in_place(ro)
    mm = np.memmap(tmp_path / "f.bin", np.uint8, "w+", shape=(4, 128))
    assert not can_pin_in_place(mm) and not can_pin_in_place(np.asarray(mm)[1:])
    assert in_place_refusal(mm) == "it is a file mapping" and in_place_refusal(a) is None
    assert in_place_refusal(on_line((4, 128), offset=64)) == "it starts 64 bytes past a 128-byte line"
    assert in_place_refusal(a[:, 1:]) == "it is not C-contiguous" and in_place_refusal(ro) == "it is read-only"
    assert in_place_refusal(a[2:]) is None and in_place_refusal(on_line((3, 100))[1:]) is not None  # stride 100


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


@pytest.fixture(autouse=True)
def no_registration_left():
    """Every test gives back every registration it made."""
    yield
    gc.collect()
    assert pinned_module._registrations == {}


def table_source(x: torch.Tensor) -> TableFeatures:
    """x's rows in a 128-byte-stride table gathered by the Triton kernel (interpreted on the CPU)."""
    table = torch.zeros(x.shape[0], 128, dtype=torch.uint8)
    table[:, : x.shape[1] * 4] = x.view(torch.uint8)
    return TableFeatures(table, x.shape[1], torch.float32)


@pytest.mark.skipif(HAS_CUDA, reason="the Triton kernel runs interpreted on the CPU here")
def test_table_gather_checks_ids():
    x = torch.randn(5, 3)
    source = table_source(x)
    assert torch.equal(source.gather(torch.tensor([4, 0])), x[[4, 0]])
    with pytest.raises(IndexError, match="id 5 at position 1 out of range"):
        source.gather(torch.tensor([1, 5]))
    pending = source.gather_async(torch.tensor([2, -1]))
    with pytest.raises(IndexError, match="id -1 at position 1"):
        pending.check()


def test_pending_gather_check_waits_for_its_own_event():
    err = torch.tensor([3])  # "no error" until the copy behind the kernel lands

    class CopyLands:
        def synchronize(self):
            err[0] = 1  # the kernel found a bad id at position 1

    value, ids = torch.zeros(3, 2), torch.tensor([0, 9, 1])
    with pytest.raises(IndexError, match="id 9 at position 1 out of range \\[0, 4\\)"):
        PendingGather(value, err, ids, 4, done=CopyLands()).check()
    assert PendingGather(value, torch.tensor([3]), ids, 10).check() is value


def test_pin_in_place_registers_once_and_unregisters_after_pending_work():
    table = on_line((4, 128))
    pinning = FakePinning()
    pin = pin_table(table, pinning, progress=False)
    assert pin.in_place and pin.tensor.data_ptr() == table.ctypes.data
    release_pin(pinning, pin)
    assert pinning.log == [
        ("register", table.ctypes.data, table.nbytes),
        ("synchronize",),
        ("unregister", table.ctypes.data),
    ]


def test_memory_pinned_by_someone_else_is_used_as_it_is():
    table = on_line((4, 128))
    pinning = FakePinning(pinned={table.ctypes.data})
    pin = pin_table(table, pinning, progress=False)
    release_pin(pinning, pin)
    assert pin.in_place and pinning.log == []  # registering it again would leave a pending CUDA error


def test_a_table_pinned_twice_shares_one_registration():
    table = on_line((4, 128))
    pinning = FakePinning()
    first, second = pin_table(table, pinning, False), pin_table(table[1:], pinning, False)
    assert len(pinning.calls("register")) == 1 and second.in_place
    release_pin(pinning, first)
    assert pinning.calls("unregister") == []  # the second still reads it
    release_pin(pinning, second)
    assert pinning.calls("unregister") == [("unregister", table.ctypes.data)]


def test_failed_registration_is_cleared_and_an_exact_copy_is_pinned(caplog):
    table = on_line((3, 1000), fill=np.arange(3000).astype(np.uint8).reshape(3, 1000))  # 3000 bytes
    pinning = FakePinning(codes=[712])  # cudaErrorHostMemoryAlreadyRegistered
    with caplog.at_level(logging.WARNING, logger="gnnsys.storage.pinned"):
        pin = pin_table(table, pinning, progress=False)
    register_in_place, clear, register_copy = pinning.log
    assert register_in_place == ("register", table.ctypes.data, 3000) and clear == ("clear_error",)
    assert register_copy[2] == 3000  # exactly the table, not torch's power-of-two rounding (4096)
    assert not pin.in_place and np.array_equal(pin.tensor.numpy(), table)
    assert [r.getMessage().count("\n") for r in caplog.records] == [0]
    assert "CUDA error 712" in caplog.text and "pinning a copy instead" in caplog.text
    release_pin(pinning, pin)
    assert pinning.log[-1] == ("unregister", register_copy[1])


def test_a_memmap_is_copied_into_an_exactly_sized_registered_buffer(tmp_path):
    mm = np.memmap(tmp_path / "f.bin", np.uint8, "w+", shape=(5, 384))
    mm[:] = np.random.default_rng(2).integers(0, 256, mm.shape, dtype=np.uint8)
    pinning = FakePinning()
    pin = pin_table(np.memmap(tmp_path / "f.bin", np.uint8, "r", shape=(5, 384)), pinning, progress=False)
    assert pinning.calls("register") == [("register", pin.tensor.data_ptr(), 5 * 384)]
    assert np.array_equal(pin.tensor.numpy(), mm)
    release_pin(pinning, pin)


def test_a_table_off_its_line_is_pinned_as_a_page_aligned_copy(caplog):
    """torch leaves tensors 64 B past a line: pinned in place, every row read
    would be rotated; a page-aligned copy puts them back on lines. Memory
    pinned by someone else is copied as well when it starts off a line."""
    table = on_line((5, 256), offset=64, fill=np.arange(5 * 256).astype(np.uint8).reshape(5, 256))
    pinning = FakePinning(pinned={table.ctypes.data})
    with caplog.at_level(logging.INFO, logger="gnnsys.storage.pinned"):
        pin = pin_table(table, pinning, progress=False)
    assert not pin.in_place and pin.tensor.data_ptr() % 4096 == 0 and np.array_equal(pin.tensor.numpy(), table)
    assert pinning.log == [("register", pin.tensor.data_ptr(), 5 * 256)]
    assert "pinning a page-aligned copy of the table (not pinned in place: it starts 64 bytes past" in caplog.text
    release_pin(pinning, pin)


def test_a_copy_that_cannot_be_pinned_is_a_clear_error(tmp_path):
    mm = np.memmap(tmp_path / "f.bin", np.uint8, "w+", shape=(2, 128))
    pinning = FakePinning(codes=[2])
    with pytest.raises(GPUUnavailableError, match="cannot pin .* MiB of host memory .*CUDA error 2") as e:
        pin_table(mm[:, :64], pinning, progress=False)
    assert "\n" not in str(e.value) and pinning.log[-1] == ("clear_error",)


@pytest.mark.skipif(HAS_CUDA, reason="the Triton kernel runs interpreted on the CPU here")
def test_a_collected_pinned_table_is_unregistered(monkeypatch):
    monkeypatch.setattr(pinned_module, "require_cuda", lambda what: None)
    x = torch.randn(8, 4)
    pinning = FakePinning()
    features = PinnedFeatures(x, device="cpu", pinning=pinning, progress=False)
    assert torch.equal(features.gather(torch.tensor([7, 2])), x[[7, 2]])
    ptr = features.table.data_ptr()
    del features
    gc.collect()
    assert pinning.log[1:] == [("synchronize",), ("unregister", ptr)]
    with PinnedFeatures(x, device="cpu", pinning=pinning, progress=False) as closed:
        pass
    del closed
    gc.collect()  # close() ended the registration; collecting does not end it again
    assert pinning.calls("unregister") == [("unregister", ptr)] * 2


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_pinned_zero_copy_gather(make_dataset, dtype):
    t = torch.randn(50, 13).to(dtype)
    ids = torch.tensor([49, 3, 3, 0], device="cuda")
    raw = t.view(torch.uint8).reshape(50, -1).numpy()
    rows = RowTable(on_line(raw.shape, fill=raw), 13, dtype)
    with PinnedFeatures(rows) as in_place:  # a writable in-memory table on a line: registered where it is
        assert in_place.pinned_in_place and in_place.table.is_pinned()
        assert torch.equal(in_place.gather(ids).cpu().view(torch.uint8), t[ids.cpu()].view(torch.uint8))
    assert in_place.closed
    with PinnedFeatures(t) as as_given:  # torch's allocator: pinned in place only when on a line
        assert as_given.pinned_in_place == (t.data_ptr() % 128 == 0) and as_given.table.data_ptr() % 128 == 0
        assert torch.equal(as_given.gather(ids).cpu().view(torch.uint8), t[ids.cpu()].view(torch.uint8))
    ds, arrays = make_dataset(num_nodes=50, dim=13)
    with PinnedFeatures(ds.features) as copied:  # a read-only memmap: read into a pinned allocation
        assert not copied.pinned_in_place
        assert torch.equal(copied.gather(ids).cpu(), torch.from_numpy(arrays["x"][ids.cpu().numpy()]))


@pytest.mark.gpu
@gpu
def test_pinned_and_staged_gathers_of_gpu_ids():
    from gnnsys.storage.staged import StagedFeatures

    t = torch.randn(100, 32)
    ids = [torch.randint(0, 100, (17,), device="cuda") for _ in range(4)]
    with PinnedFeatures(t.clone()) as pinned:
        for source in (pinned, StagedFeatures(t)):
            got = [source.gather_async(i).wait() for i in ids]
            assert all(torch.equal(g.cpu(), t[i.cpu()]) for g, i in zip(got, ids))
