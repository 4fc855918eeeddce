"""predict on a heterogeneous dataset: the checkpoint's best R-GCN by exact
layer-wise inference, its outputs and files, and what it refuses."""

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.inference.prediction import predict
from gnnsys.inference.rgcn_layerwise import hetero_layerwise_logits
from tests.hetero_graphs import hetero_dataset

FAST = dict(fanouts=[3, 2], hidden=8, batch_size=16, embedding_dim=4, progress=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("ckpt")
    ds = hetero_dataset()
    return ds, gnnsys.train(ds, epochs=3, checkpoint_dir=ckpt, **FAST), ckpt


def test_scores_and_labels_are_the_best_models_exact_logits(trained, tmp_path):
    ds, result, ckpt = trained
    nodes = np.array([9, 0, 33])
    expected = hetero_layerwise_logits(result.model, ds, torch.from_numpy(nodes))
    scores = predict(ds, ckpt, nodes=nodes)
    assert scores.dtype == np.float32 and np.allclose(scores, expected.numpy(), atol=1e-6)
    path = predict(ds, ckpt / "checkpoint.pt", tmp_path / "labels.npy", output="labels", batch_size=2)
    labels = np.load(path)
    assert labels.dtype == np.int64 and labels.shape == (60,)  # every paper by default
    assert np.array_equal(labels[nodes], expected.argmax(1).numpy())
    assert [p.name for p in tmp_path.iterdir()] == ["labels.npy"]  # no temporary left


def test_embeddings_are_a_hidden_layers_output(trained):
    ds, _, ckpt = trained
    hidden = predict(ds, ckpt, nodes=[1, 2], output="embeddings", layer=1)
    assert hidden.shape == (2, 8) and (hidden >= 0).all()  # after the hidden layer's ReLU
    with pytest.raises(ConfigError, match="layer: must be in 1..2"):
        predict(ds, ckpt, output="embeddings", layer=3)


@pytest.mark.parametrize(
    "options, name",
    [
        (dict(scratch_dir="/tmp"), "scratch_dir"),
        (dict(host_mem_budget=1.0), "host_mem_budget"),
        (dict(inference_dtype="bfloat16"), "inference_dtype"),
        (dict(return_stats=True), "return_stats"),
        (dict(nodes=[60]), "nodes"),
        (dict(out="scores.txt"), "out"),
    ],
)
def test_what_does_not_apply_is_refused_in_one_line(trained, options, name):
    ds, _, ckpt = trained
    with pytest.raises(ConfigError) as refused:
        predict(ds, ckpt, **options)
    assert refused.value.option == name and "\n" not in str(refused.value)


def test_a_checkpoint_of_another_graph_is_refused(trained, tmp_path, make_dataset):
    ds, _, ckpt = trained
    with pytest.raises(DatasetError, match="does not fit dataset 'other'.*paper 5"):
        predict(hetero_dataset(paper_dim=5, name="other"), ckpt)
    homogeneous, _ = make_dataset()
    gnnsys.train(homogeneous, epochs=1, fanouts=[2], hidden=8, checkpoint_dir=tmp_path, progress=False)
    with pytest.raises(DatasetError, match="do not match its R-GCN model"):
        predict(ds, tmp_path)


def test_cli_predicts_for_a_prepared_heterogeneous_dataset(tmp_path, capsys):
    from gnnsys.cli import main
    from gnnsys.datasets import prepare_synthetic

    mag = prepare_synthetic(out=tmp_path / "mag", like="mag", scale=0.0005, progress=False)
    train = ["train", str(mag), "--fanouts", "3,2", "--hidden", "8", "--epochs", "1", "--no-progress"]
    assert main([*train, "--checkpoint-dir", str(tmp_path / "ckpt")]) == 0
    out = tmp_path / "scores.npy"
    assert main(["predict", str(mag), "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out), "--no-progress"]) == 0
    papers = gnnsys.load_dataset(mag).num_nodes("paper")
    assert np.load(out).shape == (papers, 349) and f"wrote scores {papers}x349" in capsys.readouterr().out
    predict = ["predict", str(mag), "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out)]
    assert main([*predict, "--scratch-dir", str(tmp_path)]) == 2
    refused = "gnnsys predict: error: --scratch-dir: does not apply to a heterogeneous dataset: it belongs to"
    assert capsys.readouterr().err.startswith(refused)
