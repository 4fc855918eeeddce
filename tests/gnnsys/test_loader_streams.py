"""The loader's CUDA stream ordering, run on the CPU with stand-in streams and events.

`RecordingStreams` (tests/storage/fakes.py) logs every stream and event call
with its thread; a feature source that defers its id check (as TableFeatures
does on a GPU) and a sampler that logs the stream it runs on complete the
picture. Checked: each stage queues its work on its own stream, the next
stage and the consumer wait on events (never the host), tensors are recorded
on the streams that use them, the id check runs at hand-out, and nothing on
the sampling or gather path synchronises.
"""

import threading

import pytest
import torch

from gnnsys.loading.loader import MinibatchLoader, _tensors
from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions
from gnnsys.samplers.neighbor import NeighborSampler
from gnnsys.storage import RowTable
from gnnsys.storage.source import CacheTier
from tests.storage.fakes import RecordingStreams, pretend_cuda


class LoggingSampler:
    """NeighborSampler, logging the stream current when it samples; its
    MiniBatches move to `device`."""

    def __init__(self, dataset, streams, device="cpu"):
        self.inner = NeighborSampler(dataset.indptr, dataset.indices, [3, 2], seed=0)
        self.streams, self.device = streams, torch.device(device)

    def sample(self, seeds, epoch=0, batch=0):
        self.streams.log.append(("sample", batch, self.streams.current(None).name, threading.current_thread().name))
        return self.inner.sample(seeds, epoch, batch).to(self.device)


class DeferredHandle:
    """A launched gather whose id check is due later (like PendingGather)."""

    def __init__(self, rows, bad, log, batch):
        self.rows, self.bad, self.log, self.batch = rows, bad, log, batch

    def wait(self):
        return self.rows

    def check(self):
        self.log.append(("check", self.batch, threading.current_thread().name))
        if self.bad is not None:
            raise IndexError(f"ids: id {self.bad} out of range")
        return self.rows


class DeferredSource:
    """A FeatureSource off the CPU (so the loader takes its asynchronous path)
    whose gathers log the current stream and defer the id check, which fails
    for the gather numbered `bad_batch`. Rows of ids on the CPU are exact;
    of ids on 'meta', 'meta' tensors."""

    def __init__(self, x, streams, bad_batch=None):
        self.rows, self.streams, self.bad_batch = RowTable.from_tensor(x), streams, bad_batch
        self.shape, self.dtype = self.rows.shape, self.rows.dtype
        self.device = torch.device("meta")  # not the CPU: gathers are asynchronous
        self.count = 0

    def gather_async(self, ids, out=None):
        batch, self.count = self.count, self.count + 1
        self.streams.log.append(("gather", batch, self.streams.current(None).name, threading.current_thread().name))
        rows = torch.empty((ids.shape[0], self.shape[1]), device="meta") if ids.is_meta else self.rows.gather(ids)
        return DeferredHandle(rows, 0 if batch == self.bad_batch else None, self.streams.log, batch)


def entries(log, kind):
    return [e for e in log if e[0] == kind]


@pytest.mark.parametrize("prefetch,workers", [(0, 1), (2, 1), (3, 2)])
def test_stages_order_through_events_and_never_synchronise(make_dataset, prefetch, workers):
    ds, _ = make_dataset(num_nodes=80, num_edges=600, dim=5)
    streams = RecordingStreams()
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(sampler=LoggingSampler(ds, streams)),
        BatchOptions(batch_size=8),
        PipelineOptions(prefetch=prefetch, sampling_threads=workers, streams=streams),
        features=DeferredSource(torch.randn(80, 5), streams),
    )
    consumer = threading.current_thread().name
    sample_streams = [s.name for s in loader._sample_streams]
    gather = loader._gather_stream.name
    batches = []
    for k, mb in enumerate(loader):
        streams.log.append(("consume", k, {id(t) for t in _tensors(mb)}))
        batches.append(mb)
    log, n = streams.log, len(loader)
    assert n >= 4 and entries(log, "synchronize") == []  # no host waits anywhere
    # each stage ran on its own stream
    assert [e[2] for e in entries(log, "sample")] == [sample_streams[e[1] % workers] for e in entries(log, "sample")]
    assert {e[2] for e in entries(log, "gather")} == {gather}
    # the gather stream waits on batch k's sampling event, recorded on its worker's stream after sampling
    recorded = {e[1]: e for e in entries(log, "record")}
    sampled = {e[1]: e for e in entries(log, "sample")}  # workers may log out of batch order
    gather_waits = [e for e in entries(log, "wait_event") if e[1] == gather]
    for k, wait in enumerate(gather_waits):
        assert recorded[wait[2]][2] == sample_streams[k % workers]
        assert log.index(recorded[wait[2]]) > log.index(sampled[k])
    # the consumer's stream waits on batch k's gather event, then records every tensor, then checks ids
    consumer_stream = f"default@{consumer}"
    handed = [e for e in entries(log, "wait_event") if e[1] == consumer_stream]
    assert len(handed) == len(gather_waits) == n
    for k, wait in enumerate(handed):
        assert recorded[wait[2]][2] == gather and log.index(recorded[wait[2]]) > log.index(entries(log, "gather")[k])
        consume = log.index(next(e for e in log if e[0] == "consume" and e[1] == k))
        window = log[log.index(wait) : consume]
        assert {e[1] for e in window if e[0] == "record_stream" and e[2] == consumer_stream} >= log[consume][2]
        assert ("check", k, consumer) in window
    assert all(e[3] == consumer for e in entries(log, "wait_event") if e[1] == consumer_stream)


def test_a_bad_id_raises_when_its_batch_is_handed_out(make_dataset):
    ds, _ = make_dataset(num_nodes=80, num_edges=600, dim=5)
    streams = RecordingStreams()
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[3, 2]),
        BatchOptions(batch_size=8),
        PipelineOptions(prefetch=2, streams=streams),
        features=DeferredSource(torch.randn(80, 5), streams, bad_batch=2),
    )
    seen = []
    with pytest.raises(IndexError, match="out of range") as e:
        for mb in loader:
            seen.append(mb)
    assert len(seen) == 2  # batches 0 and 1 came out; batch 2 holds the bad id
    assert ("check", 2, threading.current_thread().name) in streams.log  # checked by the consumer
    assert not getattr(e.value, "__notes__", None)  # not a failure of the gather stage


def test_labels_follow_the_batch_to_the_device(make_dataset, monkeypatch):
    """'meta' stands in for a GPU: sampler and features already deliver there, the labels do not."""
    import gnnsys.loading.loader

    monkeypatch.setattr(gnnsys.loading.loader, "normalize_device", torch.device)
    ds, arrays = make_dataset(num_nodes=80, num_edges=600, dim=5)
    streams = RecordingStreams()  # only the stand-in sampler and source log to it
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(sampler=LoggingSampler(ds, streams, "meta")),
        BatchOptions(batch_size=16),
        PipelineOptions(prefetch=0),
        device="meta",
        features=DeferredSource(torch.randn(80, 5), streams),
    )
    mb = next(iter(loader))
    assert {t.device.type for t in _tensors(mb)} == {"meta"}


def test_device_cuda_means_the_current_gpu(make_dataset, monkeypatch):
    pretend_cuda(monkeypatch)
    ds, _ = make_dataset(num_nodes=40, dim=3)
    loader = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=[2]), pipeline=PipelineOptions(streams=RecordingStreams()), device="cuda"
    )
    assert loader.device == torch.device("cuda:0")  # what every tensor on "cuda" reports


class WindowedSource(DeferredSource, CacheTier):
    """A DeferredSource that is a cache tier (so the loader may pass it a
    lookahead window) and logs each window: the ids of its tensors and their values."""

    def set_window(self, batches):
        self.streams.log.append(("set_window", [id(b) for b in batches], [b.tolist() for b in batches]))


@pytest.mark.parametrize("prefetch,workers", [(0, 1), (2, 2)])
def test_window_ids_are_copied_once_and_read_after_their_sampling(make_dataset, prefetch, workers):
    """With lookahead K, each batch's input ids are copied to the host once, on
    its sampling stream before its sampling event; set_window reads a batch's
    copy only after the host waited on that event (not K copies, none unordered)."""
    ds, _ = make_dataset(num_nodes=80, num_edges=600, dim=5)
    streams = RecordingStreams()
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(sampler=LoggingSampler(ds, streams)),
        BatchOptions(batch_size=8),
        PipelineOptions(prefetch=prefetch, sampling_threads=workers, lookahead=2, streams=streams),
        features=WindowedSource(torch.randn(80, 5), streams),
    )
    sample_streams = [s.name for s in loader._sample_streams]
    inputs = [mb.input_nodes.tolist() for mb in loader]
    log, n = streams.log, len(loader)
    copies = entries(log, "to_host")
    assert len(copies) == n  # one copy per batch, not one per window it appears in
    copy_of = {}  # id of a host copy -> (batch, its sampling event)
    for copy in copies:
        after = log[log.index(copy) :]
        record = next(e for e in after if e[0] == "record" and e[2] == copy[2])  # the sampling event, same stream
        batch = next(e[1] for e in reversed(log[: log.index(copy)]) if e[0] == "sample" and e[3] == copy[3])
        assert copy[2] == sample_streams[batch % workers]
        copy_of[copy[1]] = (batch, record[1])
    windows = entries(log, "set_window")
    assert len(windows) == n
    for j, window in enumerate(windows):
        assert window[2] == inputs[j + 1 : j + 3]
        before = log[: log.index(window)]
        for copy_id in window[1]:
            batch, event = copy_of[copy_id]
            assert ("synchronize", event) in [e[:2] for e in before]  # the host waited for that batch's sampling
