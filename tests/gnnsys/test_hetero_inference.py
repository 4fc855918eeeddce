"""Exact layer-wise inference of the R-GCN: the logits of full-neighbour
sampling, whatever the chunk size, and the trainer's layer-wise evaluation."""

import pytest
import torch

import gnnsys
from gnnsys.errors import ConfigError
from gnnsys.inference.rgcn_layerwise import hetero_layerwise_logits, in_edges
from gnnsys.models.rgcn import HeteroRGCN
from gnnsys.samplers.hetero import HeteroNeighborSampler
from tests.hetero_graphs import CITES, hetero_dataset

FAST = dict(fanouts=[3, 2], hidden=8, batch_size=16, progress=False)


def full_neighbour_logits(model, ds, nodes):
    mb = HeteroNeighborSampler.from_dataset(ds, [-1] * len(model.layers)).sample(nodes)
    mb.x = {t: ds.features[t][ids] for t, ids in mb.input_nodes.items() if t in ds.features}
    with torch.no_grad():
        return model.eval()(model.inputs(mb), mb.blocks)


@pytest.mark.parametrize("layers, batch_size", [(1, 7), (2, 5), (3, 64)])
def test_layerwise_logits_are_full_neighbour_sampling_s(layers, batch_size):
    ds = hetero_dataset()
    torch.manual_seed(1)
    model = HeteroRGCN(ds.node_types, {"paper": 6}, ds.edge_types, "paper", 8, ds.num_classes, layers, embedding_dim=4)
    nodes = torch.tensor([7, 3, 59, 0, 21])  # any order
    model.train()
    got = hetero_layerwise_logits(model, ds, nodes, batch_size=batch_size)
    assert model.training  # restored
    expected = full_neighbour_logits(model, ds, nodes)
    assert got.shape == (5, ds.num_classes) and torch.allclose(got, expected, atol=1e-5)
    repeated = hetero_layerwise_logits(model, ds, torch.tensor([3, 3, 7]), batch_size=batch_size)
    assert torch.allclose(repeated, got[[1, 1, 0]], atol=1e-6)


def test_in_edges_takes_each_nodes_in_neighbours_in_order():
    indptr, indices = hetero_dataset().relations[CITES]
    nodes = torch.tensor([5, 0, 5, 17])
    block = in_edges(indptr, indices, nodes, 60)
    assert block.num_dst == 4 and block.num_src == 60
    for i, v in enumerate(nodes.tolist()):
        assert (
            block.indices[block.indptr[i] : block.indptr[i + 1]].tolist() == indices[indptr[v] : indptr[v + 1]].tolist()
        )


def test_training_evaluates_layerwise_by_default_and_sampled_when_asked():
    ds = hetero_dataset()
    exact = gnnsys.train(ds, epochs=2, **FAST)
    assert exact.config["eval"] == "auto"
    logits = hetero_layerwise_logits(exact.model, ds, ds.split("test"))
    accuracy = float((logits.argmax(1) == ds.labels[ds.split("test")]).float().mean())
    assert exact.test == pytest.approx(accuracy)
    sampled = gnnsys.train(ds, epochs=2, eval="sampled", **FAST)
    assert [e["loss"] for e in sampled.epochs] == [e["loss"] for e in exact.epochs]  # evaluation leaves training alone


@pytest.mark.parametrize("options", [dict(scratch_dir="/tmp"), dict(inference_dtype="bfloat16")])
def test_streaming_options_are_refused_in_one_line(options):
    with pytest.raises(ConfigError, match="holds its layers in memory") as refused:
        gnnsys.train(hetero_dataset(), epochs=1, **FAST, **options)
    assert "\n" not in str(refused.value)
