"""gnnsys.storage.cache.shared: the ownership rule, and gathers through a cache
shared by 2 to 4 gloo processes equal the base bit for bit, keep ownership
disjoint, serve replicated rows without exchange, and survive a bad id."""

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from gnnsys.errors import ConfigError
from gnnsys.parallel.distributed import launch
from gnnsys.storage.cache.ownership import REPLICATED, Ownership, exchange_bytes, serve_step, shard_policy
from gnnsys.storage.cache.shared import SharedCachedFeatures

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import this module by name
import test_shared_cache as me  # noqa: E402
from fakes import CountingRows  # noqa: E402

NUM_ROWS, DIM = 60, 3
LAUNCH = {"timeout_s": 30, "deadline_s": 60}


def table(dtype=torch.float16) -> torch.Tensor:
    """The same [NUM_ROWS, DIM] table of random bit patterns (NaNs included) on every rank."""
    raw = torch.randint(
        0, 256, (NUM_ROWS, DIM * dtype.itemsize), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    return raw.view(dtype)


def scores(ties=False) -> np.ndarray:
    """A per-row hotness, the same on every rank; with ties, only 6 distinct values."""
    s = np.random.default_rng(1).random(NUM_ROWS)
    return np.floor(s * 6) if ties else s


def same(got, x, ids) -> bool:
    return torch.equal(got.view(torch.uint8), x[torch.as_tensor(ids).long()].view(torch.uint8))


# ----- the ownership rule, in one process -----


@pytest.mark.parametrize("world, capacity, frac", [(1, 10, 0.0), (3, 4, 0.25), (4, 5, 0.0), (2, 7, 1.0), (3, 30, 0.5)])
@pytest.mark.parametrize("ties", [False, True])
def test_the_hottest_rows_are_replicated_then_striped_and_the_rest_go_by_id(world, capacity, frac, ties):
    score = scores(ties)
    o = Ownership(NUM_ROWS, world, capacity, frac, score)
    r = round(frac * min(capacity, NUM_ROWS))
    order = np.lexsort((np.arange(NUM_ROWS), -score))  # hottest first, ties to the lower id
    ranked = order[: r + world * (min(capacity, NUM_ROWS) - r)]
    assert np.array_equal(o.ranked, ranked)
    assert o.num_replicated == r and np.array_equal(o.replicated, np.sort(ranked[:r]))
    assert (o.owner[ranked[:r]] == REPLICATED).all()
    assert np.array_equal(o.owner[ranked[r:]], np.arange(ranked.shape[0] - r) % world)
    rest = np.setdiff1d(np.arange(NUM_ROWS), ranked)
    assert np.array_equal(o.owner[rest], rest % world)
    shards = [o.owned(k) for k in range(world)]
    assert np.array_equal(np.sort(np.concatenate(shards + [o.replicated])), np.arange(NUM_ROWS))
    for k, shard in enumerate(shards):  # a static cache of a rank's free slots holds its stripe (ties: as hot)
        policy = shard_policy(shard, "static", o.capacity - r, score=score)
        warm, stripe = shard[policy.warm()[0]], ranked[r + k :: world]
        assert np.array_equal(np.sort(score[warm]), np.sort(score[stripe]))
        if not ties:
            assert np.array_equal(np.sort(warm), np.sort(stripe))


def test_without_a_score_rows_go_by_id_and_options_are_checked():
    o = Ownership(NUM_ROWS, 3, 5)
    assert np.array_equal(o.owner, np.arange(NUM_ROWS) % 3) and o.replicated.shape == (0,)
    with pytest.raises(ConfigError, match="replicate_frac: .*needs a score"):
        Ownership(NUM_ROWS, 3, 5, 0.5)
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="replicate_frac: must be in"):
            Ownership(NUM_ROWS, 2, 5, bad, scores())
    with pytest.raises(ConfigError, match="world_size"):
        Ownership(NUM_ROWS, 0, 5)
    with pytest.raises(ConfigError, match="score: needs one value per node"):
        Ownership(NUM_ROWS, 2, 5, 0.0, np.ones(3))
    with pytest.raises(ConfigError, match="policy: belady"):
        shard_policy(o.owned(0), "belady", 2, trace=[np.arange(3)])


def test_route_splits_a_batch_by_owner():
    o = Ownership(NUM_ROWS, 3, 6, 0.5, scores())  # 3 replicated rows, 3 striped per rank
    ids = np.arange(NUM_ROWS, dtype=np.int64)
    replicated, own, order, counts = o.route(ids, 1)
    assert np.array_equal(ids[replicated], o.replicated) and np.array_equal(ids[own], o.owned(1))
    who = o.owner[ids[order]]
    assert (np.diff(who) >= 0).all() and np.array_equal(counts, np.bincount(who, minlength=3))
    assert counts[1] == 0 and counts.sum() + replicated.sum() + own.sum() == NUM_ROWS


def test_serve_step_looks_up_the_union_once_and_counts_hits_per_requester():
    shard = np.array([2, 5, 7, 9, 11], np.int64)
    cached = {5, 9}
    looked = []

    def access(local):
        looked.append(local)
        return np.isin(shard[local], list(cached))

    union, where, own_hits, peer_hits, misses = serve_step(
        shard, access, np.array([5, 7]), np.array([5, 9, 11, 2, 9]), [3, 0, 2]
    )
    assert np.array_equal(union, [2, 5, 7, 9, 11]) and len(looked) == 1
    assert np.array_equal(union[where], [5, 7, 5, 9, 11, 2, 9])
    assert own_hits == 1 and peer_hits.tolist() == [2, 0, 1] and misses == 3


def test_exchange_bytes_counts_ids_rows_and_one_hit_count_per_peer_served():
    assert exchange_bytes([0, 3, 1], [2, 0, 0], row_bytes=12) == 8 * 4 + 12 * 2 + 8
    assert exchange_bytes([0, 0], [0, 0], row_bytes=12) == 0


def test_the_shared_cache_needs_an_initialised_process_group():
    with pytest.raises(ConfigError, match="group: torch.distributed is not initialised"):
        SharedCachedFeatures(CountingRows(table()), 4, "lru")


# ----- gloo processes -----


def make_cache(policy, capacity, frac, x=None, score=True):
    base = CountingRows(table() if x is None else x)
    options = {"score": scores()} if score else {}
    return base, SharedCachedFeatures(base, capacity, policy, replicate_frac=frac, **options)


def check_exact(ctx):
    """Every id-set case, for several policies, with the base's reads matching the misses."""
    rank = ctx.rank
    g = torch.Generator().manual_seed(100 + rank)
    for policy, frac, capacity in [
        ("static", 0.0, 5),
        ("static", 0.5, 4),
        ("lru", 0.0, 3),
        ("lru", 0.34, 6),
        ("sieve", 0.0, 4),
        ("s3fifo", 0.25, 8),
        ("hybrid", 0.2, 5),
    ]:
        base, cache = make_cache(policy, capacity, frac)
        x, o = base.x, cache.ownership
        warm_reads = base.rows_read
        mine = np.flatnonzero((o.owner == rank) | (o.owner == REPLICATED))
        theirs = np.flatnonzero((o.owner != rank) & (o.owner != REPLICATED))
        cases = [
            torch.randint(0, NUM_ROWS, (5 + 7 * rank,), generator=g),  # a different size on every rank
            torch.tensor([3, 3, 3, 0, 3, NUM_ROWS - 1, 0], dtype=torch.int32),
            torch.from_numpy(np.repeat(theirs, 2)),
            torch.from_numpy(mine[::-1].copy()),
            torch.empty(0, dtype=torch.long) if rank == 0 else torch.randint(0, NUM_ROWS, (9,), generator=g),
            torch.empty(0, dtype=torch.long),
        ]
        cases += [torch.randint(0, NUM_ROWS, (20,), generator=g) for _ in range(6)]  # evictions for the dynamic ones
        for i, ids in enumerate(cases):
            cache.set_window(cases[i + 1 : i + 3])
            assert same(cache.gather(ids), x, ids), (policy, frac, i)
        into = torch.full((len(cases[0]), DIM), 7.0, dtype=x.dtype)
        assert cache.gather(cases[0], out=into) is into and same(into, x, cases[0])
        pending = [(ids, cache.gather_async(ids)) for ids in cases[-4:]]  # several exchanges queued
        assert all(same(f.wait(), x, ids) for ids, f in pending)
        stats = cache.stats()
        everything = cases + [cases[0]] + cases[-4:]
        assert stats["requested"] == sum(len(c) for c in everything)
        assert stats["distinct"] == sum(len(c.unique()) for c in everything)
        assert stats["local_hits"] + stats["remote_hits"] <= stats["distinct"]
        assert stats["misses"] == base.rows_read - warm_reads
        assert stats["bytes_from_base"] == stats["misses"] * DIM * x.dtype.itemsize
        assert stats["hit_rate"] == (stats["local_hits"] + stats["remote_hits"]) / stats["distinct"]
        cache.reset_stats()
        assert cache.stats()["requested"] == 0
        cache.close()


@pytest.mark.parametrize("world", [2, 3])
def test_gather_equals_the_base_bit_for_bit(world):
    launch(me.check_exact, world, **LAUNCH)


def check_ownership(ctx):
    """Each rank's cached rows are its own, disjoint from the others', and with
    static they are exactly the ranking's stripes; lru keeps that after evictions."""
    rank, world = ctx.rank, ctx.world_size
    for policy in ("static", "lru"):
        base, cache = make_cache(policy, 6, 0.34)
        o = cache.ownership
        if policy == "lru":
            g = torch.Generator().manual_seed(rank)
            for _ in range(8):
                cache.gather(torch.randint(0, NUM_ROWS, (25,), generator=g))
        held = [None] * world
        dist.all_gather_object(held, cache.cached_ids())
        assert all((o.owner[h] == r).all() and h.shape[0] <= 6 - o.num_replicated for r, h in enumerate(held))
        union = np.concatenate(held)
        assert np.unique(union).shape[0] == union.shape[0]
        assert np.intersect1d(union, o.replicated).shape[0] == 0
        if policy == "static":
            assert np.array_equal(np.sort(np.concatenate([union, o.replicated])), np.sort(o.ranked))
            cache.reset_stats()  # every rank asks for every row: the hits are where the rows are held
            cache.gather(torch.arange(NUM_ROWS))
            stats = cache.stats()
            assert stats["local_hits"] == o.num_replicated + held[rank].shape[0]
            assert stats["remote_hits"] == union.shape[0] - held[rank].shape[0]
            assert stats["misses"] == o.owned(rank).shape[0] - held[rank].shape[0]
        cache.close()


def test_ownership_is_disjoint_and_covers_every_cached_row():
    launch(me.check_ownership, 4, **LAUNCH)


def check_replica(ctx):
    """Replicated ids need no exchange; one remote id costs its id, its row and
    a hit count; gather_async returns while its exchange waits for the peers."""
    rank = ctx.rank
    base, cache = make_cache("static", 6, 1.0)
    o, x = cache.ownership, base.x
    assert same(cache.gather(torch.from_numpy(np.tile(o.replicated, 2))), x, np.tile(o.replicated, 2))
    stats = cache.stats()
    assert stats["bytes_sent"] == stats["bytes_received"] == stats["remote_hits"] == stats["misses"] == 0
    assert stats["local_hits"] == stats["distinct"] == 6
    cache.reset_stats()
    remote = int(np.flatnonzero(o.owner == 1)[0])
    ids = torch.tensor([remote] if rank == 0 else [], dtype=torch.long)
    assert same(cache.gather(ids), x, ids)
    row = DIM * x.dtype.itemsize
    sent, received = (8, row + 8) if rank == 0 else (row + 8, 8)
    stats = cache.stats()
    assert (stats["bytes_sent"], stats["bytes_received"]) == (sent, received)
    assert stats["misses"] == (1 if rank == 1 else 0) and stats["remote_hits"] == 0
    if rank == 1:
        time.sleep(1.0)  # rank 0's exchange cannot finish before rank 1 joins it
    pending = cache.gather_async(ids)
    assert rank == 1 or not pending.done()  # rank 0 goes on (computes) while its exchange waits
    assert same(pending.wait(), x, ids)
    cache.close()


def test_replicated_rows_are_served_without_exchange():
    launch(me.check_replica, 2, **LAUNCH)


def check_bad_input(ctx):
    """Rank 1's bad ids or `out` raise there; the others still get exact rows
    (their remote ids from their own base) and the next gather is normal."""
    rank = ctx.rank
    base, cache = make_cache("lru", 4, 0.0)
    x, o = base.x, cache.ownership
    remote = torch.from_numpy(np.flatnonzero(o.owner != rank)[:5])
    bad = [
        (torch.tensor([1, NUM_ROWS]), None, IndexError, f"id {NUM_ROWS} out of range"),
        (torch.tensor([-1, 2]), None, IndexError, "id -1 out of range"),
        (torch.tensor([1.0]), None, TypeError, "int32 or int64"),
        (remote, torch.empty(2, DIM, dtype=x.dtype), ValueError, "out must be"),
    ]
    for ids, out, error, message in bad:
        if rank == 1:
            with pytest.raises(error, match=message):
                cache.gather(ids, out=out)
        else:
            before = cache.stats()["misses"]
            assert same(cache.gather(remote), x, remote)
            assert cache.stats()["misses"] - before >= remote.shape[0]
        assert same(cache.gather(remote), x, remote)
    cache.close()


def test_a_bad_id_raises_on_its_rank_and_the_others_go_on():
    launch(me.check_bad_input, 2, **LAUNCH)


def check_benchmark_simulates_the_cache(ctx):
    """benchmarks/bench_shared_cache.py's simulation of (b) counts the same hits,
    lower-tier rows and exchanged bytes as the real cache over the same batches."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_shared_cache as bench

    rank, world, steps = ctx.rank, ctx.world_size, 6
    g = np.random.default_rng(7)
    traces = [[np.unique(g.integers(0, NUM_ROWS, 4 + 6 * q + s)) for s in range(steps)] for q in range(world)]
    for policy in ("static", "lru"):
        base, cache = make_cache(policy, 7, 0.3)
        for batch in traces[rank]:
            assert same(cache.gather(torch.from_numpy(batch)), base.x, batch)
        stats = [None] * world
        dist.all_gather_object(stats, cache.stats())
        o = cache.ownership
        policies = [shard_policy(o.owned(r), policy, 7 - o.num_replicated, score=scores()) for r in range(world)]
        for p in policies:
            p.warm()
        tally = bench.Tally(1)
        bench.shared(traces, o, policies, DIM * 2, np.zeros(steps, np.int64), tally)
        assert tally.hits[0] == sum(s["local_hits"] + s["remote_hits"] for s in stats)
        assert tally.distinct[0] == sum(s["distinct"] for s in stats)
        assert tally.base_rows[0] == sum(s["misses"] for s in stats)
        assert tally.exchanged[0] == sum(s["bytes_sent"] for s in stats) == sum(s["bytes_received"] for s in stats)
        cache.close()


def test_the_benchmark_simulates_what_the_cache_does():
    launch(me.check_benchmark_simulates_the_cache, 2, **LAUNCH)
