"""RowTable.gather: exact rows for every stored dtype and row layout, `out` reuse."""

import numpy as np
import pytest
import torch

from gnnsys.datasets.features_file import row_stride
from gnnsys.storage import RowTable
from gnnsys.storage.gather_cpu import word_view

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def padded_table(x: torch.Tensor, stride: int) -> np.ndarray:
    raw = x.contiguous().view(torch.uint8).reshape(x.shape[0], -1).numpy()
    table = np.zeros((x.shape[0], stride), np.uint8)
    table[:, : raw.shape[1]] = raw
    return table


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("dim", [1, 3, 7, 64])
@pytest.mark.parametrize("align", [1, 2, 128])
def test_gather_is_bit_exact(dtype, dim, align):
    x = (torch.randn(40, dim, generator=torch.Generator().manual_seed(dim)) * 1e3).to(DTYPES[dtype])
    table = RowTable(padded_table(x, row_stride(dim, dtype, align)), dim, DTYPES[dtype])
    ids = torch.tensor([39, 0, 7, 7, 12], dtype=torch.int32)
    got = table.gather(ids)
    assert got.dtype == x.dtype and torch.equal(got.view(torch.uint8), x[ids.long()].view(torch.uint8))


def test_gather_into_out_and_from_a_memmap(tmp_path):
    x = torch.randn(30, 5)
    path = tmp_path / "rows.bin"
    padded_table(x, 32).tofile(path)
    table = RowTable(np.memmap(path, np.uint8, "r", shape=(30, 32)), 5, torch.float32)
    out = torch.full((3, 5), float("nan"))
    ids = torch.tensor([29, 1, 4])
    assert table.gather(ids, out=out) is out and torch.equal(out, x[ids])
    assert table.gather(torch.empty(0, dtype=torch.long)).shape == (0, 5)


@pytest.mark.parametrize("stride, nbytes, word", [(128, 512, 8), (12, 12, 4), (6, 6, 2), (3, 3, 1), (16, 28, 4)])
def test_word_view_uses_the_widest_dividing_word(stride, nbytes, word):
    assert word_view(np.zeros((2, stride), np.uint8), nbytes).dtype.itemsize == word


def test_bad_gather_arguments():
    table = RowTable.from_tensor(torch.randn(4, 3))
    with pytest.raises(IndexError, match="id 4 out of range"):
        table.gather(torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="out must be"):
        table.gather(torch.tensor([0]), out=torch.empty(2, 3))
    with pytest.raises(ValueError, match="cannot hold"):
        RowTable(np.zeros((4, 8), np.uint8), 3, torch.float32)
