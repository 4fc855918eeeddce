"""Scores of a model's logits on the train/valid/test splits, and sampled evaluation.

Sampled evaluation (MinibatchOptions.eval "sampled") runs the model in eval
mode on minibatches sampled with the training fanouts, drawn from the
sampling stream of epoch EVAL_EPOCH, which training never reaches: the same
weights always give the same metric. Its train metric is taken on at most
SAMPLED_TRAIN_NODES train nodes (a fixed sample, `sampled_splits`), valid
and test on every node.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from gnnsys.training.tasks import split_score

SPLITS = ("train", "valid", "test")
EVAL_EPOCH = 2**31 - 1  # the sampling stream of evaluation; an epoch training never runs
SAMPLED_TRAIN_NODES = 20_000


def eval_nodes(splits: dict) -> torch.Tensor:
    """The ids of every split, concatenated in SPLITS order (what split_scores expects)."""
    return torch.cat([splits[name] for name in SPLITS])


def split_scores(metric: str, logits: torch.Tensor, labels: torch.Tensor, splits: dict) -> dict:
    """The metric per split. `logits` has one row per id of `eval_nodes(splits)`;
    unlabelled nodes (label -1; per task for multilabel) are skipped (tasks.split_score)."""
    scores, offset = {}, 0
    for name in SPLITS:
        ids = splits[name]
        rows = logits[offset : offset + ids.shape[0]]
        offset += ids.shape[0]
        scores[name] = split_score(metric, rows, labels[ids])
    return scores


def sampled_splits(splits: dict, seed: int, limit: int = SAMPLED_TRAIN_NODES) -> dict:
    """`splits` with "train" cut to a fixed sample of at most `limit` of its
    ids (a function of `seed` only), for sampled evaluation."""
    train = splits["train"]
    if train.shape[0] <= limit:
        return dict(splits)
    pick = np.sort(np.random.default_rng([seed, EVAL_EPOCH]).choice(train.shape[0], limit, replace=False))
    return {**splits, "train": train[torch.from_numpy(pick)]}


@torch.no_grad()
def sampled_logits(model, loader, inputs, autocast=contextlib.nullcontext) -> torch.Tensor:
    """The model's logits (float32, CPU) for the seeds of every batch of
    `loader` (a MinibatchLoader without shuffling), in eval mode (restored
    after), called with `inputs(batch)` (its arguments: features and blocks)
    under `autocast()` (e.g. a Precision's autocast)."""
    was_training = model.training
    model.eval()
    outs = []
    try:
        for mb in loader:
            arguments = inputs(mb)
            with autocast():
                outs.append(model(*arguments).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(outs) if outs else torch.empty(0, model.layers[-1].out_dim)
