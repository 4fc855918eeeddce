"""Streaming inference does not repeat itself and counts what it holds: a
narrowing layer that takes several passes projects its input once and its
passes read the narrow projected rows (same outputs); the host-memory plan
names every array a layer holds, with its size."""

import os

import numpy as np
import pytest
import torch

from gnnsys.errors import ConfigError
from gnnsys.inference import tiles
from gnnsys.inference.layerwise import layerwise_inference, stream_inference
from gnnsys.inference.rows_io import ArraySink
from gnnsys.inference.streaming import LayerStream
from gnnsys.models.gnn import GNN
from gnnsys.samplers import Block


def _model(conv, ds, x, residual=False, dim=16, hidden=4):
    torch.manual_seed(0)
    model = GNN(conv, dim, hidden, 3, num_layers=2, residual=residual, heads=2)
    with torch.no_grad():
        expect = model.eval()(torch.as_tensor(x), [Block.full_graph(ds.indptr, ds.indices)] * 2)
    return model, expect


@pytest.mark.parametrize("conv,budget,edges", [("sage", 50_000, 3000), ("gcn", 75_000, 6000), ("gat", 65_000, 3000)])
def test_a_narrowing_layer_is_projected_once(make_dataset, monkeypatch, conv, budget, edges):
    ds, arrays = make_dataset(num_nodes=500, num_edges=edges, dim=16, num_classes=3)
    model, expect = _model(conv, ds, arrays["x"])
    size = os.path.getsize(ds.path / ds.meta["features"]["file"])
    out, stats = layerwise_inference(model, ds, host_mem_budget=budget, return_stats=True)
    first = stats.layers[0]
    parts = {"sage": (4, 4), "gcn": (4,), "gat": (4 + 2 * 2,)}[conv]  # SAGE: x W_l apart from lin_r(x)
    assert first.passes > 1 and first.projected_width == sum(parts)
    # the wide input read once, then each pass reads the neighbours' narrow projected rows, and the
    # destinations' own rows are read apart (SAGE's own part, GAT's before each pass, or after each pass)
    neighbours, own = 500 * parts[0] * 4, 500 * parts[-1] * 4
    again = conv != "gcn" or first.rows_after
    assert size + first.passes * neighbours + again * own <= first.bytes_read
    assert first.bytes_read <= size + first.passes * (neighbours + again * own) + 4096
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(LayerStream, "projection_width", lambda self: 0)
    again, plain = layerwise_inference(model, ds, host_mem_budget=budget, return_stats=True)
    assert plain.layers[0].projected_width == 0 and plain.layers[0].bytes_read >= size * plain.layers[0].passes
    assert first.bytes_read < plain.layers[0].bytes_read
    torch.testing.assert_close(out, again, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("conv,budget", [("sage", 40_000), ("gcn", 55_000), ("gat", 55_000)])
def test_no_projection_where_it_is_not_exact_or_not_needed(make_dataset, conv, budget):
    ds, arrays = make_dataset(num_nodes=300, num_edges=1500, dim=16, num_classes=3)
    model, expect = _model(conv, ds, arrays["x"], residual=True)  # the residual needs the input rows themselves
    out, stats = layerwise_inference(model, ds, host_mem_budget=budget, return_stats=True)
    assert stats.layers[0].passes > 1 and stats.layers[0].projected_width == 0
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-5)
    model, _ = _model(conv, ds, arrays["x"])
    _, one = layerwise_inference(model, ds, return_stats=True)  # one pass: projecting first would read twice
    assert one.layers[0].passes == 1 and one.layers[0].projected_width == 0


def test_the_plan_counts_every_array_a_layer_holds(make_dataset):
    ds, arrays = make_dataset(num_nodes=400, num_edges=2000, dim=16, num_classes=3)
    model, expect = _model("gcn", ds, arrays["x"])
    nodes = torch.tensor([5, 399, 0, 7, 7])
    out, stats = layerwise_inference(model, ds, nodes, host_mem_budget=200_000, return_stats=True)
    torch.testing.assert_close(out, expect[nodes], rtol=1e-4, atol=1e-5)
    hidden, last = (s.host_bytes for s in stats.layers)
    assert hidden["node ids"] == 0  # every node: a range, no ids held
    assert last["node ids"] == 5 * 8
    assert hidden["degrees"] == last["degrees"] == 2 * 400 * 4  # the degrees and their inverse square roots
    assert last["result rows"] == 5 * 3 * 4 and "result rows" not in hidden  # a hidden layer writes a file
    assert all(part["input chunks"] > 0 and part["dense batch"] > 0 for part in (hidden, last))


def test_a_budget_short_of_the_fixed_arrays_names_them(make_dataset):
    ds, arrays = make_dataset(num_nodes=400, num_edges=2000, dim=16, num_classes=3)
    model, _ = _model("gcn", ds, arrays["x"])
    with pytest.raises(ConfigError) as e:
        layerwise_inference(model, ds, host_mem_budget=20_000)
    message = str(e.value)
    assert "\n" not in message and message.startswith("host_mem_budget: 20,000 bytes cannot hold degrees 3,200 bytes")
    assert "input chunks" in message and "bytes in all; raise it" in message


@pytest.mark.parametrize("conv", ["sage", "gcn", "gat"])
def test_edge_tiles_are_bucketed_once_and_read_back(make_dataset, monkeypatch, tmp_path, conv):
    ds, arrays = make_dataset(num_nodes=500, num_edges=3000, dim=8, num_classes=3)
    torch.manual_seed(0)
    model = GNN(conv, 8, 8, 8, num_layers=3, heads=2)  # every layer as wide: one grid for all three
    with torch.no_grad():
        expect = model.eval()(torch.as_tensor(arrays["x"]), [Block.full_graph(ds.indptr, ds.indices)] * 3)
    calls = []
    real = tiles.bucket_edges

    def counted(*args):
        calls.append(len(args[2]))
        return real(*args)

    monkeypatch.setattr(tiles, "bucket_edges", counted)
    result = np.lib.format.open_memmap(tmp_path / "out.npy", "w+", np.float32, (500, 8))  # a file: no rows held
    stats = stream_inference(model, ds, None, ArraySink(result), host_mem_budget=60_000, scratch_dir=tmp_path)
    torch.testing.assert_close(torch.from_numpy(np.array(result)), expect, rtol=1e-4, atol=1e-5)
    passes = [s.passes for s in stats.layers]
    assert passes[0] > 1 and passes[1] == passes[0] and stats.layers[1].tiles_reused == passes[0]
    if conv == "gat":  # its last layer averages the heads: more state per destination, blocks of its own
        assert stats.layers[2].tiles_reused == 0 and sum(calls) == 1000
    else:  # each block bucketed once, by the first layer
        assert sum(calls) == 500 and len(calls) == passes[0] and stats.layers[2].tiles_reused == passes[0]
    assert list(tmp_path.glob("gnnsys-inference-*")) == []
    nodes = torch.tensor([3, 1, 499])
    out, stats = layerwise_inference(model, ds, nodes, host_mem_budget=60_000, return_stats=True)
    torch.testing.assert_close(out, expect[nodes], rtol=1e-4, atol=1e-5)
    assert stats.layers[-1].tiles_reused == 0  # the last layer over other nodes buckets its own


def test_a_last_layer_short_of_budget_is_refused_before_any_layer_runs(make_dataset, monkeypatch):
    ds, arrays = make_dataset(num_nodes=400, num_edges=2000, dim=16, num_classes=3)
    torch.manual_seed(0)
    model = GNN("sage", 16, 4, 4000, num_layers=2)  # 400 x 4,000 float32 results: 6.4 MB held in memory
    ran = []
    monkeypatch.setattr(LayerStream, "begin", lambda self, *args: ran.append(1))
    with pytest.raises(ConfigError, match=r"cannot hold result rows 6\.1 MiB"):
        layerwise_inference(model, ds, host_mem_budget=1_000_000)
    assert ran == []


@pytest.mark.parametrize("conv", ["sage", "gat"])
def test_projected_rows_are_kept_in_the_scratch_dtype(make_dataset, conv):
    ds, arrays = make_dataset(num_nodes=500, num_edges=3000, dim=16, num_classes=3)
    model, expect = _model(conv, ds, arrays["x"])
    out, stats = layerwise_inference(model, ds, host_mem_budget=55_000, dtype="bfloat16", return_stats=True)
    assert stats.layers[0].projected_width > 0
    torch.testing.assert_close(out, expect, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize(  # residual False: SAGE reads projected rows (its destinations' part from a file of its own)
    "conv,residual,budget",
    [
        ("sage", True, 50_000),
        ("sage", False, 50_000),
        ("gcn", True, 75_000),
        ("gat", True, 60_000),
        ("gat", False, 60_000),
    ],
)
def test_own_rows_are_read_again_after_a_pass_when_that_saves_passes(make_dataset, monkeypatch, conv, residual, budget):
    ds, arrays = make_dataset(num_nodes=600, num_edges=4000, dim=16, num_classes=3)
    model, expect = _model(conv, ds, arrays["x"], residual=residual)
    out, stats = layerwise_inference(model, ds, host_mem_budget=budget, return_stats=True)
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-5)
    real = LayerStream.dst_bytes
    monkeypatch.setattr(LayerStream, "dst_bytes", lambda self, rows_held=True: real(self))  # rows always held
    again, held = layerwise_inference(model, ds, host_mem_budget=budget, return_stats=True)
    torch.testing.assert_close(again, expect, rtol=1e-4, atol=1e-5)
    first, first_held = stats.layers[0], held.layers[0]
    assert not first_held.rows_after and first_held.passes > 1
    assert (first.projected_width > 0) != residual and (first_held.projected_width > 0) != residual
    if conv == "gat":  # its attention needs the rows before any edge
        assert not first.rows_after and first.passes == first_held.passes
    else:
        assert first.rows_after and first.passes < first_held.passes
    nodes = torch.arange(0, 600, 2)
    picked, some = layerwise_inference(model, ds, nodes, host_mem_budget=budget, return_stats=True)
    assert not some.layers[-1].rows_after  # ids, not a range: held through the pass
    torch.testing.assert_close(picked, expect[nodes], rtol=1e-4, atol=1e-5)
