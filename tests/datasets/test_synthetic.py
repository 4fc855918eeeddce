import json

import numpy as np
import pytest
import torch

from gnnsys.cli import main
from gnnsys.datasets import DatasetError, PrepareOptions, load_dataset, write_dataset
from gnnsys.datasets.prepare import prepare_synthetic
from gnnsys.datasets.synthetic import DEFAULTS, SHAPES, _Model, read_synthetic
from gnnsys.datasets.synthetic_model import _alias_tables

TINY = {"ogbn-arxiv": 0.01, "ogbn-products": 0.001, "ogbn-papers100M": 0.0001}


def _edges(source):
    pairs = list(source.edge_chunks())
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


@pytest.mark.parametrize("like", list(SHAPES))
def test_counts_match_shape(like):
    shape, scale = SHAPES[like], TINY[like]
    s = read_synthetic(like, scale, seed=3)
    assert s.num_nodes == round(shape.num_nodes * scale)
    src, dst = _edges(s)
    assert src.shape[0] == s.expected_num_edges
    assert abs(src.shape[0] / (shape.num_edges * scale) - 1) < 0.03
    assert src.min() >= 0 and src.max() < s.num_nodes and not (src == dst).any()
    x = np.concatenate(list(s.feature_chunks()))
    assert x.dtype == np.float32 and x.shape == (s.num_nodes, shape.feature_dim)
    assert s.num_classes == shape.num_classes and s.labels.max() < shape.num_classes


def test_chunks_repeat_identically():
    s = read_synthetic("ogbn-products", 0.002, seed=5)
    first, second = list(s.edge_chunks()), list(s.edge_chunks())
    assert len(first) == len(second)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(first, second))
    assert all(np.array_equal(a, b) for a, b in zip(s.feature_chunks(), s.feature_chunks()))


def _prepare(tmp_path, name, seed, *extra):
    out = tmp_path / name
    assert (
        main(
            [
                "prepare",
                "synthetic",
                "--like",
                "ogbn-arxiv",
                "--scale",
                "0.005",
                "--seed",
                str(seed),
                "--no-progress",
                "--out",
                str(out),
                *extra,
            ]
        )
        == 0
    )
    return json.loads((out / "meta.json").read_text())


def test_cli_deterministic_per_seed(tmp_path):
    a, b, c = _prepare(tmp_path, "a", 1), _prepare(tmp_path, "b", 1), _prepare(tmp_path, "c", 2)
    assert a["checksums"] == b["checksums"]
    differ = {f for f in a["checksums"] if a["checksums"][f] != c["checksums"][f]}
    assert {"indices.npy", "features.bin", "labels.npy"} <= differ
    assert a["num_nodes"] == round(169_343 * 0.005)
    synth = a["source"]["synthetic"]
    bayes = synth["bayes_accuracy"]
    assert synth["attainable_accuracy"] == bayes["features_and_in_neighbours"]
    assert bayes["features_only"] + 0.15 < synth["attainable_accuracy"] <= synth["label_ceiling"] + 0.03
    assert synth["attainable_accuracy"] < synth["attainable_accuracy_undirected"] <= synth["label_ceiling"] + 0.03


def test_python_api_short_name_to_undirected(tmp_path):
    directed = _prepare(tmp_path, "d", 0)
    out = prepare_synthetic(out=tmp_path / "u", like="arxiv", scale=0.005, seed=0, to_undirected=True, progress=False)
    undirected = json.loads((out / "meta.json").read_text())
    assert undirected["num_edges"] == 2 * directed["num_edges"]
    assert undirected["checksums"]["features.bin"] == directed["checksums"]["features.bin"]


def test_degrees_heavy_tailed():
    s = read_synthetic("ogbn-arxiv", 0.02, seed=0)
    src, dst = _edges(s)
    for ids in (src, dst):
        degree = np.bincount(ids, minlength=s.num_nodes)
        assert degree.max() > 20 * degree.mean()
        assert np.median(degree) < degree.mean()


@pytest.mark.parametrize("homophily", [0.3, 0.8])
def test_homophily_as_asked(homophily):
    s = read_synthetic("ogbn-arxiv", 0.02, seed=1, homophily=homophily, label_noise=0.0)
    src, dst = _edges(s)
    measured = np.mean(s.labels[src] == s.labels[dst])
    baseline = s.extra["synthetic"]["class_baseline_homophily"]
    assert baseline < 0.1
    assert abs(measured - homophily) < 0.03


def test_label_noise_rate():
    clean = read_synthetic("ogbn-arxiv", 0.02, seed=4, label_noise=0.0).labels
    noisy = read_synthetic("ogbn-arxiv", 0.02, seed=4, label_noise=0.5).labels
    assert abs(np.mean(clean != noisy) - 0.5 * (1 - 1 / 40)) < 0.03


@pytest.mark.parametrize("like", list(SHAPES))
def test_splits_as_specified(like):
    shape, scale = SHAPES[like], TINY[like]
    s = read_synthetic(like, scale, seed=2)
    sizes = np.array([s.splits[k].shape[0] for k in ("train", "valid", "test")])
    expected = np.array(shape.split_counts) * s.num_nodes / shape.num_nodes
    assert np.all(np.abs(sizes - expected) <= 1)
    labelled = np.flatnonzero(s.labels >= 0)
    if shape.fully_labelled:
        assert sizes.sum() == s.num_nodes == labelled.shape[0]
    else:
        assert np.array_equal(np.sort(np.concatenate(list(s.splits.values()))), labelled)
        assert abs(labelled.shape[0] / s.num_nodes - 0.014) < 0.002
    if shape.split_order == "time":
        assert s.splits["train"].max() < s.splits["valid"].min() <= s.splits["valid"].max() < s.splits["test"].min()
    else:
        src, _ = _edges(s)
        out_degree = np.bincount(src, minlength=s.num_nodes)
        assert out_degree[s.splits["train"]].mean() > 2 * out_degree[s.splits["test"]].mean()


def _linear_accuracy(x, y, train, test):
    """Test accuracy of a ridge-regression classifier on one-hot labels (closed form)."""
    x = (x - x[train].mean(0)) / (x[train].std(0) + 1e-6)
    x = np.hstack([x, np.ones((x.shape[0], 1), x.dtype)]).astype(np.float64)
    onehot = np.eye(int(y.max()) + 1)[y[train]]
    w = np.linalg.solve(x[train].T @ x[train] + 10.0 * np.eye(x.shape[1]), x[train].T @ onehot)
    return float(np.mean((x[test] @ w).argmax(1) == y[test]))


def test_neighbourhood_makes_labels_learnable(tmp_path):
    source = read_synthetic("ogbn-arxiv", 0.03, seed=0)
    ds = load_dataset(write_dataset(source, tmp_path / "arxiv", PrepareOptions(to_undirected=True, progress=False)))
    x = ds.features[torch.arange(ds.num_nodes)].float().numpy()
    degree = np.diff(ds.indptr.numpy())
    agg = np.zeros_like(x)
    np.add.at(agg, np.repeat(np.arange(ds.num_nodes), degree), x[ds.indices.numpy()])
    agg /= np.maximum(degree, 1)[:, None]
    y, train, test = ds.labels.numpy(), ds.split("train").numpy(), ds.split("test").numpy()
    features_only = _linear_accuracy(x, y, train, test)
    with_neighbours = _linear_accuracy(np.hstack([x, agg]), y, train, test)
    assert with_neighbours > features_only + 0.15
    assert with_neighbours < ds.meta["source"]["synthetic"]["label_ceiling"]


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({"like": "ogbn-nope"}, "--like"),
        ({"scale": 0.0}, "--scale"),
        ({"homophily": 1.5}, "--homophily"),
        ({"homophily": 0.001}, "--homophily"),
        ({"label_noise": -0.1}, "--label-noise"),
        ({"degree_exponent": 1.5}, "--degree-exponent"),
        ({"scale": 1e-6}, "--scale"),
    ],
)
def test_bad_arguments(kwargs, argument):
    with pytest.raises(DatasetError, match=f"^{argument}: "):
        read_synthetic(**{"like": "ogbn-arxiv", "scale": 0.01, **kwargs})


def test_cli_bad_argument_exits_2(tmp_path, capsys):
    code = main(["prepare", "synthetic", "--like", "ogbn-arxiv", "--scale", "-1", "--out", str(tmp_path / "x")])
    assert code == 2 and "--scale: must be positive" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_attainable_accuracy_matches_the_bayes_classifier_on_the_graph():
    """The recorded Monte Carlo figures agree with the same Bayes classifier
    run on the generated graph itself (which repeats some edges, so the
    model-based estimate may be slightly optimistic)."""
    shape = SHAPES["ogbn-arxiv"]
    model = _Model(shape, 0.02, 0, shape.homophily, **DEFAULTS)
    source = read_synthetic("ogbn-arxiv", 0.02, seed=0)
    x = np.concatenate(list(source.feature_chunks())).astype(np.float64)
    src, dst = _edges(source)
    ll = model.signal * x @ model.centroids.astype(np.float64).T
    into, out, _ = model.mixing()

    def terms(owner, neighbour, mixing):
        top = ll[neighbour].max(1, keepdims=True)
        t = np.zeros_like(ll)
        np.add.at(t, owner, np.log(np.exp(ll[neighbour] - top) @ mixing.T) + top)
        return t

    with_in = np.log(model.class_share) + ll + terms(dst, src, into)
    with_all = with_in + terms(src, dst, out)
    synth = source.extra["synthetic"]
    for score, key in ((with_in, "attainable_accuracy"), (with_all, "attainable_accuracy_undirected")):
        measured = np.mean(score.argmax(1) == source.labels)
        assert abs(measured - synth[key]) < 0.05


@pytest.mark.parametrize(
    "weights,nodes,starts",
    [
        ([1.0, 2.0, 3.0, 4.0], [0, 1, 2, 3], [0, 4]),
        ([5.0, 0.5, 0.5, 1.0, 1.0, 100.0, 0.1], [0, 1, 2, 3, 4, 5, 6], [0, 3, 3, 7]),
        ([3.0, 1.0, 2.0], [2, 0, 1], [0, 1, 3, 6]),  # positions wrap: position p is node nodes[p % 3]
    ],
)
def test_alias_tables_give_the_weights(weights, nodes, starts):
    weights, nodes, starts = np.array(weights), np.array(nodes, np.int32), np.array(starts)
    prob, alias = np.empty(starts[-1]), np.empty(starts[-1], np.int32)
    _alias_tables(weights, nodes, starts, prob, alias, np.empty(starts[-1], np.int32), np.empty(starts[-1], np.int32))
    weight_at = weights[nodes[np.arange(starts[-1]) % nodes.shape[0]]]
    for a, b in zip(starts[:-1], starts[1:]):
        if a == b:
            continue
        mass = prob[a:b].copy()
        np.add.at(mass, alias[a:b] - a, 1.0 - prob[a:b])
        assert np.all((alias[a:b] >= a) & (alias[a:b] < b))
        np.testing.assert_allclose(mass / (b - a), weight_at[a:b] / weight_at[a:b].sum(), rtol=1e-12)
