"""gnnsys.storage.cache: exact rows through every policy, each policy against a
hand-computed trace, and the policy ordering on a recorded sampling trace."""

import threading

import numpy as np
import pytest
import torch

from gnnsys.errors import ConfigError
from gnnsys.samplers import NeighborSampler, SeedBatches
from gnnsys.storage import CachedFeatures, RowTable
from gnnsys.storage.cache import POLICIES, make_policy, out_degree, presample_hotness
from tests.storage.fakes import CountingSource, RecordingStreams, pretend_cuda

NUM_ROWS = 50
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def random_bits_table(dtype, dim=3, seed=0) -> torch.Tensor:
    """A [NUM_ROWS, dim] table of random bit patterns (NaNs and infinities included)."""
    raw = torch.randint(
        0, 256, (NUM_ROWS, dim * dtype.itemsize), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )
    return raw.view(dtype)


def request_batches(seed=0) -> list[torch.Tensor]:
    """Batches with repeated ids, an empty one, the last row and one larger than the table."""
    g = torch.Generator().manual_seed(seed)
    batches = [torch.randint(0, NUM_ROWS, (n,), generator=g) for n in (12, 30, 5, 70, 20, 45)]
    batches.insert(2, torch.empty(0, dtype=torch.long))
    batches.append(torch.tensor([NUM_ROWS - 1, NUM_ROWS - 1, 0], dtype=torch.int32))
    return batches


def policy_options(policy, batches):
    score = np.arange(NUM_ROWS, dtype=np.float64)[::-1].copy()
    if policy == "belady":
        return {"trace": [b.numpy() for b in batches if b.numel()]}
    return {"score": score}


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("capacity", [0, 1, 7, 40, 500])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window", [0, 2])
def test_rows_through_the_cache_equal_the_base(policy, capacity, dtype, window):
    x = random_bits_table(dtype)
    batches = request_batches()
    cache = CachedFeatures(RowTable.from_tensor(x), capacity, policy, **policy_options(policy, batches))
    for i, ids in enumerate(batches):
        cache.set_window(batches[i + 1 : i + 1 + window])
        got = cache.gather(ids)
        assert got.dtype == dtype and got.shape == (ids.numel(), 3)
        assert torch.equal(got.view(torch.uint8), x[ids.long()].view(torch.uint8))
    stats = cache.stats()
    assert stats["requested"] == sum(b.numel() for b in batches)
    assert stats["hits"] + stats["misses"] == sum(b.unique().numel() for b in batches)
    if capacity == 0:
        assert stats["hits"] == 0


def test_gather_into_out_async_and_stats_reset():
    x = torch.randn(NUM_ROWS, 4)
    cache = CachedFeatures(RowTable.from_tensor(x), 5, "lru")
    out = torch.empty(3, 4)
    ids = torch.tensor([4, 4, 9])
    assert cache.gather(ids, out=out) is out and torch.equal(out, x[ids])
    assert torch.equal(cache.gather_async(ids).wait(), x[ids])
    assert cache.stats() == {
        "hits": 2,
        "misses": 2,
        "requested": 6,
        "hit_rate": 0.5,
        "filled": 0,
        "fill_hits": 0,
        "fill_skipped": 0,
        "fill_capacity": 0,
        "read_rate": 0.5,
    }
    cache.reset_stats()
    assert cache.stats()["requested"] == 0
    with pytest.raises(IndexError):
        cache.gather(torch.tensor([NUM_ROWS]))


@pytest.mark.parametrize("policy", ["lru", "sieve", "s3fifo", "hybrid"])
def test_a_failed_base_read_leaves_the_cache_unchanged(policy):
    x = torch.randn(NUM_ROWS, 2)
    device = CountingSource(x)
    cache = CachedFeatures(device, 4, policy, score=np.ones(NUM_ROWS))
    device.before_read = lambda ids: (_ for _ in ()).throw(OSError("read failed"))
    with pytest.raises(OSError):
        cache.gather(torch.tensor([7, 8]))
    device.before_read = None
    assert torch.equal(cache.gather(torch.tensor([8, 7])), x[[8, 7]])
    assert cache.stats()["misses"] == 2


def test_warm_from_the_score_makes_the_first_batch_hit():
    x = torch.randn(NUM_ROWS, 2)
    score = np.zeros(NUM_ROWS)
    score[[3, 17, 42]] = [5.0, 9.0, 7.0]
    for policy in ("static", "lru", "sieve", "s3fifo", "hybrid"):
        cache = CachedFeatures(RowTable.from_tensor(x), 3, policy, score=score)
        cache.gather(torch.tensor([3, 17, 42]))
        assert cache.stats()["hits"] == 3, policy


def run_trace(policy, trace, windows=None):
    """The hit flags of each batch (sorted distinct ids) of `trace`."""
    out = []
    for t, ids in enumerate(trace):
        if windows is not None:
            policy.set_window(windows[t])
        out.append(policy.access(np.array(ids, dtype=np.int64))[0].tolist())
    return out


T, F = True, False
# cap 2: 0 and 1 are both reused before 2 arrives; LRU evicts 1 (older use),
# SIEVE clears both visited bits and evicts 0 (the oldest insertion).
SIEVE_VS_LRU = [[0], [1], [1], [0], [2], [1]]


@pytest.mark.parametrize(
    "name, trace, expected",
    [
        ("lru", SIEVE_VS_LRU, [[F], [F], [T], [T], [F], [F]]),
        # at [0, 1, 2] both cached rows are used by the batch: 2 streams past, 0 stays
        ("lru", [[0, 1], [2], [0, 1], [0, 1, 2], [0]], [[F, F], [F], [F, T], [T, T, F], [T]]),
        ("sieve", SIEVE_VS_LRU, [[F], [F], [T], [T], [F], [T]]),
        # 0 and 1 move to main at [2]; 2 and 3 leave the small FIFO for the ghost
        # list; 2 comes back into main from the ghost; main's frequency sweep
        # evicts 2 for 4; 4 returns from the ghost into main.
        (
            "s3fifo",
            [[0], [1], [1], [0], [2], [1], [3], [2], [1, 2], [4], [2], [4], [1, 4]],
            [[F], [F], [T], [T], [F], [T], [F], [F], [T, T], [F], [F], [F], [T, T]],
        ),
    ],
)
def test_policy_matches_the_hand_computed_trace(name, trace, expected):
    assert run_trace(make_policy(name, 2, 6), trace) == expected


def test_static_holds_the_top_scored_rows():
    policy = make_policy("static", 2, 6, score=[0, 5, 1, 4, 0, 0])
    policy.warm()
    assert run_trace(policy, [[0, 1], [3], [2, 3]]) == [[F, T], [T], [F, T]]


def test_hybrid_keeps_rows_of_the_window():
    # warm {0, 1}; batch 1: 2 is in the next batch, so it replaces 1 (0 scores
    # higher), 3 streams; batch 2: 0 is needed next and 2 is not, 4 streams.
    policy = make_policy("hybrid", 2, 6, score=[6, 5, 4, 3, 2, 1])
    policy.warm()
    hits = run_trace(policy, [[2, 3], [2, 4], [0]], windows=[[[2], [4]], [[0]], []])
    assert hits == [[F, F], [T, F], [T]]
    assert sorted(np.flatnonzero(policy.slot_of >= 0)) == [0, 2]


def test_belady_over_its_trace_and_only_its_trace():
    trace = [[0, 1], [2], [0], [1], [2]]
    policy = make_policy("belady", 2, 6, trace=trace)
    policy.warm()
    assert run_trace(policy, trace) == [[T, T], [F], [T], [T], [F]]
    with pytest.raises(ValueError, match="recorded trace"):
        policy.access(np.array([0]))


def recorded_trace(epochs=3):
    """Input nodes of NeighborSampler batches on a small skewed random graph."""
    rng = np.random.default_rng(0)
    n, m = 2000, 16000
    dst = np.sort(rng.integers(0, n, m))
    src = (rng.zipf(1.6, m) - 1) % n
    indptr = np.searchsorted(dst, np.arange(n + 1)).astype(np.int64)
    sampler = NeighborSampler(indptr, src.astype(np.int64), [5, 5])
    seeds = SeedBatches(rng.permutation(n)[:400], 50)
    trace = [
        np.unique(sampler.sample(b, e, i).input_nodes.numpy())
        for e in range(epochs)
        for i, b in enumerate(seeds.epoch(e))
    ]
    return n, indptr, sampler, seeds, trace


@pytest.mark.parametrize("fraction", [0.02, 0.05, 0.1, 0.2, 0.5])
def test_policy_ordering_on_a_recorded_trace(fraction):
    n, indptr, sampler, seeds, trace = recorded_trace()
    cap = int(fraction * n)
    score = presample_hotness(sampler, seeds, [100])
    hits = {}
    for name in POLICIES:
        options = {"trace": trace} if name == "belady" else {"score": score}
        policy = make_policy(name, cap, n, **options)
        policy.warm()
        windows = [trace[t + 1 : t + 5] for t in range(len(trace))]
        hits[name] = sum(sum(h) for h in run_trace(policy, trace, windows))
    assert hits["hybrid"] >= hits["lru"]
    assert all(h <= hits["belady"] for h in hits.values()), hits


def test_scores():
    assert out_degree(np.array([2, 0, 2, 2, 1], np.int32), 4).tolist() == [1.0, 1.0, 3.0, 0.0]

    class FakeSampler:
        num_nodes = 4

        def sample(self, seeds, epoch, batch):
            return type("MB", (), {"input_nodes": torch.tensor([seeds[0], 3])})()

    class FakeSeeds:
        def epoch(self, e):
            return [torch.tensor([0]), torch.tensor([e])]

    assert presample_hotness(FakeSampler(), FakeSeeds(), [0, 1]).tolist() == [3.0, 1.0, 0.0, 4.0]


@pytest.mark.parametrize(
    "name, options, error",
    [
        ("nope", {}, ConfigError),
        ("static", {}, ConfigError),
        ("hybrid", {}, ConfigError),
        ("lru", {"score": [1.0, 2.0]}, ConfigError),
        ("lru", {"score": [-1.0] * 6}, ConfigError),
        ("hybrid", {"score": [1.0] * 6, "decay": 0.0}, ConfigError),
    ],
)
def test_bad_options_are_refused(name, options, error):
    with pytest.raises(error):
        make_policy(name, 2, 6, **options)
    with pytest.raises(ConfigError):
        make_policy("lru", -1, 6)


def test_a_cuda_cache_normalises_its_device_and_orders_gathers_after_its_warm_up(monkeypatch):
    """device="cuda" is "cuda:<current>", as for every source; the warm-up's
    writes (on the constructing thread's current stream) are followed by an
    event that the stream of every later gather waits on. 'meta' tensors stand
    in for the GPU's, RecordingStreams for its streams."""
    pretend_cuda(monkeypatch)
    empty = torch.empty

    def on_meta(*shape, device=None, **kw):
        gpu = device is not None and torch.device(device).type == "cuda"
        return empty(*shape, device="meta" if gpu else device, **kw)

    monkeypatch.setattr(torch, "empty", on_meta)
    streams = RecordingStreams()
    base = RowTable.from_tensor(torch.randn(50, 3))
    cache = CachedFeatures(base, 10, "static", score=np.arange(50.0), device="cuda", streams=streams)
    assert cache.device == torch.device("cuda:0")
    (warmed,) = [e for e in streams.log if e[0] == "record"]
    assert warmed[2] == f"default@{threading.current_thread().name}"
    gather_stream = streams.new_stream(cache.device)
    for _ in range(2):
        with streams.use(gather_stream):
            cache.gather(torch.tensor([1, 49, 2]))
    waits = [e for e in streams.log if e[0] == "wait_event"]
    assert [(e[1], e[2]) for e in waits] == [(gather_stream.name, warmed[1])] * 2
