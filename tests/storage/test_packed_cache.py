"""The packed tier's window cache (storage/packed_cache.py): a window's cache
loaded whole, or carried from the window before by its incoming rows; the
tier carries it where it can, reads less for it, and serves the same rows."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.errors import DatasetError
from gnnsys.storage import packed_cache
from gnnsys.storage.digest import digest
from gnnsys.storage.packed_cache import WindowCache
from gnnsys.storage.packing import Segment, ids_crc, padded
from tests.storage.test_packed_source import batch, packed
from tests.storage.test_packing import BATCHES, packed_dataset

ROW_BYTES = 8


def rows_of(ids: np.ndarray) -> np.ndarray:
    """A row per id whose bytes say the id: [len(ids), ROW_BYTES] uint8."""
    return np.ascontiguousarray(ids.astype(np.int64).view(np.uint8).reshape(-1, ROW_BYTES))


def segment_file(path, ids: np.ndarray) -> Segment:
    """Write `ids`' rows to `path` as a packed file (padded); its Segment."""
    content = bytearray(padded(ids.shape[0] * ROW_BYTES))
    content[: ids.shape[0] * ROW_BYTES] = rows_of(ids).tobytes()
    path.write_bytes(content)
    return Segment(path.name, int(ids.shape[0]), len(content), digest(content))


def held(cache: WindowCache, ids: np.ndarray) -> np.ndarray:
    return cache.rows(1)[cache.slot[ids]]


sets = st.lists(st.integers(0, 199), max_size=40, unique=True).map(lambda v: np.array(sorted(v), np.int64))


@settings(deadline=None, max_examples=60)
@given(first=sets, second=sets)
def test_a_carried_cache_holds_exactly_the_new_set(tmp_path_factory, first, second):
    tmp = tmp_path_factory.mktemp("carry")
    cache = WindowCache(200, 40, ROW_BYTES)
    cache.load(tmp / "cache.seg", segment_file(tmp / "cache.seg", first), False, first, [len(first), ids_crc(first)])
    assert np.array_equal(held(cache, first), rows_of(first))
    incoming = np.setdiff1d(second, first)
    content = bytearray(padded(max(1, incoming.shape[0]) * ROW_BYTES))
    content[: incoming.shape[0] * ROW_BYTES] = rows_of(incoming).tobytes()
    cache.carry(tmp / "incoming.seg", memoryview(content), incoming.shape[0], second, [len(second), 0])
    assert np.array_equal(held(cache, second), rows_of(second))
    others = np.setdiff1d(np.arange(200), second)
    assert (cache.slot[others] == -1).all()
    assert np.unique(cache.slot[second]).shape[0] == second.shape[0]  # no two rows share a slot


def test_incoming_rows_that_are_not_the_rows_missing_are_refused(tmp_path):
    cache = WindowCache(50, 10, ROW_BYTES)
    first = np.array([1, 2, 3])
    cache.load(tmp_path / "cache.seg", segment_file(tmp_path / "cache.seg", first), False, first, [3, 0])
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
