"""The out-of-core CSC build and the writer's limits: bucketed spills give the
same files as one pass in memory; memory, disk and write failures are one line
and leave nothing behind."""

import errno
import json
import os
from collections import namedtuple

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.atomic import sha256_file
from gnnsys.datasets import (
    DatasetError,
    PrepareOptions,
    csc,
    csc_file,
    load_dataset,
    output_file,
    write_dataset,
    writer,
)
from gnnsys.datasets.inspect import verify
from tests.conftest import random_source
from tests.datasets.conftest import check_round_trip, graph_arrays, run_cli, write_ogb

OPTIONS = [
    {},
    {"to_undirected": True},
    {"self_loops": "drop", "dedup": True},
    {"reorder": "degree", "to_undirected": True, "dedup": True},
    {"reorder": "degree", "dtype": "float16", "align": 512},
]


@pytest.fixture
def no_overhead(monkeypatch):
    """Plan buckets as if the process held nothing, so a tiny --mem-limit forces many."""
    monkeypatch.setattr(csc_file, "anonymous_bytes", lambda: 0)
    monkeypatch.setattr(csc_file, "CHUNK_MARGIN", 0)
    monkeypatch.setattr(csc_file, "SPILL_PIECE", 7)


def _write(tmp_path, name, mem_limit=None, seed=0, **opts):
    source, _ = random_source(num_nodes=90, num_edges=700, seed=seed)
    return write_dataset(source, tmp_path / name, PrepareOptions(progress=False, mem_limit=mem_limit, **opts))


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("mem_limit", [0.9e-6, 2.5e-6])  # GB: lists of a few hundred bytes per bucket
def test_buckets_write_the_same_dataset_as_one_pass(tmp_path, monkeypatch, no_overhead, opts, mem_limit):
    whole = _write(tmp_path, "whole", **opts)
    plans = []
    plan = csc_file.plan_buckets
    monkeypatch.setattr(csc_file, "plan_buckets", lambda *a: plans.append(plan(*a)) or plans[-1])
    spilled = _write(tmp_path, "spilled", mem_limit=mem_limit, **opts)
    assert len(plans[0]) > 1
    a, b = (json.loads((p / "meta.json").read_text()) for p in (whole, spilled))
    assert a["checksums"] == b["checksums"]
    assert sorted(os.listdir(spilled)) == sorted(os.listdir(whole))  # no spill file left
    assert verify(spilled) == []


def test_checksums_are_those_of_the_written_files(tmp_path, no_overhead):
    path = _write(tmp_path, "ds", mem_limit=2e-6, dedup=True, self_loops="drop")
    meta = json.loads((path / "meta.json").read_text())
    assert meta["checksums"] == {f: sha256_file(path / f) for f in meta["checksums"]}
    assert set(meta["checksums"]) == set(os.listdir(path)) - {"meta.json"}


def test_bucket_plan_covers_every_node_within_the_budget():
    degree = np.array([3, 0, 5, 1, 1, 2, 0, 4])
    indptr = np.concatenate([[0], np.cumsum(degree)])
    buckets = csc_file.plan_buckets(indptr, 4, 60)
    assert buckets[0][0] == 0 and buckets[-1][1] == 8 and len(buckets) > 2
    assert all(a[1] == b[0] for a, b in zip(buckets, buckets[1:]))
    assert all((indptr[b] - indptr[a]) * 4 + (b - a) * csc_file.NODE_BYTES <= 60 for a, b in buckets)
    with pytest.raises(DatasetError, match="--mem-limit: too small to build the graph: node 2's 5 in-edges"):
        csc_file.plan_buckets(indptr, 4, 30)


def test_mem_limit_below_what_the_process_holds_is_one_line(tmp_path):
    with pytest.raises(
        DatasetError,
        match=r"^--mem-limit: 0\.00 GB is too small: the process already holds "
        r"\d+\.\d\d GB \(the input's arrays",
    ):
        _write(tmp_path, "ds", mem_limit=0.001)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf")])
def test_mem_limit_must_be_positive_and_finite(tmp_path, value):
    with pytest.raises(DatasetError, match="^--mem-limit: must be a number of GB > 0"):
        _write(tmp_path, "ds", mem_limit=value)


def test_int64_ids_when_forced(tmp_path, monkeypatch, no_overhead):
    whole = load_dataset(_write(tmp_path, "int32"))
    monkeypatch.setattr(csc, "index_dtype", lambda n: np.int64)
    monkeypatch.setattr(csc_file, "index_dtype", lambda n: np.int64)
    wide = load_dataset(_write(tmp_path, "int64", mem_limit=2e-6))
    assert wide.indices.dtype == torch.int64 and whole.indices.dtype == torch.int32
    assert (wide.indptr == whole.indptr).all() and (wide.indices.long() == whole.indices.long()).all()
    runs = [gnnsys.train(ds, epochs=1, fanouts=[3, 2], batch_size=16, hidden=8, progress=False) for ds in (whole, wide)]
    assert runs[0].epochs[0]["loss"] == runs[1].epochs[0]["loss"]


Usage = namedtuple("Usage", "total used free")


def test_too_little_disk_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(writer.shutil, "disk_usage", lambda p: Usage(10**6, 10**6 - 4096, 4096))
    with pytest.raises(
        DatasetError,
        match=r"ds: needs (at least )?0\.\d+ GB of free space while it is written .* and 0\.00 GB "
        r"are free",
    ):
        _write(tmp_path, "ds")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("opts, refused", [({}, True), ({"dedup": True}, False), ({"self_loops": "drop"}, False)])
def test_a_disk_too_small_for_the_stated_edges_is_refused_before_they_are_read(tmp_path, monkeypatch, opts, refused):
    source, _ = random_source(num_nodes=90, num_edges=700)
    source.expected_num_edges = 10**6  # as a count file or an array header states: 4 MB of int32 ids
    read = []
    monkeypatch.setattr(source, "edge_chunks", lambda: read.append(1) or iter(()))
    monkeypatch.setattr(writer.shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 3 * 10**6, 3 * 10**6))
    if refused:
        with pytest.raises(DatasetError, match=r"ds: needs at least 0\.01 GB of free space .* 0\.00 GB are free"):
            write_dataset(source, tmp_path / "ds", PrepareOptions(progress=False, **opts))
        assert read == [] and list(tmp_path.iterdir()) == []
    else:  # dedup or dropped self-loops may leave fewer edges: only the count once read can refuse
        write_dataset(source, tmp_path / "ds", PrepareOptions(progress=False, **opts))
        assert read  # read, then written: its 0 edges fit


@pytest.mark.parametrize("fail_at", [1, 3, 6, 12])
def test_a_full_disk_mid_write_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, no_overhead, fail_at):
    calls, real = [0], os.pwrite

    def pwrite(fd, data, offset):
        calls[0] += 1
        if calls[0] == fail_at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    monkeypatch.setattr(output_file.os, "pwrite", pwrite)
    with pytest.raises(DatasetError, match=r": cannot write: No space left on device \(ENOSPC\)$"):
        _write(tmp_path, "ds", mem_limit=2e-6, reorder="degree")
    assert list(tmp_path.iterdir()) == []


def test_reservation_refused_is_one_line(tmp_path, monkeypatch):
    def fallocate(fd, offset, size):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output_file.os, "posix_fallocate", fallocate)
    with pytest.raises(
        DatasetError,
        match=r"indices.npy: cannot reserve 0\.00 GB: No space left on device "
        r"\(ENOSPC\), \d+\.\d\d GB free$",
    ):
        _write(tmp_path, "ds")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("layout", ["csv", "npz"])  # npz: ogbn-papers100M's raw layout
def test_ogb_raw_layouts_build_in_buckets(tmp_path, capsys, monkeypatch, no_overhead, layout):
    a = graph_arrays(unlabelled=5)
    root = write_ogb(tmp_path / "ogbn_papers100M", a, layout)
    plans = []
    plan = csc_file.plan_buckets
    monkeypatch.setattr(csc_file, "plan_buckets", lambda *args: plans.append(plan(*args)) or plans[-1])
    status, stdout, _ = run_cli(
        capsys, "prepare", "ogb", root, "--out", tmp_path / "out", "--mem-limit", "5e-7", "--no-progress"
    )
    assert status == 0 and len(plans[0]) > 1
    check_round_trip(tmp_path / "out", a)
