"""gnnsys.storage.cache victim buffer and lookahead fill: exact rows through the
tiers, what the cache offers, the buffer's bound and order, the lookahead fill
thread (admission, waiting, failure, shutdown), and device reads on a
recorded trace."""

import gc
import threading

import numpy as np
import pytest
import torch

from gnnsys.errors import ConfigError
from gnnsys.storage import CachedFeatures, FeatureSource, RowTable
from gnnsys.storage.cache import POLICIES, VictimBuffer, presample_hotness
from tests.storage.fakes import CountingSource, OfferLog, pretend_cuda
from tests.storage.test_cache import NUM_ROWS, policy_options, random_bits_table, recorded_trace, request_batches

# (cache rows, victim rows, window, lookahead fill)
TIERS = [(0, 0, 1, False), (7, 5, 1, True), (7, 5, 3, False), (40, 3, 3, True), (500, 5, 2, True), (7, 0, 2, True)]


def victim_stack(x, capacity, victim_rows, policy, batches, fill):
    victim = VictimBuffer(RowTable.from_tensor(x), victim_rows)
    return victim, CachedFeatures(victim, capacity, policy, lookahead_fill=fill, **policy_options(policy, batches))


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("capacity, victim_rows, window, fill", TIERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rows_through_the_tiers_equal_the_base(policy, capacity, victim_rows, window, fill, dtype):
    x = random_bits_table(dtype)
    batches = request_batches()
    victim, cache = victim_stack(x, capacity, victim_rows, policy, batches, fill)
    for i, ids in enumerate(batches):
        cache.set_window(batches[i + 1 : i + 1 + window])
        cache.wait_lookahead_fill()
        got = cache.gather(ids)
        assert got.dtype == dtype and got.shape == (ids.numel(), 3)
        assert torch.equal(got.view(torch.uint8), x[ids.long()].view(torch.uint8))
        assert victim.held().shape[0] <= victim.capacity
    cache.close()
    assert cache.stats()["requested"] == sum(b.numel() for b in batches)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_cache_offers_exactly_its_evicted_rows_the_window_uses(policy):
    x = random_bits_table(torch.float32)
    batches = request_batches()
    log = OfferLog(x)
    cache = CachedFeatures(log, 7, policy, **policy_options(policy, batches))
    offered = 0
    for i, ids in enumerate(batches):
        window = batches[i + 1 : i + 3]
        cache.set_window(window)
        before = set(np.flatnonzero(cache.policy.slot_of >= 0))
        cache.gather(ids)
        if not ids.numel():
            continue  # an empty gather is no batch: nothing is evicted or offered
        after = set(np.flatnonzero(cache.policy.slot_of >= 0))
        use = {}
        for d in range(len(window), 0, -1):
            use.update(dict.fromkeys(window[d - 1].tolist(), d))
        got_ids, got_rows, got_use = log.offers[-1]
        assert sorted(got_ids.tolist()) == sorted(i for i in before - after if i in use)
        assert torch.equal(got_rows.view(torch.uint8), x[got_ids].view(torch.uint8))
        assert got_use.tolist() == [use[i] for i in got_ids.tolist()]
        offered += got_ids.shape[0]
    assert len(log.offers) == sum(1 for b in batches if b.numel())
    if policy in ("lru", "sieve", "s3fifo", "hybrid"):
        assert offered > 0


@pytest.mark.parametrize("policy", ["lru", "sieve", "s3fifo"])
def test_victim_buffer_serves_an_evicted_row_without_a_device_read(policy):
    x = torch.randn(6, 4)
    device = CountingSource(x)
    victim = VictimBuffer(device, 4)
    cache = CachedFeatures(victim, 2, policy)
    cache.set_window([[2, 3], [0]])
    cache.gather(torch.tensor([0, 1]))
    cache.set_window([[0]])
    cache.gather(torch.tensor([2, 3]))  # evicts 0 (used next) and 1 (not in the window)
    assert victim.held().tolist() == [0]
    assert victim.stats()["offered"] == 1
    reads = len(device.reads)
    assert torch.equal(cache.gather(torch.tensor([0, 0])), x[[0, 0]])
    assert len(device.reads) == reads
    assert victim.stats()["hits"] == 1


def test_hybrid_offers_a_window_row_it_evicts_for_a_nearer_one():
    x = torch.randn(4, 2)
    device = CountingSource(x)
    victim = VictimBuffer(device, 2)
    cache = CachedFeatures(victim, 1, "hybrid", score=np.ones(4))
    trace = [[0], [1], [1], [0]]
    for i, ids in enumerate(trace):
        cache.set_window(trace[i + 1 : i + 3])
        assert torch.equal(cache.gather(torch.tensor(ids)), x[ids])
    # warmed with 0; 0 (needed in 2 batches) gave its slot to 1 (needed next) and came back from the buffer
    assert [r.tolist() for r in device.reads] == [[0], [1]]
    assert victim.stats()["hits"] == 1


def test_victim_buffer_is_bounded_and_keeps_the_nearest_uses():
    x = torch.randn(8, 3)
    device = CountingSource(x)
    victim = VictimBuffer(device, 3)
    assert isinstance(victim, FeatureSource)
    victim.offer(np.array([0, 1, 2]), x[[0, 1, 2]], np.array([3, 1, 4]))
    # one batch later: 1 (used in that batch) is past; 4 is needed later than everything held
    victim.offer(torch.tensor([3, 4]), x[[3, 4]], torch.tensor([2, 6]))
    assert victim.held().tolist() == [0, 2, 3]
    assert victim.stats() == {"hits": 0, "misses": 0, "requested": 0, "hit_rate": 0.0, "offered": 5, "kept": 4}
    assert torch.equal(victim.gather(torch.tensor([4, 0, 0], dtype=torch.int32)), x[[4, 0, 0]])
    assert [r.tolist() for r in device.reads] == [[4]]
    # a served row stays until its slot is needed, then goes first
    victim.offer(np.array([5]), x[[5]], np.array([1]))
    assert victim.held().tolist() == [2, 3, 5]
    assert victim.stats()["hits"] == 1 and victim.stats()["requested"] == 3
    victim.reset_stats()
    assert victim.stats()["offered"] == 0


def test_victim_buffer_refuses_bad_offers():
    x = torch.randn(4, 2)
    victim = VictimBuffer(CountingSource(x), 2)
    with pytest.raises(ValueError, match="rows of shape"):
        victim.offer(np.array([0, 1]), x[[0]], np.array([1, 1]))
    with pytest.raises(ValueError, match="next_use"):
        victim.offer(np.array([0]), x[[0]], np.array([0]))
    with pytest.raises(IndexError):
        victim.offer(np.array([4]), x[[0]], np.array([1]))
    with pytest.raises(ConfigError, match="victim_rows"):
        VictimBuffer(CountingSource(x), -1)
    assert VictimBuffer(CountingSource(x), 0).gather(torch.tensor([3])).tolist() == x[[3]].tolist()


def filling_lru(rows: int):
    """(table, counting device over it, an lru cache of every row with the lookahead fill)."""
    x = torch.randn(rows, 2)
    device = CountingSource(x)
    return x, device, CachedFeatures(device, rows, "lru", lookahead_fill=True)


@pytest.mark.parametrize("lookahead", [1, 2])
def test_lookahead_fill_reads_the_farthest_batch_ahead_so_its_gather_reads_nothing(lookahead):
    x, device, cache = filling_lru(10)
    trace = [[0, 1], [2, 3], [4, 5]][: lookahead + 1]
    for i, ids in enumerate(trace):
        cache.set_window(trace[i + 1 :])
        cache.wait_lookahead_fill()
        assert torch.equal(cache.gather(torch.tensor(ids)), x[ids])
    # the last batch is read first, ahead of the others, and then served from what was read
    assert [r.tolist() for r in device.reads] == [trace[-1]] + trace[:-1]
    stats = cache.stats()
    assert stats["filled"] == 2 and stats["fill_hits"] == 2 and stats["hits"] == 0
    cache.gather(torch.tensor(trace[-1]))  # the policy took the rows filled ahead in at their batch
    assert cache.stats()["hits"] == 2 and device.rows_read() == 2 * len(trace)
    cache.reset_stats()
    assert cache.stats()["filled"] == 0
    cache.close()


def test_gathers_before_the_batch_read_for_serve_their_misses_from_the_lookahead_fill():
    x, device, cache = filling_lru(10)
    trace = [[0], [2, 9], [2, 3]]
    for i, ids in enumerate(trace):
        cache.set_window(trace[i + 1 :])
        cache.wait_lookahead_fill()
        assert torch.equal(cache.gather(torch.tensor(ids)), x[ids])
    assert [r.tolist() for r in device.reads] == [[2, 3], [0], [9]]
    assert cache.stats()["fill_hits"] == 2 and cache.stats()["hits"] == 1
    cache.close()


def held_fill(device):
    """Events (gate, started): the lookahead-fill thread's reads of `device` set
    `started` and wait until `gate` is set."""
    gate, started = threading.Event(), threading.Event()
    main = threading.current_thread()

    def hold(ids):
        if threading.current_thread() is not main:
            started.set()
            gate.wait()

    device.before_read = hold
    return gate, started


def test_a_gather_does_not_wait_for_a_read_for_a_later_batch():
    x, device, cache = filling_lru(6)
    gate, started = held_fill(device)
    cache.set_window([[2, 3]])
    started.wait()
    assert torch.equal(cache.gather(torch.tensor([0, 1])), x[[0, 1]])  # returns while the read is held
    gate.set()
    cache.wait_lookahead_fill()
    assert torch.equal(cache.gather(torch.tensor([3, 2])), x[[3, 2]])
    assert [r.tolist() for r in device.reads] == [[0, 1], [2, 3]]
    assert cache.stats()["fill_hits"] == 2
    cache.close()


def test_a_gather_waits_for_the_read_of_its_own_batch():
    x, device, cache = filling_lru(6)
    gate, started = held_fill(device)
    cache.set_window([[2, 3]])
    started.wait()
    cache.gather(torch.tensor([0]))
    threading.Timer(0.2, gate.set).start()
    assert torch.equal(cache.gather(torch.tensor([2, 3])), x[[2, 3]])
    cache.wait_lookahead_fill()
    assert [r.tolist() for r in device.reads] == [[0], [2, 3]]
    cache.close()


def test_a_second_window_replaces_the_waiting_request():
    x, device, cache = filling_lru(10)
    gate, started = held_fill(device)
    cache.set_window([[1]])
    started.wait()
    cache.set_window([[2]])
    cache.set_window([[3]])
    gate.set()
    cache.wait_lookahead_fill()
    assert [r.tolist() for r in device.reads] == [[1], [3]]
    cache.close()


def test_a_lookahead_fill_failure_surfaces_in_the_next_gather_and_stops_the_fill():
    x = torch.randn(6, 2)
    device = CountingSource(x)
    cache = CachedFeatures(device, 4, "lru", lookahead_fill=True)
    main = threading.current_thread()

    def fail(ids):
        if threading.current_thread() is not main:
            raise OSError("disk gone")

    device.before_read = fail
    cache.set_window([[5]])
    cache.wait_lookahead_fill()
    with pytest.raises(OSError, match="disk gone") as raised:
        cache.gather(torch.tensor([0]))
    assert any("lookahead fill" in note for note in raised.value.__notes__)
    assert not cache.fill.is_alive()
    cache.set_window([[4]])
    assert torch.equal(cache.gather(torch.tensor([0, 5])), x[[0, 5]])
    assert cache.stats()["filled"] == 0 and not cache.fill.is_alive()


def test_close_and_collection_stop_the_thread():
    x = torch.randn(6, 2)
    cache = CachedFeatures(CountingSource(x), 4, "lru", lookahead_fill=True)
    cache.set_window([[1]])
    assert cache.fill.is_alive()
    cache.close()
    assert not cache.fill.is_alive()
    cache.close()
    assert torch.equal(cache.gather(torch.tensor([1])), x[[1]])
    cache = CachedFeatures(CountingSource(x), 4, "lru", lookahead_fill=True)
    cache.set_window([[1]])
    fill = cache.fill
    del cache
    gc.collect()
    assert not fill.is_alive()


def test_hybrid_with_victim_and_lookahead_fill_reads_no_more_than_hybrid_alone():
    n, indptr, sampler, seeds, trace = recorded_trace()
    score = presample_hotness(sampler, seeds, [100])
    x = torch.randn(n, 2)
    read = {}
    for name, victim_rows, fill in (("hybrid", None, False), ("victim", 25, False), ("both", 25, True)):
        device = CountingSource(x)
        base = device if victim_rows is None else VictimBuffer(device, victim_rows)
        cache = CachedFeatures(base, 100, "hybrid", lookahead_fill=fill, score=score)
        for t, ids in enumerate(trace):
            cache.set_window(trace[t + 1 : t + 5])
            cache.wait_lookahead_fill()
            assert torch.equal(cache.gather(torch.from_numpy(ids)), x[ids])
        cache.close()
        read[name] = device.rows_read()
    assert read["both"] <= read["hybrid"] and read["victim"] < read["hybrid"], read


def test_victim_rows_take_their_exact_size_and_no_cuda_context(monkeypatch):
    """With CUDA present the rows are still pageable host memory of exactly
    capacity x row bytes: no page-locked allocation (which creates a CUDA
    context, is rounded up to a power of two, and no device copy used)."""
    pretend_cuda(monkeypatch)  # on this CPU-only torch a pinned allocation would raise
    victim = VictimBuffer(RowTable.from_tensor(torch.randn(NUM_ROWS, 3)), 5)
    assert victim.host_bytes()["rows"] == 5 * 3 * 4 and not victim._rows.is_pinned()
