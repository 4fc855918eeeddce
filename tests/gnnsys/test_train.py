"""gnnsys.train / TrainResult and the metrics they report, on tiny datasets."""

import json

import pytest
import torch

from gnnsys import ConfigError, GPUUnavailableError, TrainResult, train
from gnnsys.models.gnn import GNN
from gnnsys.training.loop import BREAKDOWN
from gnnsys.training.metrics import accuracy, evaluate, resolve_metric, roc_auc

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=16, progress=False, prefetch=2)


def test_accuracy_and_auc():
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1, 1, 1])
    assert accuracy(logits, y) == 0.75
    # scores 0.1, 0.4 (neg) vs 0.4, 0.8 (pos): pairs won 1 + 1 + 0.5 (tie) + 1 of 4
    assert roc_auc(torch.tensor([0.1, 0.4, 0.4, 0.8]), torch.tensor([0, 0, 1, 1])) == pytest.approx(3.5 / 4)
    # log-odds -1 (neg) vs 3, -1 (tie), 1 (pos)
    assert evaluate("auc", logits, y) == pytest.approx(2.5 / 3)
    assert torch.isnan(torch.tensor(roc_auc(torch.rand(5), torch.ones(5))))


@pytest.mark.parametrize("metric,classes,expect", [("auto", 2, "auc"), ("auto", 5, "acc"), ("acc", 2, "acc")])
def test_resolve_metric(metric, classes, expect):
    assert resolve_metric(metric, classes) == expect


def test_resolve_metric_rejects():
    with pytest.raises(ValueError, match="needs 2 classes"):
        resolve_metric("auc", 3)
    with pytest.raises(ValueError, match="metric must be"):
        resolve_metric("f1", 3)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_train_result_fields_and_json(make_dataset, tmp_path, model):
    ds, _ = make_dataset(num_nodes=80, num_edges=500)
    result = train(ds, model=model, epochs=3, eval_every=2, heads=2, **FAST)
    assert [r["epoch"] for r in result.epochs] == [0, 1, 2]
    assert result.metric == "acc" and result.config["model"] == model and result.config["layers"] == 2
    assert result.epochs[0]["valid"] is None and result.epochs[2]["valid"] is not None  # last epoch evaluated
    best = max((r for r in result.epochs if r["valid"] is not None), key=lambda r: r["valid"])
    assert result.best_epoch == best["epoch"] and result.test == best["test"]
    for r in result.epochs:
        assert set(r["breakdown"]) == set(BREAKDOWN) and r["loss"] > 0 and r["time_s"] > 0
    assert result.machine["device"] == "cpu" and "torch" in result.machine["versions"]
    back = TrainResult.load(result.save(tmp_path / "r.json"))
    assert back.to_dict() == json.loads(result.to_json()) and back.model is None
    assert isinstance(result.model, GNN) and result.model.layers[0].kind == model


def test_train_is_seeded_and_accepts_a_path(make_dataset):
    ds, _ = make_dataset(num_nodes=80, num_edges=500)
    a = train(ds, epochs=2, seed=3, **FAST)
    b = train(ds.path, epochs=2, seed=3, **FAST)
    c = train(ds, epochs=2, seed=4, **FAST)
    strip = lambda r: [{k: v for k, v in e.items() if k not in ("time_s", "breakdown")} for e in r.epochs]  # noqa
    assert strip(a) == strip(b) and strip(a) != strip(c)
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(p, q)


def test_auto_metric_is_auc_for_two_classes(make_dataset):
    ds, _ = make_dataset(num_nodes=80, num_edges=500, num_classes=2)
    assert train(ds, epochs=1, **FAST).metric == "auc"


def test_learns_an_easy_task(make_dataset):
    """Labels that are a function of the features are learned from scratch."""
    ds, arrays = make_dataset(num_nodes=200, num_edges=800, dim=4, num_classes=2, seed=1)
    ds.labels = torch.from_numpy((arrays["x"][:, 0] > 0).astype("int64"))
    result = train(ds, epochs=15, lr=0.02, metric="acc", dropout=0.0, **FAST)
    assert result.epochs[-1]["loss"] < result.epochs[0]["loss"]
    assert result.test > 0.85


@pytest.mark.parametrize(
    "options,name",
    [
        (dict(layers=3), "layers"),
        (dict(model="gin"), "model"),
        (dict(fanouts=[0, 2]), "fanouts"),
        (dict(epochs=0), "epochs"),
        (dict(resume=True), "resume"),
        (dict(metric="auc"), "metric"),
        (dict(dropout=1.0), "dropout"),
        (dict(fanouts="15,10"), "fanouts"),
        (dict(batch_size=1.5), "batch_size"),
        (dict(epochs="3"), "epochs"),
        (dict(seed="a"), "seed"),
        (dict(device=5), "device"),
        (dict(device="banana"), "device"),
        (dict(features="nvme"), "features"),
        (dict(workers=0), "workers"),
        (dict(cache_rows=-1), "cache_rows"),
        (dict(lookahead=2), "lookahead"),
        (dict(precision="64"), "precision"),
    ],
)
def test_bad_options_name_the_option(make_dataset, options, name):
    ds, _ = make_dataset()
    with pytest.raises(ConfigError, match=f"^{name}: "):
        train(ds, **{**FAST, **options})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_gpu_is_one_line(make_dataset):
    ds, _ = make_dataset()
    with pytest.raises(GPUUnavailableError, match="^device: needs a CUDA GPU"):
        train(ds, device="cuda", **FAST)


def test_train_leaves_the_dataset_alone_and_runs_twice(make_dataset):
    ds, _ = make_dataset()
    features = ds.features
    first, second = train(ds, epochs=1, **FAST), train(ds, epochs=1, **FAST)
    assert ds.features is features
    assert first.epochs[0]["loss"] == second.epochs[0]["loss"]


def test_options_object_equals_keywords(make_dataset):
    from gnnsys import MinibatchOptions

    ds, _ = make_dataset()
    by_keywords = train(ds, epochs=2, seed=3, **FAST)
    by_options = train(ds, MinibatchOptions(epochs=2, seed=3, **FAST))
    assert by_options.epochs[-1]["loss"] == by_keywords.epochs[-1]["loss"]
    assert by_options.config == by_keywords.config
    with pytest.raises(TypeError, match="not both"):
        train(ds, MinibatchOptions(), epochs=2)


@pytest.mark.parametrize("stored", ["float32", "bfloat16"])
def test_bf16_mixed_trains_close_to_fp32_and_feeds_bf16_rows_as_stored(make_dataset, monkeypatch, stored):
    from gnnsys.datasets import PrepareOptions
    from gnnsys.trainers.minibatch import MinibatchTrainer

    monkeypatch.setenv("GNNSYS_CPU_BF16", "1")  # bf16 compute, whatever this CPU is
    ds, _ = make_dataset(num_nodes=200, num_edges=1600, options=PrepareOptions(progress=False, dtype=stored))
    fed = []
    step = MinibatchTrainer._step
    monkeypatch.setattr(MinibatchTrainer, "_step", lambda self, mb: fed.append(mb.x.dtype) or step(self, mb))
    fp32 = train(ds, **FAST, epochs=3, dropout=0.0, precision="32")
    bf16 = train(ds, **FAST, epochs=3, dropout=0.0, precision="bf16-mixed")
    assert set(fed[: len(fed) // 2]) == {torch.float32}
    assert set(fed[len(fed) // 2 :]) == {torch.bfloat16 if stored == "bfloat16" else torch.float32}
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())  # fp32 master weights
    for a, b in zip(fp32.epochs, bf16.epochs):
        assert b["loss"] == pytest.approx(a["loss"], rel=0.05) and b["loss"] != a["loss"]


def test_epochs_driven_by_hand_are_what_run_does(make_dataset, tmp_path):
    """MinibatchTrainer's public steps (train_loader, train_epoch, evaluate,
    save_checkpoint) are run()'s: the same losses and metrics, and a
    checkpoint a resumed run continues exactly."""
    from gnnsys.trainers.minibatch import MinibatchTrainer
    from gnnsys.training.options import MinibatchOptions

    ds, _ = make_dataset(num_nodes=120, num_edges=900)
    whole = train(ds, **FAST, epochs=3)
    options = MinibatchOptions(**FAST, epochs=3, checkpoint_dir=tmp_path / "hand").for_dataset(ds)
    trainer = MinibatchTrainer(ds, options)
    loader = trainer.train_loader()
    for epoch in range(2):
        trainer.history.append({**trainer.train_epoch(loader, epoch), **trainer.evaluate()})
    trainer.save_checkpoint(2)
    trainer.store.close()
    keys = ("loss", "train", "valid", "test")
    assert [[r[k] for k in keys] for r in trainer.history] == [[r[k] for k in keys] for r in whole.epochs[:2]]
    resumed = train(ds, **FAST, epochs=3, checkpoint_dir=tmp_path / "hand", resume=True)
    assert [[r[k] for k in keys] for r in resumed.epochs] == [[r[k] for k in keys] for r in whole.epochs]


def test_a_cpu_runs_loader_yields_its_cores_to_the_model(make_dataset):
    """On the CPU the trainer's loaders run their threads at
    `loader_nice`'s niceness; the run's machine record says so."""
    from gnnsys.loading.options import CPU_COMPUTE_NICE
    from gnnsys.trainers.minibatch import MinibatchTrainer
    from gnnsys.training.options import MinibatchOptions

    ds, _ = make_dataset(num_nodes=120, num_edges=900)
    trainer = MinibatchTrainer(ds, MinibatchOptions(**FAST, epochs=1).for_dataset(ds))
    try:
        assert trainer.train_loader().nice == CPU_COMPUTE_NICE == 19
    finally:
        trainer.store.close()
    result = train(ds, **FAST, epochs=1)
    assert result.machine["threads"]["loader"] == {"threads": 2, "nice": CPU_COMPUTE_NICE}
