"""The packed tier (storage/packed_source.py): exact rows from windows packed
ahead (crossing epochs), files removed once read, other gathers served by
its base, restarts at an epoch, stale windows rebuilt and changed ones
refused; training through it equals training in memory and through the SSD tier."""

import json
import os
import tempfile

import numpy as np
import pytest
import torch

from gnnsys import train
from gnnsys.cli import main
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.storage import packed_source
from gnnsys.storage.cache import out_degree
from gnnsys.storage.packed_source import PackedFeatures
from gnnsys.storage.ssd import SSDFeatures
from gnnsys.storage.stack_builder import build_stack
from gnnsys.storage.store import HOMOGENEOUS, build_store
from gnnsys.storage.table import RowTable
from tests.storage.test_packing import BATCHES, Draws, packed_dataset

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=16, progress=False, prefetch=2, epochs=3, eval_every=3)


def packed(ds, scratch_dir=None, epochs=None, **kwargs) -> PackedFeatures:
    base = SSDFeatures(ds.features, engine="threads", threads=2, max_gap=0, host_mem_budget=1 << 20)
    kwargs.setdefault("capacity", 30)
    return PackedFeatures(base, ds.features, Draws(ds.num_nodes, epochs=epochs), scratch_dir=scratch_dir, **kwargs)


@pytest.fixture
def scratch(tmp_path):
    """The directory the tests' packed tiers write their windows in."""
    (tmp_path / "scratch").mkdir()
    return tmp_path / "scratch"


def batch(ds, epoch, index) -> torch.Tensor:
    return torch.from_numpy(Draws(ds.num_nodes).draw(epoch, index))


def test_gathers_equal_the_table_through_windows_that_cross_epochs(make_dataset, scratch):
    ds = packed_dataset(make_dataset)
    tier = packed(ds, scratch, window=3, ahead=2, epochs=3)
    for epoch in range(3):
        for index in range(BATCHES):
            ids = batch(ds, epoch, index)
            assert torch.equal(tier.gather(ids), ds.features.gather(ids))
            g = epoch * BATCHES + index
            window = scratch / f"window-{g // 3 * 3:010d}-3"
            assert not (window / f"b{g:010d}.seg").exists()  # consumed
    stats = tier.stats()
    assert stats["batches"] == 3 * BATCHES and stats["unplanned"] == 0 and stats["windows_packed"] == 4
    assert 0 < stats["hit_rate"] < 1 and stats["bytes_read"] > 0
    out = torch.empty(5, 12)  # a gather that is no planned batch: served by the SSD tier
    ids = torch.tensor([3, 1, 3, 299, 0])
    assert torch.equal(tier.gather(ids, out=out), ds.features.gather(ids)) and tier.stats()["unplanned"] == 1
    with pytest.raises(IndexError):
        tier.gather(torch.tensor([300]))
    tier.close()
    assert list(scratch.iterdir()) == []


def test_a_planned_batch_of_distinct_ids_is_recognised_in_any_order_without_a_sort(make_dataset, scratch, monkeypatch):
    ds = packed_dataset(make_dataset)
    base = SSDFeatures(ds.features, engine="threads", threads=2, max_gap=0, host_mem_budget=1 << 20)
    draws = Draws(ds.num_nodes, epochs=1, distinct=True)
    tier = PackedFeatures(base, ds.features, draws, capacity=30, scratch_dir=scratch, window=2)
    monkeypatch.setattr(packed_source, "distinct_inverse", None)  # a sort would fail
    for index in range(BATCHES):
        ids = torch.from_numpy(draws.draw(0, index))
        ids = ids.flip(0) if index % 2 else ids  # the order the loader's batch has, or another
        assert torch.equal(tier.gather(ids), ds.features.gather(ids))
    stats = tier.stats()
    assert (
        stats["batches"] == BATCHES and stats["unplanned"] == 0 and 0 < stats["hits"] < stats["hits"] + stats["misses"]
    )
    tier.close()


@pytest.mark.parametrize("dim, dtype, align", [(7, "float16", 1), (300, "bfloat16", 128), (5, "float32", 4)])
def test_rows_of_any_width_and_stride_come_back_exactly(make_dataset, scratch, dim, dtype, align):
    ds = packed_dataset(make_dataset, dim=dim, dtype=dtype, align=align)  # rows straddling 512 B blocks too
    tier = packed(ds, scratch, capacity=20, epochs=2)
    for epoch in range(2):
        for index in range(BATCHES):
            ids = batch(ds, epoch, index)
            got = tier.gather(ids)
            assert torch.equal(got.view(torch.uint8), ds.features.gather(ids).view(torch.uint8))
    assert tier.stats()["batches"] == 2 * BATCHES
    tier.close()


def test_a_batch_that_reads_no_row_is_served_packed_and_so_are_those_after_it(make_dataset, scratch):
    """A node type a heterogeneous batch reads no row of gathers nothing: still that batch's turn."""
    ds = packed_dataset(make_dataset)
    draws = Draws(ds.num_nodes, epochs=1)
    draws.draw = lambda epoch, index: np.empty(0, np.int64) if index == 1 else Draws.draw(draws, epoch, index)
    base = SSDFeatures(ds.features, engine="threads", threads=2, max_gap=0, host_mem_budget=1 << 20)
    tier = PackedFeatures(base, ds.features, draws, capacity=30, scratch_dir=scratch)
    for index in range(BATCHES):
        ids = torch.from_numpy(draws.draw(0, index))
        assert torch.equal(tier.gather(ids), ds.features.gather(ids))
    assert tier.stats()["batches"] == BATCHES and tier.stats()["unplanned"] == 0
    tier.close()


def test_gather_into_writes_rows_in_place_and_repeats(make_dataset, scratch):
    ds = packed_dataset(make_dataset)
    tier = packed(ds, scratch)
    ids = batch(ds, 0, 0)
    out, at = torch.zeros(2 * len(ids), 12), torch.arange(len(ids)) * 2 + 1
    tier.gather_into(ids, out, at)
    assert torch.equal(out[1::2], ds.features.gather(ids)) and not out[0::2].any()
    tier.close()


def test_start_epoch_packs_from_that_epoch(make_dataset, scratch):
    ds = packed_dataset(make_dataset)
    tier = packed(ds, scratch)
    tier.gather(batch(ds, 0, 0))
    tier.start_epoch(2)  # a resume, or a caller that jumps
    for index in range(BATCHES):
        ids = batch(ds, 2, index)
        assert torch.equal(tier.gather(ids), ds.features.gather(ids))
    tier.start_epoch(3)  # where the tier already is: nothing repacked
    assert torch.equal(tier.gather(batch(ds, 3, 0)), ds.features.gather(batch(ds, 3, 0)))
    assert tier.stats()["unplanned"] == 0 and tier.stats()["windows_packed"] >= 3  # epochs 0, 2 and 3 at least
    tier.close()
    assert list(scratch.iterdir()) == []


def test_a_stale_window_is_rebuilt_and_a_changed_one_refused(make_dataset, scratch):
    ds = packed_dataset(make_dataset)
    tier = packed(ds, scratch)
    manifest, directory, _ = tier.packer.pack(0, BATCHES)  # left by an earlier run
    payload = json.loads((directory / "manifest.json").read_text())
    payload["key"]["seed"] = 9
    (directory / "manifest.json").write_text(json.dumps(payload))
    for index in range(BATCHES):
        ids = batch(ds, 0, index)
        assert torch.equal(tier.gather(ids), ds.features.gather(ids))
    assert tier.stats()["windows_packed"] >= 1 and tier.stats()["windows_reused"] == 0
    tier.close()

    tier = packed(ds, scratch)
    manifest, directory, _ = tier.packer.pack(0, BATCHES)
    path = directory / manifest.segments[2].file
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    tier.gather(batch(ds, 0, 0))
    tier.gather(batch(ds, 0, 1))
    assert tier.stats()["windows_reused"] == 1
    with pytest.raises(DatasetError, match="refused"):
        tier.gather(batch(ds, 0, 2))
    tier.close()


@pytest.mark.parametrize("cache", [dict(cache_rows=60), dict(cache_rows=60, lookahead=3), {}])
def test_training_through_packed_batches_equals_training_in_memory_and_through_ssd(make_dataset, cache):
    ds = packed_dataset(make_dataset)
    memory = train(ds, **FAST)
    ssd = train(ds, **FAST, features="ssd", cache_rows=60, cache_policy="lru", eval="layerwise")
    through = train(ds, **FAST, features="packed", eval="layerwise", **cache)
    losses = [r["loss"] for r in memory.epochs]
    assert [r["loss"] for r in through.epochs] == losses == [r["loss"] for r in ssd.epochs]
    assert through.test == memory.test
    batches = -(-ds.split("train").shape[0] // FAST["batch_size"])
    for record in through.epochs:
        tier = record["tiers"]["packed"]
        assert tier["batches"] == batches and tier["unplanned"] == 0 and record["tiers"]["ssd"]["gathers"] == 0
        assert (tier["hits"] > 0) == bool(cache)


def test_options_packed_has_no_use_for_are_refused_in_one_line(make_dataset, capsys):
    ds = packed_dataset(make_dataset)
    degree = lambda: out_degree(ds.indices.numpy(), ds.num_nodes)  # noqa: E731
    for option, value in (("cache_policy", "lru"), ("victim_rows", 5), ("replicate_frac", 0.5)):
        with pytest.raises(ConfigError, match=f"^{option}: does not apply to features='packed'"):
            build_stack(
                ds.features, degree=degree, features="packed", cache_rows=10, draws=lambda: None, **{option: value}
            )
    with pytest.raises(ConfigError, match="^features: 'packed' needs the training batches"):
        build_stack(ds.features, degree=degree, features="packed")
    args = ["train", str(ds.path), "--features", "packed", "--cache-rows", "10", "--cache-policy", "sieve"]
    assert main([*args, "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cache-policy" in err[0] and "packed" in err[0]


def test_packed_needs_a_prepared_dataset(make_dataset):
    ds = packed_dataset(make_dataset)
    held = RowTable(np.array(ds.features.table), 12, torch.float32)  # the rows copied into memory
    with pytest.raises(ConfigError, match="^features: 'packed' reads a prepared dataset's features.bin"):
        build_store({HOMOGENEOUS: held}, degree={HOMOGENEOUS: None}, features="packed", draws={HOMOGENEOUS: None})


def test_sampled_evaluation_reads_through_the_ssd_tier_and_scores_as_it(make_dataset):
    ds = packed_dataset(make_dataset)
    ssd = train(ds, **FAST, features="ssd", cache_rows=60, eval="sampled")
    through = train(ds, **FAST, features="packed", cache_rows=60, eval="sampled")
    assert through.test == ssd.test and through.epochs[-1]["valid"] == ssd.epochs[-1]["valid"]
    assert [r["loss"] for r in through.epochs] == [r["loss"] for r in ssd.epochs]


def test_windows_go_beside_the_dataset_when_the_temporary_directory_refuses_o_direct(make_dataset, monkeypatch):
    ds = packed_dataset(make_dataset)
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm to stand for a temporary directory without O_DIRECT")
    monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")
    tier = packed(ds)
    assert tier.scratch.parent == ds.path.parent and tier.scratch.name.startswith("gnnsys-packed-")
    ids = batch(ds, 0, 0)
    assert torch.equal(tier.gather(ids), ds.features.gather(ids)) and tier.stats()["batches"] == 1
    tier.close()
    assert not tier.scratch.exists() and not [p for p in os.listdir("/dev/shm") if p.startswith("gnnsys-packed-")]


def test_the_scratch_budget_refuses_a_window_it_cannot_hold_and_leaves_nothing(make_dataset, scratch):
    ds = packed_dataset(make_dataset)
    tier = packed(ds, scratch, window=3, epochs=1, scratch_bytes=1024)
    with pytest.raises(
        ConfigError,
        match=r"^scratch_gb: the packed batches 0 to 2 need [\d,]+ bytes and 0 for the next window's sampled batches",
    ):
        tier.gather(batch(ds, 0, 0))
    tier.close()
    assert list(scratch.iterdir()) == []


def test_train_packs_in_the_scratch_directory_and_within_the_budget_it_is_given(make_dataset, tmp_path, capsys):
    import shutil as real

    ds = packed_dataset(make_dataset)
    scratch = tmp_path / "packs"
    scratch.mkdir()
    full = type("Usage", (), {"free": 0})()
    with pytest.MonkeyPatch.context() as mp:  # a full disk where the packs are asked to go, and only there
        usage = real.disk_usage
        mp.setattr(real, "disk_usage", lambda p: full if str(p).startswith(str(scratch)) else usage(p))
        with pytest.raises(DatasetError, match=f"^{scratch}: not enough scratch space"):
            train(ds, **FAST, features="packed", scratch_dir=scratch)
    args = ["train", str(ds.path), "--features", "packed", "--epochs", "1", "--no-progress"]
    assert main([*args, "--scratch-dir", str(scratch), "--scratch-gb", "1e-9"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("gnnsys train: error: --scratch-gb: 1 bytes cannot hold one packed batch")
        and err.count("\n") == 1
    )
    assert list(scratch.iterdir()) == []
    assert main(["train", str(ds.path), "--scratch-gb", "1", "--no-progress"]) == 2
    assert (
        "--scratch-gb: bounds the packed batches on disk; needs features='ssd' or 'packed'" in capsys.readouterr().err
    )
    result = train(ds, **FAST, features="packed", scratch_dir=scratch, scratch_gb=1.0)
    assert result.config["scratch_dir"] == str(scratch) and result.config["eval"] == "auto"
    assert list(scratch.iterdir()) == []  # the windows are removed at the end
