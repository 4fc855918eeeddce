"""Feature gathers on a side CUDA stream, ordered with events, no host sync.

`SideStreamGather(source).gather_async(ids)` launches the gather of the next
batch on its own stream (after the work that produced `ids` on the current
stream) and returns a handle; handle.wait() makes the *current* stream wait
on the gather's event and returns the rows: the host never blocks, and
training kernels of batch i overlap the gather of batch i+1.
`prefetch(source, batches)` keeps one gather in flight ahead of the consumer.
Both check ids as every FeatureSource does (IndexError): the check waits for
that gather's own event only. On a CPU source everything runs synchronously
through the same code path.

Every stream and event call goes through a `CudaStreams` object, so the
ordering logic is tested on the CPU with a recording stand-in
(tests/storage/test_pinned.py, tests/gnnsys/test_loader_streams.py); that
the ordering makes the GPU overlap gathers with training is not measured yet.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

import torch


class CudaStreams:
    """The CUDA stream and event calls of the side-stream code (torch.cuda's).
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


class StreamHandle:
    """A gather running on a side stream; wait() orders the current stream after it."""

    def __init__(self, inner, event, streams: CudaStreams | None, device: torch.device):
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
        """wait(), then raise IndexError if an id was outside the table (where the
        source defers that check, this waits for the gather's own event only)."""
        value = self.wait()
        if hasattr(self.inner, "check"):
            self.inner.check()
        return value


class SideStreamGather:
    """A FeatureSource wrapper whose gathers run on a side CUDA stream when the
    source's device is a GPU, and inline otherwise. `stream`: the side stream
    (default a new one); `streams`: the stream API (default CudaStreams())."""

    def __init__(self, source, stream=None, streams: CudaStreams | None = None):
        self.source = source
        self.shape, self.dtype, self.device = source.shape, source.dtype, source.device
        if self.device.type != "cuda" and stream is not None:
            raise ValueError(f"a CUDA stream was given for a source on {self.device}")
        self.streams = streams or (CudaStreams() if self.device.type == "cuda" else None)
        self.stream = None if self.streams is None else stream or self.streams.new_stream(self.device)

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` on `device`, usable on the current stream; IndexError for an id outside the table."""
        return self.gather_async(ids, out).check()

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> StreamHandle:
        """Launch the gather of `ids`; returns a StreamHandle (never blocks the host
        for a GPU source)."""
        if self.stream is None:
            return StreamHandle(self.source.gather_async(ids, out), None, None, self.device)
        self.stream.wait_stream(self.streams.current(self.device))  # ids / out come from the current stream
        with self.streams.use(self.stream):
            inner = self.source.gather_async(ids, out)
            event = self.streams.new_event()
            event.record(self.stream)
        if isinstance(ids, torch.Tensor):
            self.streams.record_stream(ids, self.stream)
        return StreamHandle(inner, event, self.streams, self.device)


def prefetch(source, batches: Iterable[torch.Tensor], depth: int = 1) -> Iterator[torch.Tensor]:
    """Yield source's rows for each id tensor of `batches`, keeping `depth`
    gathers in flight ahead of the one being consumed (gather of batch i+1
    overlaps the consumer's work on batch i); IndexError for an id outside the
    table, raised when that batch is yielded."""
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    gatherer = source if isinstance(source, SideStreamGather) else SideStreamGather(source)
    pending: deque = deque()
    for ids in batches:
        pending.append(gatherer.gather_async(ids))
        if len(pending) > depth:
            yield pending.popleft().check()
    while pending:
        yield pending.popleft().check()
