"""Feature gathers on a side CUDA stream, ordered with events, no host sync.

`SideStreamGather(source).gather_async(ids)` launches the gather of the next
batch on its own stream (after the work that produced `ids` on the current
stream) and returns a handle; handle.wait() makes the *current* stream wait
on the gather's event and returns the rows: the host never blocks, and
training kernels of batch i overlap the gather of batch i+1.
`prefetch(source, batches)` keeps one gather in flight ahead of the consumer.
On a CPU source everything runs synchronously through the same code path.
"""
from __future__ import annotations

from collections import deque
from typing import Iterable, Iterator

import torch


class StreamHandle:
    """A gather running on a side stream; wait() orders the current stream after it."""

    def __init__(self, inner, event: torch.cuda.Event | None, stream):
        self.inner, self.event, self.stream = inner, event, stream

    def wait(self) -> torch.Tensor:
        """The rows, usable on the current stream (no host synchronisation)."""
        value = self.inner.wait()
        if self.event is not None:
            current = torch.cuda.current_stream(value.device)
            current.wait_event(self.event)
            value.record_stream(current)  # allocated on the side stream, used on this one
        return value

    def check(self) -> torch.Tensor:
        """wait(), then verify the ids were in range where the source can (synchronises)."""
        value = self.wait()
        return self.inner.check() if hasattr(self.inner, "check") else value


class SideStreamGather:
    """A FeatureSource wrapper whose gathers run on a side CUDA stream when the
    source's device is a GPU, and inline otherwise."""

    def __init__(self, source, stream: torch.cuda.Stream | None = None):
        self.source = source
        self.shape, self.dtype, self.device = source.shape, source.dtype, source.device
        if self.device.type == "cuda":
            self.stream = stream or torch.cuda.Stream(self.device)
        elif stream is not None:
            raise ValueError(f"a CUDA stream was given for a source on {self.device}")
        else:
            self.stream = None

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.gather_async(ids, out).wait()

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> StreamHandle:
        """Launch the gather of `ids`; returns a StreamHandle (never blocks the host
        for a GPU source)."""
        if self.stream is None:
            return StreamHandle(self.source.gather_async(ids, out), None, None)
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)  # ids / out were produced on the current stream
        with torch.cuda.stream(self.stream):
            inner = self.source.gather_async(ids, out)
            event = torch.cuda.Event()
            event.record(self.stream)
        if isinstance(ids, torch.Tensor) and ids.is_cuda:
            ids.record_stream(self.stream)
        return StreamHandle(inner, event, self.stream)


def prefetch(source, batches: Iterable[torch.Tensor], depth: int = 1) -> Iterator[torch.Tensor]:
    """Yield source's rows for each id tensor of `batches`, keeping `depth`
    gathers in flight ahead of the one being consumed (gather of batch i+1
    overlaps the consumer's work on batch i)."""
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    gatherer = source if isinstance(source, SideStreamGather) else SideStreamGather(source)
    pending: deque = deque()
    for ids in batches:
        pending.append(gatherer.gather_async(ids))
        if len(pending) > depth:
            yield pending.popleft().wait()
    while pending:
        yield pending.popleft().wait()
