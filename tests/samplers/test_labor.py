"""LABOR-0 sampling: per-edge marginals, shared draws, fewer input rows,
determinism, the GPU kernel against the CPU one, the option end to end and
the benchmark's report."""

import importlib.util
import json
from pathlib import Path

import numba
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys._capabilities import HAS_CUDA
from gnnsys.cli import main
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.samplers import make_sampler
from gnnsys.samplers.labor import LaborSampler
from gnnsys.samplers.neighbor import NeighborSampler
from gnnsys.training.checkpoints import restore_training_state, training_state
from gnnsys.training.options import MinibatchOptions

DEVICE = "cuda" if HAS_CUDA else "cpu"  # without CUDA the Triton sampler runs interpreted (tests/conftest.py)
ROOT = Path(__file__).resolve().parents[2]


def csc(src, dst, n, index_dtype=np.int64):
    """CSC of in-neighbours, each node's sources in the order given."""
    src, dst = np.asarray(src), np.asarray(dst)
    order = np.argsort(dst, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    return indptr, src[order].astype(index_dtype)


def random_csc(n=60, m=700, seed=0, index_dtype=np.int32):
    rng = np.random.default_rng(seed)
    return csc(rng.integers(0, n, m), rng.integers(0, n, m), n, index_dtype)


def pool_graph(degrees, pool, seed=0):
    """Destinations 0..len(degrees)-1, destination i with degrees[i] distinct
    in-neighbours drawn from the `pool` nodes that follow them."""
    rng = np.random.default_rng(seed)
    n = len(degrees) + pool
    src = [len(degrees) + rng.choice(pool, d, replace=False) for d in degrees]
    dst = [np.full(d, i) for i, d in enumerate(degrees)]
    return csc(np.concatenate(src), np.concatenate(dst), n)


def kept(mb, block=-1):
    """{global destination: sorted global sources} of one block (default the seeds')."""
    nodes, b = mb.input_nodes.cpu().numpy(), mb.blocks[block]
    ip, ix = b.indptr.cpu().numpy(), b.indices.cpu().numpy()
    return {int(nodes[r]): sorted(nodes[ix[ip[r] : ip[r + 1]]].tolist()) for r in range(b.num_dst)}


def same(a, b) -> bool:
    return torch.equal(a.input_nodes.cpu(), b.input_nodes.cpu()) and all(
        (x.num_src, x.num_dst) == (y.num_src, y.num_dst)
        and torch.equal(x.indptr.cpu(), y.indptr.cpu())
        and torch.equal(x.indices.cpu(), y.indices.cpu())
        for x, y in zip(a.blocks, b.blocks, strict=True)
    )


@pytest.mark.parametrize("fanout", [1, 3, 6])
def test_each_edge_is_kept_with_probability_min_1_k_over_d(fanout):
    degrees = [1, 2, 4, 7, 16, 40]
    indptr, indices = pool_graph(degrees, pool=64)
    sampler = LaborSampler(indptr, indices, [fanout], seed=5)
    draws = 1500
    counts = np.zeros(indices.shape[0])
    for batch in range(draws):
        got = kept(sampler.sample(np.arange(len(degrees)), epoch=0, batch=batch))
        for s, sources in got.items():
            counts[indptr[s] : indptr[s + 1]] += np.isin(indices[indptr[s] : indptr[s + 1]], sources)
    for s, d in enumerate(degrees):
        p = min(1.0, fanout / d)
        edge = counts[indptr[s] : indptr[s + 1]]
        assert np.all(np.abs(edge - draws * p) <= 5 * np.sqrt(draws * p * (1 - p)) + 1e-9), (s, d, edge)


def test_destinations_with_the_same_neighbours_keep_the_same_ones():
    # destinations 0, 1 and 2 share 12 in-neighbours (listed in other orders); 3 has 24, a superset
    pool = np.arange(10, 34)
    src = np.concatenate([pool[:12], pool[:12][::-1], np.roll(pool[:12], 5), pool])
    dst = np.repeat([0, 1, 2, 3], [12, 12, 12, 24])
    sampler = LaborSampler(*csc(src, dst, 34), [4, 2])
    for batch in range(20):
        got = kept(sampler.sample([0, 1, 2, 3], 0, batch))
        assert got[0] == got[1] == got[2]
        assert set(got[3]) & set(pool[:12].tolist()) <= set(got[0])  # r_t < 4/24 implies r_t < 4/12


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(0, 2**16), st.integers(1, 6), st.integers(0, 3))
def test_draws_are_shared_across_a_layer(graph_seed, fanout, batch):
    """A neighbour kept by a destination of degree d is kept by every other of degree <= d."""
    indptr, indices = random_csc(n=30, m=400, seed=graph_seed)
    got = kept(LaborSampler(indptr, indices, [fanout], seed=1).sample(np.arange(30), 0, batch))
    deg = np.diff(indptr)
    for a in range(30):
        for b in range(30):
            if deg[a] <= deg[b]:
                shared = set(indices[indptr[a] : indptr[a + 1]].tolist())
                assert set(got[b]) & shared <= set(got[a])


def test_fewer_distinct_sources_than_uniform():
    """300 destinations of in-degree 20..40 over the same 80 sources, fanout 5:
    uniform draws nearly every source, LABOR about a quarter of them."""
    rng = np.random.default_rng(0)
    indptr, indices = pool_graph(rng.integers(20, 41, 300), pool=80)
    seeds = np.arange(300)
    distinct = {}
    for name, cls in (("uniform", NeighborSampler), ("labor", LaborSampler)):
        blocks = [cls(indptr, indices, [5], seed=s).sample(seeds).blocks[0] for s in range(20)]
        distinct[name] = np.mean([b.num_src - b.num_dst for b in blocks])
        edges = np.mean([b.num_edges / b.num_dst for b in blocks])
        assert 4.5 < edges < 5.5  # k = 5 per destination: exactly (uniform), in expectation (LABOR)
    assert distinct["uniform"] > 75 and distinct["labor"] < 0.5 * distinct["uniform"], distinct


def test_fewer_input_rows_over_three_layers():
    indptr, indices = random_csc(n=2000, m=40000, seed=3)
    seeds = np.arange(0, 2000, 16)
    rows = {
        cls: np.mean([cls(indptr, indices, [10, 5, 5], seed=s).sample(seeds).input_nodes.numel() for s in range(5)])
        for cls in (NeighborSampler, LaborSampler)
    }
    assert rows[LaborSampler] < 0.9 * rows[NeighborSampler], rows


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_deterministic_and_seeded(index_dtype):
    indptr, indices = random_csc(n=300, m=6000, index_dtype=index_dtype)
    seeds = np.arange(0, 300, 7)
    make = lambda seed=11: LaborSampler(indptr, indices, [6, 4, 3], seed=seed)  # noqa: E731
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = make().sample(seeds, epoch=2, batch=5)
    finally:
        numba.set_num_threads(before)
    again = make()
    again.sample(seeds[:4])  # the reused global -> local map must come back clean
    assert same(one, again.sample(seeds, epoch=2, batch=5))
    for other in (make(12).sample(seeds, 2, 5), make().sample(seeds, 3, 5), make().sample(seeds, 2, 6)):
        assert not torch.equal(one.input_nodes, other.input_nodes)


def test_layout_and_full_layers():
    indptr, indices = random_csc()
    seeds = [5, 0, 3, 41]
    mb = LaborSampler(indptr, indices, [-1, 3]).sample(seeds)
    assert torch.equal(mb.input_nodes[:4], torch.tensor(seeds)) and mb.blocks[-1].num_dst == 4
    assert mb.input_nodes.unique().numel() == mb.input_nodes.numel()
    assert mb.blocks[0].num_dst == mb.blocks[1].num_src and mb.blocks[0].num_src == mb.input_nodes.numel()
    for v, sources in kept(mb).items():  # fanout -1: every in-neighbour
        assert sources == sorted(indices[indptr[v] : indptr[v + 1]].tolist())
    for b in mb.blocks:
        assert b.indptr.dtype == b.indices.dtype == torch.int64
        assert all(torch.all(b.indices[b.indptr[r] : b.indptr[r + 1]].diff() >= 0) for r in range(b.num_dst))
    assert LaborSampler(indptr, indices, [0]).sample(seeds).blocks[0].num_edges == 0


def test_ids_are_range_checked():
    indptr, indices = random_csc(index_dtype=np.int64)
    sampler = LaborSampler(indptr, indices, [50])
    with pytest.raises(IndexError, match="seeds: id 60"):
        sampler.sample([60])
    with pytest.raises(ValueError, match="more than once"):
        sampler.sample([1, 1])
    bad = indices.copy()
    bad[indptr[7]] = 999
    with pytest.raises(DatasetError, match="node 7's in-neighbour list holds node id 999"):
        LaborSampler(indptr, bad, [50]).sample([7])
    ptr = indptr.copy()
    ptr[8] = ptr[7] - 1  # a reversed range
    with pytest.raises(DatasetError, match="edge range"):
        LaborSampler(ptr, indices, [50]).sample([7])


@pytest.mark.parametrize("fanouts", [[3, 2], [5, -1], [0, 4], [25], [2, 2, 2]])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gpu_sampler_draws_what_the_cpu_sampler_draws(fanouts, index_dtype):
    pytest.importorskip("triton")
    indptr, indices = random_csc(index_dtype=index_dtype)
    seeds = torch.tensor([5, 1, 30, 2, 17])
    want = LaborSampler(indptr, indices, fanouts, seed=7).sample(seeds, epoch=1, batch=3)
    for kind in ("gpu", "gpu-pinned"):
        sampler = make_sampler(
            kind, torch.from_numpy(indptr), torch.from_numpy(indices), fanouts, DEVICE, seed=7, sampling="labor"
        )
        got = sampler.sample(seeds, 1, 3)
        assert same(got, want) and got.input_nodes.device == sampler.device


def test_make_sampler_refuses_bad_sampling_in_one_line():
    indptr, indices = random_csc()
    assert isinstance(make_sampler("cpu", indptr, indices, [3], sampling="labor"), LaborSampler)
    assert type(make_sampler("cpu", indptr, indices, [3])) is NeighborSampler
    with pytest.raises(ValueError, match=r"^sampling must be one of uniform, labor, got 'ladder'$"):
        make_sampler("cpu", indptr, indices, [3], sampling="ladder")
    with pytest.raises(ValueError, match="without replacement"):
        make_sampler("cpu", indptr, indices, [3], sampling="labor", replace=True)


def test_option_is_checked_in_one_line(make_dataset, capsys):
    with pytest.raises(ConfigError, match="sampling") as e:
        MinibatchOptions(sampling="ladder")
    assert "\n" not in str(e.value) and "uniform, labor" in str(e.value)
    ds, _ = make_dataset()
    with pytest.raises(SystemExit) as exit_:
        main(["train", str(ds.path), "--sampling", "ladder"])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert main(["train", str(ds.path), "--mode", "fullgraph", "--sampling", "labor", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sampling: does not apply to --mode fullgraph" in err


def test_training_reaches_the_labor_sampler(make_dataset, monkeypatch):
    import gnnsys.loading.loader

    made = []
    real = gnnsys.loading.loader.make_sampler

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(gnnsys.loading.loader, "make_sampler", spy)
    ds, _ = make_dataset(num_nodes=80, num_edges=500)
    result = gnnsys.train(
        ds,
        sampling="labor",
        eval="sampled",
        epochs=2,
        fanouts=[4, 3],
        hidden=16,
        batch_size=16,
        progress=False,
        prefetch=2,
    )
    assert result.config["sampling"] == "labor" and len(result.epochs) == 2
    assert made and all(isinstance(s, LaborSampler) for s in made)


def test_a_checkpoint_from_before_the_option_resumes_as_uniform():
    options = MinibatchOptions()
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    state = training_state(options, 1, [], model, opt)
    del state["options"]["sampling"]
    assert restore_training_state(state, "ckpt", options, model, opt) == (1, [])
    with pytest.raises(DatasetError, match=r"different options \(sampling\)"):
        restore_training_state(state, "ckpt", MinibatchOptions(sampling="labor"), model, opt)


def test_bench_labor_reports_rows_of_both_samplers(make_dataset, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_labor", ROOT / "benchmarks" / "bench_labor.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ds, _ = make_dataset(num_nodes=300, num_edges=6000)
    out = tmp_path / "rows.json"
    bench.main([str(ds.path), "--batches", "3", "--batch-size", "16", "--fanouts", "5,3", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["batches"] == 3 and set(result["median"]) == {"uniform", "labor"}
    median = result["median"]
    assert result["ratio_labor_to_uniform"] == median["labor"]["input_rows"] / median["uniform"]["input_rows"]
    assert "ratio" in capsys.readouterr().out
