"""`CudaStreams`: the CUDA stream and event calls the loader's stages make.

Every stream and event call goes through a `CudaStreams` object, so the
ordering logic is tested on the CPU with a recording stand-in
(tests/storage/fakes.py, used by tests/gnnsys/test_loader_streams.py).
"""

from __future__ import annotations

import torch


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

    def record_stream(self, tensor: torch.Tensor, stream) -> None:
        """Tell the caching allocator that `stream` uses `tensor` (allocated on
        another stream); a tensor in host memory needs nothing."""
        if tensor.is_cuda:
            tensor.record_stream(stream)
