"""`gnnsys.predict` and `gnnsys predict`: scores, labels and embeddings from a
checkpoint, written atomically; checkpoints of another dataset or model are
refused in one line."""

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys import prediction
from gnnsys.cli import main
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.fullgraph import train_fullgraph
from gnnsys.minibatch import train
from gnnsys.samplers import Block
from gnnsys.training.checkpoints import FILE, load_checkpoint, save_checkpoint
from gnnsys.training.inference import layerwise_inference

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=16, progress=False, epochs=2)


@pytest.fixture
def trained(make_dataset, tmp_path):
    """(dataset, checkpoint directory, trained model) of a 2-layer GAT with a residual and layer norm."""
    ds, _ = make_dataset(num_nodes=90, num_edges=600, dim=6, num_classes=4)
    ckpt = tmp_path / "ckpt"
    result = train(ds, model="gat", heads=2, norm="layer", residual=True, checkpoint_dir=ckpt, **FAST)
    return ds, ckpt, result.model


def test_scores_labels_and_embeddings(trained, tmp_path):
    ds, ckpt, model = trained
    logits = layerwise_inference(model, ds)
    scores = gnnsys.predict(ds, ckpt)
    assert scores.dtype == np.float32 and scores.shape == (90, 4)
    np.testing.assert_allclose(scores, logits.numpy(), rtol=1e-5, atol=1e-6)
    nodes = np.array([7, 0, 89, 7])
    labels = gnnsys.predict(ds.path, ckpt / FILE, output="labels", nodes=nodes)
    assert labels.dtype == np.int64 and np.array_equal(labels, logits.argmax(1).numpy()[nodes])
    model.eval()
    with torch.no_grad():
        first = model.layers[0](ds.features[torch.arange(90)], Block.full_graph(ds.indptr, ds.indices))
    out = gnnsys.predict(
        ds, ckpt, tmp_path / "emb" / "e.npy", output="embeddings", layer=1, dtype="bfloat16", host_mem_budget=200_000
    )
    assert out == tmp_path / "emb" / "e.npy"
    np.testing.assert_allclose(np.load(out), first.numpy(), rtol=1e-4, atol=1e-5)


def test_cli_writes_each_output(trained, tmp_path, capsys):
    ds, ckpt, model = trained
    np.save(tmp_path / "ids.npy", np.array([3, 1, 4], dtype=np.int32))
    base = ["predict", str(ds.path), "--checkpoint", str(ckpt), "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "s.npy")]) == 0
    assert (
        main(
            [
                *base,
                "--out",
                str(tmp_path / "l.npy"),
                "--output",
                "labels",
                "--nodes",
                str(tmp_path / "ids.npy"),
                "--host-mem-budget",
                "0.001",
                "--dtype",
                "float16",
                "--scratch-dir",
                str(tmp_path),
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    assert main([*base, "--out", str(tmp_path / "e.npy"), "--output", "embeddings", "--layer", "1"]) == 0
    text = capsys.readouterr().out
    assert f"wrote scores 90x4 to {tmp_path / 's.npy'}" in text and "wrote labels 3 to" in text
    scores = np.load(tmp_path / "s.npy")
    assert np.array_equal(np.load(tmp_path / "l.npy"), scores.argmax(1)[[3, 1, 4]])
    assert np.load(tmp_path / "e.npy").shape == (90, 16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ds1", "e.npy", "ids.npy", "l.npy", "s.npy"]


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gnnsys predict: error: ") and "\n" not in err
    return err


def test_checkpoints_of_another_dataset_or_model_are_refused(trained, make_dataset, tmp_path, capsys):
    ds, ckpt, _ = trained
    other, _ = make_dataset(num_nodes=90, num_edges=600, dim=5, num_classes=4)
    out = tmp_path / "o.npy"
    err = _error(["predict", str(other.path), "--checkpoint", str(ckpt), "--out", str(out)], capsys)
    assert str(ckpt / FILE) in err and "5 features, 4 classes" in err
    fewer, _ = make_dataset(num_nodes=90, num_edges=600, dim=6, num_classes=3)
    assert "3 classes" in _error(["predict", str(fewer.path), "--checkpoint", str(ckpt), "--out", str(out)], capsys)
    state = load_checkpoint(ckpt)
    state["options"]["model"] = "sage"  # GAT weights under a SAGE model's options
    save_checkpoint(tmp_path / "liar", state)
    err = _error(["predict", str(ds.path), "--checkpoint", str(tmp_path / "liar"), "--out", str(out)], capsys)
    assert str(tmp_path / "liar" / FILE) in err and "do not match its sage model" in err
    train_fullgraph(ds, model="sage", layers=2, checkpoint_dir=tmp_path / "full", epochs=1, progress=False)
    err = _error(["predict", str(ds.path), "--checkpoint", str(tmp_path / "full"), "--out", str(out)], capsys)
    assert "not a checkpoint of minibatch training" in err
    assert "holds no checkpoint.pt" in _error(
        ["predict", str(ds.path), "--checkpoint", str(tmp_path), "--out", str(out)], capsys
    )
    assert not out.exists()


def test_bad_requests_are_refused(trained, tmp_path, capsys):
    ds, ckpt, _ = trained
    base = ["predict", str(ds.path), "--checkpoint", str(ckpt), "--out", str(tmp_path / "o.npy")]
    np.save(tmp_path / "far.npy", np.array([90]))
    np.save(tmp_path / "float.npy", np.array([1.0]))
    assert "nodes: id 90 out of range [0, 90)" in _error([*base, "--nodes", str(tmp_path / "far.npy")], capsys)
    assert "nodes: must be a 1-D array of node ids" in _error([*base, "--nodes", str(tmp_path / "float.npy")], capsys)
    (tmp_path / "text.npy").write_text("not an array")
    assert "cannot read node ids" in _error([*base, "--nodes", str(tmp_path / "text.npy")], capsys)
    assert "layer: must be in 1..2" in _error([*base, "--output", "embeddings", "--layer", "3"], capsys)
    assert "use output 'embeddings'" in _error([*base, "--layer", "1"], capsys)
    assert "must be a .npy file" in _error([*base[:-1], str(tmp_path / "o.txt")], capsys)
    for budget in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit, match="2"):  # argparse, at parse time
            main([*base, "--host-mem-budget", budget])
        assert "--host-mem-budget: must be a number of GB > 0" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="nodes: is empty"):
        gnnsys.predict(ds, ckpt, nodes=[])
    with pytest.raises(ConfigError, match="output"):
        gnnsys.predict(ds, ckpt, output="probabilities")
    with pytest.raises(DatasetError, match="not a checkpoint directory"):
        gnnsys.predict(ds, tmp_path / "o.npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ds1", "far.npy", "float.npy", "text.npy"]


def test_output_is_atomic(trained, tmp_path, monkeypatch):
    ds, ckpt, _ = trained
    out = tmp_path / "scores.npy"
    np.save(out, np.arange(3))

    def half_then_fail(model, dataset, nodes, sink, **kwargs):
        sink.write(0, torch.ones(5, 4))
        raise RuntimeError("killed")

    monkeypatch.setattr(prediction, "stream_inference", half_then_fail)
    with pytest.raises(RuntimeError, match="killed"):
        gnnsys.predict(ds, ckpt, out)
    assert np.array_equal(np.load(out), np.arange(3))  # the old file, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ds1", "scores.npy"]  # no temporary left
