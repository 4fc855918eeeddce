"""`make_sampler`: the CPU or the GPU neighbour sampler, uniform or LABOR, behind one call."""

from __future__ import annotations

import torch

from .base import Sampler

SAMPLERS = ("cpu", "gpu", "gpu-pinned")
SAMPLINGS = ("uniform", "labor")


def make_sampler(
    kind: str, indptr, indices, fanouts, device="cpu", seed: int = 0, replace: bool = False, sampling: str = "uniform"
) -> Sampler:
    """A `Sampler`: `sample(seeds, epoch, batch) -> MiniBatch` on its `device`.

    kind "cpu": the numba sampler (MiniBatch on the CPU); "gpu": the Triton
    sampler with the CSC copied to `device`; "gpu-pinned": the Triton sampler
    reading a CSC kept in pinned host memory. sampling "uniform": each node
    draws min(fanout, degree) of its in-neighbours (NeighborSampler);
    "labor": LABOR-0 layer-neighbour sampling (LaborSampler), without
    replacement. Every kind draws the same samples for the same sampling.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if sampling == "labor" and replace:
        raise ValueError("sampling 'labor' draws without replacement; replace=True applies to 'uniform' only")
    if kind == "cpu":
        from .labor import LaborSampler
        from .neighbor import NeighborSampler

        if sampling == "labor":
            return LaborSampler(indptr, indices, fanouts, seed=seed)
        return NeighborSampler(indptr, indices, fanouts, replace=replace, seed=seed)
    if kind in ("gpu", "gpu-pinned"):
        from gnnsys._capabilities import require_triton

        require_triton(f"sampler {kind!r}", torch.device(device))
        from .gpu_sampler import GPULaborSampler, GPUNeighborSampler

        csc = "pinned" if kind == "gpu-pinned" else "gpu"
        if sampling == "labor":
            return GPULaborSampler(indptr, indices, fanouts, seed=seed, device=device, csc=csc)
        return GPUNeighborSampler(indptr, indices, fanouts, replace=replace, seed=seed, device=device, csc=csc)
    raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {kind!r}")
