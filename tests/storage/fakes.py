"""Stand-ins for CUDA in tests of the decisions the GPU path makes on the CPU.

`RecordingStreams` has the methods of storage.cuda_stream.CudaStreams and
logs every stream and event call (with the calling thread's name) in order;
`FakePinning` has the methods of storage.pinned.HostPinning and logs the
runtime calls; `pretend_cuda` makes gnnsys believe a GPU is present, for
code that only names a CUDA device.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

from gnnsys.storage.source import FeatureSource, GatherHandle, VictimTier


def pretend_cuda(monkeypatch) -> None:
    """gnnsys sees CUDA (device "cuda" normalises to "cuda:0"); nothing runs on it."""
    import gnnsys._capabilities as caps

    monkeypatch.setattr(caps, "HAS_CUDA", True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


class FakeEvent:
    """An event: record(stream) and synchronize() are logged."""

    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def record(self, stream):
        self.log.append(("record", self.name, stream.name, threading.current_thread().name))

    def synchronize(self):
        self.log.append(("synchronize", self.name, threading.current_thread().name))

    def __repr__(self):
        return self.name


class FakeStream:
    """A stream: wait_event, wait_stream and synchronize are logged."""

    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def wait_event(self, event):
        self.log.append(("wait_event", self.name, event.name, threading.current_thread().name))

    def wait_stream(self, other):
        self.log.append(("wait_stream", self.name, other.name, threading.current_thread().name))

    def synchronize(self):
        self.log.append(("synchronize", self.name, threading.current_thread().name))

    def __repr__(self):
        return self.name


class RecordingStreams:
    """storage.cuda_stream.CudaStreams' methods over FakeStream/FakeEvent; `log`
    holds every call in order; `current` is the calling thread's stream (a
    thread's default stream is named after the thread, as CUDA's per-thread
    current stream). Host copies are kept alive so that the ids logged for
    them are never reused by a later copy."""

    def __init__(self):
        self.log: list = []
        self._hosts: list = []
        self._count = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def _name(self, kind: str) -> str:
        with self._lock:
            self._count += 1
            return f"{kind}{self._count}"

    def new_stream(self, device):
        return FakeStream(self.log, self._name("stream"))

    def current(self, device):
        stack = getattr(self._local, "stack", None)
        if stack:
            return stack[-1]
        return FakeStream(self.log, f"default@{threading.current_thread().name}")

    @contextmanager
    def use(self, stream):
        self._local.stack = getattr(self._local, "stack", [])
        self._local.stack.append(stream)
        self.log.append(("use", stream.name, threading.current_thread().name))
        try:
            yield
        finally:
            self._local.stack.pop()
            self.log.append(("leave", stream.name, threading.current_thread().name))

    def new_event(self):
        return FakeEvent(self.log, self._name("event"))

    def record_stream(self, tensor, stream):
        self.log.append(("record_stream", id(tensor), stream.name, threading.current_thread().name))

    def empty(self, shape, dtype, device):
        """A new host tensor standing in for one on `device` (which may be a pretended GPU)."""
        return torch.empty(shape, dtype=dtype)

    def pinned(self, nbytes):
        """Plain host memory standing in for pinned memory, logged with its address."""
        buffer = torch.empty(nbytes, dtype=torch.uint8)
        self.log.append(("pinned", buffer.data_ptr(), nbytes, threading.current_thread().name))
        return buffer

    def copy(self, dst, src):
        """dst.copy_(src) at once (the stand-in of a queued copy), logged with
        the address of `src` and the current stream."""
        dst.copy_(src)
        self.log.append(("copy", src.data_ptr(), self.current(None).name, threading.current_thread().name))

    def to_host(self, tensor):
        """A copy of `tensor` (a new tensor, as CUDA's to pinned memory), logged with the current stream."""
        host = tensor.clone()
        self._hosts.append(host)
        self.log.append(("to_host", id(host), self.current(None).name, threading.current_thread().name))
        return host


class FakePinning:
    """storage.pinned.HostPinning's methods: `pinned` holds the addresses that
    count as pinned by someone else; register() returns the next of `codes`
    (CUDA error codes), then 0 (success); `log` records the calls."""

    def __init__(self, codes=(), pinned=()):
        self.codes, self.pinned, self.log = list(codes), set(pinned), []

    def is_pinned(self, host: torch.Tensor) -> bool:
        return host.data_ptr() in self.pinned

    def register(self, ptr: int, nbytes: int) -> int:
        self.log.append(("register", ptr, nbytes))
        return self.codes.pop(0) if self.codes else 0

    def unregister(self, ptr: int) -> int:
        self.log.append(("unregister", ptr))
        return 0

    def clear_error(self) -> None:
        self.log.append(("clear_error",))

    def synchronize(self) -> None:
        self.log.append(("synchronize",))

    def calls(self, name: str) -> list:
        """The logged calls named `name`."""
        return [c for c in self.log if c[0] == name]


class CountingRows(FeatureSource):
    """A FeatureSource over the in-memory table `x` that counts the rows
    gathered from it (`rows_read`, repeats included)."""

    def __init__(self, x: torch.Tensor):
        self.x, self.base, self.rows_read = x, None, 0
        self.shape, self.dtype, self.device = tuple(x.shape), x.dtype, x.device

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        from gnnsys.ids import check_ids, gather_output

        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        out = gather_output(out, ids.shape[0], self.shape[1], self.dtype, self.device)
        self.rows_read += ids.shape[0]
        return torch.index_select(self.x, 0, ids.long(), out=out)

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None):
        return GatherHandle(self.gather(ids, out))


class CountingSource(FeatureSource):
    """A FeatureSource over the CPU tensor `x` that logs the ids of every
    gather (`reads`, one int64 array per call, in call order) and calls
    `before_read(ids)`, when set, before reading (to hold or fail a read)."""

    base = None
    device = torch.device("cpu")

    def __init__(self, x: torch.Tensor):
        self.x = x
        self.shape, self.dtype = tuple(x.shape), x.dtype
        self.reads: list = []
        self.before_read = None
        self._lock = threading.Lock()

    def gather(self, ids, out=None):
        ids = torch.as_tensor(ids)
        if self.before_read is not None:
            self.before_read(ids)
        with self._lock:
            self.reads.append(ids.numpy().astype("int64"))
        rows = self.x[ids.long()]
        return rows if out is None else out.copy_(rows)

    def gather_async(self, ids, out=None):
        return GatherHandle(self.gather(ids, out))

    def rows_read(self) -> int:
        """Rows read so far, repeats included."""
        with self._lock:
            return sum(r.shape[0] for r in self.reads)


class OfferLog(CountingSource, VictimTier):
    """A CountingSource that also takes `offer(ids, rows, next_use)` as a
    victim buffer does (its role is a VictimTier's), logging each call as
    (ids, rows, next_use) in `offers`."""

    def __init__(self, x: torch.Tensor):
        super().__init__(x)
        self.offers: list = []

    def offer(self, ids, rows, next_use):
        self.offers.append(
            (torch.as_tensor(ids).numpy().copy(), rows.clone(), torch.as_tensor(next_use).numpy().copy())
        )
