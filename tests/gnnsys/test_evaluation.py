"""Evaluation: split scores, sampled evaluation (deterministic, close to the
exact layer-wise metric on an easy graph) and the eval options."""

import json

import numpy as np
import pytest
import torch

from gnnsys.cli import main
from gnnsys.datasets import Dataset
from gnnsys.errors import ConfigError
from gnnsys.trainers.minibatch import MinibatchTrainer, train
from gnnsys.training.evaluation import SAMPLED_TRAIN_NODES, eval_nodes, sampled_splits
from gnnsys.training.options import MinibatchOptions

FAST = dict(fanouts=[5, 5], hidden=16, batch_size=32, progress=False, epochs=3)


def easy_dataset(n=400, classes=2, seed=0):
    """Nodes whose features show their class (plus noise), edges mostly within a class."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = np.eye(classes, dtype=np.float32)[y] + 0.5 * rng.standard_normal((n, classes)).astype(np.float32)
    src = rng.integers(0, n, 8 * n)
    same = np.array([rng.choice(np.flatnonzero(y == y[s])) for s in src])
    dst = np.where(rng.random(src.shape[0]) < 0.9, same, rng.integers(0, n, src.shape[0]))
    from gnnsys.datasets.csc import build_csc
    from gnnsys.datasets.source import array_edge_chunks

    indptr, indices = build_csc(array_edge_chunks(src, dst), n, file="edges")
    perm = rng.permutation(n)
    splits = {
        "train": torch.from_numpy(perm[:200]),
        "valid": torch.from_numpy(perm[200:300]),
        "test": torch.from_numpy(perm[300:]),
    }
    return Dataset(
        name="easy",
        indptr=torch.from_numpy(indptr),
        indices=torch.from_numpy(indices),
        features=torch.from_numpy(x),
        labels=torch.from_numpy(y),
        splits=splits,
        num_classes=classes,
    )


def test_sampled_evaluation_is_deterministic_and_close_to_layerwise():
    ds = easy_dataset()
    runs = {mode: train(ds, eval=mode, metric="acc", **FAST) for mode in ("sampled", "layerwise")}
    sampled, exact = (runs[m].epochs for m in ("sampled", "layerwise"))
    assert [r["loss"] for r in sampled] == [r["loss"] for r in exact]  # evaluation leaves training alone
    for a, b in zip(sampled, exact):
        for split in ("train", "valid", "test"):
            assert a[split] is not None and abs(a[split] - b[split]) <= 0.06
    assert exact[-1]["valid"] > 0.85
    trainer = MinibatchTrainer(ds, MinibatchOptions(eval="sampled", **FAST).for_dataset(ds))
    first = trainer.evaluate()
    assert trainer.model.training  # mode restored
    assert trainer.evaluate() == first  # the same weights, the same metric


def test_sampled_splits_cap_the_train_nodes():
    splits = {"train": torch.arange(100), "valid": torch.arange(100, 110), "test": torch.arange(110, 120)}
    small = sampled_splits(splits, seed=3, limit=20)
    assert small["train"].shape[0] == 20 and set(small["train"].tolist()) <= set(range(100))
    assert torch.equal(small["train"], sampled_splits(splits, seed=3, limit=20)["train"])
    assert small["valid"] is splits["valid"] and small["test"] is splits["test"]
    assert sampled_splits(splits, seed=3) == splits and SAMPLED_TRAIN_NODES >= 100
    assert eval_nodes(small).shape[0] == 40


def test_eval_modes_and_refusals(tmp_path):
    assert MinibatchOptions().eval_mode == "layerwise"
    assert MinibatchOptions(features="ssd").eval_mode == "sampled"
    assert MinibatchOptions(features="ssd", eval="layerwise").eval_mode == "layerwise"
    assert MinibatchOptions(eval="sampled").eval_mode == "sampled"
    ok = MinibatchOptions(eval="layerwise", scratch_dir=tmp_path, inference_dtype="bfloat16")
    assert ok.scratch_dir == str(tmp_path)
    for keywords, option in [
        (dict(eval="exact"), "eval"),
        (dict(inference_dtype="int8"), "inference_dtype"),
        (dict(eval="sampled", scratch_dir=str(tmp_path)), "scratch_dir"),
        (dict(features="ssd", inference_dtype="float16"), "inference_dtype"),
        (dict(scratch_dir=str(tmp_path / "missing")), "scratch_dir"),
    ]:
        with pytest.raises(ConfigError) as e:
            MinibatchOptions(**keywords)
        assert e.value.option == option and "\n" not in str(e.value)
    assert {"eval", "scratch_dir", "inference_dtype"} <= set(MinibatchOptions().resumable())


def test_cli_eval_flags(make_dataset, tmp_path, capsys):
    ds, _ = make_dataset()
    out = tmp_path / "result.json"
    argv = [
        "train",
        str(ds.path),
        "--fanouts",
        "4,3",
        "--hidden",
        "16",
        "--batch-size",
        "8",
        "--epochs",
        "1",
        "--no-progress",
        "--json",
        str(out),
    ]
    assert main([*argv, "--eval", "layerwise", "--scratch-dir", str(tmp_path), "--inference-dtype", "bfloat16"]) == 0
    config = json.loads(out.read_text())["config"]
    assert config["eval"] == "layerwise" and config["inference_dtype"] == "bfloat16"
    assert config["scratch_dir"] == str(tmp_path)
    capsys.readouterr()
    assert main([*argv, "--eval", "sampled", "--scratch-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gnnsys train: error: --scratch-dir: applies to layer-wise evaluation") and "\n" not in err
    assert main([*argv, "--features", "ssd"]) == 0
    assert json.loads(out.read_text())["epochs"][0]["valid"] is not None
