"""`PinnedStaging`: rows of a host tier sent to a CUDA device through pinned
buffers, with the copies on a side stream ordered by events.

The one mechanism by which host rows reach a GPU asynchronously: StagedFeatures
(storage/staged.py: placement cpu-gather, and the SSD tier on a GPU without a
cache) and the SSD tier's `gather_into` of the rows a GPU cache misses
(storage/ssd.py) both use it. A batch of n rows is sent in chunks of at most
one slot: the host tier writes a chunk's rows into one of `slots` pinned
buffers (`fill`), the copy of that buffer into the device tensor is queued on
the staging's own side stream with an event recorded after it, and the next
chunk is written into the next buffer while the copy runs. A buffer is
written again only after the event of the copy that last read it has fired
(the host waits for that copy only). The rows are handed over in a
`StreamHandle`: its wait() makes the caller's current stream wait on the event
of the batch's last copy (no host wait) and records the rows as used there, so
the copies overlap whatever that stream (or the default one) computes
meanwhile. Every stream, event, allocation and copy goes through a
`CudaStreams` object (storage/cuda_stream.py), so tests run the ordering on
the CPU with a recording stand-in whose copies are synchronous.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from gnnsys._capabilities import normalize_device, require_cuda
from gnnsys.errors import ConfigError
from gnnsys.ids import indices_on
from gnnsys.storage.source import GatherHandle

from .cuda_stream import CudaStreams, StreamHandle

DEFAULT_SLOTS = 2
DEFAULT_SLOT_BYTES = 16 << 20  # a chunk: about 1 ms of PCIe copy, its own write overlapping the last copy

Fill = Callable[[int, int, torch.Tensor], object]


def slot_rows(row_bytes: int, slot_bytes: int = DEFAULT_SLOT_BYTES) -> int:
    """Rows one slot of `slot_bytes` holds (at least one)."""
    return max(1, slot_bytes // row_bytes)


class PinnedStaging:
    """Sends [n, dim] rows of `dtype` written by a host tier to `device`
    through `slots` pinned buffers of `slot_bytes` each (rounded down to whole
    rows, at least one row), allocated on first use (see the module
    docstring). streams: the CUDA calls (default CudaStreams(), which needs
    CUDA); a stand-in runs the same logic on any device. Thread-safe: one
    batch is staged at a time."""

    @staticmethod
    def planned_bytes(row_bytes: int, slots: int = DEFAULT_SLOTS, slot_bytes: int = DEFAULT_SLOT_BYTES) -> int:
        """Pinned host bytes a staging of `slots` slots for rows of `row_bytes` holds at most."""
        return slots * slot_rows(row_bytes, slot_bytes) * row_bytes

    def __init__(
        self,
        dim: int,
        dtype: torch.dtype,
        device,
        *,
        slots: int = DEFAULT_SLOTS,
        slot_bytes: int = DEFAULT_SLOT_BYTES,
        streams: CudaStreams | None = None,
    ):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ConfigError("slots", f"must be an int >= 1, got {slots!r}")
        if isinstance(slot_bytes, bool) or not isinstance(slot_bytes, int) or slot_bytes < 1:
            raise ConfigError("slot_bytes", f"must be an int >= 1, got {slot_bytes!r}")
        if streams is None:
            require_cuda("pinned staging to a CUDA device")
            streams = CudaStreams()
        self.device = normalize_device(device)
        self.dim, self.dtype, self.streams = int(dim), dtype, streams
        self.row_bytes = self.dim * dtype.itemsize
        self.slot_rows = slot_rows(self.row_bytes, slot_bytes)
        self.side = streams.new_stream(self.device)  # the copies' stream
        self._buffers: list = [None] * slots  # pinned uint8 tensors of slot_rows rows
        self._events: list = [None] * slots  # the event after the copy that last read each buffer
        self._next = 0
        self._lock = threading.Lock()

    def upload(self, n: int, fill: Fill) -> StreamHandle:
        """Rows 0..n on `device`, each chunk written by fill(lo, hi, staged)
        (rows lo..hi into the pinned [hi - lo, dim] tensor `staged`) and copied
        on the side stream; the handle's wait() orders the current stream after
        the copies."""
        with self._lock:
            with self.streams.use(self.side):  # the rows' memory belongs to the stream that writes it
                rows = self.streams.empty((n, self.dim), self.dtype, self.device)
            event = None
            for lo in range(0, n, self.slot_rows):
                hi = min(n, lo + self.slot_rows)
                slot, staged = self._take(hi - lo)
                fill(lo, hi, staged)
                with self.streams.use(self.side):
                    self.streams.copy(rows[lo:hi], staged)
                    event = self.streams.new_event()
                    event.record(self.side)
                self._events[slot] = event
        return StreamHandle(GatherHandle(rows), event, self.streams, self.device)

    def upload_into(self, n: int, fill: Fill, out: torch.Tensor, at: torch.Tensor) -> None:
        """upload(n, fill)'s row i into out[at[i]] (`out` on `device`, `at`
        int64 on the host), in the current stream's order after the copies."""
        rows = self.upload(n, fill).wait()
        if n:
            (at_on,) = indices_on(out.device, at.cpu().numpy())
            out.index_copy_(0, at_on, rows)

    def _take(self, rows: int) -> tuple[int, torch.Tensor]:
        """(slot, its buffer as a [rows, dim] tensor), once the copy that last read it is done."""
        slot = self._next
        self._next = (slot + 1) % len(self._buffers)
        if self._events[slot] is not None:
            self._events[slot].synchronize()
            self._events[slot] = None
        if self._buffers[slot] is None:
            self._buffers[slot] = self.streams.pinned(self.slot_rows * self.row_bytes)
        staged = self._buffers[slot][: rows * self.row_bytes]
        return slot, staged.view(self.dtype).view(rows, self.dim)

    def host_bytes(self) -> int:
        """Pinned bytes held now (slots are allocated on first use)."""
        with self._lock:
            return sum(b.numel() for b in self._buffers if b is not None)

    def close(self) -> None:
        """Wait for the copies still reading the buffers, then release them."""
        with self._lock:
            for event in self._events:
                if event is not None:
                    event.synchronize()
            self._buffers = [None] * len(self._buffers)
            self._events = [None] * len(self._events)

    def __repr__(self):
        return (
            f"PinnedStaging({len(self._buffers)} slots of {self.slot_rows:,} rows "
            f"({self.slot_rows * self.row_bytes / 2**20:.1f} MiB) to {self.device})"
        )
