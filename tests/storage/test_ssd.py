"""SSDFeatures (storage/ssd.py), its read planner and its two read engines (a
thread pool and io_uring): exact rows from aligned direct reads, read merging
and amplification, the buffered fallback, engine choice, and errors."""

import ctypes
import errno
import logging
import os
import shutil
import tempfile
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.datasets import PrepareOptions, load_dataset, write_dataset
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.storage import FeatureSource, uring_io
from gnnsys.storage.direct_io import ReadPool, RowsFile, aligned, choose_gap, open_rows_file, plan_reads, row_blocks
from gnnsys.storage.io_probe import IOModel
from gnnsys.storage.ssd import SSDFeatures
from gnnsys.storage.uring_io import UringReader, uring_available
from tests.conftest import random_source

N = 300
ENGINES = ["threads", "uring"]


def _need_uring():
    ok, reason = uring_available()
    if not ok:
        pytest.skip(f"io_uring is not available here: {reason}")


def _ssd(table, engine="threads", inflight=None, **kwargs) -> SSDFeatures:
    """SSDFeatures over `table` (a memory-mapped RowTable) with O_DIRECT and `engine` (`inflight` reads: its
    threads or ring depth), skipping the test where its file system has no
    O_DIRECT or the engine is io_uring and that is unavailable."""
    if engine == "uring":
        _need_uring()
    if inflight is not None:
        kwargs["depth" if engine == "uring" else "threads"] = inflight
    try:
        return SSDFeatures(table, direct=True, engine=engine, **kwargs)
    except ConfigError as e:
        if e.option != "direct":
            raise
        pytest.skip(f"{table!r} is on a file system without O_DIRECT (tmpfs?): direct reads cannot be tested")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _id_sets(stride: int, rng) -> dict:
    """Named id tensors: random, rows starting or ending at a 512 B edge and their
    neighbours, repeats in shuffled order, the last row, and an empty batch."""
    starts = np.arange(N) * stride
    edges = np.flatnonzero((starts % 512 == 0) | ((starts + stride) % 512 == 0))
    edges = np.unique(np.clip(np.concatenate([edges - 1, edges, edges + 1]), 0, N - 1))
    repeated = rng.permutation(np.repeat(rng.choice(N, 20, replace=False), 3))
    return {
        "random": torch.from_numpy(rng.choice(N, 120, replace=False)),
        "edges": torch.from_numpy(edges),
        "repeated": torch.from_numpy(repeated),
        "last": torch.tensor([N - 1], dtype=torch.int32),
        "empty": torch.empty(0, dtype=torch.int64),
        "all": torch.arange(N),
    }


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("align", [128, 512, 4096])
@pytest.mark.parametrize("inflight", [1, 4])
@pytest.mark.parametrize("tight", [False, True], ids=["default", "tight-budget"])
@pytest.mark.parametrize("engine", ENGINES)
def test_rows_equal_base_table(make_dataset, dtype, align, inflight, tight, engine):
    """Every id set gives the base table's rows bit for bit through either
    engine with `inflight` reads in flight; `tight` uses the smallest read size
    and budget, so batches split into many reads and waves (and a ring of depth
    1 or 4 wraps around many times)."""
    ds, _ = make_dataset(options=PrepareOptions(align=align, dtype=dtype, progress=False), num_nodes=N, dim=70)
    stride = ds.meta["features"]["row_stride"]
    kwargs = {}
    if tight:
        with _ssd(ds.features) as probe:
            max_read = row_blocks(probe.row_bytes, stride, probe.block) * probe.block
        kwargs = {"max_read": max_read, "host_mem_budget": inflight * max_read}
    with _ssd(ds.features, engine, inflight, **kwargs) as ssd:
        assert isinstance(ssd, FeatureSource) and ssd.shape == ds.features.shape and ssd.dtype == ds.features.dtype
        assert ssd.engine == engine
        for name, ids in _id_sets(stride, np.random.default_rng(align + inflight)).items():
            assert _same(ssd.gather(ids), ds.features.gather(ids)), name
        ids = torch.tensor([N - 1, 0, 5, 0])
        out = torch.empty(4, 70, dtype=ssd.dtype)
        assert ssd.gather(ids, out=out) is out and _same(out, ds.features.gather(ids))
        assert _same(ssd.gather_async(ids).wait(), ds.features.gather(ids))
        into = torch.zeros(6, 70, dtype=ssd.dtype)
        ssd.gather_into(ids, into, torch.tensor([5, 1, 3, 0]))  # rows written in place, the others untouched
        expect = torch.zeros(6, 70, dtype=ssd.dtype)
        expect[torch.tensor([5, 1, 3, 0])] = ds.features.gather(ids)
        assert _same(into, expect)


def test_out_of_range_ids_raise_index_error(make_dataset):
    ds, _ = make_dataset(num_nodes=N)
    with _ssd(ds.features) as ssd:
        for bad in ([0, N], [-1, 3]):
            with pytest.raises(IndexError, match="out of range"):
                ssd.gather(torch.tensor(bad))
            with pytest.raises(IndexError, match="out of range"):
                ssd.gather_async(torch.tensor(bad))
        assert ssd.stats()["reads"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_read_amplification_of_512_byte_rows(make_dataset, engine):
    """400 B rows stored in 512 B, no gap merging: one block per row,
    adjoining rows merge into one read, and no read exceeds max_read."""
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=100)
    with _ssd(ds.features, engine, 2, max_read=4096, host_mem_budget=8192, max_gap=0) as ssd:
        assert ssd.block == 512
        ids = torch.from_numpy(np.random.default_rng(1).choice(N, 100, replace=False))
        ssd.gather(torch.cat([ids, ids[:10]]))
        s = ssd.stats()
        assert s["useful_bytes"] == 100 * 400 and s["bytes_read"] == 100 * 512 and s["rows"] == 110
        assert s["read_amplification"] == 512 / 400
        assert s["reads"] < 100  # some of the 100 random rows of 300 adjoin and share a read
        ssd.reset_stats()
        ssd.gather(torch.arange(N))
        s = ssd.stats()
        assert s["reads"] == -(-N * 512 // 4096) and s["bytes_read"] == N * 512
        assert s["file_fraction"] == 1.0 and s["gathers"] == 1 and s["max_gap_mean"] == s["max_gap_last"] == 0
        ssd.reset_stats()
        assert ssd.stats() == {
            "bytes_read": 0,
            "useful_bytes": 0,
            "reads": 0,
            "rows": 0,
            "unique_rows": 0,
            "gathers": 0,
            "read_amplification": 1.0,
            "file_fraction": 0.0,
            "max_gap_mean": 0.0,
            "max_gap_last": 0,
        }


@pytest.mark.parametrize(
    "stride,row_bytes,block,max_read",
    [(384, 280, 512, 2048), (128, 28, 512, 4096), (4096, 280, 512, 4096), (512, 400, 4096, 16384)],
)
def test_plan_reads_are_aligned_bounded_and_cover_each_row(stride, row_bytes, block, max_read):
    rng = np.random.default_rng(stride)
    rows = np.unique(np.concatenate([rng.choice(1000, 300, replace=False), np.arange(40, 90)])).astype(np.int64)
    size = 1000 * stride
    plan = plan_reads(rows, stride, row_bytes, block, max_read, size)
    assert (plan.offset % block == 0).all() and (plan.length % block == 0).all() and (plan.length <= max_read).all()
    assert (plan.need == np.minimum(plan.length, size - plan.offset)).all()
    read = np.searchsorted(plan.first, np.arange(rows.shape[0]), side="right") - 1
    start = rows * stride
    assert (start >= plan.offset[read]).all() and (start + row_bytes <= plan.offset[read] + plan.length[read]).all()
    assert (plan.src == plan.staged[read] + start - plan.offset[read]).all()
    # reads overlap by at most one block, and a read that adjoins the next one was cut by the size bound
    gap = plan.offset[1:] - (plan.offset[:-1] + plan.length[:-1])
    cut = gap <= 0
    assert (gap >= -block).all() and (cut.any() or stride > block)  # rows 40..89 need several reads
    assert (plan.length[:-1][cut] >= max_read - (2 * row_blocks(row_bytes, stride, block) - 2) * block).all()


@pytest.mark.parametrize("gap_blocks", [0, 1, 3, 8])
def test_plan_reads_merge_rows_at_most_max_gap_apart(gap_blocks):
    rows = np.array([0, 2, 6, 7, 20], np.int64)  # 512 B rows in 512 B blocks: gaps of 1, 3, 0 and 12 blocks
    plan = plan_reads(rows, 512, 400, 512, 1 << 20, 100 * 512, max_gap=gap_blocks * 512)
    expected = {0: [0, 1, 2, 4], 1: [0, 2, 4], 3: [0, 4], 8: [0, 4]}[gap_blocks]
    assert plan.first.tolist() == expected
    assert plan.length.sum() == 512 * (5 + sum(g for g in (1, 3, 12) if g <= gap_blocks))
    assert (
        plan.src
        == plan.staged[np.searchsorted(plan.first, np.arange(5), side="right") - 1]
        + rows * 512
        - plan.offset[np.searchsorted(plan.first, np.arange(5), side="right") - 1]
    ).all()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("max_gap", [512, 8192])
def test_rows_through_gap_merging_equal_the_table(make_dataset, engine, max_gap):
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=70)
    with _ssd(ds.features, engine, 4, max_gap=max_gap) as ssd:
        for name, ids in _id_sets(512, np.random.default_rng(max_gap)).items():
            assert _same(ssd.gather(ids), ds.features.gather(ids)), name
        assert ssd.stats()["read_amplification"] > 1.0  # the gaps were read too


@pytest.mark.parametrize("bad", [-1, 1.5, "8k", True])
def test_a_bad_gap_is_refused(make_dataset, bad):
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=70)
    with pytest.raises(ConfigError, match=f'^max_gap: must be "auto" or an int >= 0 bytes, got {bad!r}$'):
        SSDFeatures(ds.features, max_gap=bad)


def _model(request_us: float, seq: float = 1e9, threads_rate: float | None = None) -> IOModel:
    """An IOModel whose reads cost `request_us` microseconds each at any depth
    on both engines (the thread pool `threads_rate` reads/s if given) and
    whose bytes come at `seq` B/s."""
    rate = 1e6 / request_us
    rates = {"threads": {1: threads_rate or rate}, "uring": {1: rate}}
    return IOModel(512, rates, seq, seq, {"at": 0.0})


DEPTH = 16


def _plan_cost(plan, model) -> float:
    """The model's seconds for a plan's requests and bytes on io_uring at depth DEPTH."""
    return float(model.cost("uring", DEPTH, len(plan.offset), int(plan.length.sum())))


def test_chosen_gap_minimises_the_modelled_cost_over_every_threshold():
    """For any rows, block layout and model, the plan with choose_gap's
    threshold costs no more than the plan with any other threshold (max_read
    large enough that no run is split, so requests are the model's)."""

    @settings(max_examples=100, deadline=None, derandomize=True)
    @given(
        rows=st.sets(st.integers(0, 3000), min_size=1, max_size=120),
        layout=st.sampled_from([(512, 400, 512), (384, 280, 512), (128, 28, 512), (4096, 280, 512), (512, 400, 4096)]),
        rates=st.lists(st.floats(1e3, 1e6), min_size=2, max_size=2),
        seq=st.floats(1e7, 1e10),
    )
    def check(rows, layout, rates, seq):
        stride, row_bytes, block = layout
        rows = np.array(sorted(rows), np.int64)
        model = IOModel(512, {"uring": {1: min(rates), DEPTH: max(rates)}}, seq, seq, {})
        cost = lambda r, b: model.cost("uring", DEPTH, r, b)  # noqa: E731
        size, big = 3001 * stride, 1 << 40
        gap = choose_gap(rows, stride, row_bytes, block, cost)
        chosen = _plan_cost(plan_reads(rows, stride, row_bytes, block, big, size, gap), model)
        starts = rows * stride // block
        ends = (rows * stride + row_bytes + block - 1) // block
        for threshold in {0, *np.maximum(starts[1:] - ends[:-1], 0).tolist()}:
            other = _plan_cost(plan_reads(rows, stride, row_bytes, block, big, size, threshold * block), model)
            assert chosen <= other * (1 + 1e-12)

    check()


@pytest.mark.parametrize("engine", ENGINES)
def test_expensive_requests_merge_and_cheap_ones_do_not(make_dataset, engine):
    """With auto gaps, a model whose requests cost 1 ms reads 60 random rows
    of 300 in one request; one whose requests cost nothing reads every run of
    adjoining rows alone; both give the table's rows bit for bit."""
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=70)
    ids = torch.from_numpy(np.random.default_rng(5).choice(N, 60, replace=False))
    for request_us, merged in ((1000.0, True), (1e-3, False)):
        with _ssd(ds.features, engine, 4, io_model=_model(request_us), max_read=N * 512) as ssd:
            assert ssd.max_gap == "auto"
            for name, id_set in _id_sets(512, np.random.default_rng(1)).items():
                assert _same(ssd.gather(id_set), ds.features.gather(id_set)), name
            ssd.reset_stats()
            ssd.gather(ids)
            s = ssd.stats()
            runs = 1 + int((np.diff(np.unique(ids.numpy())) > 1).sum())
            if merged:
                assert s["reads"] == 1 and s["max_gap_last"] > 0 and s["read_amplification"] > 512 / 140
            else:
                assert s["reads"] == runs and s["max_gap_last"] == 0 and s["bytes_read"] == 60 * 512
            assert s["file_fraction"] == s["bytes_read"] / (N * 512) and s["max_gap_mean"] == s["max_gap_last"]


def test_without_a_model_auto_gaps_merge_nothing(make_dataset):
    """A file too small to probe (and any file read without O_DIRECT) has no
    model: auto reads only the blocks of the rows."""
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=70)
    with _ssd(ds.features) as ssd:
        assert ssd.io_model is None
        ssd.gather(torch.arange(0, N, 3))
        assert ssd.stats()["bytes_read"] == 100 * 512 and ssd.stats()["max_gap_last"] == 0


def test_auto_engine_takes_the_one_the_model_measured_faster(make_dataset, caplog):
    _need_uring()
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=70)
    with caplog.at_level(logging.INFO, logger="gnnsys.storage.ssd"):
        with SSDFeatures(ds.features, io_model=_model(20.0, threads_rate=1e6)) as ssd:
            assert ssd.engine == "threads"
        with SSDFeatures(ds.features, io_model=_model(20.0, threads_rate=1e3)) as ssd:
            assert ssd.engine == "uring" and "uring" in ssd.host_bytes()
            assert ssd.host_bytes()["uring"] > 0 and ssd.host_bytes()["staging"] == 64 << 20
        with SSDFeatures(ds.features, engine="uring", io_model=_model(20.0, threads_rate=1e6)) as ssd:
            assert ssd.engine == "uring"  # an engine named is kept
    assert "measured 50000 reads/s with io_uring depth 128, 1000000 with 16 threads" in caplog.text


@pytest.mark.parametrize("engine", ENGINES)
def test_tmpfs_falls_back_with_a_warning(engine):
    if engine == "uring":
        _need_uring()
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm (tmpfs) on this machine")
    root = tempfile.mkdtemp(dir="/dev/shm")
    try:
        source, _ = random_source(num_nodes=N, dim=70)
        path = write_dataset(source, os.path.join(root, "ds"), PrepareOptions(align=512, progress=False))
        try:
            SSDFeatures(load_dataset(path).features, direct=True).close()
            pytest.skip("/dev/shm enforces O_DIRECT here, so it is not a file system without direct I/O")
        except ConfigError:
            pass
        with pytest.warns(RuntimeWarning, match="O_DIRECT.*posix_fadvise") as caught:
            ssd = SSDFeatures(load_dataset(path).features, engine=engine)
        assert len(caught) == 1 and "\n" not in str(caught[0].message)
        with ssd:
            assert not ssd.direct
            ids = torch.tensor([N - 1, 3, 3, 0])
            assert _same(ssd.gather(ids), load_dataset(path).features.gather(ids))
    finally:
        shutil.rmtree(root)


@pytest.mark.parametrize("engine", ENGINES)
def test_truncated_file_is_a_dataset_error(make_dataset, engine):
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=100)
    file = ds.path / "features.bin"
    head = ds.features.gather(torch.arange(50))
    with _ssd(ds.features, engine, 4) as ssd:
        os.truncate(file, 100 * 512)
        assert _same(ssd.gather(torch.arange(50)), head)
        with pytest.raises(DatasetError, match=r"features\.bin: truncated after opening"):
            ssd.gather(torch.tensor([0, N - 1]))
        with pytest.raises(DatasetError, match="truncated"):
            ssd.gather_async(torch.arange(N)).wait()
        assert _same(ssd.gather(torch.arange(50)), head)
    with pytest.raises(DatasetError, match=r"features\.bin: was replaced or changed since this run loaded"):
        SSDFeatures(ds.features)


def test_budget_or_read_size_too_small_is_refused(make_dataset):
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=100)
    with pytest.raises(ConfigError, match=r"host_mem_budget: 16383 bytes cannot stage one read per thread"):
        SSDFeatures(ds.features, threads=4, max_read=4096, host_mem_budget=16383, engine="threads")
    with pytest.raises(ConfigError, match="max_read"):
        SSDFeatures(ds.features, max_read=256)
    with pytest.raises(ConfigError, match="threads"):
        SSDFeatures(ds.features, threads=0)
    for depth in (0, 32769):
        with pytest.raises(ConfigError, match=r"^depth: must be 1 to 32768"):
            SSDFeatures(ds.features, depth=depth)
    with pytest.raises(ConfigError, match=r"^engine: must be one of auto, uring, threads, got 'io_uring'"):
        SSDFeatures(ds.features, engine="io_uring")


def test_uring_budget_must_stage_one_read(make_dataset):
    """The ring needs room for one read per wave, not one per slot of its depth."""
    _need_uring()
    ds, _ = make_dataset(options=PrepareOptions(align=512, progress=False), num_nodes=N, dim=100)
    with pytest.raises(ConfigError, match=r"host_mem_budget: 4095 bytes cannot stage one read of max_read 4096 B"):
        SSDFeatures(ds.features, engine="uring", max_read=4096, host_mem_budget=4095)
    with SSDFeatures(ds.features, engine="uring", depth=64, max_read=4096, host_mem_budget=4096) as ssd:
        assert _same(ssd.gather(torch.arange(N)), ds.features.gather(torch.arange(N)))


def test_uring_refused_in_one_line_and_auto_falls_back_where_unavailable(make_dataset, monkeypatch, caplog):
    ds, _ = make_dataset(num_nodes=N)
    why = "io_uring_setup: Operation not permitted (forbidden by kernel.io_uring_disabled or a seccomp filter)"
    monkeypatch.setattr("gnnsys.storage.ssd.uring_available", lambda: (False, why))
    with pytest.raises(ConfigError, match=r"^engine: io_uring is not available here: io_uring_setup: Operation") as e:
        SSDFeatures(ds.features, engine="uring")
    assert "\n" not in str(e.value)
    with caplog.at_level(logging.INFO, logger="gnnsys.storage.ssd"), SSDFeatures(ds.features) as ssd:
        assert ssd.engine == "threads" and ssd.depth is None and repr(ssd).endswith("16 threads)")
        assert _same(ssd.gather(torch.tensor([3, 0, 3])), ds.features.gather(torch.tensor([3, 0, 3])))
    assert f"the thread pool: io_uring is not available ({why})" in caplog.text


def test_auto_takes_uring_where_available(make_dataset, caplog):
    _need_uring()
    ds, _ = make_dataset(num_nodes=N)
    with caplog.at_level(logging.INFO, logger="gnnsys.storage.ssd"), SSDFeatures(ds.features) as ssd:
        assert ssd.engine == "uring" and ssd.depth == 128 and repr(ssd).endswith("io_uring depth 128)")
    assert "SSD tier reads with io_uring" in caplog.text


@pytest.mark.parametrize("case", ["setup-forbidden", "not-x86-64"])
def test_uring_probe_says_why_it_is_unavailable(monkeypatch, case):
    if case == "setup-forbidden":

        def refuse(*args):
            ctypes.set_errno(errno.EPERM)
            return -1

        monkeypatch.setattr(uring_io, "_syscall", refuse)
        expected = "io_uring_setup: Operation not permitted (forbidden by kernel.io_uring_disabled or a seccomp filter)"
    else:
        monkeypatch.setattr(uring_io.platform, "machine", lambda: "aarch64")
        expected = "io_uring is driven only on Linux x86-64, this is Linux aarch64"
    assert uring_io.probe() == (False, expected)


@pytest.mark.parametrize("engine", ENGINES)
def test_refused_read_is_the_same_dataset_error_on_both_engines(tmp_path, engine):
    """A read the kernel refuses (O_DIRECT at an unaligned offset) names the
    file, offset and size; the reads around it complete and the engine stays usable."""
    if engine == "uring":
        _need_uring()
    path = tmp_path / "rows.bin"
    path.write_bytes(np.random.default_rng(0).bytes(8192))
    file = open_rows_file(path, None)
    if not file.direct:
        os.close(file.fd)
        pytest.skip(f"{tmp_path} has no O_DIRECT: unaligned reads are not refused")
    reader = UringReader(path, file, 2) if engine == "uring" else ReadPool(path, file, 2)
    staging = aligned(4096)
    try:
        plan = [np.array(v) for v in ([0, 1, 1024, 1536], [512] * 4, [512] * 4, [0, 512, 1024, 1536])]
        with pytest.raises(DatasetError, match=r"rows\.bin: read of 512 bytes at offset 1 failed \(Invalid argument\)"):
            reader.run(memoryview(staging), *plan)
        plan[0][1] = 512
        assert reader.run(memoryview(staging), *plan) == 2048 and staging[:2048] == path.read_bytes()[:2048]
    finally:
        reader.close()


@pytest.mark.timeout(30)
def test_uring_wait_lets_other_threads_run():
    """A read waiting on the ring does not hold the GIL: the thread that
    supplies its data (a pipe's writer) runs meanwhile, else this would hang."""
    _need_uring()
    r, w = os.pipe()
    reader = UringReader("pipe", RowsFile(r, 4, 512, True), 2)
    writer = threading.Timer(0.2, os.write, (w, b"rows"))
    staging = aligned(512)
    try:
        writer.start()
        assert reader.run(memoryview(staging), *(np.array([v]) for v in (0, 4, 4, 0))) == 4
        assert staging[:4] == b"rows"
    finally:
        writer.join()
        reader.close()
        os.close(w)
