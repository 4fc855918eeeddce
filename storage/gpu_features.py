"""Feature tables gathered by the Triton kernel, and the GPU-resident placement.

`TableFeatures` is the FeatureSource over a [num_rows, row_stride] uint8
table tensor that the GPU can address (GPU memory, or pinned host memory read
zero-copy); rows come back as dense [n, dim] tensors on `device`.
`GPUFeatures` copies the whole padded table into GPU memory. Devices are
normalised when a source is built ("cuda" -> "cuda:<current>", see
gnnsys._capabilities.normalize_device), so a source built for "cuda" accepts
an `out` allocated on "cuda" (which is "cuda:0").
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from gnnsys._capabilities import normalize_device, require_cuda, require_triton
from gnnsys.progress import Bar
from gnnsys.storage.source import FeatureSource
from gnnsys.storage.table import RowTable

COPY_CHUNK_BYTES = 256 << 20  # host -> device copies move this much at a time


class PendingGather:
    """A launched gather: wait() returns the rows without a host sync (the
    kernel runs in stream order); check() returns them after verifying every
    id was inside the table, raising IndexError otherwise (those rows are zero,
    never foreign bytes).

    err: the first bad position (or len(ids)) in host memory; on a GPU it is
    copied there behind the kernel, and `done`, an event recorded after that
    copy, is what check() waits for: the host waits for this gather only,
    never for other work queued on the stream.
    """

    def __init__(self, value: torch.Tensor, err: torch.Tensor, ids: torch.Tensor, num_rows: int, done=None):
        self.value, self.err, self.ids, self.num_rows, self.done = value, err, ids, num_rows, done

    def wait(self) -> torch.Tensor:
        """The rows, in stream order (nothing waits on the host)."""
        return self.value

    def check(self) -> torch.Tensor:
        """The rows, after verifying every id was inside the table (waits for this gather's event)."""
        if self.done is not None:
            self.done.synchronize()
        pos = int(self.err[0])
        if pos < self.ids.shape[0]:
            raise IndexError(f"ids: id {int(self.ids[pos])} at position {pos} out of range [0, {self.num_rows})")
        return self.value


class TableFeatures(FeatureSource):
    """A FeatureSource over a contiguous [num_rows, row_stride] uint8 `table`
    holding `dim` values of `dtype` per row, gathered by the Triton kernel into
    tensors on `device`. `max_programs` caps the kernel's grid (None: the
    launch config's thread budget, storage/gather_plan.py)."""

    placement = "table"

    def __init__(self, table: torch.Tensor, dim: int, dtype: torch.dtype, device=None, max_programs: int | None = None):
        if table.dtype != torch.uint8 or table.dim() != 2 or not table.is_contiguous():
            raise TypeError("table must be a contiguous 2-D uint8 tensor of rows")
        if dim * dtype.itemsize > table.shape[1]:
            raise ValueError(f"rows of {table.shape[1]} bytes cannot hold {dim} x {dtype}")
        self.table = table
        self.dtype = dtype
        self.shape = (table.shape[0], dim)
        self.device = normalize_device(device if device is not None else table.device)
        self.max_programs = max_programs
        require_triton(f"{type(self).__name__} on {self.device}", self.device)

    @property
    def nbytes(self) -> int:
        """Bytes of the (padded) table."""
        return self.table.numel()

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` as a [len(ids), dim] tensor on `device`; IndexError for an
        id outside the table (checking waits for this gather to finish)."""
        return self.gather_async(ids, out).check()

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> PendingGather:
        """Launch the gather on the current stream; the handle's wait() gives
        the rows with no host sync, its check() raises IndexError for an id
        outside the table. `ids` may be strided or on another device."""
        from .triton_gather import gather_rows

        ids = torch.as_tensor(ids)
        n = ids.shape[0]
        if out is None:
            out = torch.empty((n, self.shape[1]), dtype=self.dtype, device=self.device)
        elif out.shape != (n, self.shape[1]) or out.dtype != self.dtype or out.device != self.device:
            raise ValueError(f"out must be a {self.dtype} tensor of shape {(n, self.shape[1])} on {self.device}")
        err = gather_rows(self.table, ids, out, self.max_programs)
        done = None
        if err.is_cuda:
            host = torch.empty(1, dtype=torch.int64, pin_memory=True)
            host.copy_(err, non_blocking=True)
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
            err = host
        return PendingGather(out, err, ids, self.shape[0], done)

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def as_row_table(features) -> RowTable:
    """A RowTable for a RowTable, a UnifiedTensor over one, or a 2-D tensor (copied)."""
    source = getattr(features, "source", features)
    if isinstance(source, RowTable):
        return source
    if isinstance(source, torch.Tensor) and source.dim() == 2:
        return RowTable.from_tensor(source)
    raise TypeError(
        f"features must be a RowTable, a UnifiedTensor over one or a 2-D tensor, got {type(source).__name__}"
    )


def copy_rows_into(
    table: np.ndarray, dest: torch.Tensor, chunk_bytes: int = COPY_CHUNK_BYTES, progress: bool = True
) -> torch.Tensor:
    """Copy the [num_rows, row_stride] uint8 rows of `table` (in memory or a
    memmap) into the same-shaped tensor `dest` (GPU or pinned host), a chunk at
    a time, so a memory-mapped table never needs a full pageable copy."""
    num_rows, stride = table.shape
    if dest.shape != (num_rows, stride) or dest.dtype != torch.uint8:
        raise ValueError(f"dest must be a [{num_rows}, {stride}] uint8 tensor")
    step = max(1, chunk_bytes // max(stride, 1))
    with Bar(
        total=num_rows * stride,
        unit="B",
        unit_scale=True,
        disable=not progress,
        desc=f"features -> {dest.device}{' (pinned)' if dest.device.type == 'cpu' else ''}",
    ) as bar:
        for start in range(0, num_rows, step):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # a read-only memmap; we only read it
                chunk = torch.from_numpy(table[start : start + step])
            dest[start : start + step].copy_(chunk)
            bar.update(chunk.numel())
    return dest


class GPUFeatures(TableFeatures):
    """The whole padded table in GPU memory; gathers read HBM."""

    placement = "gpu"

    @classmethod
    def from_rows(cls, features, device="cuda", max_programs: int | None = None, progress: bool = True) -> GPUFeatures:
        """Copy `features` (see `as_row_table`) into GPU memory, chunk by chunk."""
        require_cuda("placement 'gpu'")
        rows = as_row_table(features)
        device = normalize_device(device)
        table = torch.empty(rows.table.shape, dtype=torch.uint8, device=device)
        copy_rows_into(rows.table, table, progress=progress)
        return cls(table, rows.shape[1], rows.dtype, device, max_programs)
