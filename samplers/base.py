"""The `Sampler` protocol: what the loader and trainers need of a neighbour sampler.

`NeighborSampler` (numba, CPU) and `GPUNeighborSampler` (Triton) implement it
for uniform sampling, `LaborSampler` and `GPULaborSampler` for LABOR-0;
`make_sampler` builds any of them from one call.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from .block import MiniBatch


@runtime_checkable
class Sampler(Protocol):
    """Samples the multi-layer computation graph of a batch of seed nodes.

    sample(seeds, epoch, batch) returns the MiniBatch of `seeds` (distinct node
    ids) for the draw stream (epoch, batch): the same arguments give the same
    MiniBatch. `device`: where that MiniBatch's tensors come out.
    """

    device: torch.device

    def sample(self, seeds, epoch: int = 0, batch: int = 0) -> MiniBatch: ...
