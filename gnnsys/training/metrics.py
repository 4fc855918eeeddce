"""Node-classification metrics: accuracy and binary ROC AUC."""

from __future__ import annotations

import torch

METRICS = ("acc", "auc")


def resolve_metric(metric: str, num_classes: int) -> str:
    """ "auto" -> "auc" for 2-class datasets (e.g. tolokers), else "acc"."""
    if metric == "auto":
        return "auc" if num_classes == 2 else "acc"
    if metric not in METRICS:
        raise ValueError(f"metric must be 'auto' or one of {METRICS}, got {metric!r}")
    if metric == "auc" and num_classes != 2:
        raise ValueError(f"metric 'auc' needs 2 classes, the dataset has {num_classes}")
    return metric


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of rows whose arg-max class equals the label."""
    if y.numel() == 0:
        return float("nan")
    return (logits.argmax(dim=1) == y).float().mean().item()


def roc_auc(scores: torch.Tensor, y: torch.Tensor) -> float:
    """Binary ROC AUC of scores against 0/1 labels (Mann-Whitney U with
    average ranks for ties); nan when only one class is present."""
    y = y.bool()
    pos, n = int(y.sum()), y.numel()
    if pos == 0 or pos == n:
        return float("nan")
    from scipy.stats import rankdata  # scipy.stats takes half a second to import: only when scored

    ranks = torch.from_numpy(rankdata(scores.double().numpy()))
    return (ranks[y].sum().item() - pos * (pos + 1) / 2) / (pos * (n - pos))


def evaluate(metric: str, logits: torch.Tensor, y: torch.Tensor) -> float:
    """`metric` ("acc" or "auc") of class logits against labels."""
    if metric == "acc":
        return accuracy(logits, y)
    if metric == "auc":
        return roc_auc(logits[:, 1] - logits[:, 0], y)  # the log-odds of class 1
    raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
