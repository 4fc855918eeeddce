"""`make_sampler`: the CPU or the GPU neighbour sampler behind one call."""
from __future__ import annotations

import torch

from .base import Sampler

SAMPLERS = ("cpu", "gpu", "gpu-pinned")


def make_sampler(kind: str, indptr, indices, fanouts, device="cpu", seed: int = 0, replace: bool = False) -> Sampler:
    """A `Sampler`: `sample(seeds, epoch, batch) -> MiniBatch` on its `device`.

    kind "cpu": the numba NeighborSampler (MiniBatch on the CPU); "gpu": the
    Triton sampler with the CSC copied to `device`; "gpu-pinned": the Triton
    sampler reading a CSC kept in pinned host memory. Both draw the same samples.
    """
    if kind == "cpu":
        from .neighbor import NeighborSampler

        return NeighborSampler(indptr, indices, fanouts, replace=replace, seed=seed)
    if kind in ("gpu", "gpu-pinned"):
        from gnnsys._capabilities import require_triton

        require_triton(f"sampler {kind!r}", torch.device(device))
        from .gpu_sampler import GPUNeighborSampler

        return GPUNeighborSampler(indptr, indices, fanouts, replace=replace, seed=seed, device=device,
                                  csc="pinned" if kind == "gpu-pinned" else "gpu")
    raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {kind!r}")
