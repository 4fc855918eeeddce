"""`CudaStreams`: the CUDA stream and event calls the loader's stages, the
shared cache's exchange and pinned staging (storage/staging.py) make;
`StreamHandle`: work queued on a side stream, whose wait() orders the
caller's current stream after it.

Every stream and event call goes through a `CudaStreams` object, so the
ordering logic is tested on the CPU with a recording stand-in
(tests/storage/fakes.py).
"""

from __future__ import annotations

import torch

from gnnsys.storage.source import GatherHandle


class CudaStreams:
    """The CUDA stream and event calls of the loader's stages (torch.cuda's).
    Streams and events are used through their own methods (wait_event,
    wait_stream, record, synchronize); a stand-in with the same methods runs
    the same ordering logic without a GPU."""

    def new_stream(self, device: torch.device):
        """A new stream on `device`."""
        return torch.cuda.Stream(device)

    def current(self, device: torch.device):
        """The calling thread's current stream on `device`."""
        return torch.cuda.current_stream(device)

    def use(self, stream):
        """Context manager: make `stream` the calling thread's current stream."""
        return torch.cuda.stream(stream)

    def new_event(self):
        """A new event (no timing)."""
        return torch.cuda.Event()

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of `tensor` in pinned host memory, queued on the current
        stream (read it once an event recorded after it has completed); a host
        tensor as it is."""
        if not tensor.is_cuda:
            return tensor
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        return host.copy_(tensor, non_blocking=True)

    def empty(self, shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A new tensor on `device`, its memory owned by the current stream."""
        return torch.empty(shape, dtype=dtype, device=device)

    def pinned(self, nbytes: int) -> torch.Tensor:
        """`nbytes` of pinned (page-locked) host memory as a uint8 tensor."""
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """dst.copy_(src) queued on the current stream without the host waiting
        (from pinned `src`: write `src` again only once an event recorded
        after the copy has fired)."""
        dst.copy_(src, non_blocking=True)

    def record_stream(self, tensor: torch.Tensor, stream) -> None:
        """Tell the caching allocator that `stream` uses `tensor` (allocated on
        another stream); a tensor in host memory needs nothing."""
        if tensor.is_cuda:
            tensor.record_stream(stream)


class StreamHandle(GatherHandle):
    """A gather running on a side stream (`inner`, a GatherHandle, whose rows
    are ready once `event` is); wait() orders the current stream after it."""

    def __init__(self, inner: GatherHandle, event, streams: CudaStreams | None, device: torch.device):
        self.inner, self.event, self.streams, self.device = inner, event, streams, device

    def wait(self) -> torch.Tensor:
        """The rows, usable on the current stream (no host synchronisation)."""
        value = self.inner.wait()
        if self.event is not None:
            current = self.streams.current(self.device)
            current.wait_event(self.event)
            self.streams.record_stream(value, current)  # allocated on the side stream, used on this one
        return value

    def check(self) -> torch.Tensor:
        """wait(), then the inner handle's id check (where the source defers
        that check, it waits for the gather's own event only)."""
        value = self.wait()
        self.inner.check()
        return value

    def done(self) -> bool:
        """Whether the inner gather is done (the stream's work may still be queued)."""
        return self.inner.done()
