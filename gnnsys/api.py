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
    """Train a node classifier on `dataset` on sampled minibatches.

    Args:
        dataset: a Dataset or HeteroDataset, or the path of a prepared
            dataset of either kind (never modified).
        options: a MinibatchOptions (a HeteroOptions for a heterogeneous
            dataset), or None to build one from `keywords`; not both.
        on_epoch_end: called with each epoch's record after its checkpoint.
        **keywords: the options' fields (model, fanouts, batch_size, epochs,
            lr, features, cache_rows, ...); `model` may also be a user's
            torch.nn.Module (a homogeneous dataset only).

    Returns:
        The TrainResult of gnnsys.training.result, its `model` holding the
        weights of the epoch of best validation (None in a torchrun rank that
        does not report). A homogeneous dataset trains a GNN ("sage", "gcn",
        "gat" or the user's module) with gnnsys.trainers.minibatch.train, a
        heterogeneous one an R-GCN with embeddings for the node types without
        features with gnnsys.trainers.hetero.train_hetero.

    Raises:
        ConfigError: an option out of range or that does not apply (one line naming it).
        DatasetError: a dataset that cannot be read (one line naming the file).
    """
    dataset = as_dataset(dataset)
    if isinstance(dataset, HeteroDataset):
        return train_hetero(dataset, options, on_epoch_end=on_epoch_end, **keywords)
    return train_homogeneous(dataset, options, on_epoch_end=on_epoch_end, **keywords)
