"""The feature tiers of minibatch training: host-memory plan (and the bytes
held, measured against it), stack and store building, training through the
SSD tier and a cache, `gnnsys info` placement advice."""

import json

import pytest
import torch

from gnnsys import train
from gnnsys.cli import main
from gnnsys.datasets import PrepareOptions
from gnnsys.errors import ConfigError
from gnnsys.samplers import NeighborSampler, SeedBatches
from gnnsys.storage.base import tiers
from gnnsys.storage.cache import out_degree
from gnnsys.storage.memory_plan import FIRST_STAGING, GB, MAX_STAGING, plan_host_memory
from gnnsys.storage.stack_builder import build_stack
from gnnsys.storage.store import HOMOGENEOUS, FeatureStore, build_store

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=16, progress=False, prefetch=2, epochs=2, eval_every=2)


def test_plan_sizes_every_part_stages_and_reads_ahead_with_what_is_left():
    from gnnsys.storage.cache import HybridPolicy, VictimBuffer

    plan = plan_host_memory(
        10_000, 1000, cache_gb=0.004, cache_policy="hybrid", lookahead=2, batch_rows=500, host_mem_budget=0.02
    )
    assert (plan.cache_rows, plan.victim_rows) == (4000, 1000)
    policy = HybridPolicy.planned_bytes(4000, 10_000, scored=True, window_ids=1000)
    fixed = {
        "cache.rows": 4000 * 1000,
        "cache.policy": policy,
        "victim": VictimBuffer.planned_bytes(1000, 10_000, 1000),
    }
    left = 0.02 * GB - sum(fixed.values())
    assert plan.lookahead_fill_rows == 2 * 500  # the window's worth, after the first staging
    assert plan.staging_bytes == left - 1000 * 1000  # then the staging takes the rest (under MAX_STAGING)
    assert plan.parts == {**fixed, "ssd.staging": plan.staging_bytes, "cache.lookahead_fill": 1000 * 1000}
    tight = plan_host_memory(
        10_000, 1000, cache_gb=0.004, cache_policy="hybrid", lookahead=2, batch_rows=500, host_mem_budget=0.0142
    )
    assert (
        FIRST_STAGING <= tight.staging_bytes < FIRST_STAGING + 1000 and 0 < tight.lookahead_fill_rows < 1000
    )  # shrank
    roomy = plan_host_memory(10_000, 1000, cache_rows=4000, lookahead=2, batch_rows=500, host_mem_budget=1)
    assert roomy.staging_bytes == MAX_STAGING and roomy.lookahead_fill_rows == 2 * 500  # the window's worth at most
    assert roomy.total <= GB
    assert plan_host_memory(10_000, 1000, cache_rows=400).victim_rows == 0  # no window, no victim buffer
    assert plan_host_memory(100, 1000, cache_rows=400, lookahead=1).cache_rows == 100  # never more than the table


def test_plan_refuses_a_budget_naming_every_part():
    with pytest.raises(ConfigError) as e:
        plan_host_memory(10_000, 1000, cache_rows=4000, lookahead=1, host_mem_budget=0.005, min_staging=2 << 20)
    assert str(e.value).startswith("host_mem_budget: 0.005 GB cannot hold cache.rows 3.8 MiB, cache.policy ")
    assert "victim " in str(e.value) and "ssd.staging (at least) 2.0 MiB" in str(e.value)


@pytest.mark.parametrize("policy, budget", [("hybrid", 0.01), ("lru", 0.01), ("hybrid", 0.0045)])
def test_bytes_held_at_every_step_stay_within_the_plan(make_dataset, policy, budget):
    """A trace of three epochs through SSD + victim buffer + cache with reading
    ahead, driven by the real loader's window: after every batch (and with every
    read ahead finished) each tier holds at most what the plan gave it."""
    from gnnsys.loading.feature_store import largest_batch_rows
    from gnnsys.loading.loader import MinibatchLoader
    from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions
    from gnnsys.storage.base import stack_host_bytes

    ds = ssd_dataset(make_dataset)
    sampler = NeighborSampler(ds.indptr, ds.indices, [4, 3], seed=0)
    batch_rows = largest_batch_rows(sampler, SeedBatches(ds.split("train"), 16, shuffle=True, seed=0), ds.num_nodes)
    stack, plan = table_stack(
        ds,
        features="ssd",
        cache_rows=40,
        cache_policy=policy,
        lookahead=3,
        host_mem_budget=budget,
        batch_rows=batch_rows,
        presample=lambda: torch.arange(ds.num_nodes, dtype=torch.float64).numpy(),
    )
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[4, 3]),
        BatchOptions(batch_size=16),
        PipelineOptions(prefetch=0, lookahead=3),
        features=stack,
    )
    planned = {
        t: sum(n for k, n in plan.parts.items() if k.startswith(t + ".") or k == t) for t in ("cache", "victim", "ssd")
    }
    steps = 0
    for epoch in range(3):
        loader.set_epoch(epoch)
        for mb in loader:
            assert torch.equal(mb.x, ds.features.gather(mb.input_nodes))
            stack.wait_lookahead_fill()
            held = stack_host_bytes(stack)
            for tier, bound in planned.items():
                assert sum(n for k, n in held.items() if k.startswith(tier + ".")) <= bound, (tier, held, plan)
            assert held["total"] <= plan.total <= plan.budget
            steps += 1
    stats = stack.stats()
    assert steps > 10 and stats["fill_capacity"] == plan.lookahead_fill_rows
    if (
        plan.lookahead_fill_rows < 3 * batch_rows
    ):  # the budget shrank the read-ahead: rows it could not hold were skipped
        assert stats["fill_skipped"] > 0
    stack.close()


def table_stack(ds, **options):
    """build_stack over `ds`'s features, its cache scored by out-degree as training scores it."""
    return build_stack(ds.features, degree=lambda: out_degree(ds.indices.numpy(), ds.num_nodes), **options)


def ssd_dataset(make_dataset, **kwargs):
    ds, _ = make_dataset(
        num_nodes=300, num_edges=2400, dim=12, options=PrepareOptions(progress=False, align=512), **kwargs
    )
    return ds


@pytest.mark.parametrize("policy", ["static", "presample", "lru", "sieve", "s3fifo"])
def test_ssd_and_cache_stack_gathers_the_table(make_dataset, policy):
    ds = ssd_dataset(make_dataset)
    stack, plan = table_stack(
        ds,
        features="ssd",
        cache_rows=40,
        cache_policy=policy,
        host_mem_budget=0.01,
        presample=lambda: torch.arange(ds.num_nodes, dtype=torch.float64).numpy(),
    )
    names = [type(t).__name__ for t in tiers(stack)]
    assert names == ["CachedFeatures", "SSDFeatures"] and plan.cache_rows == 40
    ids = torch.tensor([0, 299, 5, 5, 150, 0])
    for _ in range(3):
        assert torch.equal(stack.gather(ids), ds.features.gather(ids))
    stats = FeatureStore({HOMOGENEOUS: stack}).stats()[HOMOGENEOUS]
    assert stats["cache"]["requested"] == 18 and stats["ssd"]["bytes_read"] > 0


def test_ssd_needs_a_prepared_dataset(make_dataset):
    from torch_geometric.data import Data

    from gnnsys.datasets import Dataset

    ds = ssd_dataset(make_dataset)
    dst = torch.repeat_interleave(torch.arange(ds.num_nodes), torch.diff(ds.indptr.long()))
    masks = {
        name: torch.zeros(ds.num_nodes, dtype=torch.bool).index_fill_(0, ds.split(split), True)
        for name, split in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test"))
    }
    memory = Dataset.from_pyg(
        Data(
            x=ds.features.gather(torch.arange(ds.num_nodes)),
            y=ds.labels,
            edge_index=torch.stack([ds.indices.long(), dst]),
            **masks,
        )
    )
    with pytest.raises(ConfigError, match="^features: 'ssd' reads a prepared dataset's features.bin"):
        build_store({HOMOGENEOUS: memory.features}, degree={HOMOGENEOUS: None}, features="ssd", cache_rows=10)


def test_training_through_ssd_and_cache_equals_training_in_memory(make_dataset):
    ds = ssd_dataset(make_dataset)
    memory = train(ds, **FAST)
    tiered = train(
        ds, **FAST, features="ssd", cache_rows=60, cache_policy="lru", host_mem_budget=0.01, eval="layerwise"
    )
    assert [r["loss"] for r in tiered.epochs] == [r["loss"] for r in memory.epochs]
    assert tiered.test == memory.test
    for record in tiered.epochs:  # each epoch's own counters
        cache, ssd = record["tiers"]["cache"], record["tiers"]["ssd"]
        assert cache["hits"] + cache["misses"] > 0 and ssd["unique_rows"] == cache["misses"]
    assert "tiers" not in memory.epochs[0]


def test_cli_trains_from_ssd_and_reports_tiers(make_dataset, tmp_path, capsys):
    ds = ssd_dataset(make_dataset)
    out = tmp_path / "result.json"
    assert (
        main(
            [
                "train",
                str(ds.path),
                "--features",
                "ssd",
                "--cache-rows",
                "50",
                "--cache-policy",
                "sieve",
                "--host-mem-budget",
                "0.01",
                "--fanouts",
                "4,3",
                "--hidden",
                "8",
                "--epochs",
                "1",
                "--batch-size",
                "32",
                "--no-progress",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())["epochs"][0]
    assert (
        set(record["tiers"]) == {"cache", "ssd", "host_bytes"} and record["tiers"]["ssd"]["read_amplification"] >= 1.0
    )
    held = record["tiers"]["host_bytes"]
    assert held["cache.rows"] == 50 * 48 and held["total"] <= 0.01 * GB


def test_cli_refuses_a_budget_too_small_in_one_line(make_dataset, capsys):
    ds = ssd_dataset(make_dataset)
    assert (
        main(
            [
                "train",
                str(ds.path),
                "--features",
                "ssd",
                "--cache-rows",
                "100",
                "--host-mem-budget",
                "0.001",
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --host-mem-budget: 0.001 GB cannot hold" in err


def test_info_says_whether_the_table_fits_the_budget(make_dataset, capsys):
    ds = ssd_dataset(make_dataset)
    table = ds.num_nodes * ds.meta["features"]["row_stride"]  # 12 float32 = 48 B in 64 B rows, 8 per 512 B block
    assert main(["info", str(ds.path), "--host-mem-budget", str(table / 2 / GB)]) == 0
    text = capsys.readouterr().out
    assert "placement    auto -> cpu-gather" in text and "too small even for the SSD tier's read staging" in text
    assert main(["info", str(ds.path), "--host-mem-budget", "1", "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)["placement"]
    assert advice["table_bytes"] == table and advice["fits_budget"] and advice["auto"] == "cpu-gather"


@pytest.mark.parametrize("tiers", [dict(), dict(scratch_gb=0.0), dict(cache_rows=20, cache_policy="lru")])
def test_file_truncated_during_training_stops_the_loop_with_a_clear_error(make_dataset, tiers):
    import threading

    from gnnsys.errors import DatasetError

    ds = ssd_dataset(make_dataset)

    def truncate(record):
        with open(ds.path / "features.bin", "r+b") as f:
            f.truncate(512 * 10)

    problem = "was replaced or changed" if not tiers else "truncated after opening"  # packed: its scan checks the file
    with pytest.raises(DatasetError, match=f"features.bin: {problem}"):
        train(ds, **{**FAST, "epochs": 3, "eval_every": 3}, features="ssd", on_epoch_end=truncate, **tiers)
    loader_threads = [t for t in threading.enumerate() if t.name.startswith(("gnnsys-sample", "gnnsys-gather"))]
    assert not [t for t in loader_threads if t.is_alive()]


@pytest.mark.parametrize("policy", ["hybrid", "lru"])
def test_training_with_lookahead_victim_buffer_and_read_ahead_equals_training_in_memory(make_dataset, policy):
    ds = ssd_dataset(make_dataset)
    memory = train(ds, **FAST)
    tiered = train(
        ds,
        **FAST,
        features="ssd",
        cache_rows=30,
        cache_policy=policy,
        lookahead=3,
        victim_rows=20,
        host_mem_budget=0.01,
    )
    assert [r["loss"] for r in tiered.epochs] == [r["loss"] for r in memory.epochs]
    tiers = tiered.epochs[-1]["tiers"]
    assert set(tiers) == {"cache", "victim", "ssd", "host_bytes"}
    assert tiers["victim"]["offered"] > 0 and tiers["cache"]["filled"] > 0
    assert tiers["ssd"]["unique_rows"] <= tiers["cache"]["misses"]  # the victim buffer served some misses
