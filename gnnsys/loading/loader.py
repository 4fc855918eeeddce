"""`MinibatchLoader`: sampled minibatches with features and labels, prepared
ahead of the training loop by background threads (SALIENT/GraphBolt-style).

Stages: `sampling_threads` sampling threads (batch i goes to worker i % sampling_threads)
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
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from gnnsys._capabilities import normalize_device
from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.loading.minibatch_arrays import minibatch_from_arrays
from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions
from gnnsys.loading.pipeline import Failed, Pipeline
from gnnsys.loading.row_buffers import FeatureRows
from gnnsys.samplers.block import MiniBatch
from gnnsys.samplers.factory import make_sampler
from gnnsys.samplers.hetero import HeteroNeighborSampler
from gnnsys.samplers.seeds import SeedBatches
from gnnsys.storage.cuda_stream import CudaStreams
from gnnsys.storage.source import GatherHandle
from gnnsys.storage.store import HOMOGENEOUS


class MinibatchLoader:
    """Iterate over the minibatches of one split of `dataset`, one epoch per pass.

    Each MiniBatch has `x` (the features of its input nodes in `x_dtype`;
    bf16-mixed training passes bfloat16 for bf16-stored rows, which then
    arrive without a conversion copy), `y` (labels of its seeds), both on
    `device` like every other tensor of the batch, and `timings`
    {"sample_s", "gather_s", "wait_s"} (plus "transfer_s" off the CPU; on a
    GPU these are host times, the device work runs behind them in stream
    order). `set_epoch(e)` picks the shuffle and the sampling stream of epoch
    e, both functions of (seed, e) only. An error in a stage re-raises in the
    loop with its original traceback; leaving the loop early (break, an
    exception, closing or dropping the iterator) stops the threads. With
    lookahead K > 0, before batch j's gather each feature source's
    `set_window` gets its input ids of the sampled batches j+1..j+K (nearest
    first; fewer at the end of an epoch), which a cache uses for eviction,
    its victim buffer and its lookahead fill (so every source then needs a cache).

    Args:
        dataset: a gnnsys.datasets Dataset or HeteroDataset.
        split: "train", "valid", "test" or a tensor of node ids (a
            HeteroDataset's target nodes).
        sampling: a SamplingOptions (fanouts, sampler kind or object,
            method). A HeteroDataset is sampled per relation by the "cpu"
            sampler (HeteroNeighborSampler), its fanouts per layer an int or
            a {relation: count} dict.
        batches: a BatchOptions (batch size, shuffle, seed, the rank's share).
        pipeline: a PipelineOptions (prefetch, sampling threads, lookahead, stream API).
        features: where rows come from: a FeatureSource (a placed or cached
            stack, gnnsys.storage), or {key: FeatureSource} (a FeatureStore)
            keyed as the batches' input nodes are (a HeteroDataset's node
            types: `x` is then {node type: rows} for the types given);
            default the dataset's own table(s).
        device: where batches arrive (normalised: "cuda" is "cuda:<current>").
        x_dtype: the dtype of `x`, one for all, or {key: dtype}.
    """

    def __init__(
        self,
        dataset,
        split,
        sampling: SamplingOptions,
        batches: BatchOptions | None = None,
        pipeline: PipelineOptions | None = None,
        *,
        features=None,
        device="cpu",
        x_dtype: torch.dtype | dict = torch.float32,
    ):
        batches = batches or BatchOptions()
        pipeline = pipeline or PipelineOptions()
        ids = dataset.split(split) if isinstance(split, str) else torch.as_tensor(split)
        self.dataset = dataset
        self.seeds = seed_batches(ids, batches)
        self.device = normalize_device(device)
        self.sampler = _sampler(sampling, dataset, self.device, batches.seed)
        self.features = dataset.features if features is None else features
        self.prefetch, self.lookahead, self.sampling_threads, self.nice = (
            pipeline.prefetch,
            pipeline.lookahead,
            pipeline.sampling_threads,
            pipeline.nice,
        )
        self.x_dtype = x_dtype
        self._rows = self._row_buffers()  # {key: FeatureRows}
        self._homogeneous = list(self._rows) == [HOMOGENEOUS]
        self.set_epoch(0)
        streams = pipeline.streams
        # streams and events are duck-typed (CudaStreams, or a stand-in with its methods); None off CUDA
        self._streams: Any = streams if streams is not None else (CudaStreams() if self.device.type == "cuda" else None)
        self._sample_streams: list[Any] = [None] * self.sampling_threads
        self._gather_stream: Any = None
        if self._streams is not None:
            self._sample_streams = [self._streams.new_stream(self.device) for _ in range(self.sampling_threads)]
            self._gather_stream = self._streams.new_stream(self.device)

    def __len__(self) -> int:
        return len(self.seeds)

    def _row_buffers(self) -> dict:
        """{key: the rows of its source with their buffers}; ValueError for a
        lookahead without a cache, or a node type the dataset does not have."""
        sources = _keyed(self.features)
        if isinstance(self.dataset, HeteroDataset):
            unknown = sorted(set(sources) - set(self.dataset.node_types))
            if unknown:
                types = ", ".join(self.dataset.node_types)
                raise ValueError(f"features for unknown node types {unknown}; types: {types}")
        dtypes = self.x_dtype if isinstance(self.x_dtype, dict) else dict.fromkeys(sources, self.x_dtype)
        return {k: FeatureRows(source, dtypes[k], self.prefetch + 3, self.lookahead) for k, source in sources.items()}

    def _window_ids(self, mb) -> dict:
        """What the window holds of sampled batch `mb`: each key's input ids, copied to the host."""
        inputs = _keyed(mb.input_nodes)
        return {k: self._to_host(inputs[k]) for k in self._rows}

    def _set_window(self, window: list):
        """Hand each key's feature source its ids of the window (`_window_ids` of the batches sampled ahead)."""
        for k, rows in self._rows.items():
            rows.source.set_window([ids[k] for ids in window])

    def _gather_rows(self, mb, stream) -> list:
        """mb.x: the rows of its input nodes (keyed as they are); returns the
        gathers whose id check is due at hand-out."""
        inputs, x, pending = _keyed(mb.input_nodes), {}, []
        for k, rows in self._rows.items():
            x[k], gathering = self._gather_from(rows, inputs[k], stream)
            pending.append(gathering)
        mb.x = x if isinstance(mb.input_nodes, dict) else x[HOMOGENEOUS]
        return pending

    def _gather_from(self, rows: FeatureRows, ids: torch.Tensor, stream):
        """(rows `ids` of rows.source in x_dtype, the GatherHandle whose id check is due
        at hand-out: a CPU source checks at once, so its handle is complete), queued on `stream`."""
        source = rows.source
        ids = ids if source.device.type != "cpu" else ids.cpu()
        if stream is not None:
            self._streams.record_stream(ids, stream)  # made on the sampling stream, read here
        if source.device.type != "cpu":
            pending = source.gather_async(ids)
            return pending.wait().to(rows.x.dtype), pending
        if rows.raw is None:
            x = source.gather(ids, out=rows.x.take(ids.shape[0]))
        else:
            x = rows.x.take(ids.shape[0]).copy_(source.gather(ids, out=rows.raw.take(ids.shape[0])))
        return x, GatherHandle(x)

    def set_epoch(self, epoch: int):
        """Use the shuffle and sampling stream of epoch `epoch` from the next pass."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self.epoch = int(epoch)

    def __repr__(self):
        return (
            f"MinibatchLoader({self.dataset.name!r}, batches={len(self)}, sampler={self.sampler}, "
            f"prefetch={self.prefetch}, sampling_threads={self.sampling_threads}, device={self.device})"
        )

    def __iter__(self):
        batches = self.seeds.epoch(self.epoch)
        if self.prefetch == 0:
            sampled = (self._sample(self.epoch, i, b) for i, b in enumerate(batches))
            return (self._hand_out(self._gather(item, window)) for item, window in self._windowed(sampled))
        return Pipeline(self, self.epoch, batches).run()

    def _windowed(self, items):
        """(item, window) for each sampled item in order: the window is the
        next `lookahead` items (up to the first failed one)."""
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
            mb = self._presampled(seeds, epoch, index) if stream is None else None
            mb = self.sampler.sample(seeds, epoch, index) if mb is None else mb
            host_ids = self._window_ids(mb) if self.lookahead else None
            ready = self._event_after(stream)
        mb.timings.update(sample_s=time.perf_counter() - began, wait_s=0.0)
        return _InFlight(mb, seeds, ready, sampled=ready, host_ids=host_ids)

    def _presampled(self, seeds: torch.Tensor, epoch: int, index: int) -> MiniBatch | None:
        """Batch `index` as the feature tier that packed it ahead sampled it
        (FeatureSource.presampled), when it did; None: sample it here."""
        presampled = getattr(self._rows[HOMOGENEOUS].source, "presampled", None) if self._homogeneous else None
        arrays = None if presampled is None else presampled(seeds, epoch, index)
        return None if arrays is None else minibatch_from_arrays(arrays)

    def _to_host(self, ids: torch.Tensor) -> torch.Tensor:
        """`ids` on the host for the lookahead window: one copy per batch, queued
        on the current stream (complete once the batch's sampling event is)."""
        return ids.cpu() if self._streams is None else self._streams.to_host(ids)

    @staticmethod
    def _host_ids(item: _InFlight):
        """The input ids of the sampled `item` on the host, once the host has
        waited for its sampling event (the sampling and the copy behind it)."""
        if item.sampled is not None:
            item.sampled.synchronize()
        assert item.host_ids is not None  # copied at sampling whenever there is a window
        return item.host_ids

    def _gather(self, item: _InFlight, window=()) -> _InFlight:
        """Stage 2: features (x_dtype) and labels, and the whole batch on the
        device, queued on the gather stream after the sampling; no host wait
        (except for the sampling of the window's batches, whose ids the
        feature source reads on the host)."""
        began = time.perf_counter()
        stream, mb = self._gather_stream, item.mb
        if self.lookahead:
            self._set_window([self._host_ids(ahead) for ahead in window])
        with self._on(stream):
            if item.ready is not None:
                stream.wait_event(item.ready)
            item.pending = self._gather_rows(mb, stream)
            mb.y = self.dataset.labels[item.seeds]
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
            for t in item.mb.tensors():
                self._streams.record_stream(t, current)
        for pending in item.pending:
            pending.check()
        return item.mb


def seed_batches(ids, batches: BatchOptions) -> SeedBatches:
    """The SeedBatches of `ids` that `batches` (a BatchOptions) describes."""
    return SeedBatches(
        ids,
        batches.batch_size,
        shuffle=batches.shuffle,
        drop_last=batches.drop_last,
        seed=batches.seed,
        rank=batches.rank,
        world_size=batches.world_size,
    )


def _window(ahead) -> list:
    """The sampled items in `ahead`, up to the first failed one."""
    window = []
    for item in ahead:
        if isinstance(item, Failed):
            break
        window.append(item)
    return window


def _keyed(value) -> Mapping:
    """A homogeneous graph's one value as {HOMOGENEOUS: value}; a dict as it is."""
    return value if isinstance(value, Mapping) else {HOMOGENEOUS: value}


def _sampler(sampling: SamplingOptions, dataset, device, seed: int):
    """The loader's sampler: the options' Sampler object, or the kind they name built over the dataset's graph."""
    if not isinstance(sampling.sampler, str):
        return sampling.sampler
    assert sampling.fanouts is not None  # SamplingOptions requires them for a named sampler
    if isinstance(dataset, HeteroDataset):
        if sampling.sampler != "cpu":
            raise ValueError(
                f"sampler {sampling.sampler!r}: a heterogeneous graph is sampled by the CPU sampler ('cpu')"
            )
        return HeteroNeighborSampler.from_dataset(
            dataset, list(sampling.fanouts), seed=seed, method=sampling.method, replace=sampling.replace
        )
    return make_sampler(
        sampling.sampler,
        dataset.indptr,
        dataset.indices,
        list(sampling.fanouts),
        device=device,
        seed=seed,
        replace=sampling.replace,
        sampling=sampling.method,
    )


@dataclass
class _InFlight:
    """A batch between stages: its MiniBatch, its seeds as given (on the host:
    labels are read with them), the event recorded after the last stage's work
    on that stage's stream (None off CUDA), the feature gathers whose id
    check is due at hand-out (None for a CPU source, which checks at once),
    and with a lookahead window the sampling's event and the input ids'
    copy on the host queued before it."""

    mb: Any  # a MiniBatch or a HeteroMiniBatch
    seeds: torch.Tensor
    ready: Any = None
    pending: list = field(default_factory=list)
    sampled: Any = None
    host_ids: Any = None


def _tensors(mb) -> list:
    """Every tensor a minibatch holds when it is handed out (its `tensors()`)."""
    return list(mb.tensors())
