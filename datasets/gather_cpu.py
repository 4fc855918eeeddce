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

_WORDS = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


@numba.njit(parallel=True, nogil=True, cache=True)
def gather_rows(table: np.ndarray, ids: np.ndarray, out: np.ndarray):
    """out[i, :] = table[ids[i], :out.shape[1]] (tables of any element type)."""
    width = out.shape[1]
    for i in numba.prange(ids.shape[0]):
        row = ids[i]
        for j in range(width):
            out[i, j] = table[row, j]


def word_view(rows: np.ndarray, nbytes: int) -> np.ndarray:
    """A [num_rows, stride / w] view of a [num_rows, stride] uint8 table as
    w-byte words, w = gcd(8, stride, nbytes) (the widest word dividing both)."""
    return rows.view(_WORDS[math.gcd(8, rows.shape[1], nbytes)])
