"""The packed format and its writer (storage/packing.py, storage/packer.py):
a window's segments hold each batch's uncached rows in id order, the cache
holds the window's most read rows, a window packed for this key is reused,
a stale one rebuilt, and a changed file refused in one line; sampled
batches read back only as written; a set of ids has one hash in any order."""

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.datasets import PrepareOptions
from gnnsys.errors import DatasetError
from gnnsys.storage.packer import Packer
from gnnsys.storage.packing import PAD, Manifest, ids_hash, read_sampled, read_segment, write_sampled
from gnnsys.storage.ssd import rows_file

BATCHES = 4


class Draws:
    """Batches of random ids, a function of (seed, epoch, batch), as BatchDraws gives them."""

    def __init__(
        self, num_nodes: int, seed: int = 0, batches: int = BATCHES, epochs=None, size: int = 40, distinct=False
    ):
        self.num_nodes, self.seed, self.batches, self.epochs, self.size = num_nodes, seed, batches, epochs, size
        self.distinct = distinct  # each batch's ids distinct (a sampler's input nodes), else drawn with repeats
        self.key = {"seed": seed, "batches_per_epoch": batches, "distinct": distinct}

    def draw(self, epoch: int, batch: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, epoch, batch])
        if self.distinct:
            return rng.choice(self.num_nodes, self.size, replace=False)
        return rng.integers(0, self.num_nodes, self.size)


def packed_dataset(make_dataset, dim=12, dtype="float32", align=512):
    options = PrepareOptions(progress=False, align=align, dtype=dtype)
    ds, _ = make_dataset(num_nodes=300, num_edges=1200, dim=dim, options=options)
    return ds


def make_packer(ds, scratch, capacity=30, **draws) -> Packer:
    path, shape, dtype, stride = rows_file(ds.features)
    return Packer(path, shape, dtype, stride, Draws(shape[0], **draws), capacity, scratch, False, ds.features.identity)


def rows_of(ds, ids) -> np.ndarray:
    rows = ds.features.gather(torch.as_tensor(ids, dtype=torch.int64)).numpy()
    return rows.view(np.uint8).reshape(len(ids), -1)


def test_a_window_holds_each_batchs_uncached_rows_in_id_order_and_its_most_read_rows(make_dataset, tmp_path):
    ds = packed_dataset(make_dataset)
    packer = make_packer(ds, tmp_path)
    manifest, directory, packed = packer.pack(2, 5)  # crosses from epoch 0 into epoch 1
    assert packed and len(manifest.segments) == 5
    drawn = [np.unique(Draws(300).draw(*divmod(g, BATCHES))) for g in range(2, 7)]
    counts = np.bincount(np.concatenate(drawn), minlength=300)
    cached = np.fromfile(directory / "cache.ids", dtype=np.int64)
    assert cached.shape[0] == 30 and np.all(np.diff(cached) > 0)
    assert counts[cached].min() >= counts[np.setdiff1d(np.arange(300), cached)].max()  # the most read rows
    for g, segment in zip(range(2, 7), manifest.segments, strict=True):
        epoch, batch = divmod(g, BATCHES)
        ids = np.unique(Draws(300).draw(epoch, batch))
        missing = np.setdiff1d(ids, cached)
        assert segment.ids == ids_hash(ids) and segment.unique == ids.shape[0] and segment.rows == missing.shape[0]
        content = np.frombuffer(read_segment(directory / segment.file, segment, False), np.uint8)
        assert segment.nbytes % PAD == 0 and content.shape[0] == segment.nbytes
        assert np.array_equal(content[: missing.shape[0] * 48].reshape(-1, 48), rows_of(ds, missing))
    cache = np.frombuffer(read_segment(directory / "cache.seg", manifest.cache, False), np.uint8)
    assert np.array_equal(cache[: 30 * 48].reshape(30, 48), rows_of(ds, cached))


def test_a_window_packed_for_this_key_is_reused_and_a_stale_one_rebuilt(make_dataset, tmp_path, caplog):
    ds = packed_dataset(make_dataset)
    caplog.set_level(logging.INFO, logger="gnnsys.storage.packer")
    first, directory, _ = make_packer(ds, tmp_path).pack(0, 3)
    again, _, packed = make_packer(ds, tmp_path).pack(0, 3)
    assert not packed and again == first
    for stale in (
        lambda: make_packer(ds, tmp_path, seed=1),  # other batches
        lambda: make_packer(ds, tmp_path, capacity=10),  # another cache
    ):
        _, _, packed = stale().pack(0, 3)
        assert packed
        assert "is stale" in caplog.text
        make_packer(ds, tmp_path).pack(0, 3)  # back to the first key (rebuilt)
    payload = json.loads((directory / "manifest.json").read_text())
    payload["key"]["seed"] = 7  # a manifest edited by hand
    (directory / "manifest.json").write_text(json.dumps(payload))
    assert Manifest.read(directory, first.key) is None
    assert make_packer(ds, tmp_path).pack(0, 3)[2]
    (directory / "manifest.json").write_text("{not json")
    assert Manifest.read(directory, first.key) is None


@pytest.mark.parametrize("change", ["byte", "size", "missing"])
def test_a_changed_segment_is_refused_in_one_line(make_dataset, tmp_path, change):
    ds = packed_dataset(make_dataset)
    manifest, directory, _ = make_packer(ds, tmp_path).pack(0, 2)
    segment = manifest.segments[1]
    path = directory / segment.file
    if change == "byte":
        data = bytearray(path.read_bytes())
        data[5] ^= 1
        path.write_bytes(bytes(data))
    elif change == "size":
        path.write_bytes(path.read_bytes() + bytes(PAD))
    else:
        path.unlink()
    with pytest.raises(DatasetError) as e:
        read_segment(path, segment, False)
    assert str(e.value).startswith(str(path)) and "refused" in str(e.value) and "\n" not in str(e.value)


def test_a_replaced_rows_file_is_refused(make_dataset, tmp_path):
    ds = packed_dataset(make_dataset)
    path = rows_file(ds.features)[0]
    path.write_bytes(path.read_bytes())  # same content, another file
    with pytest.raises(DatasetError, match="replaced or changed"):
        make_packer(ds, tmp_path / "scratch").pack(0, 1)
    assert list((tmp_path / "scratch").iterdir()) == []  # the partial window is removed


def test_a_window_the_disk_cannot_hold_is_refused_before_writing(make_dataset, tmp_path, monkeypatch):
    ds = packed_dataset(make_dataset)
    import gnnsys.storage.packer as packer_module

    monkeypatch.setattr(packer_module.shutil, "disk_usage", lambda path: SimpleNamespace(free=1000))
    scratch = tmp_path / "scratch"
    with pytest.raises(DatasetError) as e:
        make_packer(ds, scratch).pack(0, 2)
    said = str(e.value)
    assert said.startswith(f"{scratch}: not enough scratch space for the packed batches 0 to 1: needs ")
    assert "1,000 free" in said and "\n" not in said and not any(scratch.iterdir())


def full_disk_after(monkeypatch, scratch, writes: int):
    """os.write fails with ENOSPC on files under `scratch` after `writes` writes there succeed."""
    import errno

    import gnnsys.storage.pack_scan as scan_module

    write, done = scan_module.os.write, [0]

    def filling(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(scratch)):
            if done[0] >= writes:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done[0] += 1
        return write(fd, data)

    monkeypatch.setattr(scan_module.os, "write", filling)


@pytest.mark.parametrize("writes", [0, 3])
def test_a_disk_that_fills_while_packing_stops_in_one_line_and_leaves_nothing(
    make_dataset, tmp_path, monkeypatch, writes
):
    ds = packed_dataset(make_dataset)
    scratch = tmp_path / "scratch"
    full_disk_after(monkeypatch, scratch, writes)
    with pytest.raises(DatasetError) as e:
        make_packer(ds, scratch).pack(0, BATCHES)
    said = str(e.value)
    assert said.startswith(str(scratch / "window-0000000000-4")) and "\n" not in said
    assert said.endswith("cannot write the packed segment (No space left on device)")
    assert list(scratch.iterdir()) == []  # the partial window is removed


arrays_of = st.dictionaries(
    st.sampled_from(["seeds", "input_nodes", "indptr_0", "weights"]),
    st.tuples(st.sampled_from(["int64", "int32", "float16", "uint8"]), st.lists(st.integers(0, 7), max_size=2)),
    min_size=1,
).map(lambda spec: {n: np.arange(int(np.prod(shape)), dtype=t).reshape(shape) for n, (t, shape) in spec.items()})


@settings(deadline=None, max_examples=40)
@given(arrays=arrays_of)
def test_a_sampled_batch_reads_back_as_written_and_only_for_its_key_and_bytes(tmp_path_factory, arrays):
    path = tmp_path_factory.mktemp("sampled") / "s0000000000.batch"
    written = write_sampled(path, arrays, key=7)
    assert written == path.stat().st_size
    read = read_sampled(path, 7)
    assert read.keys() == arrays.keys()
    for name, a in arrays.items():
        assert read[name].dtype == a.dtype and np.array_equal(read[name], a)
        assert read[name].flags.writeable and read[name].ctypes.data % a.dtype.itemsize == 0
    assert read_sampled(path, 8) is None  # written for another key
    content = bytearray(path.read_bytes())
    path.write_bytes(content[:-1])
    assert read_sampled(path, 7) is None  # cut short
    if any(a.nbytes for a in arrays.values()):
        at = len(content) - 1 - next(i for i, b in enumerate(reversed(content)) if b)  # the last byte of an array
        content[at] ^= 0xFF
        path.write_bytes(content)
        assert read_sampled(path, 7) is None  # another byte
    assert read_sampled(tmp_path_factory.mktemp("none") / "s.batch", 7) is None


@settings(deadline=None, max_examples=60)
@given(ids=st.lists(st.integers(0, 2**40), min_size=1, max_size=30, unique=True), data=st.data())
def test_a_set_of_ids_has_one_hash_in_any_order_and_another_set_another(ids, data):
    ids = np.array(ids, np.int64)
    shuffled = data.draw(st.permutations(ids.tolist()))
    assert ids_hash(np.array(shuffled, np.int64)) == ids_hash(ids) == ids_hash(ids.astype(np.uint64))
    assert ids_hash(ids[1:]) != ids_hash(ids)
    assert ids_hash(np.append(ids, ids[0])) != ids_hash(ids)  # a repeated id is another multiset
    other = data.draw(st.integers(0, 2**40).filter(lambda v: v not in set(ids.tolist())))
    assert ids_hash(np.append(ids[1:], other)) != ids_hash(ids)


def test_a_sampled_batch_consumed_as_soon_as_it_is_in_place_was_still_written(tmp_path, monkeypatch):
    """The loader may read and remove a sampled batch the moment it is renamed into place: its size is the write's."""
    real_replace = os.replace

    def replace_then_consume(src, dst):
        real_replace(src, dst)
        assert read_sampled(Path(dst), 7)["seeds"].tolist() == [3, 1]
        os.unlink(dst)

    monkeypatch.setattr(os, "replace", replace_then_consume)
    path = tmp_path / "s0000000000.batch"
    written = write_sampled(path, {"seeds": np.array([3, 1]), "input_nodes": np.arange(5)}, key=7)
    assert written > 0 and not path.exists() and not list(tmp_path.iterdir())
