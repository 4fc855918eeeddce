import pytest
import torch

from gnnsys.datasets import Dataset

Data = pytest.importorskip("torch_geometric.data").Data


@pytest.mark.parametrize("with_masks", [True, False])
def test_from_pyg_round_trip(with_masks):
    g = torch.Generator().manual_seed(0)
    n = 30
    ei = torch.randint(0, n, (2, 90), generator=g)
    data = Data(x=torch.randn(n, 5, generator=g), y=torch.randint(0, 3, (n,), generator=g), edge_index=ei)
    perm = torch.randperm(n, generator=g)
    ids = {"train": perm[:15], "val": perm[15:20], "test": perm[20:]}
    for k, v in ids.items():
        if with_masks:
            data[f"{k}_mask"] = torch.zeros(n, dtype=torch.bool).index_fill_(0, v, True)
        else:
            data[f"{k}_idx"] = v
    ds = Dataset.from_pyg(data, name="toy")
    assert (ds.name, ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == ("toy", n, 90, 5, 3)
    assert torch.equal(ds.features[torch.arange(n)], data.x)
    assert torch.equal(ds.labels, data.y)
    assert sorted(map(tuple, ds.edge_index().T.tolist())) == sorted(map(tuple, ei.T.tolist()))
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test")):
        assert sorted(ds.split(ours).tolist()) == sorted(ids[theirs].tolist())


def test_from_pyg_needs_a_split():
    data = Data(x=torch.zeros(3, 2), y=torch.zeros(3, dtype=torch.long), edge_index=torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="train_mask nor train_idx"):
        Dataset.from_pyg(data)
