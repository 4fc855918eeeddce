"""The model a minibatch run trains, built from its options: the built-in GNN
that options.model names, or a fresh copy of the user's module. The
minibatch trainer builds it for each run (and, data-parallel, once more to
hold rank 0's weights); `gnnsys predict` builds it to load a checkpoint's."""

from __future__ import annotations

import torch

from gnnsys.errors import ConfigError
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.user_model import fresh_copy


def build_model(dataset, options: MinibatchOptions, module: torch.nn.Module | None = None) -> torch.nn.Module:
    """The GNN `options` describe for `dataset`, or a copy of the user's
    `module` (options.model names it), initialised from options.seed, on the
    CPU (`module`'s own device for a user module)."""
    from gnnsys.models.gnn import GNN
    from gnnsys.models.names import is_user_model

    o = options
    if is_user_model(o.model):
        if module is None:
            raise ConfigError("model", f"{o.model} is a user module: pass the module itself as model=")
        return fresh_copy(module, o.seed)
    torch.manual_seed(o.seed)
    assert o.layers is not None  # MinibatchOptions sets it from fanouts
    return GNN(
        o.model,
        dataset.num_features,
        o.hidden,
        dataset.num_classes,
        o.layers,
        dropout=o.dropout,
        norm=o.norm,
        residual=o.residual,
        heads=o.heads,
        input_dropout=o.input_dropout,
    )
