"""`train_hetero(dataset, ...) -> TrainResult`: sampled minibatch node
classification on a heterogeneous graph (ogbn-mag's kind) with an R-GCN.

`HeteroTrainer` is the minibatch trainer (gnnsys.minibatch.MinibatchTrainer:
the epoch loop, progress, checkpoints and exact resume, the best epoch's
weights, LR schedule, patience, evaluation) with what a
heterogeneous graph changes: per-relation sampling (HeteroNeighborSampler),
one feature stack per featured node type (gnnsys.hetero_features), the
HeteroMinibatchLoader, and the R-GCN (gnnsys.hetero_models) with learnable
embeddings for the types without features, and exact layer-wise
evaluation over every relation (gnnsys.training.hetero_inference). `runs` goes through the shared
gnnsys.training.runs. The options are HeteroOptions (what is refused and
why: gnnsys.training.hetero_options).
"""

from __future__ import annotations

import os

import torch

from gnnsys.datasets import as_dataset
from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.datasets.meta import HETERO, load_meta_json
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.minibatch import MinibatchTrainer, retain_memory
from gnnsys.training.checkpoints import run_lock
from gnnsys.training.hetero_options import HeteroOptions
from gnnsys.training.result import TrainResult
from gnnsys.training.runs import train_runs


def is_hetero(dataset) -> bool:
    """Whether `dataset` (a Dataset, a HeteroDataset or the path of a prepared
    dataset) is heterogeneous: for a path, its meta.json says kind "hetero"
    (one that cannot be read counts as homogeneous, whose loading says why)."""
    if isinstance(dataset, HeteroDataset):
        return True
    if not isinstance(dataset, (str, os.PathLike)):
        return False
    try:
        meta = load_meta_json(dataset)
    except DatasetError:
        return False
    return isinstance(meta, dict) and meta.get("kind") == HETERO


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
    from gnnsys.hetero_models import HeteroRGCN

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
        """Exact logits of the target `nodes` over every neighbour (gnnsys.training.hetero_inference)."""
        from gnnsys.training.hetero_inference import hetero_layerwise_logits

        o = self.options
        return hetero_layerwise_logits(self.model, self.dataset, nodes, o.eval_batch_size, self.device, self.rows)

    def _sampler(self):
        """The training HeteroNeighborSampler (the loader builds its own, drawing the same)."""
        from gnnsys.samplers.hetero import HeteroNeighborSampler

        o = self.options
        fanouts = o.sampler_fanouts(self.dataset.edge_types)
        return HeteroNeighborSampler.from_dataset(self.dataset, fanouts, seed=o.seed, method=o.sampling)

    def _feature_tiers(self):
        """({featured type: its stack of tiers}, {type: the stack's bottom})."""
        from gnnsys.feature_stack import tiers_of
        from gnnsys.hetero_features import build_type_stacks
        from gnnsys.samplers.seeds import SeedBatches

        o = self.options
        stacks = build_type_stacks(
            self.dataset,
            sampler=self._sampler(),
            seed_batches=SeedBatches(self.dataset.split("train"), o.batch_size, shuffle=True, seed=o.seed),
            features=o.features,
            device=self.device,
            cache_rows=o.cache_rows,
            cache_gb=o.cache_gb,
            cache_policy=o.cache_policy,
            lookahead=o.lookahead,
            victim_rows=o.victim_rows,
            host_mem_budget=o.host_mem_budget,
            progress=o.progress,
        )
        return stacks, {t: tiers_of(stack)[-1] for t, stack in stacks.items()}

    def _open_loader(self, split, batches, pipeline):
        from gnnsys.hetero_loader import HeteroMinibatchLoader
        from gnnsys.loader_options import SamplingOptions

        o = self.options
        return HeteroMinibatchLoader(
            self.dataset,
            split,
            SamplingOptions(fanouts=o.sampler_fanouts(self.dataset.edge_types), method=o.sampling),
            batches,
            pipeline,
            device=self.device,
            features=self.features,
            x_dtype={t: self.precision.input_dtype(stack.dtype) for t, stack in self.features.items()},
        )

    def _inputs(self, mb) -> tuple:
        """(the R-GCN's x_dict of `mb`, its blocks)."""
        return self.model.inputs(mb), mb.blocks

    def _reset_tiers(self):
        from gnnsys.hetero_features import reset_type_tiers

        reset_type_tiers(self.features)

    def _tier_postfix(self, elapsed_s: float) -> dict:
        from gnnsys.hetero_features import type_tier_postfix

        return type_tier_postfix(self.features, elapsed_s)

    def _tier_record(self) -> dict:
        from gnnsys.hetero_features import type_tier_record

        return type_tier_record(self.features)

    def _close_tiers(self):
        from gnnsys.hetero_features import close_type_tiers

        close_type_tiers(self.features)
