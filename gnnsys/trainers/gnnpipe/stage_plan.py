"""Stage balancing: split the model's units into contiguous stages of
similar cost (GNNPipe's profiler plus a small dynamic program)."""

from __future__ import annotations

import time

import numpy as np
import torch

from gnnsys.models.units import aggregates
from gnnsys.samplers import Block


def plan_stages(costs, num_stages: int) -> list[int]:
    """Split units with the given costs into `num_stages` non-empty contiguous
    runs minimising the most expensive run; returns the S + 1 boundaries."""
    costs = [float(c) for c in costs]
    n = len(costs)
    if not 1 <= num_stages <= n:
        raise ValueError(f"cannot split {n} layers into {num_stages} stages (need 1 <= stages <= layers)")
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    inf = float("inf")
    # best[s][i]: min over splits of units[:i] into s stages of the max stage cost
    best = np.full((num_stages + 1, n + 1), inf)
    cut = np.zeros((num_stages + 1, n + 1), dtype=np.int64)
    best[0][0] = 0.0
    for s in range(1, num_stages + 1):
        for i in range(s, n + 1):
            for j in range(s - 1, i):
                value = max(best[s - 1][j], prefix[i] - prefix[j])
                if value < best[s][i]:
                    best[s][i], cut[s][i] = value, j
    bounds = [n]
    for s in range(num_stages, 0, -1):
        bounds.append(int(cut[s][bounds[-1]]))
    return bounds[::-1]


def estimate_unit_costs(units, num_nodes: int, num_edges: int) -> list[float]:
    """Flop-proportional cost of each unit on the whole graph: N x weights for
    the dense part, plus E x d_in for an aggregation."""
    costs = []
    for u in units:
        weights = sum(p.numel() for p in u.parameters())
        d_in = getattr(u, "in_dim", 0)
        costs.append(num_nodes * weights + (num_edges * d_in if aggregates(u) else 0))
    return costs


def measure_unit_costs(units, x: torch.Tensor, block: Block, repeats: int = 3) -> list[float]:
    """Median seconds of forward + backward of each unit on the whole graph
    (the profiler of GNNPipe); x is the first unit's input."""
    costs = []
    h = x
    for u in units:
        times = []
        for _ in range(repeats):
            inp = h.detach().requires_grad_()
            t = time.perf_counter()
            out = u(inp, block)
            out.sum().backward()
            times.append(time.perf_counter() - t)
        u.zero_grad(set_to_none=True)
        costs.append(float(np.median(times)))
        with torch.no_grad():
            h = u(h, block)
    return costs
