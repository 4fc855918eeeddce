"""cpu-gather: the CPU gathers rows into pinned staging buffers, then an async copy.

The classic pipeline (and the baseline the zero-copy gather is measured
against): numba gathers rows of a RowTable (memory-mapped or in memory) into
one of `slots` pinned buffers; the host-to-device copy runs asynchronously on
the current stream, and a buffer is reused only after its copy's event fired.
"""

from __future__ import annotations

import torch

from gnnsys._capabilities import normalize_device, require_cuda
from gnnsys.storage.source import FeatureSource, GatherHandle

from .gpu_features import as_row_table


class StagedFeatures(FeatureSource):
    """A FeatureSource over a RowTable whose rows reach a CUDA `device` through
    pinned staging buffers (`slots` of them, reused round robin)."""

    placement = "cpu-gather"

    def __init__(self, features, device="cuda", slots: int = 2):
        require_cuda("placement 'cpu-gather' on a CUDA device")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.base = as_row_table(features)  # the lower tier every row comes from
        self.shape, self.dtype = self.base.shape, self.base.dtype
        self.device = normalize_device(device)
        self._buffers = [torch.empty(0, dtype=torch.uint8, pin_memory=True) for _ in range(slots)]
        self._events = [None] * slots
        self._next = 0

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.gather_async(ids, out).wait()

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None):
        """Gather on the CPU (waits only for the copy that last used this slot),
        then queue the copy to the device; the rows are ready in stream order."""
        ids = torch.as_tensor(ids).cpu()
        n, dim = ids.shape[0], self.shape[1]
        slot = self._next
        self._next = (slot + 1) % len(self._buffers)
        if self._events[slot] is not None:
            self._events[slot].synchronize()
        nbytes = n * dim * self.dtype.itemsize
        if self._buffers[slot].numel() < nbytes:
            self._buffers[slot] = torch.empty(
                max(nbytes, 2 * self._buffers[slot].numel()), dtype=torch.uint8, pin_memory=True
            )
        staged = self._buffers[slot][:nbytes].view(self.dtype).view(n, dim)
        self.base.gather(ids, out=staged)
        if out is None:
            out = torch.empty((n, dim), dtype=self.dtype, device=self.device)
        out.copy_(staged, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        self._events[slot] = event
        return GatherHandle(out)

    def host_bytes(self) -> dict:
        """{"staging": bytes} of its pinned staging buffers."""
        return {"staging": sum(b.numel() for b in self._buffers)}

    def __repr__(self):
        return f"StagedFeatures(shape={self.shape}, dtype={self.dtype}, device={self.device})"
