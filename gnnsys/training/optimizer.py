"""The optimizer of a minibatch run: Adam, and SparseAdam beside it for the
embeddings that take sparse gradients.

`make_optimizer(model, lr, weight_decay)` gives `torch.optim.Adam` (fused where
torch has the kernel, `adam`) over every parameter of a model whose gradients are all dense. A model with
`nn.Embedding(..., sparse=True)` modules (the R-GCN's embeddings of the
featureless node types under `sparse_embeddings`) gets a
`DenseSparseAdam`: Adam over the other parameters and `torch.optim.SparseAdam`
over the embeddings, which updates only the rows a step's gradient touches
(their moments too: "lazy" Adam), so a step costs what the batch reads, not
the whole table.
"""

from __future__ import annotations

import torch
from torch import nn

from gnnsys.errors import ConfigError


def sparse_parameters(model: nn.Module) -> list:
    """The parameters of `model` whose gradients are sparse (the weights of its sparse nn.Embeddings)."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse]


def adam(params, **options) -> torch.optim.Adam:
    """`torch.optim.Adam(params, **options)`, fused (one kernel per parameter for the whole
    update, not one per operation over all parameters) where torch has the fused kernel: every
    parameter a floating CPU or CUDA tensor. The same update to fp32 rounding; a step took
    2-3x less time on the SAGE model of the benchmarks."""
    params = list(params)
    fusable = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.Adam(params, fused=True if params and fusable else None, **options)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """Adam over `model`'s parameters, or a DenseSparseAdam when some take
    sparse gradients (ConfigError("weight_decay") for those with weight_decay > 0:
    SparseAdam has none)."""
    sparse = sparse_parameters(model)
    if not sparse:
        return adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    if weight_decay > 0:
        raise ConfigError(
            "weight_decay",
            f"sparse-gradient embeddings train with SparseAdam, which has no weight decay; got {weight_decay}, use 0",
        )
    taken = {id(p) for p in sparse}
    dense = [p for p in model.parameters() if id(p) not in taken]
    return DenseSparseAdam(dense, sparse, lr=lr)


class DenseSparseAdam(torch.optim.Optimizer):
    """One optimizer made of Adam over `dense` parameters and SparseAdam over
    `sparse` ones (parameters whose gradients are sparse), both at `lr`.

    param_groups is Adam's group then SparseAdam's (the dicts the two use, so
    an LR schedule changes both); step and zero_grad cover both; state_dict
    holds both optimizers' states ({"dense": ..., "sparse": ...}).
    """

    def __init__(self, dense, sparse, lr: float):
        dense, sparse = list(dense), list(sparse)
        self._dense = adam(dense, lr=lr) if dense else None
        self._sparse = torch.optim.SparseAdam(sparse, lr=lr)
        super().__init__(dense + sparse, {"lr": lr})
        self._link_groups()

    def _parts(self) -> list:
        return [o for o in (self._dense, self._sparse) if o is not None]

    def _link_groups(self):
        self.param_groups = [g for o in self._parts() for g in o.param_groups]

    @torch.no_grad()
    def step(self, closure=None):
        """One step of both optimizers; closure (re-evaluates the loss) as torch's optimizers take it."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for o in self._parts():
            o.step()
        return loss

    def state_dict(self) -> dict:
        """{"dense": Adam's state_dict (None without dense parameters), "sparse": SparseAdam's}."""
        return {
            "dense": None if self._dense is None else self._dense.state_dict(),
            "sparse": self._sparse.state_dict(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a `state_dict` of a DenseSparseAdam over the same parameters."""
        if not isinstance(state_dict, dict) or set(state_dict) != {"dense", "sparse"}:
            raise ValueError("not the state of an Adam with SparseAdam (sparse-gradient embeddings)")
        if (state_dict["dense"] is None) != (self._dense is None):
            raise ValueError("the state's dense parameters do not match this optimizer's")
        if self._dense is not None:
            self._dense.load_state_dict(state_dict["dense"])
        self._sparse.load_state_dict(state_dict["sparse"])
        self._link_groups()
