"""Dataset.from_pyg on a torch_geometric HeteroData, HeteroDataset.to_pyg, and their round trips."""

import pytest
import torch

from gnnsys.datasets import Dataset, DatasetError, HeteroDataset, load_dataset
from tests.datasets.test_ogb_mag import mag_arrays, prepare, write_mag

HeteroData = pytest.importorskip("torch_geometric.data").HeteroData


def toy(split="mask", g=None):
    """A small HeteroData: papers with features, years, labels (one unlabelled)
    and a split; authors without features; three edge types."""
    g = g or torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.randn(12, 4, generator=g)
    data["paper"].y = torch.randint(0, 3, (12,), generator=g)
    data["paper"].y[5] = -1
    data["paper"].year = torch.arange(2000, 2012)
    data["author"].num_nodes = 7
    data["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 7, (20,), generator=g), torch.randint(0, 12, (20,), generator=g)]
    )
    data["paper", "rev_writes", "author"].edge_index = data["author", "writes", "paper"].edge_index.flip(0)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, 12, (2, 15), generator=g)
    ids = {"train": torch.tensor([0, 1, 2, 3, 4]), "val": torch.tensor([6, 7]), "test": torch.tensor([8, 9, 11])}
    for name, v in ids.items():
        if split == "mask":
            data["paper"][f"{name}_mask"] = torch.zeros(12, dtype=torch.bool).index_fill_(0, v, True)
        else:
            data["paper"][f"{name}_idx"] = v
    return data, ids


def pairs(edge_index) -> list:
    return sorted(map(tuple, edge_index.T.tolist()))


@pytest.mark.parametrize("split", ["mask", "idx"])
def test_from_pyg_hetero(split):
    data, ids = toy(split)
    ds = Dataset.from_pyg(data, name="toy")
    assert isinstance(ds, HeteroDataset) and ds.name == "toy" and ds.target == "paper"
    assert ds.node_types == {"paper": 12, "author": 7} and ds.num_classes == 3
    assert ds.edge_types == [
        ("author", "writes", "paper"),
        ("paper", "rev_writes", "author"),
        ("paper", "cites", "paper"),
    ]
    assert torch.equal(ds.features["paper"][torch.arange(12)], data["paper"].x) and "author" not in ds.features
    assert torch.equal(ds.labels, data["paper"].y) and torch.equal(ds.node_years["paper"], data["paper"].year)
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test")):
        assert ds.split(ours).tolist() == ids[theirs].tolist()
    indptr, indices = ds.relations[("author", "writes", "paper")]
    assert indptr.shape == (13,) and indices.dtype == torch.int32
    back = ds.to_pyg()
    for edge_type in data.edge_types:
        assert pairs(back[edge_type].edge_index) == pairs(data[edge_type].edge_index)
    assert back["author"].num_nodes == 7 and "x" not in back["author"]
    for key in ("x", "y", "year", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(back["paper"][key], toy("mask")[0]["paper"][key]), key


def test_round_trip_of_a_prepared_dataset(tmp_path, capsys):
    prepare(capsys, write_mag(tmp_path / "ogbn_mag", mag_arrays()), tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    again = Dataset.from_pyg(ds.to_pyg(), name=ds.name)
    assert again.node_types == ds.node_types and again.edge_types == ds.edge_types
    for relation, (indptr, indices) in ds.relations.items():
        assert torch.equal(again.relations[relation][0], indptr) and torch.equal(again.relations[relation][1], indices)
    assert torch.equal(again.labels, ds.labels) and torch.equal(again.node_years["paper"], ds.node_years["paper"])
    assert torch.equal(again.features["paper"][torch.arange(11)], ds.features["paper"][torch.arange(11)])
    assert all(torch.equal(again.split(s), ds.split(s)) for s in ("train", "valid", "test"))


def test_target_is_chosen_or_inferred():
    data, _ = toy()
    data["author"].y = torch.zeros(7, dtype=torch.long)
    with pytest.raises(ValueError, match="give target=: the node types holding y are paper, author"):
        Dataset.from_pyg(data)
    assert Dataset.from_pyg(data, target="paper").target == "paper"
    with pytest.raises(ValueError, match="target 'venue' is not a node type"):
        Dataset.from_pyg(data, target="venue")
    with pytest.raises(ValueError, match="node type 'author' has neither train_mask nor train_idx"):
        Dataset.from_pyg(data, target="author")


def test_bad_edges_name_the_edge_type():
    data, _ = toy()
    data["author", "writes", "paper"].edge_index[0, 3] = 7  # 7 authors: ids 0..6
    with pytest.raises(DatasetError, match=r"'author', 'writes', 'paper'.*row 3: node id 7 out of range \[0, 7\)"):
        Dataset.from_pyg(data)
