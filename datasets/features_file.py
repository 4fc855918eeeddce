"""The aligned row layout of `features.bin` (docs/architecture.md, "On-disk dataset format")."""

from __future__ import annotations

import numpy as np
import torch

from gnnsys.errors import DatasetError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def row_stride(dim: int, dtype: str, align: int) -> int:
    """Bytes per row: dim * itemsize rounded up to a multiple of `align`; a
    row no larger than `align` is rounded up to a power of two instead, so
    that rows pack into align-sized blocks and none straddles two."""
    if align <= 0 or align & (align - 1):
        raise DatasetError("--align", f"must be a positive power of two, got {align}")
    nbytes = max(1, dim * DTYPES[dtype].itemsize)
    if nbytes <= align:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // align) * align


def strides_written(dim: int, dtype: str, align: int) -> tuple[int, ...]:
    """The row strides `prepare` writes for these rows: row_stride's, and the
    layout of earlier versions (rows no larger than `align` took a whole
    `align` each), so that datasets prepared before still load."""
    nbytes = dim * DTYPES[dtype].itemsize
    return tuple(sorted({row_stride(dim, dtype, align), max(align, -(-nbytes // align) * align)}))


def open_rows(path, num_nodes: int, stride: int, mode: str = "r") -> np.memmap:
    """The file as a [num_nodes, stride] uint8 memmap (one row per node)."""
    return np.memmap(path, dtype=np.uint8, mode=mode, shape=(num_nodes, stride))


def encode_rows(chunk: np.ndarray, dtype: str) -> np.ndarray:
    """Float rows -> their bytes in `dtype`, as a [rows, dim * itemsize] uint8 array."""
    t = torch.from_numpy(np.ascontiguousarray(chunk, dtype=np.float32)).to(DTYPES[dtype])
    return t.view(torch.uint8).numpy().reshape(chunk.shape[0], -1)


def encoded_rows(chunk: np.ndarray, dtype: str, stride: int) -> np.ndarray:
    """Float rows as [rows, stride] uint8: their bytes in `dtype`, zero-padded to `stride`."""
    rows = encode_rows(chunk, dtype)
    if stride == rows.shape[1]:
        return rows
    padded = np.zeros((chunk.shape[0], stride), np.uint8)
    padded[:, : rows.shape[1]] = rows
    return padded


def decode_rows(raw: np.ndarray, dim: int, dtype: str) -> torch.Tensor:
    """[rows, stride] uint8 rows -> a [rows, dim] tensor of `dtype` (exact values)."""
    torch_dtype = DTYPES[dtype]
    body = np.ascontiguousarray(raw[:, : dim * torch_dtype.itemsize])
    return torch.from_numpy(body).view(torch_dtype).reshape(raw.shape[0], dim)
