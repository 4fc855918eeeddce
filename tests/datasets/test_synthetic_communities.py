"""Planted communities in the synthetic graphs: --communities, --locality, --shuffle-ids."""

import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.cli import main
from gnnsys.datasets import DatasetError
from gnnsys.datasets.synthetic import DEFAULTS, SHAPES, _Model, read_synthetic

ARXIV = SHAPES["ogbn-arxiv"]


def _edges(source):
    pairs = list(source.edge_chunks())
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def _model(scale, seed, **communities):
    return _Model(ARXIV, scale, seed, ARXIV.homophily, **{**DEFAULTS, "label_noise": 0.0, **communities})


def _model_edges(model):
    pairs = [model.edge_chunk(k) for k in range(model.chunk_nodes.shape[0] - 1)]
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def _digest(source):
    h = hashlib.sha256()
    for src, dst in source.edge_chunks():
        h.update(src.tobytes())
        h.update(dst.tobytes())
    h.update(source.labels.tobytes())
    for name in ("train", "valid", "test"):
        h.update(source.splits[name].tobytes())
    for x in source.feature_chunks():
        h.update(x.tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(
    "like,scale,digest",
    [
        ("arxiv", 0.005, "a736995d001771b4"),
        ("products", 0.001, "3caa268ce1ea10b3"),
        ("papers100M", 0.0002, "6e40723620ea4937"),
    ],
)
def test_default_graph_is_unchanged(like, scale, digest):
    """The digests of the graphs as generated before communities existed; locality 0 gives the same graph."""
    assert _digest(read_synthetic(like, scale, 7)) == digest
    assert _digest(read_synthetic(like, scale, 7, communities=5, locality=0.0, shuffle_ids=True)) == digest


@pytest.mark.parametrize("communities,locality,shuffle", [(10, 0.8, False), (4, 0.3, False), (10, 0.8, True)])
def test_intra_community_share_homophily_and_degrees(communities, locality, shuffle):
    plain = _model(0.02, 1)
    model = _model(0.02, 1, communities=communities, locality=locality, shuffle_ids=shuffle)
    src, dst = _model_edges(model)
    base_src, base_dst = _model_edges(plain)
    intra = np.mean(model.community[src] == model.community[dst])
    assert abs(intra - (locality + (1 - locality) / communities)) < 0.02
    assert abs(np.mean(model.z[src] == model.z[dst]) - ARXIV.homophily) < 0.02
    assert np.array_equal(dst, base_dst) and not (src == dst).any()
    out, base_out = np.bincount(src, minlength=model.num_nodes), np.bincount(base_src, minlength=model.num_nodes)
    # out-degree follows popularity as before, scaled by the community's in-edges per unit of its popularity
    for q, tolerance in ((0.5, 0.15), (0.9, 0.15), (0.99, 0.3)):
        assert abs(np.quantile(out, q) - np.quantile(base_out, q)) <= max(1.0, tolerance * np.quantile(base_out, q))
    assert out.max() > 20 * out.mean()
    assert np.corrcoef(out, base_out)[0, 1] > 0.9  # the same nodes are popular
    sizes = np.bincount(model.community, minlength=communities)
    assert sizes.max() - sizes.min() <= 1
    contiguous = np.all(np.diff(model.community) >= 0)
    assert contiguous != shuffle


def test_deterministic_by_seed():
    kwargs = dict(communities=8, locality=0.7, shuffle_ids=True)
    a, b = read_synthetic("arxiv", 0.005, 3, **kwargs), read_synthetic("arxiv", 0.005, 3, **kwargs)
    assert _digest(a) == _digest(b)
    assert _digest(read_synthetic("arxiv", 0.005, 4, **kwargs)) != _digest(a)
    assert _digest(read_synthetic("arxiv", 0.005, 3, communities=8, locality=0.7)) != _digest(a)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.integers(2, 40), st.floats(0.0, 1.0), st.booleans(), st.integers(0, 3))
def test_any_communities_give_a_valid_graph(communities, locality, shuffle, seed):
    model = _model(0.002, seed, communities=communities, locality=locality, shuffle_ids=shuffle)
    src, dst = _model_edges(model)
    assert src.min() >= 0 and src.max() < model.num_nodes and not (src == dst).any()
    assert np.array_equal(np.bincount(dst, minlength=model.num_nodes), model.in_degree)


def test_meta_records_the_parameters(tmp_path):
    out = tmp_path / "syn"
    args = ["prepare", "synthetic", "--like", "ogbn-arxiv", "--scale", "0.005", "--no-progress", "--out", str(out)]
    assert main([*args, "--communities", "6", "--locality", "0.5", "--shuffle-ids"]) == 0
    synth = json.loads((out / "meta.json").read_text())["source"]["synthetic"]
    assert (synth["communities"], synth["locality"], synth["shuffle_ids"]) == (6, 0.5, True)


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({"communities": 0}, "--communities"),
        ({"communities": 2.5}, "--communities"),
        ({"communities": True}, "--communities"),
        ({"communities": 10**6, "locality": 0.5}, "--communities"),
        ({"communities": 4, "locality": 1.5}, "--locality"),
        ({"communities": 4, "locality": float("nan")}, "--locality"),
        ({"locality": 0.5}, "--locality"),
        ({"shuffle_ids": True}, "--shuffle-ids"),
        ({"like": "ogbn-mag", "communities": 4, "locality": 0.5}, "--communities"),
        ({"like": "ogbn-proteins", "communities": 4}, "--communities"),
    ],
)
def test_bad_arguments(kwargs, argument):
    with pytest.raises(DatasetError, match=f"^{argument}: "):
        read_synthetic(**{"like": "ogbn-arxiv", "scale": 0.01, **kwargs})


def test_cli_locality_without_communities_exits_2(tmp_path, capsys):
    out = tmp_path / "x"
    code = main(["prepare", "synthetic", "--like", "arxiv", "--scale", "0.005", "--locality", "0.5", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "--locality: needs --communities >= 2" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
