"""`gnnsys.predict` and `gnnsys predict`: scores, labels and embeddings from a
checkpoint, written atomically (or streamed to a FIFO, never inside a
dataset); checkpoints of another dataset or model are refused in one line."""

import errno
import io
import os
import shutil
import stat
import threading

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.cli import main
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.inference import prediction, rows_io
from gnnsys.inference.layerwise import layerwise_inference
from gnnsys.samplers import Block
from gnnsys.trainers.fullgraph import train_fullgraph
from gnnsys.trainers.minibatch import train
from gnnsys.training.checkpoints import FILE, load_checkpoint, save_checkpoint

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
        ds,
        ckpt,
        tmp_path / "emb" / "e.npy",
        output="embeddings",
        layer=1,
        inference_dtype="bfloat16",
        host_mem_budget=0.0002,
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
                "--inference-dtype",
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
    assert str(ckpt / FILE) in err and "was trained on other data" in err
    state = load_checkpoint(ckpt)
    del state["options"]["dataset_id"]  # without the data's identity, the weights' shapes tell
    save_checkpoint(tmp_path / "anonymous", state)
    err = _error(["predict", str(other.path), "--checkpoint", str(tmp_path / "anonymous"), "--out", str(out)], capsys)
    assert "5 features, 4 classes" in err
    fewer, _ = make_dataset(num_nodes=90, num_edges=600, dim=6, num_classes=3)
    argv = ["predict", str(fewer.path), "--checkpoint", str(tmp_path / "anonymous"), "--out", str(out)]
    assert "3 classes" in _error(argv, capsys)
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
    assert "nodes: node id 90 out of range [0, 90)" in _error([*base, "--nodes", str(tmp_path / "far.npy")], capsys)
    assert "float.npy: node ids must be integers, got floats" in _error(
        [*base, "--nodes", str(tmp_path / "float.npy")], capsys
    )
    (tmp_path / "text.npy").write_text("not an array")
    assert "text.npy: " in _error([*base, "--nodes", str(tmp_path / "text.npy")], capsys)
    with pytest.raises(SystemExit, match="2"):  # argparse, at parse time
        main([*base, "--nodes", str(tmp_path / "none.npy")])
    assert "none.npy: no such file or directory" in capsys.readouterr().err
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


def _read_fifo(path, into: list):
    with open(path, "rb") as f:
        into.append(f.read())


def test_a_fifo_out_is_streamed_to(trained, tmp_path, capsys):
    ds, ckpt, _ = trained
    fifo = tmp_path / "scores.npy"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=_read_fifo, args=(fifo, got), daemon=True)
    reader.start()
    assert main(["predict", str(ds.path), "--checkpoint", str(ckpt), "--out", str(fifo), "--no-progress"]) == 0
    reader.join(30)
    assert f"wrote scores to {fifo}" in capsys.readouterr().out
    scores = np.load(io.BytesIO(got[0]))
    np.testing.assert_allclose(scores, gnnsys.predict(ds, ckpt), rtol=1e-6)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file in its place


def test_out_inside_the_dataset_is_refused(trained, capsys):
    ds, ckpt, _ = trained
    before = {p.name: p.read_bytes() for p in ds.path.iterdir()}
    for name in ("labels.npy", "extra.npy"):
        err = _error(["predict", str(ds.path), "--checkpoint", str(ckpt), "--out", str(ds.path / name)], capsys)
        assert f"out: {ds.path / name}: is inside the gnnsys dataset {ds.path}" in err
    assert {p.name: p.read_bytes() for p in ds.path.iterdir()} == before


@pytest.mark.parametrize(
    "ids, problem",
    [
        (np.array(["1", "2"]), "got strings"),
        (np.array([b"1"]), "got bytes"),
        (np.zeros(2, "i4,f8"), "got records"),
        (np.array(["2020-01-01"], "M8[D]"), "got datetimes"),
        (np.array([1, None], dtype=object), "holds Python objects"),
        (np.array([3, 2**64 - 1], np.uint64), "ids.npy: row 1: node id 18446744073709551615 out of range"),
        (np.array([3, 90], ">i8"), "node id 90 out of range [0, 90)"),
    ],
)
def test_node_files_of_any_dtype_are_one_line(trained, tmp_path, capsys, ids, problem):
    ds, ckpt, _ = trained
    np.save(tmp_path / "ids.npy", ids)
    argv = ["predict", str(ds.path), "--checkpoint", str(ckpt), "--out", str(tmp_path / "o.npy")]
    assert problem in _error([*argv, "--nodes", str(tmp_path / "ids.npy")], capsys)
    assert not (tmp_path / "o.npy").exists()


def test_node_files_in_big_endian_or_text_are_read(trained, tmp_path):
    ds, ckpt, _ = trained
    np.save(tmp_path / "ids.npy", np.array([5, 2], ">u4"))
    (tmp_path / "ids.txt").write_text("5\n2\n")
    argv = ["predict", str(ds.path), "--checkpoint", str(ckpt), "--no-progress", "--output", "labels"]
    assert main([*argv, "--out", str(tmp_path / "a.npy"), "--nodes", str(tmp_path / "ids.npy")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b.npy"), "--nodes", str(tmp_path / "ids.txt")]) == 0
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


def test_a_checkpoint_of_other_data_with_the_same_dimensions_is_refused(trained, make_dataset, tmp_path, capsys):
    ds, ckpt, _ = trained
    other, _ = make_dataset(num_nodes=90, num_edges=600, dim=6, num_classes=4, seed=7)  # same shape, other data
    out = tmp_path / "o.npy"
    err = _error(["predict", str(other.path), "--checkpoint", str(ckpt), "--out", str(out)], capsys)
    assert str(ckpt / FILE) in err and f"was trained on other data ({ds.path}, identity" in err
    assert not out.exists()
    copy = tmp_path / "copy"
    shutil.copytree(ds.path, copy)  # the same data elsewhere: accepted
    assert main(["predict", str(copy), "--checkpoint", str(ckpt), "--out", str(out), "--no-progress"]) == 0
    state = load_checkpoint(ckpt)
    del state["options"]["dataset_id"]  # a checkpoint from before identities were recorded: judged by shapes
    save_checkpoint(tmp_path / "old", state)
    assert gnnsys.predict(other, tmp_path / "old").shape == (90, 4)
    with pytest.raises(DatasetError, match="was written for other data .* cannot resume"):
        train(other, checkpoint_dir=ckpt, resume=True, model="gat", heads=2, norm="layer", residual=True, **FAST)


def test_a_full_disk_under_out_names_the_output(trained, tmp_path, monkeypatch, capsys):
    ds, ckpt, _ = trained

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rows_io.os, "posix_fallocate", no_space)
    monkeypatch.setattr(rows_io.shutil, "disk_usage", lambda path: type("U", (), {"free": 100})())
    out = tmp_path / "out" / "scores.npy"
    err = _error(["predict", str(ds.path), "--checkpoint", str(ckpt), "--out", str(out)], capsys)
    assert f"{out}: not enough space for the output on its disk: needs" in err and "scratch" not in err
    assert list(out.parent.iterdir()) == []
