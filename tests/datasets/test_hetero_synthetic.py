"""The ogbn-mag-shaped generator (`gnnsys prepare synthetic --like ogbn-mag`)."""

import json

import numpy as np
import pytest

from gnnsys.datasets import load_dataset
from gnnsys.datasets.hetero_dataset import relation_name
from gnnsys.datasets.synthetic import _Model, read_synthetic
from gnnsys.datasets.synthetic_mag import AFFINITY, DRAWN, NODE_TYPES, PAPERS, RELATIONS, _MagModel
from tests.datasets.conftest import assert_fails, run_cli

SCALE = 0.005


@pytest.fixture(scope="module")
def source():
    return read_synthetic("mag", SCALE, seed=1, add_reverse_relations="no")


def _edges(rel):
    chunks = list(rel.edge_chunks())
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


def test_shape(source):
    assert source.node_types == {t: round(n * SCALE) for t, n in NODE_TYPES.items()}
    assert list(source.relations) == list(RELATIONS) and source.target == "paper"
    targets = {relation: edges for relation, (edges, _, _) in DRAWN.items()} | {RELATIONS[2]: PAPERS.num_edges}
    for relation, rel in source.relations.items():
        src, dst = _edges(rel)
        assert src.shape[0] == rel.expected_num_edges and abs(src.shape[0] / (targets[relation] * SCALE) - 1) < 0.05
        assert 0 <= src.min() and src.max() < source.node_types[relation[0]]
        assert 0 <= dst.min() and dst.max() < source.node_types[relation[2]]
    x = np.concatenate(list(source.features["paper"].feature_chunks()))
    assert x.shape == (source.node_types["paper"], 128) and x.dtype == np.float32 and set(source.features) == {"paper"}
    assert source.num_classes == 349 and 0 <= source.labels.min() and source.labels.max() < 349


def test_time_split_and_years(source):
    n = source.node_types["paper"]
    train, valid, test = (source.splits[s] for s in ("train", "valid", "test"))
    sizes = np.array([train.size, valid.size, test.size])
    assert abs(sizes / n - np.array(PAPERS.split_counts) / PAPERS.num_nodes).max() < 0.002
    assert np.array_equal(np.concatenate([train, valid, test]), np.arange(n))  # oldest ids train, newest test
    years = source.node_years["paper"]
    assert years[train].min() == 2010 and years[train].max() == 2017 and (np.diff(years[train]) >= 0).all()
    assert (years[valid] == 2018).all() and (years[test] == 2019).all()


def test_degrees_are_skewed(source):
    # (relation, 0: out-degrees of the source type / 1: in-degrees of the destination type, max / mean at least)
    for relation, side, factor in [
        (RELATIONS[1], 1, 10),
        (RELATIONS[1], 0, 10),
        (RELATIONS[3], 1, 10),
        (RELATIONS[0], 1, 4),
    ]:
        ids = _edges(source.relations[relation])[side]
        degree = np.bincount(ids, minlength=source.node_types[relation[2 if side else 0]])
        assert degree.max() > factor * degree.mean(), (relation, side)


def test_neighbours_share_the_venue_as_recorded(source):
    model = _MagModel(SCALE, 1, _Model(PAPERS, SCALE, 1, 0.3, 2.0, 0.1, 2.5, 1000.0), 2.5, 1000.0)
    recorded = source.extra["synthetic"]["same_venue_share"]
    for relation in DRAWN:
        src, dst = _edges(source.relations[relation])
        same = np.mean(model.classes[relation[0]][src] == model.classes[relation[2]][dst])
        assert recorded[relation_name(relation)] == model.same_venue_share(relation)
        assert abs(same - model.same_venue_share(relation)) < 0.02, relation
    # institutions are fewer than venues at this scale, so many draws fall back to all institutions
    assert recorded["author__affiliated_with__institution"] < AFFINITY[RELATIONS[0]] - 0.1
    assert recorded["author__writes__paper"] > AFFINITY[RELATIONS[1]]


def test_recorded_accuracy_matches_the_drawn_features(source):
    s = source.extra["synthetic"]
    bayes, errors = s["bayes_accuracy"], s["bayes_standard_error"]
    assert bayes["features_only"] < bayes["features_and_in_neighbours"] < bayes["features_and_all_neighbours"]
    assert bayes["features_and_all_neighbours"] <= s["label_ceiling"] == pytest.approx(0.9 + 0.1 / 349)
    assert s["attainable_accuracy_at_least"] == bayes["features_and_all_neighbours"] and errors["features_only"] > 0
    # the papers' model rebuilt from the recorded parameters: its centroids give the Bayes rule on the features
    model = _Model(
        PAPERS,
        SCALE,
        1,
        s["homophily"],
        s["feature_signal"],
        s["label_noise"],
        s["degree_exponent"],
        s["max_degree_factor"],
    )
    x = np.concatenate(list(source.features["paper"].feature_chunks())).astype(np.float64)
    prior = np.log(model.class_share + 1e-300)
    predicted = (prior + s["feature_signal"] * x @ model.centroids.astype(np.float64).T).argmax(axis=1)
    accuracy = np.mean(predicted == source.labels)
    assert abs(accuracy - bayes["features_only"]) < 4 * errors["features_only"] + 0.01


def test_prepare_cli(tmp_path, capsys):
    argv = ["prepare", "synthetic", "--like", "ogbn-mag", "--scale", "0.002", "--no-progress"]
    assert run_cli(capsys, *argv, "--out", tmp_path / "a")[0] == 0
    assert run_cli(capsys, *argv, "--out", tmp_path / "b")[0] == 0
    a, b = (json.loads((tmp_path / d / "meta.json").read_text()) for d in "ab")
    assert a["checksums"] == b["checksums"]  # deterministic
    ds = load_dataset(tmp_path / "a")
    assert len(ds.edge_types) == 7 and ds.meta["reverse_relations"]["names"] == "ogb"
    assert ds.meta["source"]["synthetic"]["like"] == "ogbn-mag" and ds.num_classes == 349
    assert run_cli(capsys, *argv, "--add-reverse-relations", "no", "--out", tmp_path / "c")[0] == 0
    assert load_dataset(tmp_path / "c").edge_types == list(RELATIONS)


def test_reverse_relations_are_refused_for_a_homogeneous_shape(tmp_path, capsys):
    result = run_cli(
        capsys, "prepare", "synthetic", "--like", "arxiv", "--add-reverse-relations", "yes", "--out", tmp_path / "o"
    )
    assert_fails(result, "--add-reverse-relations", "heterogeneous", folder=tmp_path, allowed=[])
