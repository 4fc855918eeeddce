"""Scores of a model's logits on the train/valid/test splits."""
from __future__ import annotations

import torch

from .metrics import evaluate

SPLITS = ("train", "valid", "test")


def eval_nodes(splits: dict) -> torch.Tensor:
    """The ids of every split, concatenated in SPLITS order (what split_scores expects)."""
    return torch.cat([splits[name] for name in SPLITS])


def split_scores(metric: str, logits: torch.Tensor, labels: torch.Tensor, splits: dict) -> dict:
    """The metric per split. `logits` has one row per id of `eval_nodes(splits)`;
    unlabelled nodes (label -1) are skipped."""
    scores, offset = {}, 0
    for name in SPLITS:
        ids = splits[name]
        rows = logits[offset:offset + ids.shape[0]]
        offset += ids.shape[0]
        y = labels[ids].long()
        keep = y >= 0
        scores[name] = evaluate(metric, rows[keep], y[keep])
    return scores
