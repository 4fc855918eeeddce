"""`train_hetero(dataset, ...) -> TrainResult`: sampled minibatch node
classification on a heterogeneous graph (ogbn-mag's kind) with an R-GCN.

`HeteroTrainer` is the minibatch trainer (gnnsys.trainers.minibatch.MinibatchTrainer:
the epoch loop, progress, checkpoints and exact resume, the best epoch's
weights, LR schedule, patience, evaluation, the loader and the FeatureStore
keyed by node type) with what a heterogeneous graph changes: per-relation
fanouts, the R-GCN (gnnsys.models.rgcn) with learnable embeddings for the
types without features, its inputs, and exact layer-wise evaluation over
every relation (gnnsys.inference.rgcn_layerwise). `runs` goes through the shared
gnnsys.training.runs. The options are HeteroOptions (what is refused and
why: gnnsys.training.hetero_options).
"""

from __future__ import annotations

import torch

from gnnsys.datasets import as_dataset
from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.errors import ConfigError
from gnnsys.runtime.allocator import retain_memory
from gnnsys.trainers.minibatch import MinibatchTrainer
from gnnsys.training.checkpoint_lock import run_lock
from gnnsys.training.hetero_options import HeteroOptions
from gnnsys.training.result import TrainResult
from gnnsys.training.runs import train_runs


def train_hetero(dataset, options=None, *, on_epoch_end=None, **keywords) -> TrainResult:
    """Train an R-GCN for node classification on a heterogeneous dataset.

    dataset: a HeteroDataset or the path of a prepared heterogeneous dataset
    (never modified). Options come as a HeteroOptions (or a
    MinibatchOptions, taken as one) or as its keywords (MinibatchOptions'
    plus relation_fanouts, embedding_dim and sparse_embeddings), not both. on_epoch_end(record)
    runs after each epoch's checkpoint. Returns a TrainResult whose `model`
    is the HeteroRGCN with the weights of its epoch of best validation; with
    runs > 1 every run and their mean and standard deviation, as
    gnnsys.train reports them. Each epoch record's "tiers" holds the counters
    of every featured node type's tiers, keyed by the type.
    """
    if isinstance(keywords.get("model"), torch.nn.Module):
        raise ConfigError(
            "model", "a user module trains on a homogeneous dataset; a heterogeneous one trains the R-GCN"
        )
    options = HeteroOptions.build(options, keywords)
    dataset = as_dataset(dataset)
    if not isinstance(dataset, HeteroDataset):
        raise ConfigError("dataset", f"{dataset.name} is homogeneous: train it with gnnsys.train")
    options = options.for_dataset(dataset)
    with run_lock(options):
        result = train_runs(options, lambda run: _train_run(dataset, run, on_epoch_end))
    assert result is not None  # one process: every run reports
    return result


def build_hetero_model(dataset: HeteroDataset, options: HeteroOptions):
    """The HeteroRGCN `options` describe for `dataset`, initialised from options.seed."""
    from gnnsys.models.rgcn import HeteroRGCN

    torch.manual_seed(options.seed)
    return HeteroRGCN.for_dataset(dataset, options)


def _train_run(dataset, options: HeteroOptions, on_epoch_end) -> TrainResult | None:
    retain_memory(options)
    return HeteroTrainer(dataset, options, on_epoch_end).run()


class HeteroTrainer(MinibatchTrainer):
    """One minibatch training run on a HeteroDataset (see the module docstring)."""

    def _build_model(self, module):
        return build_hetero_model(self.dataset, self.options)

    def _layerwise_logits(self, nodes):
        """Exact logits of the target `nodes` over every neighbour (gnnsys.inference.rgcn_layerwise)."""
        from gnnsys.inference.rgcn_layerwise import hetero_layerwise_logits

        o = self.options
        return hetero_layerwise_logits(self.model, self.dataset, nodes, o.eval_batch_size, self.device, self.rows)

    def _fanouts(self) -> list:
        """Per layer a count, or {relation: count} with the relation fanouts (HeteroOptions.sampler_fanouts)."""
        return self.options.sampler_fanouts(self.dataset.edge_types)

    def _inputs(self, mb) -> tuple:
        """(the R-GCN's x_dict of `mb`, its blocks)."""
        return self.model.inputs(mb), mb.blocks
