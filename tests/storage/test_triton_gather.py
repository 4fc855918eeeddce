"""The Triton gather kernel, bit-exact against index_select.

Without CUDA the kernel runs in Triton's interpreter: TRITON_INTERPRET=1 must
be set before triton is first imported (triton.jit and triton.language's own
helpers pick compiled or interpreted at import), so it is set here, before
any gnnsys module imports triton. With CUDA the same tests run compiled on
the GPU and the variable is left alone.
"""

import numpy as np
import pytest
import torch

pytest.importorskip("triton")  # interpreted on the CPU: tests/conftest.py sets TRITON_INTERPRET

from gnnsys._capabilities import HAS_CUDA, triton_interpreting  # noqa: E402
from gnnsys.storage import UnifiedTensor  # noqa: E402
from gnnsys.storage.gather_plan import LaunchConfig  # noqa: E402
from gnnsys.storage.gpu_features import TableFeatures  # noqa: E402
from gnnsys.storage.triton_gather import gather_rows  # noqa: E402
from tests.storage.fakes import pretend_cuda  # noqa: E402

assert HAS_CUDA or triton_interpreting(), "without CUDA, Triton must run interpreted (tests/conftest.py)"

DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def padded_table(x: torch.Tensor, stride: int) -> torch.Tensor:
    """x's rows as a [n, stride] uint8 table, zero padded (the features.bin layout)."""
    raw = x.view(torch.uint8).reshape(x.shape[0], -1)
    table = torch.zeros(x.shape[0], stride, dtype=torch.uint8)
    table[:, : raw.shape[1]] = raw
    return table.to(DEVICE)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.cpu().view(torch.uint8), b.cpu().view(torch.uint8))


IDS = [3, 3, 40, 0, 17, 2, 40, 9]  # unsorted, repeated


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "dim,stride", [(7, 128), (33, 256), (64, 256), (5, None), (3, None), (100, 512), (602, 2432), (25, 112)]
)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_gather_is_bit_exact(dtype, dim, stride, id_dtype):
    x = torch.randn(41, dim, generator=torch.Generator().manual_seed(dim)).to(dtype)
    table = padded_table(x, stride or dim * dtype.itemsize)  # None: unaligned in-memory rows
    ids = torch.tensor(IDS, dtype=id_dtype)
    got = TableFeatures(table, dim, dtype).gather(ids)
    assert same_bits(got, x.index_select(0, ids.long()))


def test_unaligned_base_pointer_and_grid_cap():
    x = torch.randn(30, 9)
    table = padded_table(x, 36 + 4)[1:]  # starts 40 bytes into the allocation
    ids = torch.arange(28, -1, -1)
    src = TableFeatures(table, 9, torch.float32, max_programs=1)
    assert same_bits(src.gather(ids), x[1:].index_select(0, ids))


def test_aligned_dataset_rows(make_dataset):
    ds, arrays = make_dataset(num_nodes=50, dim=11)
    rows = ds.features
    src = TableFeatures(torch.from_numpy(np.array(rows.table)).to(DEVICE), 11, rows.dtype)
    ids = torch.tensor([49, 0, 7, 7, 23])
    assert same_bits(src.gather(ids), torch.from_numpy(arrays["x"][ids.numpy()]))


def test_empty_ids_and_out_buffer():
    src = TableFeatures(padded_table(torch.randn(5, 4), 128), 4, torch.float32)
    assert src.gather(torch.empty(0, dtype=torch.int64)).shape == (0, 4)
    out = torch.full((2, 4), 7.0, device=DEVICE)
    assert src.gather(torch.tensor([1, 2]), out=out) is out
    with pytest.raises(ValueError, match="out must be"):
        src.gather(torch.tensor([1, 2]), out=torch.empty(3, 4, device=DEVICE))


@pytest.mark.parametrize("bad", [5, -1, 1 << 40])
def test_out_of_range_id_is_never_read(bad):
    x = torch.randn(5, 6)
    src = TableFeatures(padded_table(x, 128), 6, torch.float32)
    ids = torch.tensor([1, bad, 2])
    with pytest.raises(IndexError, match=f"id {bad} at position 1 out of range"):
        src.gather(ids)
    handle = src.gather_async(ids)  # no check until asked: the bad row is zero, the others exact
    rows = handle.wait().cpu()
    assert torch.equal(rows[1], torch.zeros(6)) and torch.equal(rows[[0, 2]], x[[1, 2]])
    with pytest.raises(IndexError):
        handle.check()


def strided_ids():
    """Non-contiguous id tensors: a step, a stride-0 expand, a transposed column."""
    return {
        "step": torch.arange(40)[::5],
        "expand": torch.tensor([7]).expand(6),
        "column": torch.tensor([[3, 9], [0, 1], [40, 2]]).t()[0],
    }


@pytest.mark.parametrize("kind", ["step", "expand", "column"])
def test_strided_ids_are_read_by_value(kind):
    x = torch.randn(41, 100)
    ids = strided_ids()[kind]
    assert not ids.is_contiguous()
    source = TableFeatures(padded_table(x, 512), 100, torch.float32)
    assert same_bits(source.gather(ids), x[ids])
    assert same_bits(UnifiedTensor(source)[ids], x[ids])


def test_cuda_device_is_normalised(monkeypatch):
    pretend_cuda(monkeypatch)
    source = TableFeatures(padded_table(torch.randn(4, 2), 128).cpu(), 2, torch.float32, device="cuda")
    assert source.device == torch.device("cuda:0")  # what a tensor allocated on "cuda" reports


def table_at(x: torch.Tensor, stride: int, offset: int) -> torch.Tensor:
    """x's rows in a zero-padded [n, stride] table starting `offset` bytes past a 128-byte line."""
    raw = x.view(torch.uint8).reshape(x.shape[0], -1)
    buf = torch.zeros(x.shape[0] * stride + 256, dtype=torch.uint8, device=DEVICE)
    skip = (-buf.data_ptr()) % 128 + offset
    table = buf[skip : skip + x.shape[0] * stride].view(x.shape[0], stride)
    table[:, : raw.shape[1]] = raw.to(DEVICE)
    assert table.data_ptr() % 128 == offset
    return table


@pytest.mark.parametrize("row_bytes", [256, 512, 1024, 2048, 4096])
@pytest.mark.parametrize("layout", ["aligned", "offset", "packed"])
def test_every_row_size_and_layout(row_bytes, layout):
    """Rows on lines, the same rows with the base 64 B past a line (rotated),
    and unpadded rows straddling lines; with the default tile, with tiles of 2
    rows over 3 programs (each program loops, carrying the next ids), and so
    with the ids sorted first (rows stored through the permutation)."""
    dim = row_bytes // 4 - (layout == "packed")
    x = torch.randn(23, dim, generator=torch.Generator().manual_seed(row_bytes))
    table = table_at(x, dim * 4 if layout == "packed" else row_bytes, 64 if layout == "offset" else 0)
    ids = torch.tensor([22, 0, 5, 5, 17, 3, 22, 9, 11, 1, 0])
    for config, programs in ((None, None), (LaunchConfig(rows=2), 3), (LaunchConfig(rows=2, sort=True), 3)):
        out = torch.empty(len(ids), dim, device=DEVICE)
        err = gather_rows(table, ids.to(DEVICE), out, programs, config)
        assert int(err[0]) == len(ids) and same_bits(out, x[ids])


@pytest.mark.parametrize("sort", [False, True])
@pytest.mark.parametrize("bad_at", [[11, 37], [37], [49], [0, 49], [12, 13, 14, 15]])
def test_the_first_bad_position_is_reported_across_tiles_and_programs(bad_at, sort):
    """Tiles of 4 rows over 3 programs: program 0 has tiles 0, 3, 6, 9, 12
    (positions 0-3, 12-15, ..., 48-49), so positions 11 and 37 fall to
    different programs; each keeps its first and one atomic takes the least.
    Sorted, the bad ids come first and the positions reported are the caller's."""
    x = torch.randn(10, 8)
    ids = torch.arange(50) % 10
    ids[bad_at] = -1 - torch.tensor(bad_at)
    out = torch.full((50, 8), 7.0, device=DEVICE)
    err = gather_rows(padded_table(x, 128), ids.to(DEVICE), out, 3, LaunchConfig(rows=4, sort=sort))
    assert int(err[0]) == min(bad_at)
    good = ids >= 0
    assert same_bits(out[good.to(DEVICE)], x[ids[good]]) and not out[~good.to(DEVICE)].any()


@pytest.mark.parametrize("n", [1, 3, 64, 65])
def test_batches_around_one_tile(n):
    x = torch.randn(70, 30)
    ids = torch.randperm(70, generator=torch.Generator().manual_seed(n))[:n]
    out = torch.empty(n, 30, device=DEVICE)
    err = gather_rows(padded_table(x, 128), ids.to(DEVICE), out, config=LaunchConfig(rows=64))
    assert int(err[0]) == n and same_bits(out, x[ids])
