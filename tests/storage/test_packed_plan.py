"""The packed tier's plan (storage/packed_plan.py): windows sized by the
epoch, the scratch space and the host-memory budget, refusals in one line,
the scan-versus-random-reads choice, and `--features ssd` choosing packed
batches or random reads, saying which and why."""

import json
from types import SimpleNamespace

import pytest
import torch

from gnnsys import train
from gnnsys.cli import main
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.storage import packed_plan
from gnnsys.storage.base import tiers
from gnnsys.storage.pack_scan import SPARE, staging_bytes
from gnnsys.storage.packed_plan import packed_parts, packing_pays, plan_packed
from gnnsys.storage.packed_source import PackedFeatures
from gnnsys.storage.packing import padded
from gnnsys.storage.ssd import SSDFeatures
from tests.storage.test_packed_source import FAST
from tests.storage.test_packing import packed_dataset

SIZES = dict(per_epoch=10, batch_rows=100, ahead=2)
BATCH_BYTES = padded(100 * 512)


def plan(**kwargs):
    return plan_packed(1000, 512, **{**SIZES, "free_bytes": 10**12, **kwargs})


def test_a_window_holds_the_epoch_when_the_disk_and_the_budget_allow():
    p = plan(cache_rows=50, host_mem_budget=1.0)
    assert p.window == 10 and p.batch_bytes == BATCH_BYTES and "bound by the epoch" in p.reason
    assert p.memory.cache_rows == 50 and p.memory.parts == packed_parts(1000, 512, 50, 2, 100, 10)
    assert p.memory.parts["packed.cache"] == padded(50 * 512)
    assert p.memory.parts["packer.ids"] == 2 * 10 * 100 * 4  # the window written and the one drawn ahead
    assert p.memory.total <= p.memory.budget


@pytest.mark.parametrize("batches", [1, 4, 9])
def test_the_scratch_space_shrinks_the_window_to_two_windows_it_holds(batches):
    cache = padded(50 * 512) + 8 * 50
    space = 2 * (batches * BATCH_BYTES + cache) + BATCH_BYTES - 1  # one byte short of another batch per window
    for given in (dict(scratch_bytes=space), dict(free_bytes=space)):
        p = plan(cache_rows=50, **given)
        assert p.window == batches and "bound by the scratch space" in p.reason


@pytest.mark.parametrize("batches", [2, 5])
def test_each_of_the_two_windows_keeps_room_for_the_sampled_batches_of_the_one_drawn_after_it(batches):
    cache, sampled = padded(50 * 512) + 8 * 50, 1000
    space = 2 * (batches * (BATCH_BYTES + 2 * sampled) + cache)
    assert plan(cache_rows=50, scratch_bytes=space, sampled_bytes=sampled).window == batches
    assert plan(cache_rows=50, scratch_bytes=space - 2, sampled_bytes=sampled).window == batches - 1


def test_the_budget_shrinks_the_window_to_what_it_holds():
    fixed = sum(packed_parts(1000, 512, 0, 2, 100, 3).values())
    p = plan(host_mem_budget=fixed / 1e9)
    assert p.window == 3 and "bound by the host-memory budget" in p.reason and p.memory.total <= p.memory.budget
    assert sum(packed_parts(1000, 512, 0, 2, 100, 4).values()) > p.memory.budget


def held(cache_rows: int, window: int) -> int:
    return sum(packed_parts(1000, 512, cache_rows, 2, 100, window).values())


@pytest.mark.parametrize("rows", [8, 200, 992])  # whole pages of rows
def test_without_a_cache_size_the_cache_takes_what_the_budget_leaves_beside_the_largest_window(rows):
    p = plan(host_mem_budget=held(rows, 10) / 1e9)
    assert p.window == 10 and p.memory.cache_rows == rows and p.memory.total <= p.memory.budget
    assert f"with a cache of {rows:,} rows" in p.reason and held(rows + 1, 10) > p.memory.budget


def test_a_budget_that_holds_every_row_caches_every_row_and_none_is_chosen_without_a_budget_or_given_a_size():
    assert plan(host_mem_budget=1.0).memory.cache_rows == 1000
    assert plan().memory.cache_rows == 0 and "cache of" not in plan().reason
    assert plan(host_mem_budget=1.0, cache_rows=7).memory.cache_rows == 7
    assert plan(host_mem_budget=1.0, cache_gb=512e-9 * 9).memory.cache_rows == 9


def test_a_chosen_cache_leaves_the_scratch_space_its_windows():
    space = 2 * 4 * BATCH_BYTES + BATCH_BYTES  # windows of 4 batches and no cache, or of 4 and a cache of 2 pages
    p = plan(host_mem_budget=1.0, scratch_bytes=space)
    assert p.window == 4 and "bound by the scratch space" in p.reason
    cache = p.memory.cache_rows
    assert 0 < cache < 1000 and 2 * (padded(cache * 512) + 8 * cache) <= BATCH_BYTES
    assert 2 * (padded((cache + 1) * 512) + 8 * (cache + 1)) > BATCH_BYTES


def test_staging_is_shared_by_a_windows_files_within_its_bounds():
    assert staging_bytes(1) == (1 + SPARE) * (2 << 20)  # at most 2 MiB a buffer
    assert staging_bytes(40) == (40 + SPARE) * ((64 << 20) // 40 // 4096 * 4096)  # 64 MiB shared, whole pages
    assert staging_bytes(1000) == (1000 + SPARE) * (256 << 10)


@pytest.mark.parametrize(
    "given, option, text",
    [
        (dict(host_mem_budget=1e-6), "host_mem_budget", "1e-06 GB cannot hold one packed batch (53,248 bytes"),
        (dict(scratch_bytes=BATCH_BYTES), "scratch_gb", "53,248 bytes cannot hold one packed batch (53,248 bytes"),
    ],
)
def test_no_room_for_one_batch_is_refused_in_one_line(given, option, text):
    with pytest.raises(ConfigError) as e:
        plan(**given)
    assert e.value.option == option and text in str(e.value) and "\n" not in str(e.value)


def test_a_disk_without_room_for_one_batch_is_named_in_one_line():
    with pytest.raises(
        DatasetError, match=r"^/packs: not enough scratch space for one packed batch .* 1,000 bytes free$"
    ):
        plan(free_bytes=1000, scratch="/packs")


@pytest.mark.parametrize("batch_rows, pays", [(1000, False), (100_000, True)])
def test_packing_pays_when_a_windows_scan_beats_its_random_reads(batch_rows, pays):
    model = SimpleNamespace(seq_bytes_per_s=1e9, rates={"threads": {1: 1e4, 32: 5e4}, "uring": {32: 4e4}})
    p = plan_packed(10**6, 512, per_epoch=10, batch_rows=batch_rows, ahead=2, free_bytes=10**12)
    decided, why = packing_pays(p, 10**9, batch_rows, model)  # a 1 s scan against 0.2 s or 20 s of random reads
    assert decided == pays and ("beats" in why) == pays
    assert packing_pays(p, 10**9, batch_rows, None)[0]  # unmeasured: packing is assumed to pay


def tier_kinds(ds, **options):
    """The tiers a run of `options` trains through (the trainer's store), and its note."""
    from gnnsys.trainers.minibatch import MinibatchTrainer
    from gnnsys.training.options import MinibatchOptions

    trainer = MinibatchTrainer(ds, MinibatchOptions(**{**FAST, **options}).for_dataset(ds))
    try:
        return [type(t) for t in tiers(trainer.store[next(iter(trainer.store))])], trainer.store.notes
    finally:
        trainer.store.close()


def test_features_ssd_packs_unless_an_option_of_random_reads_or_the_device_says_otherwise(make_dataset, monkeypatch):
    ds = packed_dataset(make_dataset)
    kinds, notes = tier_kinds(ds, features="ssd", cache_rows=30)
    assert kinds == [PackedFeatures, SSDFeatures] and list(notes.values())[0].startswith("packed batches in windows")
    for given, why in [
        (dict(cache_policy="hybrid", lookahead=2), "cache_policy is the random-read tier's"),
        (dict(scratch_gb=0.0), "scratch_gb 0 allows no packed batches"),
    ]:
        kinds, notes = tier_kinds(ds, features="ssd", cache_rows=30, **given)
        assert kinds[-1] is SSDFeatures and PackedFeatures not in kinds and why in list(notes.values())[0]
    slow_scan = SimpleNamespace(seq_bytes_per_s=1.0, rates={"threads": {1: 1e9}})
    monkeypatch.setattr(packed_plan, "_device_model", lambda *a: slow_scan)
    kinds, notes = tier_kinds(ds, features="ssd", cache_rows=30)
    assert PackedFeatures not in kinds and "less than its scan of the rows file" in list(notes.values())[0]
    with pytest.raises(ConfigError, match="^scratch_gb: bounds packed batches, and none are packed here"):
        tier_kinds(ds, features="ssd", cache_rows=30, scratch_gb=1.0)


def test_train_with_features_ssd_says_which_tier_and_trains_as_in_memory(make_dataset, capsys):
    ds = packed_dataset(make_dataset)
    packed = train(ds, **FAST, features="ssd", cache_rows=30)
    memory = train(ds, **FAST)
    assert [r["loss"] for r in packed.epochs] == [r["loss"] for r in memory.epochs]
    assert all(r["tiers"]["packed"]["unplanned"] == 0 for r in packed.epochs)
    assert capsys.readouterr().out.startswith("features ssd: packed batches in windows of 10 batches")
    assert main(["train", str(ds.path), "--features", "packed", "--scratch-gb", "0", "--no-progress"]) == 2
    assert "--scratch-gb: 0 holds no packed batch" in capsys.readouterr().err


def test_info_says_what_features_ssd_reads_with_and_why(make_dataset, capsys):
    ds = packed_dataset(make_dataset)
    assert main(["info", str(ds.path)]) == 0
    assert "\nssd          --features ssd (default sampling): packed batches in windows of" in capsys.readouterr().out
    assert main(["info", str(ds.path), "--host-mem-budget", "0.001", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["ssd"]
    assert said.startswith("rows read at random: host_mem_budget: 0.001 GB cannot hold one packed batch")


@pytest.mark.parametrize("cache_rows, lookahead", [(30, 0), (0, 3)])
def test_bytes_the_packed_tier_holds_stay_within_its_plan(make_dataset, tmp_path, cache_rows, lookahead):
    """Through three epochs of packed batches, after every gather, each part
    the tiers hold is at most what the host-memory plan gave it."""
    from gnnsys.storage.base import stack_host_bytes
    from gnnsys.storage.stack_builder import build_stack
    from tests.storage.test_packing import BATCHES, Draws

    ds = packed_dataset(make_dataset)
    stack, plan = build_stack(
        ds.features,
        degree=None,
        features="packed",
        cache_rows=cache_rows,
        lookahead=lookahead,
        host_mem_budget=0.05,
        draws=lambda: Draws(ds.num_nodes, epochs=3),
        scratch_dir=tmp_path,
    )
    assert plan.budget == 0.05e9 and plan.total <= plan.budget and "packer.ids" in plan.parts
    for epoch in range(3):
        for index in range(BATCHES):
            ids = torch.from_numpy(Draws(ds.num_nodes).draw(epoch, index))
            assert torch.equal(stack.gather(ids), ds.features.gather(ids))
            held = stack_host_bytes(stack)
            for part, n in held.items():
                if part != "total":
                    assert n <= plan.parts[part], (part, held, plan.parts)
    assert stack.stats()["batches"] == 3 * BATCHES
    stack.close()
