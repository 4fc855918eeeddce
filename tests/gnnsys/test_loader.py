"""MinibatchLoader: contents, determinism vs a synchronous run, prefetch bound,
error propagation, prompt shutdown."""

import os
import sys
import threading
import time
import traceback

import pytest
import torch

from gnnsys.datasets import PrepareOptions
from gnnsys.loading.loader import MinibatchLoader
from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions
from gnnsys.storage.source import CacheTier


def live_stage_threads():
    return [t for t in threading.enumerate() if t.name.startswith("gnnsys-") and t.is_alive()]


def wait_until(condition, timeout=2.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


class CountingSampler:
    """Wraps a sampler: counts calls and can fail at one batch."""

    def __init__(self, inner, fail_at=None):
        self.inner, self.fail_at, self.calls = inner, fail_at, 0

    def sample(self, seeds, epoch, batch):
        self.calls += 1
        if batch == self.fail_at:
            raise ZeroDivisionError(f"boom at batch {batch}")
        return self.inner.sample(seeds, epoch, batch)


def same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x.seeds, y.seeds) and torch.equal(x.input_nodes, y.input_nodes)
        assert torch.equal(x.x, y.x) and torch.equal(x.y, y.y)
        for p, q in zip(x.blocks, y.blocks):
            assert torch.equal(p.indptr, q.indptr) and torch.equal(p.indices, q.indices)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_batches_carry_features_labels_and_timings(make_dataset, dtype):
    ds, _ = make_dataset(num_nodes=80, num_edges=600, options=PrepareOptions(dtype=dtype, progress=False))
    loader = MinibatchLoader(ds, "train", SamplingOptions(fanouts=[4, 3]), BatchOptions(batch_size=16))
    batches = list(loader)
    assert len(batches) == len(loader) == -(-ds.split("train").numel() // 16)
    assert torch.equal(torch.cat([mb.seeds for mb in batches]).sort().values, ds.split("train").sort().values)
    for mb in batches:
        assert mb.x.dtype == torch.float32 and mb.x.shape == (mb.input_nodes.numel(), ds.num_features)
        assert torch.equal(mb.x, ds.features[mb.input_nodes].float())
        assert torch.equal(mb.y, ds.labels[mb.seeds])
        assert {"sample_s", "gather_s", "wait_s"} <= set(mb.timings)
        assert mb.blocks[0].num_src == mb.input_nodes.numel() and mb.blocks[-1].num_dst == mb.seeds.numel()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_feature_buffers_are_reused_only_when_released(make_dataset, dtype):
    ds, _ = make_dataset(num_nodes=200, num_edges=1500, options=PrepareOptions(dtype=dtype, progress=False))
    loader = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=[4, 4]), BatchOptions(batch_size=8), PipelineOptions(prefetch=2)
    )
    held = list(loader)  # every batch kept: no buffer may be shared
    assert len({mb.x.data_ptr() for mb in held}) == len(held)
    assert all(torch.equal(mb.x, ds.features[mb.input_nodes].float()) for mb in held)
    del held
    pointers = set()
    for mb in loader:  # each batch dropped before the next few: a handful of buffers cycle
        pointers.add(mb.x.data_ptr())
        assert torch.equal(mb.x, ds.features[mb.input_nodes].float())
    assert len(pointers) < len(loader)


def test_split_as_ids_and_drop_last(make_dataset):
    ds, _ = make_dataset(num_nodes=50, num_edges=300)
    loader = MinibatchLoader(
        ds,
        torch.arange(0, 50, 2),
        SamplingOptions(fanouts=[2]),
        BatchOptions(batch_size=10, drop_last=True, shuffle=False),
    )
    assert len(loader) == 2
    assert [mb.seeds.tolist() for mb in loader] == [list(range(0, 20, 2)), list(range(20, 40, 2))]


@pytest.mark.parametrize("prefetch, sampling_threads", [(1, 1), (3, 2), (8, 2)])
def test_pipelined_equals_synchronous(make_dataset, prefetch, sampling_threads):
    ds, _ = make_dataset(num_nodes=120, num_edges=1500)

    def make(**pipeline):
        loader = MinibatchLoader(
            ds,
            "train",
            SamplingOptions(fanouts=[5, 3]),
            BatchOptions(batch_size=8, seed=4),
            PipelineOptions(**pipeline),
        )
        loader.set_epoch(2)
        return loader

    same_batches(list(make(prefetch=0)), list(make(prefetch=prefetch, sampling_threads=sampling_threads)))


def test_set_epoch_changes_shuffle_and_samples_reproducibly(make_dataset):
    ds, _ = make_dataset(num_nodes=120, num_edges=1500)
    loader = MinibatchLoader(ds, "train", SamplingOptions(fanouts=[5, 3]), BatchOptions(batch_size=8))
    first = list(loader)
    loader.set_epoch(1)
    second = list(loader)
    assert not torch.equal(first[0].seeds, second[0].seeds)
    loader.set_epoch(0)
    same_batches(first, list(loader))


def test_prefetch_bounds_batches_in_flight(make_dataset):
    ds, _ = make_dataset(num_nodes=200, num_edges=1500)
    prefetch = 2
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[3]),
        BatchOptions(batch_size=10),
        PipelineOptions(prefetch=prefetch, sampling_threads=2),
    )
    loader.sampler = counter = CountingSampler(loader.sampler)
    n = len(loader)
    for i, _ in enumerate(loader):
        handed_out = i + 1
        # the stages run ahead up to the bound, and no further
        assert wait_until(lambda: counter.calls >= min(n, handed_out + prefetch))
        time.sleep(0.05)
        assert counter.calls <= handed_out + prefetch
    assert counter.calls == n


@pytest.mark.parametrize("stage", ["sample", "gather"])
def test_stage_error_reraises_with_its_traceback(make_dataset, monkeypatch, stage):
    ds, _ = make_dataset(num_nodes=120, num_edges=800)
    loader = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=[3]), BatchOptions(batch_size=8), PipelineOptions(prefetch=2)
    )
    if stage == "sample":
        loader.sampler = CountingSampler(loader.sampler, fail_at=2)
    else:
        real = loader._gather

        def failing_gather(mb, *window):
            if failing_gather.count == 2:
                raise ZeroDivisionError("boom at batch 2")
            failing_gather.count += 1
            return real(mb, *window)

        failing_gather.count = 0
        monkeypatch.setattr(loader, "_gather", failing_gather)
    got = []
    with pytest.raises(ZeroDivisionError, match="boom at batch 2") as info:
        for mb in loader:
            got.append(mb)
    assert len(got) == 2
    frames = "".join(traceback.format_tb(info.value.__traceback__))
    assert ("in sample" if stage == "sample" else "in failing_gather") in frames
    assert wait_until(lambda: not live_stage_threads(), 1.0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="niceness is per thread on Linux")
@pytest.mark.parametrize("nice", [0, 7, 19])
def test_stage_threads_take_the_pipelines_niceness_and_the_consumer_keeps_its_own(make_dataset, monkeypatch, nice):
    ds, _ = make_dataset(num_nodes=120, num_edges=800)
    loader = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=[3]), BatchOptions(batch_size=8), PipelineOptions(prefetch=2, nice=nice)
    )
    seen = {}

    def niceness():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def record(real):
        def stage(*args):
            seen[threading.current_thread().name] = niceness()
            return real(*args)

        return stage

    monkeypatch.setattr(loader, "_sample", record(loader._sample))
    monkeypatch.setattr(loader, "_gather", record(loader._gather))
    before = niceness()
    assert len(list(loader)) == len(loader)
    assert seen == {"gnnsys-sample-0": max(nice, before), "gnnsys-gather": max(nice, before)}
    assert niceness() == before


@pytest.mark.parametrize("leave", ["break", "close", "del", "interrupt"])
def test_leaving_early_stops_every_thread(make_dataset, leave):
    ds, _ = make_dataset(num_nodes=300, num_edges=3000)
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[5, 5]),
        BatchOptions(batch_size=4),
        PipelineOptions(prefetch=3, sampling_threads=2),
    )
    it = iter(loader)
    next(it)
    assert live_stage_threads()
    if leave == "break":
        for _ in it:
            break
        del it
    elif leave == "close":
        it.close()
    elif leave == "del":
        del it
    else:
        with pytest.raises(KeyboardInterrupt):
            for _ in it:
                raise KeyboardInterrupt
        del it
    assert wait_until(lambda: not live_stage_threads(), 1.0)


def test_an_interrupt_while_the_threads_start_stops_those_started(make_dataset, monkeypatch):
    """Ctrl-C or SIGTERM landing between two thread starts: the threads
    already started are stopped and joined, not left running at exit."""
    ds, _ = make_dataset(num_nodes=300, num_edges=3000)
    loader = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=[5, 5]), BatchOptions(batch_size=4), PipelineOptions(sampling_threads=2)
    )
    start = threading.Thread.start

    def interrupted_start(thread):
        start(thread)
        if thread.name == "gnnsys-sample-1":
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    with pytest.raises(KeyboardInterrupt):
        next(iter(loader))
    assert wait_until(lambda: not live_stage_threads(), 1.0)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: PipelineOptions(prefetch=-1), "prefetch"),
        (lambda: PipelineOptions(sampling_threads=0), "sampling_threads"),
        (lambda: PipelineOptions(lookahead=-1), "lookahead"),
        (lambda: PipelineOptions(nice=20), "nice must be in 0..19"),
        (lambda: PipelineOptions(nice=-1), "nice must be in 0..19"),
        (lambda: SamplingOptions(), "needs fanouts"),
        (lambda: SamplingOptions(sampler=object(), fanouts=[2]), "belong to the sampler object"),
    ],
)
def test_bad_loader_options(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batches=BatchOptions(batch_size=0)), "batch_size"),
        (dict(pipeline=PipelineOptions(lookahead=2)), "stack with a cache"),
        (dict(batches=BatchOptions(rank=2, world_size=2)), "rank"),
        (dict(sampling=SamplingOptions(fanouts=[2], method="poisson")), "sampling must be one of"),
    ],
)
def test_bad_loader_arguments(make_dataset, kwargs, match):
    ds, _ = make_dataset()
    kwargs.setdefault("sampling", SamplingOptions(fanouts=[2]))
    with pytest.raises(ValueError, match=match):
        MinibatchLoader(ds, "train", **kwargs)


def test_bad_epoch(make_dataset):
    ds, _ = make_dataset()
    with pytest.raises(ValueError, match="epoch"):
        MinibatchLoader(ds, "train", SamplingOptions(fanouts=[2])).set_epoch(-1)


class HalvedFeatures:
    """A FeatureSource over the dataset's table that halves every row (a stand-in tier)."""

    def __init__(self, base):
        self.base, self.shape, self.dtype, self.device = base, base.shape, base.dtype, base.device

    def gather(self, ids, out=None):
        rows = self.base.gather(ids) / 2
        return rows if out is None else out.copy_(rows)

    def gather_async(self, ids, out=None):
        raise NotImplementedError


def test_sampler_object_and_feature_source_are_used(make_dataset):
    from gnnsys.samplers import NeighborSampler

    ds, _ = make_dataset()
    sampler = CountingSampler(NeighborSampler(ds.indptr, ds.indices, [3, 2], seed=7))
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(sampler=sampler),
        BatchOptions(batch_size=8, seed=7),
        PipelineOptions(prefetch=2),
        features=HalvedFeatures(ds.features),
    )
    by_name = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=[3, 2]), BatchOptions(batch_size=8, seed=7), PipelineOptions(prefetch=0)
    )
    batches = list(loader)
    assert sampler.calls == len(batches) == len(by_name)
    for mb, ref in zip(batches, by_name):
        assert torch.equal(mb.input_nodes, ref.input_nodes)
        assert torch.equal(mb.x, ref.x / 2)


def test_sampler_object_refuses_sampling_arguments(make_dataset):
    from gnnsys.samplers import NeighborSampler

    ds, _ = make_dataset()
    with pytest.raises(ValueError, match="belong to the sampler object"):
        MinibatchLoader(
            ds, "train", SamplingOptions(fanouts=[3, 2], sampler=NeighborSampler(ds.indptr, ds.indices, [3, 2]))
        )


class WindowRecorder(HalvedFeatures, CacheTier):
    """A stand-in cache tier: records the window it is given before each gather."""

    def __init__(self, base):
        super().__init__(base)
        self.log = []

    def set_window(self, batches):
        self.log.append(("window", [b.tolist() for b in batches]))

    def gather(self, ids, out=None):
        self.log.append(("gather", ids.tolist()))
        return super().gather(ids, out)


@pytest.mark.parametrize("prefetch, sampling_threads", [(0, 1), (1, 1), (3, 2)])
@pytest.mark.parametrize("lookahead", [1, 3])
def test_lookahead_window_precedes_each_gather(make_dataset, prefetch, sampling_threads, lookahead):
    ds, _ = make_dataset(num_nodes=120, num_edges=1500)
    source = WindowRecorder(ds.features)
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[4, 2]),
        BatchOptions(batch_size=8, seed=3),
        PipelineOptions(prefetch=prefetch, sampling_threads=sampling_threads, lookahead=lookahead),
        features=source,
    )
    batches = [mb.input_nodes.tolist() for mb in loader]
    windows, gathers = source.log[0::2], source.log[1::2]
    assert [g for _, g in gathers] == batches and all(kind == "window" for kind, _ in windows)
    for j, (_, window) in enumerate(windows):  # the next `lookahead` batches, fewer at the end of the epoch
        assert window == batches[j + 1 : j + 1 + lookahead]
    reference = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=[4, 2]), BatchOptions(batch_size=8, seed=3), PipelineOptions(prefetch=0)
    )
    for mb, ref in zip(loader, reference, strict=True):  # the window changes no batch
        assert torch.equal(mb.input_nodes, ref.input_nodes) and torch.equal(mb.x, ref.x / 2)


def test_ranks_iterate_disjoint_equal_shares_of_the_epoch(make_dataset):
    ds, _ = make_dataset(num_nodes=120, num_edges=1500)

    def make(**shard):
        batches = BatchOptions(batch_size=4, seed=5, **shard)
        loader = MinibatchLoader(ds, "train", SamplingOptions(fanouts=[3]), batches, PipelineOptions(prefetch=0))
        loader.set_epoch(1)
        return loader

    shares = [torch.cat([mb.seeds for mb in make(rank=r, world_size=3)]) for r in range(3)]
    whole = torch.cat([mb.seeds for mb in make()])
    assert len({len(make(rank=r, world_size=3)) for r in range(3)}) == 1
    assert all(s.shape[0] == whole.shape[0] // 3 for s in shares)
    union = torch.cat(shares)
    assert union.unique().shape[0] == union.shape[0] and set(union.tolist()) <= set(whole.tolist())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_buffer_pool_reuses_a_buffer_only_once_nothing_refers_to_it(dtype):
    from gnnsys.loading.row_buffers import BufferPool

    pool = BufferPool(dim=3, dtype=dtype, capacity=2)
    first = pool.take(4)
    assert first.shape == (4, 3) and first.dtype == dtype
    address = first.data_ptr()
    kept = first[1:].t()  # a view keeps the memory in use after the batch itself is gone
    del first
    second = pool.take(4)
    assert second.data_ptr() != address
    del kept, second
    assert pool.take(2).data_ptr() == address  # free again, and big enough
    assert pool.take(100).shape == (100, 3)  # too small: a bigger one
