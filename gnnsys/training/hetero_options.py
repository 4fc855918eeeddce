"""`HeteroOptions`: the options of minibatch training on a heterogeneous
dataset (gnnsys.trainers.hetero), MinibatchOptions' with what differs.

What applies unchanged: the optimiser, epochs, runs, LR schedule, patience,
checkpoints and resume, precision, device, batch size, prefetch, sampling
("uniform" or "labor"), the feature tiers (features, cache_rows / cache_gb,
cache_policy, lookahead, victim_rows, host_mem_budget; the FeatureStore
shares them among the node types with features), dropout and input_dropout.
What is refused, one line naming the option: a model other than "sage"
(the R-GCN's relation convs are SAGE convs; a user module), heads, norm and
residual (options of the homogeneous models), a sampler other than "cpu",
scratch_dir and inference_dtype (options of the homogeneous graphs' streaming
inference: a heterogeneous graph's layer-wise evaluation,
gnnsys.inference.rgcn_layerwise, holds its layers in memory), and
workers > 1 (data-parallel training of heterogeneous graphs is not
implemented). eval works as for a homogeneous graph: "auto" is exact
layer-wise inference over every neighbour of every relation (as OGB's R-GCN
example evaluates), sampled with features="ssd".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from gnnsys.datasets.hetero_dataset import relation_name
from gnnsys.errors import ConfigError
from gnnsys.training.limits import GB, INT_MAX
from gnnsys.training.options import MinibatchOptions, _verify, recorded
from gnnsys.training.tasks import task_metric

REFUSED = ("heads", "norm", "residual")  # options of the homogeneous models
STREAMING = ("scratch_dir", "inference_dtype")  # options of the homogeneous graphs' streaming inference


@dataclass(frozen=True)
class HeteroOptions(MinibatchOptions):
    """Options of minibatch training on a HeteroDataset (see the module docstring).

    model "sage": an R-GCN (gnnsys.models.rgcn.HeteroRGCN) of `layers`
    layers; fanouts: per layer, output layer first, the count every relation
    draws (-1: all); relation_fanouts: {relation name "src__rel__dst": one
    count per layer} for the relations that draw their own (>= 0, 0 none,
    -1 all); embedding_dim: the width of the learnable embeddings of the
    node types without features (None: hidden); sparse_embeddings: those
    embeddings take sparse gradients and train with SparseAdam, which updates
    only the rows a batch read (gnnsys.training.optimizer; needs
    weight_decay 0 and a node type without features).
    """

    relation_fanouts: dict | None = None
    embedding_dim: int | None = None
    sparse_embeddings: bool = False

    def __post_init__(self):
        if isinstance(self.relation_fanouts, dict):
            layers = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731
            self._set("relation_fanouts", {str(k): layers(v) for k, v in self.relation_fanouts.items()})
        super().__post_init__()

    def _check(self):
        super()._check()
        if self.model != "sage":
            raise ConfigError(
                "model",
                f"a heterogeneous dataset trains an R-GCN of SAGE convs (gnnsys.models.rgcn); got {self.model!r}, "
                "use 'sage'",
            )
        self._refuse_given(REFUSED, "shapes the homogeneous models; the R-GCN of a heterogeneous dataset has none")
        if self.sampler != "cpu":
            raise ConfigError("sampler", f"a heterogeneous graph is sampled by the 'cpu' sampler; got {self.sampler!r}")
        if self.workers > 1:
            raise ConfigError("workers", "data-parallel training of a heterogeneous dataset is not implemented; use 1")
        if self.embedding_dim is not None and not 1 <= self.embedding_dim <= INT_MAX:
            raise ConfigError("embedding_dim", f"must be a width >= 1 (None: hidden), got {self.embedding_dim}")
        if self.sparse_embeddings and self.weight_decay > 0:
            raise ConfigError(
                "sparse_embeddings",
                f"SparseAdam, which trains sparse embeddings, has no weight decay; got weight_decay "
                f"{self.weight_decay}, use 0",
            )
        for name, counts in (self.relation_fanouts or {}).items():
            if (
                not isinstance(counts, list)
                or len(counts) != len(self.fanouts)
                or any(isinstance(k, bool) or not isinstance(k, int) or not -1 <= k <= INT_MAX for k in counts)
            ):
                raise ConfigError(
                    "relation_fanouts",
                    f"{name!r} needs one count >= 0 or -1 per layer ({len(self.fanouts)}), got {counts!r}",
                )

    def _check_eval(self):
        self._refuse_given(
            STREAMING,
            "applies to streaming inference of a homogeneous graph; a heterogeneous graph's layer-wise evaluation "
            "holds its layers in memory",
        )
        super()._check_eval()

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
        return dataclasses.replace(self, metric=task_metric(self, dataset), **recorded(dataset))

    @classmethod
    def build(cls, options=None, keywords: dict | None = None):
        """MinibatchOptions.build, taking a MinibatchOptions (as the CLI builds
        for a homogeneous dataset) as the HeteroOptions of its values."""
        if isinstance(options, MinibatchOptions) and not isinstance(options, cls):
            options = cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(MinibatchOptions)})
        return super().build(options, keywords)


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
