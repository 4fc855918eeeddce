"""`train`: the entry point that trains a prepared or in-memory dataset of
either kind, choosing the trainer by the dataset: a homogeneous one with the
minibatch trainer (gnnsys.trainers.minibatch.train), a heterogeneous one (a
HeteroDataset, as load_dataset opens a directory whose meta.json says kind
"hetero") with the R-GCN trainer (gnnsys.trainers.hetero.train_hetero)."""

from __future__ import annotations

from gnnsys.datasets import HeteroDataset, as_dataset
from gnnsys.trainers.hetero import train_hetero
from gnnsys.trainers.minibatch import train as train_homogeneous


def train(dataset, options=None, *, on_epoch_end=None, **keywords):
    """Train a node classifier on `dataset` on sampled minibatches; a TrainResult.

    A homogeneous dataset: gnnsys.trainers.minibatch.train (a GNN "sage", "gcn" or
    "gat", or a user module; MinibatchOptions or its keywords). A
    heterogeneous one: gnnsys.trainers.hetero.train_hetero (an R-GCN with
    embeddings for the node types without features; HeteroOptions or its
    keywords: MinibatchOptions' plus relation_fanouts, embedding_dim and sparse_embeddings).
    Either returns the TrainResult of gnnsys.training.result (None in a
    torchrun rank that does not report).
    """
    dataset = as_dataset(dataset)
    if isinstance(dataset, HeteroDataset):
        return train_hetero(dataset, options, on_epoch_end=on_epoch_end, **keywords)
    return train_homogeneous(dataset, options, on_epoch_end=on_epoch_end, **keywords)
