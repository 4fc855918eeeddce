"""StagedFeatures: rows of a host tier reach a CUDA device through pinned staging.

The classic pipeline (and the baseline the zero-copy gather is measured
against) of placement cpu-gather, and how the SSD tier feeds a GPU without a
cache: the tier below (a RowTable that numba gathers from, memory-mapped or in
memory, or the SSD tier's O_DIRECT reads) writes each batch's rows into pinned
buffers, and asynchronous copies on a side stream move them to the device
(storage/staging.py `PinnedStaging`, which also serves the SSD tier under a GPU
cache); the caller's stream waits on the copies' event, the host only for a
buffer's previous copy.
"""

from __future__ import annotations

import torch

from gnnsys.errors import ConfigError
from gnnsys.ids import check_ids, gather_output
from gnnsys.storage.source import FeatureSource, GatherHandle

from .cuda_stream import CudaStreams
from .gpu_features import as_row_table
from .staging import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, PinnedStaging


class StagedFeatures(FeatureSource):
    """A FeatureSource whose rows, those of `features` (a host FeatureSource
    such as SSDFeatures, or what as_row_table takes), reach the CUDA `device`
    through pinned staging (`slots` buffers of `slot_bytes`; `streams`: the
    CUDA calls, see PinnedStaging)."""

    name = "staged"
    placement = "cpu-gather"

    def __init__(
        self,
        features,
        device="cuda",
        slots: int = DEFAULT_SLOTS,
        *,
        slot_bytes: int = DEFAULT_SLOT_BYTES,
        streams: CudaStreams | None = None,
    ):
        source = getattr(features, "source", features)  # a UnifiedTensor's
        self.base = source if isinstance(source, FeatureSource) else as_row_table(source)
        if self.base.device.type != "cpu":
            raise ConfigError("features", f"staging sends host rows to a GPU; {self.base!r} is on {self.base.device}")
        self.shape, self.dtype = tuple(self.base.shape), self.base.dtype
        self.pinned = PinnedStaging(
            self.shape[1], self.dtype, device, slots=slots, slot_bytes=slot_bytes, streams=streams
        )
        self.device = self.pinned.device

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.gather_async(ids, out).wait()

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None):
        """Rows `ids` on the device, in stream order: a StreamHandle whose
        wait() makes the current stream wait on the copies (IndexError for an
        id out of range, before anything is staged)."""
        ids = check_ids(torch.as_tensor(ids).cpu(), self.shape[0])
        if out is not None:
            gather_output(out, ids.shape[0], self.shape[1], self.dtype, self.device)
        handle = self.pinned.upload(ids.shape[0], self._fill(ids))
        return handle if out is None else GatherHandle(out.copy_(handle.wait()))

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        """Row ids[i] into out[at[i]] (on the device), after the copies in the current stream's order."""
        ids = check_ids(torch.as_tensor(ids).cpu(), self.shape[0])
        self.pinned.upload_into(ids.shape[0], self._fill(ids), out, at)

    def _fill(self, ids: torch.Tensor):
        """The fill of PinnedStaging.upload: rows ids[lo:hi] gathered by the base into the pinned buffer."""
        return lambda lo, hi, staged: self.base.gather(ids[lo:hi], out=staged)

    def host_bytes(self) -> dict:
        """{"pinned": bytes} of its pinned staging buffers."""
        return {"pinned": self.pinned.host_bytes()}

    def close(self) -> None:
        """Release the staging buffers (after their copies), then close the base."""
        self.pinned.close()
        super().close()

    def __repr__(self):
        return f"StagedFeatures(shape={self.shape}, dtype={self.dtype}, device={self.device}, over {self.base!r})"
