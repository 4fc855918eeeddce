"""HeteroRGCN: the R-GCN sum computed by hand, embeddings for featureless
types, gradients, bf16 aggregation and bad inputs."""

import pytest
import torch

from gnnsys.models.rgcn import HeteroRGCN
from gnnsys.samplers.hetero import HeteroNeighborSampler
from tests.hetero_graphs import CITES, EMPLOYS, WRITES, WRITTEN_BY, hetero_dataset


def model_for(ds, layers=2, **kwargs):
    torch.manual_seed(0)
    dims = {t: ds.feature_dim(t) for t in ds.features}
    return HeteroRGCN(ds.node_types, dims, ds.edge_types, ds.target, 8, ds.num_classes, layers, **kwargs)


def batch(ds, fanouts, seeds):
    mb = HeteroNeighborSampler.from_dataset(ds, fanouts).sample(seeds)
    mb.x = {t: ds.features[t][ids] for t, ids in mb.input_nodes.items() if t in ds.features}
    return mb


def test_one_layer_is_root_plus_the_mean_of_each_relation():
    ds = hetero_dataset()
    model = model_for(ds, layers=1, embedding_dim=5).eval()
    seeds = torch.tensor([4, 11, 30])
    mb = batch(ds, [-1], seeds)  # every neighbour: the whole graph's means
    logits = model(model.inputs(mb), mb.blocks)
    layer = model.layers[0]
    x = ds.features["paper"][torch.arange(ds.num_nodes("paper"))]
    authors = model.embeddings["author"].weight
    with torch.no_grad():
        for row, v in enumerate(seeds.tolist()):
            expect = layer.roots["paper"](x[v])
            for relation, inputs in ((CITES, x), (WRITES, authors)):
                indptr, indices = ds.relations[relation]
                nbrs = indices[indptr[v] : indptr[v + 1]].long()
                if nbrs.numel():
                    expect = expect + layer.convs.convs[relation].lin_l(inputs[nbrs].mean(0))
            torch.testing.assert_close(logits[row], expect, rtol=1e-5, atol=1e-5)
    assert list(layer.roots.keys()) == ["paper"]  # the last layer computes the target only
    assert set(layer.convs.convs.keys()) == {CITES, WRITES}


def test_featureless_types_read_embeddings_of_their_size_and_get_gradients():
    ds = hetero_dataset()
    model = model_for(ds, embedding_dim=5)
    assert model.embedding_types == ["author", "institution"]
    assert model.embeddings["author"].weight.shape == (ds.num_nodes("author"), 5)
    default = model_for(ds)
    assert default.embeddings["author"].weight.shape == (ds.num_nodes("author"), 8)  # hidden
    mb = batch(ds, [3, 3], ds.split("train")[:6])
    logits = model(model.inputs(mb), mb.blocks)
    assert logits.shape == (6, ds.num_classes)
    logits.sum().backward()
    grad = model.embeddings["author"].weight.grad
    touched = grad.abs().sum(1) > 0
    assert touched.any()
    assert set(torch.nonzero(touched).view(-1).tolist()) <= set(mb.input_nodes["author"].tolist())


def test_hidden_layers_update_types_no_relation_reaches():
    ds = hetero_dataset()
    model = model_for(ds, layers=2)
    assert set(model.layers[0].roots.keys()) == {"paper", "author", "institution"}
    assert set(model.layers[0].convs.convs.keys()) == {WRITES, CITES, WRITTEN_BY, EMPLOYS}


def test_bf16_autocast_aggregates_close_to_fp32():
    ds = hetero_dataset()
    model = model_for(ds).eval()
    mb = batch(ds, [4, 4], torch.arange(12))
    exact = model(model.inputs(mb), mb.blocks)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(model.inputs(mb), mb.blocks)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), exact, rtol=0.05, atol=0.05)


def test_bad_inputs():
    ds = hetero_dataset()
    model = model_for(ds)
    mb = batch(ds, [2, 2], torch.arange(4))
    inputs = model.inputs(mb)
    with pytest.raises(ValueError, match="author has no features"):
        model({**inputs, "author": torch.zeros(mb.input_nodes["author"].shape[0], 8)}, mb.blocks)
    with pytest.raises(ValueError, match="paper: got 3 input rows"):
        model({**inputs, "paper": inputs["paper"][:3]}, mb.blocks)
    with pytest.raises(ValueError, match="2 blocks for a 1-layer"):
        model_for(ds, layers=1)(inputs, mb.blocks)
    with pytest.raises(ValueError, match="target"):
        HeteroRGCN(ds.node_types, {}, ds.edge_types, "venue", 8, 3, 2)
