"""`MinibatchLoader`: sampled minibatches with features and labels, prepared
ahead of the training loop by background threads (SALIENT/GraphBolt-style).

Stages: `num_workers` sampling threads (batch i goes to worker i % num_workers)
-> one gather thread (features of input_nodes as float32, labels of seeds,
move to `device`) -> the consumer. Batch i may start only once batch
i - prefetch has been handed out, so at most `prefetch` batches are in flight
and memory stays bounded; batches come out in order, identical to a
synchronous run (`prefetch=0`) because every draw is a function of (seed,
epoch, batch). The numba kernels release the GIL, so the stages overlap.
"""
from __future__ import annotations

import queue
import threading
import time

import torch

from gnnsys.samplers.factory import make_sampler
from gnnsys.samplers.seeds import SeedBatches

_POLL_S = 0.05  # how often a blocked stage looks at the stop event


class MinibatchLoader:
    """Iterate over the minibatches of one split of `dataset`, one epoch per pass.

    dataset: a gnnsys.datasets.Dataset; split: "train", "valid", "test" or a
    tensor of node ids; fanouts: per layer, output layer first (PyG order), -1
    for all neighbours. Each MiniBatch has `x` (float32 features of
    input_nodes), `y` (labels of seeds), both on `device`, and `timings`
    {"sample_s", "gather_s", "wait_s"} (plus "transfer_s" off the CPU).
    `prefetch` batches are prepared ahead (0: everything runs in the caller's
    thread). `set_epoch(e)` picks the shuffle and the sampling stream of epoch
    e, both functions of (seed, e) only. An error in a stage re-raises in the
    loop with its original traceback; leaving the loop early (break, an
    exception, closing or dropping the iterator) stops the threads.
    `sampler`: a Sampler object (gnnsys.samplers.Sampler; `fanouts` and
    `replace` are then its own and must be left out; `seed` still seeds the
    shuffle) or the name of a kind that make_sampler builds ("cpu", "gpu",
    "gpu-pinned"). `features`: the FeatureSource rows come from (for example a
    placed or cached stack, gnnsys.storage); default the dataset's own table.
    """

    def __init__(self, dataset, split, fanouts=None, batch_size: int = 1024, shuffle: bool = True,
                 drop_last: bool = False, seed: int = 0, replace: bool = False, prefetch: int = 4,
                 num_workers: int = 1, device="cpu", epoch: int = 0, sampler="cpu", features=None):
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        ids = dataset.split(split) if isinstance(split, str) else torch.as_tensor(split)
        self.dataset = dataset
        self.seeds = SeedBatches(ids, batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed)
        self.device = torch.device(device)
        self.sampler = _sampler(sampler, dataset, fanouts, self.device, seed, replace)
        self.features = dataset.features if features is None else features
        self.prefetch = int(prefetch)
        self.num_workers = int(num_workers)
        self.set_epoch(epoch)
        source = self.features
        self._x_buffers = _BufferPool(source.shape[1], torch.float32, capacity=self.prefetch + 3)
        self._raw_buffers = (None if source.dtype == torch.float32 else
                             _BufferPool(source.shape[1], source.dtype, capacity=2))

    def __len__(self) -> int:
        return len(self.seeds)

    def set_epoch(self, epoch: int):
        """Use the shuffle and sampling stream of epoch `epoch` from the next pass."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self.epoch = int(epoch)

    def __repr__(self):
        return (f"MinibatchLoader({self.dataset.name!r}, batches={len(self)}, sampler={self.sampler}, "
                f"prefetch={self.prefetch}, num_workers={self.num_workers}, device={self.device})")

    def __iter__(self):
        batches = self.seeds.epoch(self.epoch)
        if self.prefetch == 0:
            return (self._gather(self._sample(self.epoch, i, b)) for i, b in enumerate(batches))
        return _Pipeline(self, self.epoch, batches).run()

    def _sample(self, epoch: int, index: int, seeds: torch.Tensor):
        """Stage 1: the sampled MiniBatch of batch `index`."""
        began = time.perf_counter()
        mb = self.sampler.sample(seeds, epoch, index)
        mb.timings.update(sample_s=time.perf_counter() - began, wait_s=0.0)
        return mb

    def _gather(self, mb):
        """Stage 2: features (float32) and labels, moved to the device."""
        began = time.perf_counter()
        source = self.features
        ids = mb.input_nodes.to(source.device)
        if source.device.type != "cpu":
            x = source.gather(ids).float()
        elif self._raw_buffers is None:
            x = source.gather(ids, out=self._x_buffers.take(ids.shape[0]))
        else:
            raw = source.gather(ids, out=self._raw_buffers.take(ids.shape[0]))
            x = self._x_buffers.take(ids.shape[0]).copy_(raw)
        mb.x = x
        mb.y = self.dataset.labels[mb.seeds.to(self.dataset.labels.device)]
        mb.timings["gather_s"] = time.perf_counter() - began
        if mb.x.device != self.device or mb.blocks[0].indptr.device != self.device:
            began = time.perf_counter()
            timings = mb.timings
            mb = mb.to(self.device)
            if self.device.type == "cuda":
                torch.cuda.current_stream(self.device).synchronize()
            timings["transfer_s"] = time.perf_counter() - began
            mb.timings = timings
        return mb


def _sampler(sampler, dataset, fanouts, device, seed, replace):
    """The loader's sampler: `sampler` itself, or the kind it names built over the dataset's graph."""
    if not isinstance(sampler, str):
        if fanouts is not None or replace:
            raise ValueError("fanouts and replace belong to the sampler object; leave them out")
        return sampler
    if fanouts is None:
        raise ValueError(f"sampler {sampler!r} needs fanouts")
    return make_sampler(sampler, dataset.indptr, dataset.indices, fanouts, device=device, seed=seed,
                        replace=replace)


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
        self.threads = [threading.Thread(target=self._sample_loop, args=(w,), daemon=True,
                                         name=f"gnnsys-sample-{w}") for w in range(workers)]
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
                item.timings["wait_s"] = wait
                yield item
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
                while index >= self.handed_out + self.loader.prefetch and not self.stop.is_set():
                    self.gate.wait(_POLL_S)
            if self.stop.is_set():
                return
            try:
                item = self.loader._sample(self.epoch, index, self.batches[index])
            except BaseException as e:  # noqa: BLE001 -- re-raised in the consumer
                self.sampled[worker].put(_Failed("sample", index, e))
                return
            self.sampled[worker].put(item)

    def _gather_loop(self):
        step = self.loader.num_workers
        for index in range(len(self.batches)):
            try:
                item = self._get(self.sampled[index % step])
            except _Stopped:
                return
            if not isinstance(item, _Failed):
                try:
                    item = self.loader._gather(item)
                except BaseException as e:  # noqa: BLE001 -- re-raised in the consumer
                    item = _Failed("gather", index, e)
            self.ready.put(item)
            if isinstance(item, _Failed):
                return


def _reraise(failure: _Failed):
    """Raise a stage's exception in the consumer, keeping its traceback."""
    error = failure.error
    if hasattr(error, "add_note"):
        error.add_note(f"(in MinibatchLoader's {failure.stage} stage, batch {failure.index})")
    raise error.with_traceback(error.__traceback__)
