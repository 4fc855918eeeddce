"""What a dataset's task asks of training: its loss, its metric and how a split is scored.

- multiclass (one label per node, -1 for none): cross entropy; accuracy, or
  binary ROC AUC ("auc") for two classes.
- multilabel (Dataset.task "multilabel": [N, tasks] of 0/1, -1 for an entry
  without a label; ogbn-proteins): binary cross entropy with logits over the
  labelled entries, and "rocauc", the ROC AUC averaged over the tasks exactly
  as OGB's node-property Evaluator computes it.

The model has one output per class, or per task (Dataset.num_classes is the
task count of a multilabel dataset), so output widths need nothing here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gnnsys.errors import ConfigError
from gnnsys.training.metrics import evaluate, resolve_metric, roc_auc

METRICS = ("acc", "auc", "rocauc")


def task_metric(options, dataset) -> str:
    """options.metric ("auto" or a name) resolved for `dataset`'s task:
    "rocauc" for a multilabel dataset, else metrics.resolve_metric's choice;
    ConfigError when the metric does not score the task, or when GNNPipe
    (options.pipelined) would train a multilabel task (its loss is cross entropy)."""
    metric = options.metric
    if getattr(dataset, "task", "multiclass") == "multilabel":
        if metric not in ("auto", "rocauc"):
            raise ConfigError(
                "metric",
                f"{metric!r} scores one label per node; {dataset.name} has "
                f"{dataset.num_classes} binary tasks: use rocauc",
            )
        if getattr(options, "pipelined", False):
            raise ConfigError(
                "workers", "GNNPipe (workers or chunks > 1) trains one label per node, not multilabel tasks"
            )
        return "rocauc"
    if metric == "rocauc":
        raise ConfigError(
            "metric", "rocauc averages over the tasks of a multilabel dataset; use acc, or auc for 2 classes"
        )
    try:
        return resolve_metric(metric, dataset.num_classes)
    except ValueError as e:
        raise ConfigError("metric", str(e)) from None


def task_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean training loss of `logits` against labels `y`: binary cross
    entropy with logits over the labelled entries of multilabel [n, tasks]
    labels, else cross entropy skipping label -1."""
    if y.dim() == 2:
        known = y >= 0
        return F.binary_cross_entropy_with_logits(logits.float()[known], y[known].float())
    return F.cross_entropy(logits.float(), y.long(), ignore_index=-1)


def rocauc(scores: torch.Tensor, y: torch.Tensor) -> float:
    """ROC AUC averaged over tasks, as OGB's Evaluator ("rocauc") computes it:
    task t counts when its labelled entries (not -1, not NaN) hold both 0 and
    1, and scores AUC on those entries; ValueError when no task does."""
    y = y.detach().cpu().double()
    scores = scores.detach().cpu()
    per_task = []
    for t in range(y.shape[1]):
        column = y[:, t]
        labelled = (column == 0) | (column == 1)
        if bool((column == 1).any()) and bool((column == 0).any()):
            per_task.append(roc_auc(scores[labelled, t], column[labelled]))
    if not per_task:
        raise ValueError("ROC-AUC is undefined: no task has both a positive and a negative labelled node")
    return sum(per_task) / len(per_task)


def split_score(metric: str, logits: torch.Tensor, y: torch.Tensor) -> float:
    """`metric` of one split's logits against its labels: "rocauc" over every
    row (unlabelled entries skipped per task), else over the labelled rows."""
    if metric == "rocauc":
        return rocauc(logits, y)
    y = y.long()
    keep = y >= 0
    return evaluate(metric, logits[keep], y[keep])
