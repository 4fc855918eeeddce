"""`HeteroOptions`: the options of minibatch training on a heterogeneous
dataset (gnnsys.trainers.hetero): the components a heterogeneous graph's
run takes (gnnsys.training.components) and its own.

What it has: the optimiser, epochs, runs, LR schedule, patience,
checkpoints and resume, precision, device, batch size, prefetch, sampling
("uniform" or "labor"), the feature tiers (the FeatureStore shares them
among the node types with features), dropout and input_dropout, and eval
("auto": exact layer-wise inference over every neighbour of every relation,
as OGB's R-GCN example evaluates; sampled with features="ssd" or "packed"). What it
has not, so that giving it is refused as not an option of a heterogeneous
dataset: heads, norm and residual (the homogeneous models' shape; the
R-GCN's relation convs are SAGE convs), sampler (a heterogeneous graph is
sampled on the CPU), scratch_dir and inference_dtype (its layer-wise
evaluation, gnnsys.inference.rgcn_layerwise, holds its layers in memory),
workers and replicate_frac (data-parallel training of heterogeneous graphs
is not implemented).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch

from gnnsys.datasets.hetero_dataset import relation_name
from gnnsys.errors import ConfigError
from gnnsys.storage.memory_plan import GB
from gnnsys.training.components import InferenceSchema, SamplingSchema, TierSchema
from gnnsys.training.options import TrainOptions, _verify, recorded
from gnnsys.training.schema import INT_MAX, OptionsSchema, option
from gnnsys.training.tasks import task_metric


class HeteroSchema(OptionsSchema):
    """What a heterogeneous graph's model and sampling have of their own."""

    GROUP: ClassVar[str] = "heterogeneous"
    relation_fanouts: dict[str, list[int]] | None = option(
        None,
        "a relation (src__rel__dst) that draws its own fanouts, one per layer (0: none, -1: all; repeat for "
        "several); the others draw --fanouts",
        metavar="REL=N,N,...",
    )
    embedding_dim: int | None = option(
        None, "width of the learnable embeddings of node types without features", ge=1, shown="--hidden"
    )
    sparse_embeddings: bool = option(
        False,
        "those embeddings take sparse gradients and train with SparseAdam, which updates only the rows a batch "
        "read (needs --weight-decay 0)",
    )

    def _check(self):
        super()._check()
        if self.sparse_embeddings and self.weight_decay > 0:
            raise ConfigError(
                "sparse_embeddings",
                f"SparseAdam, which trains sparse embeddings, has no weight decay; got weight_decay "
                f"{self.weight_decay}, use 0",
            )
        for name, counts in (self.relation_fanouts or {}).items():
            if len(counts) != len(self.fanouts) or any(not -1 <= k <= INT_MAX for k in counts):
                raise ConfigError(
                    "relation_fanouts",
                    f"{name!r} needs one count >= 0 or -1 per layer ({len(self.fanouts)}), got {counts!r}",
                )


class HeteroOptions(TrainOptions, SamplingSchema, TierSchema, InferenceSchema, HeteroSchema):
    """Options of minibatch training on a HeteroDataset (see the module
    docstring): model "sage" is an R-GCN (gnnsys.models.rgcn.HeteroRGCN) of
    `layers` layers."""

    APPLIES_TO: ClassVar[str] = "a heterogeneous dataset"
    ABSENT: ClassVar[dict] = {
        **dict.fromkeys(("heads", "norm", "residual"), "it shapes the homogeneous models; the R-GCN has none"),
        "sampler": "a heterogeneous graph is sampled on the CPU",
        **dict.fromkeys(
            ("scratch_dir", "inference_dtype"),
            "it belongs to streaming inference of a homogeneous graph; a heterogeneous graph's layer-wise "
            "evaluation holds its layers in memory",
        ),
        **dict.fromkeys(
            ("workers", "replicate_frac"), "data-parallel training of heterogeneous graphs is not implemented"
        ),
    }
    model: Literal["sage"] = option("sage", "an R-GCN of SAGE convs (the one model of a heterogeneous dataset)")  # type: ignore[assignment]
    sampler: ClassVar[str] = "cpu"  # what the shared minibatch trainer reads, fixed for a heterogeneous graph
    workers: ClassVar[int] = 1
    replicate_frac: ClassVar[float] = 0.0

    def sampler_fanouts(self, relations) -> list:
        """The fanouts a HeteroNeighborSampler over `relations` takes: per
        layer the count of `fanouts`, or {relation: count} with relation_fanouts'."""
        if not self.relation_fanouts:
            return list(self.fanouts)
        names = {relation_name(r): r for r in relations}
        return [
            {r: self.relation_fanouts.get(name, self.fanouts)[layer] for name, r in names.items()}
            for layer in range(len(self.fanouts))
        ]

    def for_dataset(self, dataset):
        """These options completed for the HeteroDataset `dataset` (metric
        resolved, its name recorded) after the `verify` check when asked for;
        ConfigError for a relation_fanouts name that is not a relation of the
        dataset, or a run whose parameters do not fit the device's memory."""
        if self.verify:
            _verify(dataset)
        names = [relation_name(r) for r in dataset.edge_types]
        unknown = sorted(set(self.relation_fanouts or {}) - set(names))
        if unknown:
            raise ConfigError("relation_fanouts", f"{unknown[0]!r} is not a relation of {dataset.name}: {names}")
        if self.sparse_embeddings and set(dataset.node_types) <= set(dataset.features):
            raise ConfigError(
                "sparse_embeddings", f"every node type of {dataset.name} has features: it has no embeddings"
            )
        check_parameters_fit(self, dataset)
        return self.replace(metric=task_metric(self, dataset), **recorded(dataset))


def check_parameters_fit(options: HeteroOptions, dataset):
    """ConfigError("hidden") when the R-GCN's parameters with their gradients
    and Adam's two moments (16 bytes each; the embeddings of the featureless
    types among them) exceed the memory of the device: the GPU's, or the
    host memory available."""
    from gnnsys.models.rgcn import HeteroRGCN

    o = options
    with torch.device("meta"):
        model = HeteroRGCN.for_dataset(dataset, o)
    need = 16 * sum(p.numel() for p in model.parameters())
    device = torch.device(o.device)
    if device.type == "cuda":
        have, where = torch.cuda.get_device_properties(device).total_memory, f"of {device}"
    else:
        from gnnsys.host_memory import available_host_bytes

        have, where = available_host_bytes(), "of host memory available"
    if need > have:
        raise ConfigError(
            "hidden",
            f"the R-GCN's parameters with gradients and Adam state (the featureless types' embeddings among them) "
            f"need about {need / GB:,.2f} GB, more than the {have / GB:,.2f} GB {where}",
        )
