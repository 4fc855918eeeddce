"""The option objects `MinibatchLoader` takes: how batches are sampled, which
seeds each batch holds, and how far the pipeline works ahead.

SamplingOptions and PipelineOptions check their fields when built
(ValueError naming the field); batch fields are checked by SeedBatches and
sampler kinds by make_sampler, when the loader builds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gnnsys.samplers.base import Sampler
from gnnsys.storage.cuda_stream import CudaStreams


@dataclass(frozen=True)
class SamplingOptions:
    """How each batch's blocks are drawn.

    fanouts: neighbours per layer, output layer first (PyG order), -1 for all;
    sampler: the kind make_sampler builds over the dataset's graph ("cpu",
    "gpu", "gpu-pinned"), or a `Sampler` object, which then owns its fanouts,
    method and replacement (leave those three at their defaults); method:
    "uniform" or "labor" (LABOR-0); replace: draw with replacement.
    """

    fanouts: Sequence[int] | None = None
    sampler: str | Sampler = "cpu"
    method: str = "uniform"
    replace: bool = False

    def __post_init__(self):
        if isinstance(self.sampler, str):
            if self.fanouts is None:
                raise ValueError(f"sampler {self.sampler!r} needs fanouts")
        elif self.fanouts is not None or self.replace or self.method != "uniform":
            raise ValueError("fanouts, method and replace belong to the sampler object; leave them out")


@dataclass(frozen=True)
class BatchOptions:
    """Which seeds each batch holds.

    batch_size: seeds per batch; shuffle: a new order every epoch; drop_last:
    leave out a last, smaller batch; seed: seeds the shuffle and a named
    sampler's draws (every draw is a function of seed, epoch and batch);
    rank/world_size: data parallelism, the loader iterates rank `rank`'s
    disjoint share of each epoch's shuffled seeds.
    """

    batch_size: int = 1024
    shuffle: bool = True
    drop_last: bool = False
    seed: int = 0
    rank: int = 0
    world_size: int = 1


@dataclass(frozen=True)
class PipelineOptions:
    """How far the loader's threads work ahead of the consumer.

    prefetch: batches prepared ahead (0: everything runs in the caller's
    thread); sampling_threads: sampling threads; lookahead K > 0: batches are
    sampled K further ahead and the feature source's `set_window` gets their
    input ids before each gather (needs a stack with a cache); streams: the
    stream API of a CUDA device (default CudaStreams() on CUDA), a stand-in
    with the same methods makes the loader order its stages through it on
    any device; nice: the OS niceness (0-19) its threads take on Linux, so
    that where the consumer computes on the same cores the loader works in
    the time the consumer leaves (0: the caller's; a thread never lowers it).
    """

    prefetch: int = 4
    sampling_threads: int = 1
    lookahead: int = 0
    streams: CudaStreams | None = None
    nice: int = 0

    def __post_init__(self):
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.lookahead < 0:
            raise ValueError(f"lookahead must be >= 0, got {self.lookahead}")
        if self.sampling_threads < 1:
            raise ValueError(f"sampling_threads must be >= 1, got {self.sampling_threads}")
        if not 0 <= self.nice <= 19:
            raise ValueError(f"nice must be in 0..19, got {self.nice}")


CPU_COMPUTE_NICE = 19


def loader_nice(device) -> int:
    """The niceness a trainer's loader threads take when its model computes on
    `device`: CPU_COMPUTE_NICE on the CPU, where the model's kernels use every
    core and the loader's sampling and gathering would otherwise take cores from
    them (benchmarks/README.md, "Measurements behind design choices"); else 0."""
    return CPU_COMPUTE_NICE if torch.device(device).type == "cpu" else 0
