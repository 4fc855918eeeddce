"""The readers on the real files of /work/shared/datasets (skipped without them):
the counts its README states."""

import numpy as np
import pytest

from gnnsys.datasets import PrepareOptions, load_dataset, write_dataset
from gnnsys.datasets.csv_reader import read_count, read_csv
from gnnsys.datasets.npz import read_npz
from gnnsys.datasets.planetoid import read_planetoid
from tests.conftest import SHARED_DATASETS

needs_shared = pytest.mark.skipif(not SHARED_DATASETS.is_dir(), reason=f"no shared datasets at {SHARED_DATASETS}")


@pytest.mark.parametrize("root", [pytest.param("shared", marks=needs_shared), "embedded"])
def test_cora(tmp_path, root):
    src = read_planetoid("cora", SHARED_DATASETS / "planetoid" / "raw" if root == "shared" else None)
    ds = load_dataset(write_dataset(src, tmp_path / "cora", PrepareOptions(dedup=True, progress=False)))
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (2708, 10556, 1433, 7)
    assert [len(ds.split(s)) for s in ("train", "valid", "test")] == [140, 500, 1000]
    assert ds.split("train").tolist() == list(range(140)) and ds.split("valid").tolist() == list(range(140, 640))
    assert set(np.unique(ds.features[np.arange(2708)].numpy())) == {0.0, 1.0}  # binary bag of words


@needs_shared
def test_tolokers(tmp_path):
    src = read_npz(SHARED_DATASETS / "heterophilous" / "tolokers.npz")
    ds = load_dataset(write_dataset(src, tmp_path / "tolokers", PrepareOptions(progress=False)))
    assert (ds.num_nodes, ds.num_features, ds.num_classes, ds.num_edges) == (11758, 10, 2, 519000)


@needs_shared
def test_arxiv_partial_through_the_csv_reader():
    raw = SHARED_DATASETS / "ogbn-arxiv-partial" / "raw"
    labels = read_csv(raw / "node-label.csv.gz")
    years = read_csv(raw / "node_year.csv.gz")
    assert labels.shape == years.shape == (read_count(raw / "num-node-list.csv.gz"),) == (169343,)
    assert read_count(raw / "num-edge-list.csv.gz") == 1166243
    assert labels.min() == 0 and np.unique(labels).size == 40
    split = [(years <= 2017).sum(), (years == 2018).sum(), (years >= 2019).sum()]
    assert split == [90941, 29799, 48603]
