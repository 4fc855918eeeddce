"""Data-parallel minibatch training with 2 gloo processes on the CPU.

Equivalence: the shares of SeedBatches interleave, so the union of the two
ranks' batch i (batch_size B each) is exactly batch i of one process with
batch_size 2B, and every sampled neighbour is a hash of (seed, epoch, batch,
node), so each seed's computation is the same in both runs. With equal
shares and no dropout, the DDP average of the two ranks' gradients is the
gradient of the mean loss over the union: both runs must take the same steps.
A run without gradient averaging, or with overlapping or shifted shares,
ends with other parameters.
"""

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from gnnsys.datasets import PrepareOptions, write_dataset
from gnnsys.errors import DatasetError
from gnnsys.parallel.data_parallel import rank_slice
from gnnsys.parallel.distributed import WorkerError
from gnnsys.trainers.minibatch import train
from gnnsys.training.checkpoints import load_checkpoint
from tests.conftest import random_source

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import this module's hooks by name
import test_data_parallel as me  # noqa: E402

BOUND_S = 40  # process start-up (importing torch) dominates on a loaded 2-core machine
OPTIONS = dict(model="sage", fanouts=(3, 2), hidden=8, epochs=2, dropout=0.0, lr=0.02, seed=1, progress=False)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    # 30 training seeds: 15 per rank; 61 nodes to evaluate: rank_slice pads
    source, _ = random_source(num_nodes=61, num_edges=400, dim=7, seed=0)
    return write_dataset(source, tmp_path_factory.mktemp("dp") / "ds", PrepareOptions(progress=False))


@pytest.fixture(scope="module")
def two_ranks(dataset_dir):
    """W=2, batch_size 4: the run the others are compared with."""
    return train(dataset_dir, batch_size=4, workers=2, **OPTIONS)


def trajectory(result):
    return [(e["loss"], e["train"], e["valid"], e["test"]) for e in result["epochs"]]


def test_two_ranks_equal_one_process_on_the_union_of_their_batches(dataset_dir, two_ranks):
    one = train(dataset_dir, batch_size=8, **OPTIONS)
    for a, b in zip(trajectory(one.to_dict()), trajectory(two_ranks.to_dict()), strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    for (name, a), (_, b) in zip(one.model.named_parameters(), two_ranks.model.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    # the single-process format: same fields, same record keys, config differs by the options only
    ours, theirs = one.to_dict(), two_ranks.to_dict()
    assert ours.keys() == theirs.keys() and ours["best_epoch"] == theirs["best_epoch"]
    assert [e.keys() for e in ours["epochs"]] == [e.keys() for e in theirs["epochs"]]
    assert {k for k in ours["config"] if ours["config"][k] != theirs["config"][k]} == {"batch_size", "workers"}


@pytest.mark.parametrize("policy, replicate", [("lru", 0.0), ("static", 0.5)])
def test_the_shared_cache_changes_no_result_and_serves_rows_between_ranks(dataset_dir, two_ranks, policy, replicate):
    cached = train(
        dataset_dir, batch_size=4, workers=2, cache_rows=10, cache_policy=policy, replicate_frac=replicate, **OPTIONS
    )
    assert trajectory(cached.to_dict()) == trajectory(two_ranks.to_dict())
    tiers = cached.epochs[-1]["tiers"]["cache"]  # rank 0's counters
    assert tiers["remote_hits"] > 0 and tiers["bytes_received"] > 0 and tiers["exchange_s"] > 0
    assert tiers["local_hits"] + tiers["remote_hits"] <= tiers["distinct"]


@pytest.mark.parametrize("n", [0, 1, 5, 7, 61])
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_evaluation_slices_are_equal_distinct_and_cover_the_nodes(n, world_size):
    """Equal lengths: every rank gathers features in as many batches; distinct: a sampler refuses repeats."""
    ids = torch.randperm(100)[:n]
    slices = [rank_slice(ids, r, world_size) for r in range(world_size)]
    assert len({s.shape[0] for s in slices}) == 1
    assert all(s.unique().shape == s.shape for s in slices)
    assert torch.equal(torch.cat(slices)[:n], ids)


def kill_rank_1(record):
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def raise_on_rank_1(record):
    if dist.get_rank() == 1:
        raise RuntimeError("injected")


def exit_on_rank_1(record):
    if dist.get_rank() == 1:
        os._exit(3)


def test_killed_rank_stops_all_and_the_run_resumes_to_the_uninterrupted_result(dataset_dir, tmp_path):
    """Dropout on: each rank's own RNG state must come back from the checkpoint."""
    options = dict(OPTIONS, dropout=0.5, epochs=3, batch_size=4, workers=2)
    whole = train(dataset_dir, checkpoint_dir=tmp_path / "whole", **options)
    assert [p.name for p in (tmp_path / "whole").iterdir()] == ["checkpoint.pt"]  # one file, by rank 0
    assert len(load_checkpoint(tmp_path / "whole")["extra"]["rng_ranks"]) == 2

    began = time.monotonic()
    with pytest.raises(WorkerError, match="^worker 1 failed: killed by signal SIGKILL$"):
        train(dataset_dir, checkpoint_dir=tmp_path / "cut", on_epoch_end=me.kill_rank_1, **options)
    assert time.monotonic() - began < BOUND_S
    assert [p.name for p in (tmp_path / "cut").iterdir()] == ["checkpoint.pt"]
    assert load_checkpoint(tmp_path / "cut")["epoch"] == 1

    resumed = train(dataset_dir, checkpoint_dir=tmp_path / "cut", resume=True, **options)
    assert trajectory(resumed.to_dict()) == trajectory(whole.to_dict())
    for a, b in zip(whole.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(DatasetError, match=r"different options \(workers\)"):
        train(dataset_dir, checkpoint_dir=tmp_path / "cut", resume=True, **dict(options, workers=1, epochs=4))


@pytest.mark.parametrize(
    "hook, cause", [(me.raise_on_rank_1, "RuntimeError: injected"), (me.exit_on_rank_1, "exited with status 3")]
)
def test_a_failing_rank_stops_every_rank_within_seconds(dataset_dir, tmp_path, hook, cause):
    began = time.monotonic()
    with pytest.raises(WorkerError, match=f"^worker 1 failed: {cause}$"):
        train(
            dataset_dir, batch_size=4, workers=2, checkpoint_dir=tmp_path, on_epoch_end=hook, **dict(OPTIONS, epochs=3)
        )
    assert time.monotonic() - began < BOUND_S
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # complete, no temporary file left


def keep_packed_counters(directory, record):
    """Write this rank's packed-tier counters of the epoch (the result holds rank 0's only)."""
    name = f"rank{dist.get_rank()}-epoch{record['epoch']}.json"
    (Path(directory) / name).write_text(json.dumps(record["tiers"]["packed"]))


def test_packed_ranks_pack_their_own_batches_and_train_as_in_memory(dataset_dir, two_ranks, tmp_path):
    """Each rank packs its own share in a subdirectory of the scratch directory: the same steps, bit for bit."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "counters").mkdir()
    packed = train(
        dataset_dir,
        batch_size=4,
        workers=2,
        features="packed",
        cache_rows=10,
        eval="layerwise",
        scratch_dir=tmp_path / "scratch",
        scratch_gb=0.01,
        on_epoch_end=functools.partial(me.keep_packed_counters, tmp_path / "counters"),
        **OPTIONS,
    )
    assert trajectory(packed.to_dict()) == trajectory(two_ranks.to_dict())
    for a, b in zip(two_ranks.model.parameters(), packed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    counters = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "counters").iterdir()}
    assert sorted(counters) == [f"rank{r}-epoch{e}" for r in (0, 1) for e in (0, 1)]
    for c in counters.values():  # 15 seeds a rank in batches of 4, every one from its packs
        assert c["batches"] == 4 and c["unplanned"] == 0 and c["hits"] > 0
    assert list((tmp_path / "scratch").iterdir()) == []  # the ranks' windows and subdirectories are removed


def test_a_killed_packed_run_resumes_to_the_uninterrupted_result(dataset_dir, two_ranks, tmp_path):
    packed = dict(OPTIONS, batch_size=4, workers=2, features="packed", eval="layerwise", checkpoint_dir=tmp_path)
    with pytest.raises(WorkerError, match="^worker 1 failed: killed by signal SIGKILL$"):
        train(dataset_dir, on_epoch_end=me.kill_rank_1, **packed)
    assert load_checkpoint(tmp_path)["epoch"] == 1
    resumed = train(dataset_dir, resume=True, **packed)
    assert trajectory(resumed.to_dict()) == trajectory(two_ranks.to_dict())
    tier = resumed.epochs[1]["tiers"]["packed"]  # the epoch resumed, packed for it
    assert tier["batches"] == 4 and tier["unplanned"] == 0


def _cli_args(dataset_dir, out) -> list[str]:
    args = ["train", str(dataset_dir), "--no-progress", "--json", str(out), "--batch-size", "4"]
    for k, v in OPTIONS.items():
        if k != "progress":
            args += [f"--{k}", ",".join(map(str, v)) if isinstance(v, tuple) else str(v)]
    return args


@pytest.mark.parametrize(
    "launcher",
    [
        [sys.executable, "-m", "gnnsys"],
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "gnnsys"],
    ],
    ids=["cli --workers 2", "torchrun"],
)
def test_the_cli_and_torchrun_give_the_api_result(dataset_dir, two_ranks, tmp_path, launcher):
    """`gnnsys train --workers 2`, and torchrun with 2 processes (workers from WORLD_SIZE)."""
    out = tmp_path / "result.json"
    workers = ["--workers", "2"] if "torch.distributed.run" not in launcher else []
    run = subprocess.run(
        [*launcher, *_cli_args(dataset_dir, out), *workers],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    ran = json.loads(out.read_text())
    for a, b in zip(trajectory(ran), trajectory(two_ranks.to_dict()), strict=True):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-7)
    assert ran["config"] == {**two_ranks.config, "epoch_table": True}  # the CLI prints its rows
