"""Streaming layer-wise inference equals the model on the whole graph (what the
in-memory layer-wise inference computed), in one pass or several, for any
chunking; it reads what it says, keeps within its scratch directory and
cleans up, and fails in one line when the scratch space is short."""

import errno
import os
import weakref

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.datasets import Dataset
from gnnsys.errors import ConfigError
from gnnsys.inference import passes as passes_module
from gnnsys.inference import rows_io
from gnnsys.inference.layerwise import layerwise_inference
from gnnsys.inference.rows_io import ScratchSpaceError
from gnnsys.inference.streaming import LayerStream
from gnnsys.inference.tiles import TileStore
from gnnsys.models.gnn import GNN
from gnnsys.samplers import Block


def _model(conv, ds, x, norm=None, residual=False, layers=3, dim=5):
    """A model with batch-norm statistics moved off their defaults, and its
    outputs on the whole graph (the oracle) for every node."""
    torch.manual_seed(0)
    model = GNN(conv, dim, 8, 3, num_layers=layers, norm=norm, residual=residual, heads=2)
    full = [Block.full_graph(ds.indptr, ds.indices)] * layers
    model.train()
    model(torch.randn(ds.num_nodes, dim), full)
    model.eval()
    with torch.no_grad():
        expect = model(torch.as_tensor(x), full)
    model.train()
    return model, expect


@pytest.mark.parametrize("conv,batch_size", [("sage", 7), ("gat", 16), ("gcn", 5)])
@pytest.mark.parametrize("norm", [None, "batch"])
def test_layerwise_equals_full_graph(make_dataset, conv, batch_size, norm):
    ds, arrays = make_dataset(num_nodes=50, num_edges=300, dim=5, num_classes=3)
    model, expect = _model(conv, ds, arrays["x"], norm)
    nodes = torch.tensor([3, 0, 49, 17])
    out = layerwise_inference(model, ds, nodes, batch_size=batch_size)
    assert model.training  # mode restored
    torch.testing.assert_close(out, expect[nodes], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layerwise_inference(model, ds, batch_size=batch_size), expect, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("conv", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("norm,residual", [(None, False), ("layer", True), ("batch", True)])
@pytest.mark.parametrize(
    "budget,chunk_bytes,several", [(None, None, False), (76_000, 1, True), (130_000, 40_000, True), (None, 1, False)]
)
def test_streaming_equals_full_graph_for_any_budget_and_chunk(
    make_dataset, conv, norm, residual, budget, chunk_bytes, several
):
    ds, arrays = make_dataset(num_nodes=600, num_edges=4000, dim=5, num_classes=3)  # has self-loops, repeats
    model, expect = _model(conv, ds, arrays["x"], norm, residual)
    out, stats = layerwise_inference(model, ds, host_mem_budget=budget, chunk_bytes=chunk_bytes, return_stats=True)
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-5)
    first = stats.layers[0]
    assert (first.passes > 1) == several and first.nodes == 600
    if chunk_bytes == 1:  # the smallest chunk: one alignment unit of rows
        assert first.chunks_read >= first.passes * -(-600 // first.chunk_rows)


@pytest.mark.parametrize("conv", ["sage", "gcn", "gat"])
def test_a_blocks_arrays_are_let_go_before_the_next_blocks_are_made(make_dataset, monkeypatch, conv):
    """One block's tiles and stream state are held at a time, as the budget's
    plan counts them, and the heap's freed memory goes back to the OS after each block."""
    ds, arrays = make_dataset(num_nodes=600, num_edges=4000, dim=5, num_classes=3)
    model, expect = _model(conv, ds, arrays["x"])
    held, blocks = [], []
    real_tiles, real_begin = TileStore.tiles, LayerStream.begin

    def tiles(self, k, *args):
        assert all(ref() is None for ref in held), "an earlier block's arrays are still held"
        made = real_tiles(self, k, *args)
        held.extend(weakref.ref(a) for a in made)
        blocks.append(k)
        return made

    def begin(self, *args):
        real_begin(self, *args)
        state = (getattr(self, name, None) for name in ("acc", "dst_scale", "run_sum"))
        held.extend(weakref.ref(t) for t in state if t is not None)

    released = []
    monkeypatch.setattr(TileStore, "tiles", tiles)
    monkeypatch.setattr(LayerStream, "begin", begin)
    monkeypatch.setattr(passes_module, "release_freed_memory", lambda: released.append(len(blocks)))
    out = layerwise_inference(model, ds, host_mem_budget=75_000, chunk_bytes=1)
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-5)
    assert blocks.count(1) >= 1  # several blocks a layer
    assert released == list(range(1, len(blocks) + 1))  # the freed memory handed back after every block


def test_in_memory_features_and_another_source(make_dataset):
    ds, arrays = make_dataset(num_nodes=80, num_edges=500, dim=5)
    model, expect = _model("sage", ds, arrays["x"])
    memory = Dataset(
        name="m",
        indptr=ds.indptr,
        indices=ds.indices,
        features=torch.from_numpy(arrays["x"]),
        labels=ds.labels,
        splits=ds.splits,
        num_classes=3,
    )
    out, stats = layerwise_inference(model, memory, return_stats=True)
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-5)
    assert stats.layers[0].bytes_read == 80 * 5 * 4  # the rows gathered, once
    torch.testing.assert_close(layerwise_inference(model, ds, features=memory.features), expect, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("conv,reads", [("sage", 1), ("gcn", 1), ("gat", 2)])
def test_bytes_read_per_pass(make_dataset, conv, reads):
    ds, arrays = make_dataset(num_nodes=700, num_edges=3000, dim=5)
    model, _ = _model(conv, ds, arrays["x"])
    size = os.path.getsize(ds.path / ds.meta["features"]["file"])
    _, one = layerwise_inference(model, ds, return_stats=True)
    _, many = layerwise_inference(model, ds, host_mem_budget=80_000, chunk_bytes=8192, return_stats=True)
    for stats in (one, many):
        first = stats.layers[0]
        assert first.input_bytes == size
        # each pass reads the file once (GAT also the block's own rows), to the end of its last block,
        # and blocks that do not hold their own rows read them once more after their passes
        again = first.rows_after
        assert size * (first.passes + again) <= first.bytes_read
        assert first.bytes_read <= 1.1 * size * (first.passes * reads + again) + 4096 * (first.passes + again)
    assert one.layers[0].passes == 1 and many.layers[0].passes > 1
    assert one.layers[0].bytes_read <= 1.1 * size * reads
    assert one.to_dict()["layers"][0]["passes"] == 1


def test_last_layer_runs_over_the_nodes_only(make_dataset):
    ds, arrays = make_dataset(num_nodes=300, num_edges=1500, dim=5)
    model, expect = _model("gcn", ds, arrays["x"])
    nodes = torch.tensor([299, 4, 4, 150])  # any order, repeats allowed
    out, stats = layerwise_inference(model, ds, nodes, return_stats=True)
    torch.testing.assert_close(out, expect[nodes], rtol=1e-4, atol=1e-5)
    assert [s.nodes for s in stats.layers] == [300, 300, 4]


def test_scratch_files_go_to_scratch_dir_and_are_removed(make_dataset, tmp_path, monkeypatch):
    ds, arrays = make_dataset(num_nodes=60, num_edges=300, dim=5)
    model, expect = _model("sage", ds, arrays["x"])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    seen = []
    real = rows_io.ScratchRows.__init__

    def spy(self, directory, *args, **kwargs):
        seen.append(directory)
        real(self, directory, *args, **kwargs)

    monkeypatch.setattr(rows_io.ScratchRows, "__init__", spy)
    torch.testing.assert_close(layerwise_inference(model, ds, scratch_dir=scratch), expect, rtol=1e-4, atol=1e-5)
    assert len(seen) == 2 and all(d.parent == scratch for d in seen)
    assert list(scratch.iterdir()) == []

    def fail(self, x_dst, a, b):
        raise RuntimeError("boom")

    monkeypatch.setattr(LayerStream, "finish", fail)
    with pytest.raises(RuntimeError, match="boom"):
        layerwise_inference(model, ds, scratch_dir=scratch)
    assert list(scratch.iterdir()) == []
    with pytest.raises(ConfigError, match="scratch_dir"):
        layerwise_inference(model, ds, scratch_dir=tmp_path / "missing")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_scratch_is_close_to_float32(make_dataset, dtype):
    ds, arrays = make_dataset(num_nodes=60, num_edges=300, dim=5)
    model, expect = _model("gat", ds, arrays["x"])
    out = layerwise_inference(model, ds, dtype=dtype)
    torch.testing.assert_close(out, expect, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EOPNOTSUPP])
def test_full_scratch_disk_is_one_line_and_leaves_nothing(make_dataset, tmp_path, monkeypatch, error):
    ds, arrays = make_dataset(num_nodes=60, num_edges=300, dim=5)
    model, _ = _model("sage", ds, arrays["x"])

    def no_space(fd, offset, length):
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(rows_io.os, "posix_fallocate", no_space)
    monkeypatch.setattr(rows_io.shutil, "disk_usage", lambda path: type("U", (), {"free": 100})())
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(ScratchSpaceError) as e:
        layerwise_inference(model, ds, scratch_dir=scratch)
    message = str(e.value)
    assert "\n" not in message and "layer1.bin" in message
    assert f"needs {60 * 8 * 4:,} bytes, 100 free" in message
    assert list(scratch.iterdir()) == []


def test_bad_settings_are_one_line_errors(make_dataset):
    ds, arrays = make_dataset(num_nodes=60, num_edges=300, dim=5)
    model, _ = _model("sage", ds, arrays["x"])
    with pytest.raises(ValueError, match="batch_size"):
        layerwise_inference(GNN("sage", 5, 4, 3, 1), ds, batch_size=0)
    with pytest.raises(ConfigError, match="host_mem_budget: 1,000 bytes cannot hold"):
        layerwise_inference(model, ds, host_mem_budget=1000)
    with pytest.raises(ConfigError, match="dtype"):
        layerwise_inference(model, ds, dtype="int8")
    with pytest.raises(IndexError, match="nodes: id 60"):
        layerwise_inference(model, ds, torch.tensor([60]))


def test_any_chunking_gives_the_same_rows(make_dataset):
    ds, arrays = make_dataset(num_nodes=400, num_edges=2500, dim=5)
    models = {conv: _model(conv, ds, arrays["x"], "layer", True, layers=2) for conv in ("sage", "gcn", "gat")}

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(
        conv=st.sampled_from(sorted(models)),
        budget=st.integers(80_000, 400_000),
        chunk=st.integers(1, 10_000),
        nodes=st.lists(st.integers(0, 399), min_size=1, max_size=30),
    )
    def check(conv, budget, chunk, nodes):
        model, expect = models[conv]
        ids = torch.tensor(nodes)
        out = layerwise_inference(model, ds, ids, batch_size=7, host_mem_budget=budget, chunk_bytes=chunk)
        torch.testing.assert_close(out, expect[ids], rtol=1e-4, atol=1e-5)

    check()


def test_chunk_reads_are_block_aligned(make_dataset):
    ds, _ = make_dataset(num_nodes=300, num_edges=1000, dim=5)
    rows = rows_io.input_rows(ds)
    try:
        assert isinstance(rows, rows_io.FileRows)
        rows.reserve(300)
        assert (rows.align_rows * rows.stride) % 4096 == 0
        first = rows.read(0, rows.align_rows)
        last = rows.read(rows.align_rows, 300)
        stored = ds.features[torch.arange(300)]
        assert torch.equal(torch.cat([first.clone(), last]), stored)
        assert rows.bytes_read == os.path.getsize(rows.path)
    finally:
        rows.close()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_rows_are_read_into_two_reserved_float_buffers(tmp_path, dtype):
    values = torch.randn(1000, 8)
    out = rows_io.ScratchRows(tmp_path, "rows.bin", 1000, 8, dtype)
    out.write(0, values)
    rows, other = out.rows(), rows_io.ScratchRows(tmp_path, "other.bin", 1000, 4, dtype).rows()
    try:
        rows.reserve(512)
        reads = [rows.read(lo, min(lo + 512, 1000)) for lo in (0, 512)]
        expect = values.to(getattr(torch, dtype)).float()
        assert torch.equal(torch.cat(reads), expect)
        again = rows.read(0, 512)  # the first buffer again: no read allocates
        assert [r.data_ptr() for r in (*reads, again)] == [
            reads[0].data_ptr(),
            reads[1].data_ptr(),
            reads[0].data_ptr(),
        ]
        assert reads[0].data_ptr() != reads[1].data_ptr() and torch.equal(again, expect[:512])
        with pytest.raises(ValueError, match="cannot share the buffers"):
            other.share_buffers(rows)
    finally:
        rows.close()
        other.close()
