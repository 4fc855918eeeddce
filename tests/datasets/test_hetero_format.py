"""The heterogeneous on-disk format: meta.json's kind and schema, the Python
writer, what loading checks, and `gnnsys info` on it."""

import json
import re

import numpy as np
import pytest
import torch

from gnnsys.datasets import DatasetError, PrepareOptions, load_dataset, prepare_ogb, write_dataset
from gnnsys.datasets.hetero_source import HeteroSource, NodeFeatures, RelationSource
from gnnsys.datasets.meta import read_meta
from gnnsys.datasets.source import array_edge_chunks, array_feature_chunks
from tests.datasets.conftest import graph_arrays, run_cli, write_ogb
from tests.datasets.test_ogb_mag import mag_arrays, write_mag


@pytest.fixture
def mag(tmp_path):
    """A prepared heterogeneous dataset (the Python API on a tiny raw ogbn-mag directory)."""
    return prepare_ogb(write_mag(tmp_path / "ogbn_mag", mag_arrays()), tmp_path / "out", progress=False)


def rewrite_meta(path, edit):
    meta = json.loads((path / "meta.json").read_text())
    edit(meta)
    (path / "meta.json").write_text(json.dumps(meta))


def test_kind_tells_the_formats_apart(tmp_path, mag):
    assert json.loads((mag / "meta.json").read_text())["kind"] == "hetero"
    with pytest.raises(DatasetError, match="meta.json: describes a heterogeneous dataset"):
        read_meta(mag)  # the homogeneous reader (the SSD tier's) refuses it in one line
    homogeneous = prepare_ogb(write_ogb(tmp_path / "ogbn_arxiv", graph_arrays()), tmp_path / "h", progress=False)
    assert read_meta(homogeneous)["kind"] == "homogeneous"
    rewrite_meta(homogeneous, lambda m: m.pop("kind"))  # prepared before the field existed
    assert load_dataset(homogeneous).num_nodes == 40


@pytest.mark.parametrize(
    "edit,words",
    [
        (lambda m: m["relations"][1].update(src="venue"), "field 'relations[1].src' names an unknown node type"),
        (lambda m: m["relations"][0].pop("indices"), "field 'relations[0].indices' is missing"),
        (lambda m: m["relations"][5].update(reverse_of=["a", "b", "c"]), "'relations[5].reverse_of' names no relation"),
        (lambda m: m["node_types"]["paper"]["features"].update(row_stride=8), "'node_types.paper.features.row_stride'"),
        (lambda m: m.update(target="author"), "labels.npy: holds 11 labels for 13 nodes"),
        (lambda m: m["node_types"]["paper"].update(num_nodes=12), "paper.features.bin: size 352 bytes"),
        (lambda m: m["relations"][2].update(num_edges=3), "paper__cites__paper.indices.npy: holds"),
        (lambda m: m["relations"].append(m["relations"][0]), "is listed twice"),
    ],
)
def test_load_names_the_bad_field_or_file(mag, edit, words):
    rewrite_meta(mag, edit)
    with pytest.raises(DatasetError, match=re.escape(words)):
        load_dataset(mag)


def test_out_of_range_ids_name_the_file(mag):
    ds = load_dataset(mag)
    name = mag / "paper__to__author.indices.npy"
    indices = np.load(name)
    indices[2] = 11  # a paper id: 11 papers
    np.save(name, indices)
    with pytest.raises(DatasetError, match=f"{name}: row 2: node id 11 out of range"):
        load_dataset(mag)
    assert ds.relations[("paper", "to", "author")][1].shape == indices.shape


def _source(with_target_features: bool):
    rng = np.random.default_rng(0)
    n = {"user": 6, "item": 9}
    x = rng.standard_normal((9, 3)).astype(np.float32)
    features = {"item": NodeFeatures(9, 3, array_feature_chunks(x), "items.npy")} if with_target_features else {}
    return HeteroSource(
        name="toy",
        kind="arrays",
        node_types=n,
        relations={
            ("user", "buys", "item"): RelationSource(
                array_edge_chunks(rng.integers(0, 6, 20), rng.integers(0, 9, 20)), "buys"
            )
        },
        features=features,
        target="item",
        labels=rng.integers(0, 2, 9),
        splits={"train": np.arange(5), "valid": np.array([5, 6]), "test": np.array([7, 8])},
    ), x


def test_python_writer_and_a_target_without_features(tmp_path, capsys):
    src, x = _source(True)
    ds = load_dataset(write_dataset(src, tmp_path / "with", PrepareOptions(progress=False)))
    assert torch.equal(ds.features["item"][torch.arange(9)], torch.from_numpy(x))
    assert ds.meta["reverse_relations"] == {"added": False, "names": None} and ds.edge_types == [
        ("user", "buys", "item")
    ]
    src, _ = _source(False)
    out = write_dataset(src, tmp_path / "without", PrepareOptions(progress=False))
    status, stdout, _ = run_cli(capsys, "info", out, "--verify")
    assert status == 0 and "node type    item: 9 nodes, no features" in stdout and "placement" not in stdout
    status, _, err = run_cli(capsys, "info", out, "--probe-io")
    assert status == 2 and "--probe-io: the target node type 'item' has no feature table" in err


def test_unknown_types_in_a_source_are_refused(tmp_path):
    src, _ = _source(True)
    src.relations[("user", "rates", "shop")] = RelationSource(
        array_edge_chunks(np.arange(2), np.arange(2)), "rates.csv"
    )
    with pytest.raises(
        DatasetError, match="rates.csv: relation user__rates__shop names an unknown destination node type 'shop'"
    ):
        write_dataset(src, tmp_path / "out", PrepareOptions(progress=False))
    assert not (tmp_path / "out").exists()
