"""The Triton gather kernel, bit-exact against index_select.

Without CUDA the kernel runs in Triton's interpreter: TRITON_INTERPRET=1 must
be set before triton is first imported (triton.jit and triton.language's own
helpers pick compiled or interpreted at import), so it is set here, before
any gnnsys module imports triton. With CUDA the same tests run compiled on
the GPU and the variable is left alone.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("triton")  # interpreted on the CPU: tests/conftest.py sets TRITON_INTERPRET

from gnnsys._capabilities import HAS_CUDA, triton_interpreting  # noqa: E402
from gnnsys.storage import UnifiedTensor  # noqa: E402
from gnnsys.storage.gpu_features import TableFeatures  # noqa: E402
from tests.storage.fakes import pretend_cuda  # noqa: E402

assert HAS_CUDA or triton_interpreting(), "without CUDA, Triton must run interpreted (tests/conftest.py)"

DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize(
    "table_ptr,stride,row_bytes,expect",
    [
        # elem, load_vec, store_vec, rotate, row_v, load_v, src_stride_v, base_off_v
        (4096, 512, 400, (4, 4, 4, False, 25, 25, 32, 0)),  # fp32 x 100 (products): 16-byte loads and stores
        (4096, 2432, 2408, (4, 4, 2, False, 301, 151, 152, 0)),  # fp32 x 602: stores 8 bytes, loads the padded row
        (4096, 256, 200, (4, 4, 2, False, 25, 13, 16, 0)),  # fp16 x 100
        (4096, 28, 28, (4, 1, 1, True, 7, 7, 7, 0)),  # unaligned in-memory rows: rotated, 4-byte words
        (4096 + 6, 10, 10, (2, 1, 1, True, 5, 5, 5, 3)),  # a table starting 6 bytes past a line
        (4096 + 32, 112, 100, (4, 4, 1, True, 25, 7, 7, 2)),  # 16-byte loads of rotated rows
    ],
)
def test_plan_vector_widths_and_rotation(table_ptr, stride, row_bytes, expect):
    from gnnsys.storage.triton_gather import plan_gather

    p = plan_gather(table_ptr, stride, 1024, row_bytes)
    assert (p.elem, p.load_vec, p.store_vec, p.rotate, p.row_v, p.load_v, p.src_stride_v, p.base_off_v) == expect
    assert p.load_v * p.load_vec * p.elem <= stride  # loading whole vectors never leaves the row's stride


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


def test_bench_gather_gpu_parses_args():
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gather_gpu.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "--row-bytes" in r.stdout
