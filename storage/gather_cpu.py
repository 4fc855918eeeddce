"""Parallel row gather on the CPU (numba, releases the GIL)."""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(parallel=True, nogil=True, cache=True)
def gather_rows(table: np.ndarray, ids: np.ndarray, out: np.ndarray):
    """out[i, :] = table[ids[i], :out.shape[1]] for byte (uint8) tables."""
    width = out.shape[1]
    for i in numba.prange(ids.shape[0]):
        out[i, :] = table[ids[i], :width]
