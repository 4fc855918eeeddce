"""Parallel row gather on the CPU (numba, releases the GIL).

Rows are copied as the widest machine words that divide both the row size and
the row stride (8 bytes for aligned float tables), which runs at about the
speed of a plain memory copy, unlike byte-wise copies (benchmarks/README.md,
"Measurements behind design choices").
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from gnnsys.ids import indices_on

_WORDS = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


@numba.njit(parallel=True, nogil=True, cache=True)
def gather_rows(table: np.ndarray, ids: np.ndarray, out: np.ndarray):
    """out[i, :] = table[ids[i], :out.shape[1]] (tables of any element type)."""
    width = out.shape[1]
    for i in numba.prange(ids.shape[0]):
        row = ids[i]
        for j in range(width):
            out[i, j] = table[row, j]


@numba.njit(parallel=True, nogil=True, cache=True)
def gather_rows_to(table: np.ndarray, ids: np.ndarray, out: np.ndarray, at: np.ndarray):
    """out[at[i], :] = table[ids[i], :out.shape[1]] (the positions `at` distinct)."""
    width = out.shape[1]
    for i in numba.prange(ids.shape[0]):
        row, dest = ids[i], at[i]
        for j in range(width):
            out[dest, j] = table[row, j]


def copy_rows(src: torch.Tensor, rows: np.ndarray, out: torch.Tensor, at: np.ndarray) -> None:
    """out[at[i]] = src[rows[i]] for 2-D tensors of one dtype and width (the
    positions `at` distinct): on the CPU a parallel copy of whole words with
    no intermediate tensor, elsewhere torch's indexing (the index arrays
    sent in one transfer, indices_on)."""
    if not rows.shape[0]:
        return
    if src.device.type == out.device.type == "cpu" and src.is_contiguous() and out.is_contiguous():
        gather_rows_to(
            tensor_words(src),
            np.ascontiguousarray(rows, np.int64),
            tensor_words(out),
            np.ascontiguousarray(at, np.int64),
        )
    elif src.device == out.device:
        rows_t, at_t = indices_on(out.device, rows, at)
        out[at_t] = src[rows_t]
    else:
        (rows_t,), (at_t,) = indices_on(src.device, rows), indices_on(out.device, at)
        out[at_t] = src[rows_t].to(out.device, non_blocking=True)


def tensor_words(t: torch.Tensor) -> np.ndarray:
    """A contiguous 2-D CPU tensor's memory as [rows, row bytes / w] words (w as word_view)."""
    row_bytes = t.shape[1] * t.element_size()
    raw = t.view(torch.uint8).reshape(t.shape[0], row_bytes).numpy()
    return raw.view(_WORDS[math.gcd(8, row_bytes)])


def word_view(rows: np.ndarray, nbytes: int) -> np.ndarray:
    """A [num_rows, stride / w] view of a [num_rows, stride] uint8 table as
    w-byte words, w = gcd(8, stride, nbytes) (the widest word dividing both)."""
    return rows.view(_WORDS[math.gcd(8, rows.shape[1], nbytes)])
