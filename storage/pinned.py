"""Pinned host placement: the GPU reads feature rows from host memory itself.

A writable, C-contiguous in-memory table is pinned in place with
cudaHostRegister (no copy); anything else - a read-only memmap of
features.bin above all - is read chunk by chunk into a pinned allocation.
Either way the Triton gather reads the rows over PCIe into device memory
with no staging copy (zero-copy through unified virtual addressing).
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from gnnsys._capabilities import require_cuda

from .gpu_features import PendingGather, TableFeatures, as_row_table, copy_rows_into

log = logging.getLogger(__name__)


def can_pin_in_place(table: np.ndarray) -> bool:
    """Whether cudaHostRegister may pin `table`'s memory where it is: a writable,
    C-contiguous array that is not a file mapping (a memmap's pages belong to the
    file; registering them would pin the whole file or fail)."""
    base = table
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap):
            return False
        base = base.base
    return bool(table.flags.writeable and table.flags.c_contiguous and table.size > 0)


class PinnedFeatures(TableFeatures):
    """Rows in pinned host memory, gathered zero-copy into tensors on `device`.

    Use as a context manager or call close(): close() unregisters memory pinned
    in place (the caller's array is left as it was) or frees the pinned copy.
    """

    placement = "pinned"

    def __init__(self, features, device="cuda", max_programs: int | None = None, progress: bool = True):
        require_cuda("placement 'pinned'")
        rows = as_row_table(features)
        table, self.pinned_in_place = _pin(rows.table, progress)
        super().__init__(table, rows.shape[1], rows.dtype, device, max_programs)

    @property
    def closed(self) -> bool:
        return self.table is None

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> PendingGather:
        if self.closed:
            raise RuntimeError("PinnedFeatures is closed")
        return super().gather_async(ids, out)

    def close(self) -> None:
        """Unregister or free the pinned memory (after pending gathers finish)."""
        if self.closed:
            return
        torch.cuda.synchronize(self.device)
        if self.pinned_in_place:
            _check(torch.cuda.cudart().cudaHostUnregister(self.table.data_ptr()), "cudaHostUnregister")
        self.table = None

    def __enter__(self) -> "PinnedFeatures":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pin(table: np.ndarray, progress: bool) -> tuple[torch.Tensor, bool]:
    """(pinned uint8 tensor of `table`'s rows, whether it was pinned in place)."""
    if can_pin_in_place(table):
        host = torch.from_numpy(table)
        rc = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.numel(), 0)
        if int(rc) == 0:
            return host, True
        log.info("cudaHostRegister failed (%s); copying the table into pinned memory instead", rc)
    pinned = torch.empty(table.shape, dtype=torch.uint8, pin_memory=True)
    copy_rows_into(table, pinned, progress=progress)
    return pinned, False


def _check(rc, call: str) -> None:
    if int(rc) != 0:
        raise RuntimeError(f"{call} failed with CUDA error {rc}")
