"""Layer-wise full-neighbour inference equals the model on the whole graph."""
import pytest
import torch

from gnnsys.training.inference import layerwise_inference
from gnnsys.models import GNN
from gnnsys.samplers import Block


@pytest.mark.parametrize("conv,batch_size", [("sage", 7), ("gat", 16), ("gcn", 5)])
@pytest.mark.parametrize("norm", [None, "batch"])
def test_layerwise_equals_full_graph(make_dataset, conv, batch_size, norm):
    ds, arrays = make_dataset(num_nodes=50, num_edges=300, dim=5, num_classes=3)
    torch.manual_seed(0)
    model = GNN(conv, 5, 8, 3, num_layers=3, norm=norm, heads=2)
    model.train()
    model(torch.randn(50, 5), [Block.full_graph(ds.indptr, ds.indices)] * 3)  # move batch-norm statistics
    model.eval()
    expect = model(torch.from_numpy(arrays["x"]), [Block.full_graph(ds.indptr, ds.indices)] * 3)
    model.train()
    nodes = torch.tensor([3, 0, 49, 17])
    out = layerwise_inference(model, ds, nodes, batch_size=batch_size)
    assert model.training  # mode restored
    torch.testing.assert_close(out, expect[nodes], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layerwise_inference(model, ds, batch_size=batch_size), expect, rtol=1e-4,
                               atol=1e-5)


def test_bad_batch_size(make_dataset):
    ds, _ = make_dataset()
    with pytest.raises(ValueError, match="batch_size"):
        layerwise_inference(GNN("sage", 7, 4, 3, 1), ds, batch_size=0)
