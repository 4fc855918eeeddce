"""Full-graph models as lists of units, each `forward(x_src, block) -> [num_dst, out]`.

- shallow (below 4 layers by default): `layers` GNNLayers in -> hidden -> ... -> classes;
- deep (`input_proj=True`, the default from 4 layers): an input projection
  (a per-node Linear + ReLU, counted as a unit) to `hidden`, then `layers`
  GNNLayers, hidden ones with `residual` and `norm`, the last one to the classes.

The first unit applies `input_dropout` to the input features, so every path
that runs the units (the reference, each GNNPipe chunk of the first stage,
cost measurement) drops them; in GNNPipe each chunk draws its own mask over
its rows and halo.

The single-process full-graph trainer runs all units in order; GNNPipe splits
them into contiguous stages, one per worker.
"""

from __future__ import annotations

import torch
from torch import nn

from gnnsys.models.dropout import HashDropout
from gnnsys.models.gnn import GNNLayer
from gnnsys.samplers import Block


class InputProjection(nn.Module):
    """Per-node (input dropout ->) Linear -> ReLU -> dropout; reads no neighbours (`local`)."""

    local = True

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.0, input_dropout: float = 0.0):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.input_dropout = HashDropout(input_dropout)
        self.lin = nn.Linear(in_dim, out_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x_src: torch.Tensor, block: Block) -> torch.Tensor:
        """Rows of the block's destination nodes."""
        return self.dropout(torch.relu(self.lin(self.input_dropout(x_src[: block.num_dst]))))


def build_units(
    conv: str,
    in_dim: int,
    hidden: int,
    num_classes: int,
    layers: int,
    *,
    heads: int = 4,
    norm: str | None = None,
    residual: bool = False,
    dropout: float = 0.5,
    input_proj: bool = False,
    input_dropout: float = 0.0,
) -> nn.ModuleList:
    """The model as a list of units (see the module docstring)."""
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    units = []
    width = in_dim
    if input_proj:
        units.append(InputProjection(in_dim, hidden, dropout, input_dropout))
        width = hidden
    dims = [width] + [hidden] * (layers - 1) + [num_classes]
    for i in range(layers):
        last = i == layers - 1
        units.append(
            GNNLayer(
                conv,
                dims[i],
                dims[i + 1],
                heads=heads if conv == "gat" else 1,
                norm=None if last else norm,
                residual=residual and not last,
                dropout=0.0 if last else dropout,
                activation=not last,
                input_dropout=0.0 if units else input_dropout,
            )
        )
    return nn.ModuleList(units)


def units_for(options, in_dim: int, num_classes: int) -> nn.ModuleList:
    """The units of a FullGraphOptions, initialised from its seed (the same on every worker)."""
    torch.manual_seed(options.seed)
    return build_units(
        options.model,
        in_dim,
        options.hidden,
        num_classes,
        options.layers,
        heads=options.heads,
        norm=options.norm,
        residual=options.residual,
        dropout=options.dropout,
        input_proj=options.input_proj,
        input_dropout=options.input_dropout,
    )


def full_forward(units, x: torch.Tensor, block: Block) -> torch.Tensor:
    """All units over the whole graph (block = Block.full_graph(...))."""
    for u in units:
        x = u(x, block)
    return x


def aggregates(unit: nn.Module) -> bool:
    """True when a unit reads neighbours (a GNN layer), False for per-node
    units (`local = True`, e.g. the input projection)."""
    return not getattr(unit, "local", False)
