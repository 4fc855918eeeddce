"""Multi-label training: OGB's ROC-AUC metric, the BCE loss, the metric's
choice, and `gnnsys prepare ogb` + `gnnsys train` on a tiny ogbn-proteins."""

import itertools
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnsys.cli import main
from gnnsys.errors import ConfigError
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.tasks import rocauc, split_score, task_loss, task_metric


def pairwise_rocauc(y, scores):
    """OGB's Evaluator by hand: per task with both classes among the labelled
    (not NaN) rows, the share of (positive, negative) pairs ordered right
    (ties count half); the mean over those tasks."""
    per_task = []
    for t in range(y.shape[1]):
        labelled = ~np.isnan(y[:, t])
        pos, neg = scores[labelled & (y[:, t] == 1), t], scores[labelled & (y[:, t] == 0), t]
        if pos.size and neg.size:
            wins = sum((p > q) + 0.5 * (p == q) for p, q in itertools.product(pos, neg))
            per_task.append(wins / (pos.size * neg.size))
    return sum(per_task) / len(per_task)


def random_case(seed):
    """Labels with NaN entries, a task with one class only, tied scores."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, (40, 6)).astype(np.float64)
    y[rng.random(y.shape) < 0.2] = np.nan
    y[:, 3] = np.where(np.isnan(y[:, 3]), np.nan, 1.0)  # only positives: skipped
    scores = np.round(rng.standard_normal(y.shape), 1).astype(np.float32)  # ties
    return y, scores


def as_labels(y):
    """The gnnsys form of OGB's float labels: int8 with -1 for NaN."""
    return torch.from_numpy(np.where(np.isnan(y), -1, y).astype(np.int8))


@pytest.mark.parametrize("seed", range(5))
def test_rocauc_is_ogbs_by_hand(seed):
    y, scores = random_case(seed)
    assert rocauc(torch.from_numpy(scores), as_labels(y)) == pytest.approx(pairwise_rocauc(y, scores), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_rocauc_is_ogbs_evaluator(seed):
    # run where the ogb package imports, e.g. PYTHONPATH=<pip install --target DIR ogb scikit-learn ...>
    evaluate = pytest.importorskip("ogb.nodeproppred").Evaluator
    y, scores = random_case(seed)
    evaluator = evaluate("ogbn-proteins")
    evaluator.num_tasks = y.shape[1]
    want = evaluator.eval({"y_true": y, "y_pred": scores})["rocauc"]
    assert rocauc(torch.from_numpy(scores), as_labels(y)) == pytest.approx(want, abs=1e-12)


def test_rocauc_raises_when_no_task_has_both_classes():
    y = torch.tensor([[1, -1], [1, 0], [-1, 0]], dtype=torch.int8)
    with pytest.raises(ValueError, match="no task has both"):
        rocauc(torch.zeros(3, 2), y)


def test_loss_is_bce_on_the_labelled_entries():
    logits = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    y = torch.tensor([[1, -1], [0, 1]], dtype=torch.int8)
    want = F.binary_cross_entropy_with_logits(torch.tensor([0.5, 2.0, 0.0]), torch.tensor([1.0, 0.0, 1.0]))
    assert torch.equal(task_loss(logits, y), want)
    assert torch.equal(
        task_loss(logits, torch.tensor([1, -1])), F.cross_entropy(logits[:1], torch.tensor([1]))
    )  # single-label: -1 skipped


def test_split_score_of_multiclass_skips_unlabelled():
    logits = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert split_score("acc", logits, torch.tensor([1, -1, 0])) == 0.5


class _Data:
    def __init__(self, task, num_classes):
        self.task, self.num_classes, self.name = task, num_classes, "d"


def test_metric_follows_the_task():
    multilabel, three, two = _Data("multilabel", 112), _Data("multiclass", 3), _Data("multiclass", 2)
    assert task_metric(MinibatchOptions(), multilabel) == "rocauc"
    assert task_metric(MinibatchOptions(metric="rocauc"), multilabel) == "rocauc"
    assert task_metric(MinibatchOptions(), three) == "acc" and task_metric(MinibatchOptions(), two) == "auc"
    with pytest.raises(ConfigError, match="metric: 'acc' scores one label per node; d has 112 binary tasks"):
        task_metric(MinibatchOptions(metric="acc"), multilabel)
    with pytest.raises(ConfigError, match="metric: rocauc averages over the tasks of a multilabel dataset"):
        task_metric(MinibatchOptions(metric="rocauc"), three)


def test_prepare_and_train_tiny_proteins_from_the_cli(tmp_path, capsys):
    from tests.datasets.test_ogb_proteins import TASKS, proteins_arrays, write_proteins

    root = write_proteins(tmp_path / "ogbn_proteins", proteins_arrays())
    data = tmp_path / "data"
    assert main(["prepare", "ogb", str(root), "--out", str(data), "--node-features-from-edges", "mean"]) == 0
    result = tmp_path / "result.json"
    argv = ["train", str(data), "--epochs", "2", "--batch-size", "8", "--hidden", "8", "--fanouts", "3,3"]
    assert main([*argv, "--json", str(result)]) == 0
    out = capsys.readouterr().out
    assert "test rocauc" in out
    record = json.loads(result.read_text())
    assert record["metric"] == "rocauc" and all(0 <= e["valid"] <= 1 for e in record["epochs"])
    from gnnsys.datasets import load_dataset

    assert load_dataset(data).num_classes == TASKS


def test_synthetic_proteins_trains_well_above_chance(tmp_path):
    import gnnsys
    from gnnsys.datasets import prepare_synthetic

    data = prepare_synthetic(
        "ogbn-proteins", tmp_path / "sp", scale=0.001, seed=0, node_features_from_edges="mean", progress=False
    )
    result = gnnsys.train(data, epochs=6, batch_size=32, hidden=32, layers=2, fanouts=[10, 10], lr=0.02, progress=False)
    assert result.metric == "rocauc" and result.test > 0.6


def test_predicted_labels_of_a_multilabel_dataset_are_each_tasks_0_or_1(tmp_path):
    import gnnsys
    from tests.datasets.test_ogb_proteins import TASKS, proteins_arrays, write_proteins

    root = write_proteins(tmp_path / "ogbn_proteins", proteins_arrays())
    data = tmp_path / "data"
    assert main(["prepare", "ogb", str(root), "--out", str(data), "--node-features-from-edges", "mean"]) == 0
    ckpt = tmp_path / "ckpt"
    gnnsys.train(data, epochs=1, batch_size=8, hidden=8, fanouts=[3, 3], checkpoint_dir=ckpt, progress=False)
    logits = gnnsys.predict(data, ckpt, output="scores", progress=False)
    labels = gnnsys.predict(data, ckpt, output="labels", progress=False)
    assert labels.shape == (logits.shape[0], TASKS) and labels.dtype == np.int8
    assert np.array_equal(labels, (logits > 0).astype(np.int8))
