"""The pipelined scan and writes of a window (storage/pack_scan.py): the
packed files hold exactly each batch's rows in id order and zero padding
whatever the read chunks, staging blocks and buffers, rows straddling them,
word width and buffer pool, and a scan stopped midway leaves no thread and no files."""

import threading

import numpy as np
import pytest

from gnnsys.datasets import PrepareOptions
from gnnsys.storage import pack_scan
from gnnsys.storage import packer as packer_module
from gnnsys.storage.digest import digest
from gnnsys.storage.packer import Cancelled
from gnnsys.storage.packing import PAD, padded
from tests.storage.test_packing import BATCHES, Draws, make_packer, rows_of


def contents(manifest, directory) -> dict:
    files = [*manifest.segments, *[manifest.cache][: manifest.cache is not None]]
    return {s.file: (directory / s.file).read_bytes() for s in files}


@pytest.mark.parametrize(
    "dtype, dim, align",  # rows of 48 bytes 64 apart (copied in words of 8), of 12 (words of 4), of 10 (words of 2)
    [("float32", 12, 512), ("float32", 3, 4), ("float16", 5, 2)],
)
def test_packed_files_are_the_rows_in_id_order_whatever_the_chunks_and_buffers(
    make_dataset, tmp_path, monkeypatch, dtype, dim, align
):
    options = PrepareOptions(progress=False, align=align, dtype=dtype)
    ds, _ = make_dataset(num_nodes=3000, num_edges=6000, dim=dim, options=options)
    row_bytes, stride = ds.features.row_bytes, ds.features.table.shape[1]
    manifest, directory, _ = make_packer(ds, tmp_path / "wide", size=1500).pack(0, BATCHES)
    wide = contents(manifest, directory)
    # reads of 3 rows staged in blocks of 2, one page a staging buffer (rows straddle them), no spare one
    # (the scan waits for the writer)
    monkeypatch.setattr(pack_scan, "CHUNK_BYTES", 3 * stride + 1)
    monkeypatch.setattr(pack_scan, "BLOCK_BYTES", 2 * stride)
    monkeypatch.setattr(packer_module, "stage_size", lambda files: PAD)
    monkeypatch.setattr(pack_scan, "SPARE", 0)
    narrow_manifest, narrow_directory, _ = make_packer(ds, tmp_path / "narrow", size=1500).pack(0, BATCHES)
    assert narrow_manifest.segments == manifest.segments and narrow_manifest.cache == manifest.cache
    assert contents(narrow_manifest, narrow_directory) == wide
    cached = np.fromfile(directory / "cache.ids", dtype=np.int64)
    for g, segment in enumerate(manifest.segments):
        missing = np.setdiff1d(np.unique(Draws(3000, size=1500).draw(0, g)), cached)
        assert segment.rows == missing.shape[0] and segment.rows * row_bytes > 2 * PAD  # several staging buffers
        data = wide[segment.file]
        assert len(data) == segment.nbytes and segment.nbytes % PAD == 0 and digest(data) == segment.digest
        assert np.array_equal(np.frombuffer(data[: segment.rows * row_bytes], np.uint8), rows_of(ds, missing).ravel())
        assert not any(data[segment.rows * row_bytes :])  # zero padding
    assert wide["cache.seg"][: 30 * row_bytes] == rows_of(ds, cached).tobytes()
    into = np.ones(padded(cached.shape[0] * row_bytes), np.uint8)  # the cache packed into memory instead
    staged, staged_directory, _ = make_packer(ds, tmp_path / "memory", size=1500).pack(0, BATCHES, cache_into=into)
    assert staged.segments == manifest.segments and staged.cache is None and staged.cache_in_memory()
    assert not (staged_directory / "cache.seg").exists()
    assert contents(staged, staged_directory) == {k: v for k, v in wide.items() if k != "cache.seg"}
    assert into.tobytes() == wide["cache.seg"]  # the rows in id order, then zeros


class StopAfter:
    """A stop event that is set once it has been asked `calls` times."""

    def __init__(self, calls: int):
        self.calls = calls

    def is_set(self) -> bool:
        self.calls -= 1
        return self.calls < 0


def test_a_scan_stopped_midway_leaves_no_thread_and_no_files(make_dataset, tmp_path, monkeypatch):
    ds, _ = make_dataset(num_nodes=300, num_edges=1200, dim=12, options=PrepareOptions(progress=False, align=512))
    monkeypatch.setattr(pack_scan, "CHUNK_BYTES", 10 * ds.features.table.shape[1])
    before = set(threading.enumerate())
    with pytest.raises(Cancelled):
        make_packer(ds, tmp_path / "scratch").pack(0, BATCHES, StopAfter(BATCHES + 3))  # planned, then 3 chunks
    assert list((tmp_path / "scratch").iterdir()) == []
    assert set(threading.enumerate()) <= before
