"""Pinned staging of host rows for a GPU (storage/staging.py), run on the CPU.

`RecordingStreams` (tests/storage/fakes.py) stands in for CUDA: it logs every
stream, event, pinned allocation and copy, and runs the copies at once. The
staging serves StagedFeatures (over a table, or over the SSD tier) and the SSD
tier under a cache. Checked: every chunk's copy is queued on the staging's
side stream with an event recorded after it, the consumer's stream waits on
that event (the host does not), a pinned buffer is written again only after
the event of its last copy fired, the rows that arrive equal x[ids], and the
pinned bytes appear in host_bytes() and in the stack's memory plan.
"""

import threading

import numpy as np
import pytest
import torch

from gnnsys.errors import ConfigError
from gnnsys.storage import RowTable, stack_builder
from gnnsys.storage import staging as staging_module
from gnnsys.storage.cache import CachedFeatures, VictimBuffer
from gnnsys.storage.source import FeatureSource
from gnnsys.storage.ssd import SSDFeatures
from gnnsys.storage.staged import StagedFeatures
from gnnsys.storage.staging import PinnedStaging
from tests.storage.fakes import RecordingStreams, pretend_cuda

ROW = 6 * 4  # bytes of a row of 6 float32


def consumer() -> str:
    """The name RecordingStreams gives this thread's current (default) stream."""
    return f"default@{threading.current_thread().name}"


class LoggingRows(FeatureSource):
    """The rows of `x` (a RowTable), logging ("fill", address of `out`) before each gather."""

    def __init__(self, x: torch.Tensor, log: list):
        self.rows, self.log, self.base = RowTable.from_tensor(x), log, None
        self.shape, self.dtype = self.rows.shape, self.rows.dtype

    def gather(self, ids, out=None):
        self.log.append(("fill", None if out is None else out.data_ptr()))
        return self.rows.gather(ids, out=out)


def check_ordering(log: list, side: str) -> list:
    """Walk the log: every copy is queued on `side` and followed by an event
    recorded there; a pinned buffer is filled again only after the event of
    its last copy was synchronised (fired). Returns the events, in order."""
    last_event, fired, events, copied = {}, set(), [], None
    for entry in log:
        if entry[0] == "copy":
            assert entry[2] == side, f"a copy queued on {entry[2]}, not the side stream {side}"
            assert copied is None, "a copy with no event recorded after it"
            copied = entry[1]
        elif entry[0] == "record" and entry[2] == side:
            assert copied is not None, "an event on the side stream with no copy before it"
            last_event[copied], copied = entry[1], None
            events.append(entry[1])
        elif entry[0] == "synchronize":
            fired.add(entry[1])
        elif entry[0] == "fill" and entry[1] in last_event:
            assert last_event[entry[1]] in fired, f"buffer refilled before {last_event[entry[1]]} (its last copy) fired"
    assert copied is None, "a copy with no event after it"
    return events


def staged_table(x: torch.Tensor, slot_rows: int = 4, slots: int = 2):
    streams = RecordingStreams()
    source = LoggingRows(x, streams.log)
    staged = StagedFeatures(source, "cpu", slots, slot_bytes=slot_rows * ROW, streams=streams)
    return staged, streams


def test_staged_rows_are_copied_on_the_side_stream_and_the_consumer_waits_on_its_event():
    x = torch.randn(40, 6)
    staged, streams = staged_table(x)
    log, side = streams.log, staged.pinned.side.name
    rng = np.random.default_rng(0)
    for n in (10, 3, 0, 8, 1):
        ids = torch.from_numpy(rng.integers(0, 40, n))
        start = len(log)
        handle = staged.gather_async(ids)
        queued = log[start:]
        assert not [e for e in queued if e[0] in ("wait_event", "wait_stream")]  # nobody waits at queueing
        assert len([e for e in queued if e[0] == "copy"]) == -(-n // 4)  # one copy per chunk of a slot
        rows = handle.wait()
        assert torch.equal(rows, x[ids])
        waited = log[start + len(queued) :]
        if n:
            last = [e for e in queued if e[0] == "record"][-1][1]
            assert ("wait_event", consumer(), last, threading.current_thread().name) in waited
            assert ("record_stream", id(rows), consumer(), threading.current_thread().name) in waited
        else:
            assert waited == []
    events = check_ordering(log, side)
    assert len(events) == 3 + 1 + 2 + 1
    assert not [e for e in log if e[0] == "synchronize" and not e[1].startswith("event")]  # no stream synchronised
    assert len([e for e in log if e[0] == "pinned"]) == 2 and staged.host_bytes() == {"pinned": 2 * 4 * ROW}


def test_a_pinned_buffer_is_written_again_only_after_its_copy_event_fired():
    streams = RecordingStreams()
    staging = PinnedStaging(3, torch.float32, "cpu", slots=2, slot_bytes=2 * 12, streams=streams)

    def fill(lo, hi, staged):
        streams.log.append(("fill", staged.data_ptr()))
        staged.copy_(torch.arange(lo * 3, hi * 3, dtype=torch.float32).view(-1, 3))

    rows = staging.upload(9, fill).wait()  # 5 chunks of at most 2 rows through 2 buffers
    assert torch.equal(rows, torch.arange(27.0).view(9, 3))
    events = check_ordering(streams.log, staging.side.name)
    assert len(events) == 5
    synchronised = lambda: [e[1] for e in streams.log if e[0] == "synchronize"]  # noqa: E731
    assert synchronised() == events[:3]  # before chunks 3, 4 and 5, each buffer's previous copy; never the last two
    staging.close()
    assert synchronised()[3:] == [events[4], events[3]]  # closing waits for the copies still reading each buffer
    assert staging.host_bytes() == 0


def test_gather_into_writes_the_rows_in_place_after_the_copies():
    x = torch.randn(30, 6)
    staged, streams = staged_table(x, slot_rows=2, slots=3)
    ids, at = torch.tensor([4, 29, 0, 7, 7]), torch.tensor([11, 0, 5, 7, 2])
    out = torch.zeros(12, 6)
    staged.gather_into(ids, out, at)
    expect = torch.zeros(12, 6)
    expect[at] = x[ids]
    assert torch.equal(out, expect)
    events = check_ordering(streams.log, staged.pinned.side.name)
    assert ("wait_event", consumer(), events[-1], threading.current_thread().name) in streams.log
    given = torch.empty(5, 6)
    assert staged.gather(ids, out=given) is given and torch.equal(given, x[ids])


class OnDevice(FeatureSource):
    """A tier whose rows are on a GPU (never gathered here)."""

    shape, dtype, device = (4, 6), torch.float32, torch.device("cuda", 0)


def test_bad_ids_and_options_fail_before_anything_is_staged():
    staged, streams = staged_table(torch.randn(10, 6))
    with pytest.raises(IndexError, match="out of range"):
        staged.gather_async(torch.tensor([3, 10]))
    assert streams.log == []
    with pytest.raises(ConfigError, match="^slots: must be an int >= 1"):
        StagedFeatures(torch.randn(4, 2), "cpu", 0, streams=RecordingStreams())
    with pytest.raises(ConfigError, match="^features: staging sends host rows to a GPU; .* is on cuda:0$"):
        StagedFeatures(OnDevice(), "cpu", streams=RecordingStreams())


def _ssd(table, **kwargs) -> SSDFeatures:
    """SSDFeatures over `table` with O_DIRECT where the file system has it, else buffered reads."""
    try:
        return SSDFeatures(table, engine="threads", threads=2, max_gap=0, direct=True, **kwargs)
    except ConfigError as e:
        if e.option != "direct":
            raise
        return SSDFeatures(table, engine="threads", threads=2, max_gap=0, direct=False, **kwargs)


def test_rows_a_cache_misses_are_read_from_the_ssd_into_pinned_buffers(make_dataset):
    ds, _ = make_dataset(num_nodes=200, num_edges=800, dim=12)
    streams = RecordingStreams()
    row_bytes = 12 * ds.features.dtype.itemsize
    pinned = PinnedStaging(12, ds.features.dtype, "cpu", slot_bytes=16 * row_bytes, streams=streams)
    ssd = _ssd(ds.features, pinned=pinned)
    stack = CachedFeatures(VictimBuffer(ssd, 8), 20, "lru")
    rng = np.random.default_rng(1)
    for _ in range(4):
        ids = torch.from_numpy(rng.integers(0, 200, 60))
        start = len(streams.log)
        assert torch.equal(stack.gather(ids), ds.features.gather(ids))
        new = streams.log[start:]
        records = [e for e in new if e[0] == "record"]
        wait = ("wait_event", consumer(), records[-1][1], threading.current_thread().name)
        assert wait in new and new.index(wait) > new.index(records[-1])
    check_ordering(streams.log, pinned.side.name)
    copied = sum(1 for e in streams.log if e[0] == "copy")
    assert copied >= -(-ssd.stats()["unique_rows"] // 16)  # every row read crossed in a pinned chunk
    assert 0 < ssd.host_bytes()["pinned"] <= PinnedStaging.planned_bytes(row_bytes, slot_bytes=16 * row_bytes)
    stack.close()


def test_a_host_out_never_touches_the_ssd_tiers_staging(make_dataset, monkeypatch):
    pretend_cuda(monkeypatch)
    ds, _ = make_dataset(num_nodes=100, dim=12)
    streams = RecordingStreams()
    ssd = _ssd(ds.features, pinned=PinnedStaging(12, ds.features.dtype, "cuda", streams=streams))
    stack = CachedFeatures(ssd, 10, "lru")  # on the host: the SSD tier's CPU path
    ids = torch.tensor([5, 99, 5, 0])
    assert torch.equal(stack.gather(ids), ds.features.gather(ids))
    assert streams.log == [] and ssd.host_bytes()["pinned"] == 0
    assert "pinned staging to cuda:0" in repr(ssd)
    stack.close()
    with pytest.raises(ConfigError, match="^pinned: stages rows of 5 x"):
        _ssd(ds.features, pinned=PinnedStaging(5, ds.features.dtype, "cuda", streams=streams))


@pytest.mark.parametrize("cache_rows", [0, 20])
def test_ssd_stacks_on_a_gpu_stage_through_pinned_buffers_in_the_plan(make_dataset, monkeypatch, cache_rows):
    """Without a cache: StagedFeatures over the SSD tier; with one: the SSD
    tier's own staging under the cache (built here on the host, as a GPU
    cache's memory cannot be made without a GPU); both planned."""
    pretend_cuda(monkeypatch)
    monkeypatch.setattr(staging_module, "CudaStreams", RecordingStreams)
    host_cache = lambda base, *args, device=None, **kwargs: CachedFeatures(base, *args, **kwargs)  # noqa: E731
    monkeypatch.setattr(stack_builder, "CachedFeatures", host_cache)
    ds, _ = make_dataset(num_nodes=100, dim=12)
    row_bytes = 12 * ds.features.dtype.itemsize
    stack, plan = stack_builder.build_stack(
        ds.features, degree=lambda: np.ones(100), features="ssd", device="cuda", cache_rows=cache_rows
    )
    planned = PinnedStaging.planned_bytes(row_bytes)
    if cache_rows:
        ssd = stack.base
        assert isinstance(ssd, SSDFeatures) and ssd.pinned.device == torch.device("cuda:0")
        assert plan.parts["ssd.pinned"] == planned and "staged.pinned" not in plan.parts
    else:
        assert isinstance(stack, StagedFeatures) and isinstance(stack.base, SSDFeatures) and stack.base.pinned is None
        assert stack.device == torch.device("cuda:0") and plan.parts["staged.pinned"] == planned
    stack.close()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_the_loader_uses_staged_rows_only_after_their_copy_event(make_dataset, monkeypatch, prefetch):
    """StagedFeatures on a (pretended) GPU under the real loader: every batch's
    rows are copied on the staging's side stream, the loader's gather stream
    waits on the event after the batch's last copy before anything uses the
    rows, and the rows are the table's."""
    from gnnsys.loading.loader import MinibatchLoader
    from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions

    pretend_cuda(monkeypatch)
    ds, _ = make_dataset(num_nodes=80, num_edges=600, dim=5)
    streams = RecordingStreams()
    staged = StagedFeatures(ds.features, "cuda", slot_bytes=8 * 20, streams=streams)
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[3, 2]),
        BatchOptions(batch_size=8),
        PipelineOptions(prefetch=prefetch, streams=streams),
        features=staged,
    )
    batches = 0
    for mb in loader:
        assert torch.equal(mb.x, ds.features.gather(mb.input_nodes))
        batches += 1
    log, side, gather = streams.log, staged.pinned.side.name, loader._gather_stream.name
    check_ordering(log, side)
    side_events = [e[1] for e in log if e[0] == "record" and e[2] == side]
    waits = [i for i, e in enumerate(log) if e[0] == "wait_event" and e[1] == gather and e[2] in side_events]
    assert batches >= 4 and len(waits) == batches
    for i in waits:  # on the event after the batch's last copy: the last one recorded on the side stream before
        assert log[i][2] == [e[1] for e in log[:i] if e[0] == "record" and e[2] == side][-1]
    staged.close()
