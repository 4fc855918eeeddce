"""`MinibatchLoader`: sampled minibatches with features and labels, prepared
ahead of the training loop by background threads (SALIENT/GraphBolt-style).

Stages: `num_workers` sampling threads (batch i goes to worker i % num_workers)
-> one gather thread (features of input_nodes as float32, labels of seeds,
move to `device`) -> the consumer. Batch i may start only once batch
i - prefetch has been handed out, so at most `prefetch` batches are in flight
and memory stays bounded; batches come out in order, identical to a
synchronous run (`prefetch=0`) because every draw is a function of (seed,
epoch, batch). The numba kernels release the GIL, so the stages overlap.

On a CUDA device each stage has its own stream (one per sampling thread, one
for the gather thread) and nothing on the way waits on the host for the GPU:
a stage queues its work on its stream and the batch travels on with an event
recorded after that work; the next stage's stream, and at hand-out the
consumer's current stream, wait on that event (on the GPU), and every tensor
crossing streams is recorded on the stream that uses it (`record_stream`),
so the caching allocator never hands its memory out early. A feature
source's id check (IndexError) is deferred to the hand-out and waits for that
batch's gather only, never for training work. So the training kernels of
batch i overlap the sampling and gathers of the next batches. The ordering is
tested on the CPU with stand-in stream objects (tests/gnnsys/
test_loader_streams.py); the overlap has not been measured on a GPU yet.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from gnnsys._capabilities import normalize_device
from gnnsys.samplers.block import MiniBatch
from gnnsys.samplers.factory import make_sampler
from gnnsys.samplers.seeds import SeedBatches
from gnnsys.storage.base import has_tier
from gnnsys.storage.cuda_stream import CudaStreams

_POLL_S = 0.05  # how often a blocked stage looks at the stop event


class MinibatchLoader:
    """Iterate over the minibatches of one split of `dataset`, one epoch per pass.

    dataset: a gnnsys.datasets.Dataset; split: "train", "valid", "test" or a
    tensor of node ids; fanouts: per layer, output layer first (PyG order), -1
    for all neighbours. Each MiniBatch has `x` (features of input_nodes in
    `x_dtype`, default float32; bf16-mixed training passes bfloat16 for
    bf16-stored rows, which then arrive without a conversion copy), `y` (labels
    of seeds), both on `device` (normalised: "cuda" is "cuda:<current>")
    like every other tensor of the batch, and `timings`
    {"sample_s", "gather_s", "wait_s"} (plus "transfer_s" off the CPU; on a GPU
    these are host times, the device work runs behind them in stream order).
    `prefetch` batches are prepared ahead (0: everything runs in the caller's
    thread). `set_epoch(e)` picks the shuffle and the sampling stream of epoch
    e, both functions of (seed, e) only. An error in a stage re-raises in the
    loop with its original traceback; leaving the loop early (break, an
    exception, closing or dropping the iterator) stops the threads.
    `sampler`: a Sampler object (gnnsys.samplers.Sampler; `fanouts`, `replace`
    and `sampling` are then its own and must be left out; `seed` still seeds
    the shuffle) or the name of a kind that make_sampler builds ("cpu", "gpu",
    "gpu-pinned"), drawing by `sampling` ("uniform" or "labor", LABOR-0).
    `features`: the FeatureSource rows come from (for example a placed or
    cached stack, gnnsys.storage); default the dataset's own table.
    `streams`: the stream API of a CUDA device (default
    gnnsys.storage.cuda_stream.CudaStreams()); a stand-in with the same methods
    makes the loader order its stages through it on any device.
    `rank`/`world_size`: data-parallel training, this loader iterates rank
    `rank`'s disjoint share of every epoch's shuffled seeds (SeedBatches).
    `lookahead` K > 0: batches are sampled K further ahead, and before batch
    j's gather the feature source's `set_window` gets the input ids of the
    sampled batches j+1..j+K (nearest first; fewer at the end of an epoch),
    which a cache uses for eviction, its victim buffer and reading ahead.
    """

    def __init__(
        self,
        dataset,
        split,
        fanouts=None,
        batch_size: int = 1024,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        replace: bool = False,
        prefetch: int = 4,
        num_workers: int = 1,
        device="cpu",
        epoch: int = 0,
        sampler="cpu",
        features=None,
        streams: CudaStreams | None = None,
        rank: int = 0,
        world_size: int = 1,
        lookahead: int = 0,
        x_dtype: torch.dtype = torch.float32,
        sampling: str = "uniform",
    ):
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        if lookahead < 0:
            raise ValueError(f"lookahead must be >= 0, got {lookahead}")
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        ids = dataset.split(split) if isinstance(split, str) else torch.as_tensor(split)
        self.dataset = dataset
        self.seeds = SeedBatches(
            ids, batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed, rank=rank, world_size=world_size
        )
        self.device = normalize_device(device)
        self.sampler = _sampler(sampler, dataset, fanouts, self.device, seed, replace, sampling)
        self.features = dataset.features if features is None else features
        self.prefetch = int(prefetch)
        self.lookahead = int(lookahead)
        if self.lookahead and not has_tier(self.features, "cache"):
            raise ValueError(
                f"lookahead needs a feature stack with a cache, which takes the window; got {self.features!r}"
            )
        self.num_workers = int(num_workers)
        self.set_epoch(epoch)
        source, self.x_dtype = self.features, x_dtype
        self._x_buffers = _BufferPool(source.shape[1], x_dtype, capacity=self.prefetch + 3)
        self._raw_buffers = None if source.dtype == x_dtype else _BufferPool(source.shape[1], source.dtype, capacity=2)
        self._streams = streams if streams is not None else (CudaStreams() if self.device.type == "cuda" else None)
        self._sample_streams = [None] * self.num_workers
        self._gather_stream = None
        if self._streams is not None:
            self._sample_streams = [self._streams.new_stream(self.device) for _ in range(self.num_workers)]
            self._gather_stream = self._streams.new_stream(self.device)

    def __len__(self) -> int:
        return len(self.seeds)

    def set_epoch(self, epoch: int):
        """Use the shuffle and sampling stream of epoch `epoch` from the next pass."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self.epoch = int(epoch)

    def __repr__(self):
        return (
            f"MinibatchLoader({self.dataset.name!r}, batches={len(self)}, sampler={self.sampler}, "
            f"prefetch={self.prefetch}, num_workers={self.num_workers}, device={self.device})"
        )

    def __iter__(self):
        batches = self.seeds.epoch(self.epoch)
        if self.prefetch == 0:
            sampled = (self._sample(self.epoch, i, b) for i, b in enumerate(batches))
            return (self._hand_out(self._gather(item, window)) for item, window in self._windowed(sampled))
        return _Pipeline(self, self.epoch, batches).run()

    def _windowed(self, items):
        """(item, window) for each sampled item in order: the window is the
        input ids of the next `lookahead` items (up to the first failed one)."""
        ahead, items = collections.deque(), iter(items)
        for item in items:
            ahead.append(item)
            if len(ahead) > self.lookahead:
                yield ahead.popleft(), _window(ahead)
        while ahead:
            yield ahead.popleft(), _window(ahead)

    def _on(self, stream):
        """Context: `stream` is this thread's current stream (nothing off CUDA)."""
        return nullcontext() if stream is None else self._streams.use(stream)

    def _event_after(self, stream):
        """An event recorded on `stream` after the work queued on it so far (None off CUDA)."""
        if stream is None:
            return None
        event = self._streams.new_event()
        event.record(stream)
        return event

    def _sample(self, epoch: int, index: int, seeds: torch.Tensor, worker: int = 0) -> _InFlight:
        """Stage 1: the sampled MiniBatch of batch `index`, on worker `worker`'s stream."""
        began = time.perf_counter()
        stream = self._sample_streams[worker]
        with self._on(stream):
            mb = self.sampler.sample(seeds, epoch, index)
            ready = self._event_after(stream)
        mb.timings.update(sample_s=time.perf_counter() - began, wait_s=0.0)
        return _InFlight(mb, seeds, ready)

    def _gather(self, item: _InFlight, window=()) -> _InFlight:
        """Stage 2: features (x_dtype) and labels, and the whole batch on the
        device, queued on the gather stream after the sampling; no host wait
        (except that a window of GPU-sampled ids is copied to the host)."""
        began = time.perf_counter()
        stream, mb, source = self._gather_stream, item.mb, self.features
        if self.lookahead:
            source.set_window([ids.cpu() for ids in window])
        with self._on(stream):
            if item.ready is not None:
                stream.wait_event(item.ready)
            ids = mb.input_nodes if source.device.type != "cpu" else mb.input_nodes.cpu()
            if stream is not None:
                self._streams.record_stream(ids, stream)  # made on the sampling stream, read here
            item.pending = None
            if source.device.type != "cpu":
                item.pending = source.gather_async(ids)
                x = item.pending.wait().to(self.x_dtype)
            elif self._raw_buffers is None:
                x = source.gather(ids, out=self._x_buffers.take(ids.shape[0]))
            else:
                raw = source.gather(ids, out=self._raw_buffers.take(ids.shape[0]))
                x = self._x_buffers.take(ids.shape[0]).copy_(raw)
            mb.x, mb.y = x, self.dataset.labels[item.seeds]
            gathered = time.perf_counter()
            # tensors already there stay as they are; a copy to the host must be complete when it is read
            item.mb = mb.to(self.device, non_blocking=self.device.type == "cuda")
            item.ready = self._event_after(stream)
        item.mb.timings["gather_s"] = gathered - began
        if self.device.type != "cpu":
            item.mb.timings["transfer_s"] = time.perf_counter() - gathered
        return item

    def _hand_out(self, item: _InFlight) -> MiniBatch:
        """The batch, usable on the consumer's current stream: that stream waits
        on the batch's event and every tensor is recorded as used by it; then the
        feature source's deferred id check (IndexError; it waits for this
        batch's gather only)."""
        if item.ready is not None:
            current = self._streams.current(self.device)
            current.wait_event(item.ready)
            for t in _tensors(item.mb):
                self._streams.record_stream(t, current)
        if hasattr(item.pending, "check"):
            item.pending.check()
        return item.mb


def _window(ahead) -> list:
    """The input ids of the sampled items in `ahead`, up to the first failed one."""
    window = []
    for item in ahead:
        if isinstance(item, _Failed):
            break
        window.append(item.mb.input_nodes)
    return window


def _sampler(sampler, dataset, fanouts, device, seed, replace, sampling):
    """The loader's sampler: `sampler` itself, or the kind it names built over the dataset's graph."""
    if not isinstance(sampler, str):
        if fanouts is not None or replace or sampling != "uniform":
            raise ValueError("fanouts, replace and sampling belong to the sampler object; leave them out")
        return sampler
    if fanouts is None:
        raise ValueError(f"sampler {sampler!r} needs fanouts")
    return make_sampler(
        sampler, dataset.indptr, dataset.indices, fanouts, device=device, seed=seed, replace=replace, sampling=sampling
    )


@dataclass
class _InFlight:
    """A batch between stages: its MiniBatch, its seeds as given (on the host:
    labels are read with them), the event recorded after the last stage's work
    on that stage's stream (None off CUDA), and the feature gather whose id
    check is due at hand-out (None for a CPU source, which checks at once)."""

    mb: MiniBatch
    seeds: torch.Tensor
    ready: object = None
    pending: object = None


def _tensors(mb: MiniBatch):
    """Every tensor a MiniBatch holds when it is handed out."""
    yield from (t for t in (mb.seeds, mb.input_nodes, mb.x, mb.y) if t is not None)
    for block in mb.blocks:
        yield from (block.indptr, block.indices, *block.cache.values())


class _BufferPool:
    """Reusable host buffers for gathered rows. A buffer is handed out again
    only when no tensor refers to its memory any more (its storage use count
    is back to the pool's own reference), so rows the caller or autograd
    still hold are never overwritten. A fresh allocation of a batch's rows
    (tens of MB) page-faults on first touch and costs more than the gather
    itself (benchmarks/README.md, "Measurements behind design choices").
    """

    def __init__(self, dim: int, dtype: torch.dtype, capacity: int):
        self.dim, self.dtype, self.capacity = dim, dtype, capacity
        self.buffers = []
        self.lock = threading.Lock()

    @staticmethod
    def _uses(t: torch.Tensor) -> int:
        return torch._C._storage_Use_Count(t.untyped_storage()._cdata)

    def take(self, rows: int) -> torch.Tensor:
        """A [rows, dim] tensor that nothing else refers to."""
        with self.lock:
            free = [i for i, (buf, idle) in enumerate(self.buffers) if self._uses(buf) == idle]
            fits = [i for i in free if self.buffers[i][0].shape[0] >= rows]
            if fits:
                return self.buffers[fits[0]][0][:rows]
            if free:  # too small: make room for a bigger one
                self.buffers.pop(free[0])
            buf = torch.empty((rows + rows // 4, self.dim), dtype=self.dtype)
            if len(self.buffers) < self.capacity:
                self.buffers.append((buf, self._uses(buf)))
            return buf[:rows]


class _Stopped(Exception):
    """Raised inside a stage when the pipeline is being shut down."""


class _Failed:
    """A stage's exception, passed downstream in place of a batch."""

    def __init__(self, stage: str, index: int, error: BaseException):
        self.stage, self.index, self.error = stage, index, error


class _Pipeline:
    """The threads and queues of one pass over the batches."""

    def __init__(self, loader: MinibatchLoader, epoch: int, batches: list):
        self.loader, self.epoch, self.batches = loader, epoch, batches
        self.stop = threading.Event()
        self.gate = threading.Condition()
        self.handed_out = 0
        workers = loader.num_workers
        self.sampled = [queue.Queue() for _ in range(workers)]
        self.ready = queue.Queue()
        self.threads = [
            threading.Thread(target=self._sample_loop, args=(w,), daemon=True, name=f"gnnsys-sample-{w}")
            for w in range(workers)
        ]
        self.threads.append(threading.Thread(target=self._gather_loop, daemon=True, name="gnnsys-gather"))

    def run(self):
        """Generator of the batches in order; joins the threads when it ends or is closed."""
        for t in self.threads:
            t.start()
        try:
            for _ in range(len(self.batches)):
                began = time.perf_counter()
                item = self._get(self.ready)
                wait = time.perf_counter() - began
                with self.gate:
                    self.handed_out += 1
                    self.gate.notify_all()
                if isinstance(item, _Failed):
                    _reraise(item)
                mb = self.loader._hand_out(item)
                mb.timings["wait_s"] = wait
                yield mb
        finally:
            self.close()

    def close(self, timeout: float = 5.0):
        """Stop every stage and join its thread."""
        self.stop.set()
        with self.gate:
            self.gate.notify_all()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            if t.is_alive() and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    def _get(self, q: queue.Queue):
        while True:
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                if self.stop.is_set():
                    raise _Stopped from None

    def _sample_loop(self, worker: int):
        step = self.loader.num_workers
        for index in range(worker, len(self.batches), step):
            with self.gate:
                while (
                    index >= self.handed_out + self.loader.prefetch + self.loader.lookahead and not self.stop.is_set()
                ):
                    self.gate.wait(_POLL_S)
            if self.stop.is_set():
                return
            try:
                item = self.loader._sample(self.epoch, index, self.batches[index], worker)
            except BaseException as e:  # noqa: BLE001 -- re-raised in the consumer
                self.sampled[worker].put(_Failed("sample", index, e))
                return
            self.sampled[worker].put(item)

    def _sampled(self):
        """The sampled items in batch order, from the workers' queues."""
        step = self.loader.num_workers
        for index in range(len(self.batches)):
            yield self._get(self.sampled[index % step])

    def _gather_loop(self):
        try:
            for index, (item, window) in enumerate(self.loader._windowed(self._sampled())):
                if not isinstance(item, _Failed):
                    try:
                        item = self.loader._gather(item, window)
                    except BaseException as e:  # noqa: BLE001 -- re-raised in the consumer
                        item = _Failed("gather", index, e)
                self.ready.put(item)
                if isinstance(item, _Failed):
                    return
        except _Stopped:
            return


def _reraise(failure: _Failed):
    """Raise a stage's exception in the consumer, keeping its traceback."""
    error = failure.error
    if hasattr(error, "add_note"):
        error.add_note(f"(in MinibatchLoader's {failure.stage} stage, batch {failure.index})")
    raise error.with_traceback(error.__traceback__)
