"""The packed tier's window cache (storage/packed_cache.py): a window's cache
loaded whole, packed into the tier's memory, or carried from the window
before by its incoming rows; the tier carries it where it can, reads less
for it, and serves the same rows."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.errors import DatasetError
from gnnsys.storage import packed_cache
from gnnsys.storage.digest import digest
from gnnsys.storage.packed_cache import WindowCache
from gnnsys.storage.packing import Manifest, Segment, ids_hash, padded, read_segment
from tests.storage.test_packed_source import batch, packed
from tests.storage.test_packing import BATCHES, make_packer, packed_dataset
from tests.storage.test_packing import rows_of as table_rows

ROW_BYTES = 8


def rows_of(ids: np.ndarray) -> np.ndarray:
    """A row per id whose bytes say the id: [len(ids), ROW_BYTES] uint8."""
    return np.ascontiguousarray(ids.astype(np.int64).view(np.uint8).reshape(-1, ROW_BYTES))


def cache_window(directory, ids: np.ndarray) -> Manifest:
    """Write `ids`' rows to directory/cache.seg as a window's cache (padded); its manifest."""
    content = bytearray(padded(ids.shape[0] * ROW_BYTES))
    content[: ids.shape[0] * ROW_BYTES] = rows_of(ids).tobytes()
    (directory / "cache.seg").write_bytes(content)
    segment = Segment("cache.seg", int(ids.shape[0]), len(content), digest(content))
    return Manifest({"cached": [int(ids.shape[0]), ids_hash(ids)]}, 0, [], segment)


def held(cache: WindowCache, ids: np.ndarray) -> np.ndarray:
    return cache.rows(1)[cache.slot[ids]]


sets = st.lists(st.integers(0, 199), max_size=40, unique=True).map(lambda v: np.array(sorted(v), np.int64))


@settings(deadline=None, max_examples=60)
@given(first=sets, second=sets)
def test_a_carried_cache_holds_exactly_the_new_set(tmp_path_factory, first, second):
    tmp = tmp_path_factory.mktemp("carry")
    cache = WindowCache(200, 40, ROW_BYTES)
    cache.load(tmp, cache_window(tmp, first), False, first, [len(first), ids_hash(first)])
    assert np.array_equal(held(cache, first), rows_of(first))
    incoming = np.setdiff1d(second, first)
    content = bytearray(padded(max(1, incoming.shape[0]) * ROW_BYTES))
    content[: incoming.shape[0] * ROW_BYTES] = rows_of(incoming).tobytes()
    cache.carry(tmp / "incoming.seg", memoryview(content), incoming.shape[0], second, [len(second), 0])
    assert np.array_equal(held(cache, second), rows_of(second))
    others = np.setdiff1d(np.arange(200), second)
    assert (cache.slot[others] == -1).all()
    assert np.unique(cache.slot[second]).shape[0] == second.shape[0]  # no two rows share a slot


def test_a_window_without_its_cache_file_is_refused_where_its_cache_cannot_be_carried(tmp_path):
    manifest = Manifest({"cached": [2, 0]}, 0, [], None, [5, 1], Segment("incoming.seg", 2, 4096, 0))
    with pytest.raises(DatasetError, match="carried over from a window this reader did not read; refused"):
        WindowCache(50, 10, ROW_BYTES).load(tmp_path, manifest, False, np.array([1, 2]), [2, 0])


def test_incoming_rows_that_are_not_the_rows_missing_are_refused(tmp_path):
    cache = WindowCache(50, 10, ROW_BYTES)
    first = np.array([1, 2, 3])
    cache.load(tmp_path, cache_window(tmp_path, first), False, first, [3, 0])
    with pytest.raises(DatasetError, match=r"incoming\.seg: holds 1 rows, its window's cache lacks 2; refused"):
        cache.carry(tmp_path / "incoming.seg", memoryview(bytearray(4096)), 1, np.array([1, 7, 8]), [3, 1])


def test_the_tier_carries_its_cache_between_windows_and_reads_less(make_dataset, tmp_path, monkeypatch):
    """Through 3 epochs in windows of 2 batches, the cache is carried into
    every window but the first where incoming rows up to the cache's size
    are (share 1), reading fewer bytes than loading each whole, with the
    same rows; nothing is carried where no incoming rows are."""
    ds = packed_dataset(make_dataset, dim=64)
    read = {}
    for share in (1, 10**9):
        monkeypatch.setattr(packed_cache, "CARRY_SHARE", share)
        (tmp_path / str(share)).mkdir()
        tier = packed(ds, tmp_path / str(share), capacity=ds.num_nodes, window=2, epochs=3)
        for epoch in range(3):
            for index in range(BATCHES):
                ids = batch(ds, epoch, index)
                assert torch.equal(tier.gather(ids), ds.features.gather(ids))
        stats = tier.stats()
        read[share] = (stats["windows_carried"], stats["bytes_read"])
        tier.close()
    assert read[1][0] == 3 * BATCHES // 2 - 1 and read[10**9][0] == 0
    assert read[1][1] < read[10**9][1]


def test_a_packer_writes_incoming_rows_after_its_first_window_and_a_new_one_rebuilds_a_carried_window(
    make_dataset, tmp_path, monkeypatch
):
    monkeypatch.setattr(packed_cache, "CARRY_SHARE", 1)
    ds = packed_dataset(make_dataset, dim=64)
    packer = make_packer(ds, tmp_path, capacity=ds.num_nodes)
    first = packer.plan(0, 2)
    assert first.carried is None and first.incoming is None
    packer.pack(0, 2, plan=first)
    second, directory, _ = packer.pack(2, 2)
    cached = np.fromfile(directory / "cache.ids", np.int64)
    assert second.cache is None and not (directory / "cache.seg").exists()
    assert second.carried == [int(first.cached.shape[0]), ids_hash(first.cached)]
    assert np.array_equal(np.fromfile(directory / "cache.ids", np.int64), cached)
    incoming = np.setdiff1d(cached, first.cached)
    content = read_segment(directory / "incoming.seg", second.incoming, False)
    assert np.array_equal(np.frombuffer(content, np.uint8)[: incoming.shape[0] * 256], table_rows(ds, incoming).ravel())
    again, _, packed = make_packer(ds, tmp_path, capacity=ds.num_nodes).pack(2, 2)  # read first by a new reader
    assert packed and again.cache is not None and again.incoming is None


def test_the_first_windows_cache_is_packed_into_the_tiers_memory_and_rebuilt_by_a_new_reader(make_dataset, tmp_path):
    ds = packed_dataset(make_dataset, dim=64)
    tier = packed(ds, tmp_path, capacity=ds.num_nodes // 2, window=BATCHES, epochs=1)
    for index in range(BATCHES):
        ids = batch(ds, 0, index)
        assert torch.equal(tier.gather(ids), ds.features.gather(ids))
        if index == 0:
            directory = tmp_path / f"window-{0:010d}-{BATCHES}"
            manifest = json.loads((directory / "manifest.json").read_text())
            assert manifest["cache"] is None and manifest["incoming"] is None
            assert not (directory / "cache.seg").exists()
    stats = tier.stats()
    assert stats["bytes_read"] == sum(s["nbytes"] for s in manifest["segments"])  # the batches' files, no cache
    assert stats["hits"] > 0
    _, _, rebuilt = make_packer(ds, tmp_path, capacity=ds.num_nodes // 2, epochs=1).pack(0, BATCHES)
    assert rebuilt  # its cache is in the tier's memory, not on disk
    tier.close()


def test_a_window_whose_cache_went_into_another_readers_memory_is_refused(tmp_path):
    manifest = Manifest({"cached": [2, 0]}, 0, [], None)
    with pytest.raises(DatasetError, match="its cache was packed into another reader's memory; refused"):
        WindowCache(50, 10, ROW_BYTES).load(tmp_path, manifest, False, np.array([1, 2]), [2, 0])


def test_a_tier_that_restarts_at_an_epoch_packs_that_windows_cache_whole(make_dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(packed_cache, "CARRY_SHARE", 1)
    ds = packed_dataset(make_dataset, dim=64)
    tier = packed(ds, tmp_path, capacity=ds.num_nodes, window=2, epochs=3)
    for epoch in (0, 2, 1):
        tier.start_epoch(epoch)
        for index in range(BATCHES):
            ids = batch(ds, epoch, index)
            assert torch.equal(tier.gather(ids), ds.features.gather(ids))
    assert tier.stats()["windows_carried"] == 3  # the second window of each epoch; the first read whole
    tier.close()


def test_the_incoming_rows_buffer_stays_within_its_part_of_the_plan(make_dataset, monkeypatch):
    from gnnsys.storage.base import stack_host_bytes
    from gnnsys.storage.stack_builder import build_stack
    from tests.storage.test_packing import Draws

    monkeypatch.setattr(packed_cache, "CARRY_SHARE", 1)
    ds = packed_dataset(make_dataset)
    stack, plan = build_stack(
        ds.features,
        degree=None,
        features="packed",
        cache_rows=ds.num_nodes,
        host_mem_budget=0.1,
        draws=lambda: Draws(ds.num_nodes, epochs=3),
    )
    most = 0
    for epoch in range(3):
        for index in range(BATCHES):
            ids = batch(ds, epoch, index)
            assert torch.equal(stack.gather(ids), ds.features.gather(ids))
            held = stack_host_bytes(stack)
            assert held["packed.read_buffers"] <= plan.parts["packed.read_buffers"]
            assert held["packed.incoming"] <= plan.parts["packed.incoming"]
            most = max(most, held["packed.incoming"])
    assert stack.stats()["windows_carried"] == 2 and most > 0
    stack.close()
