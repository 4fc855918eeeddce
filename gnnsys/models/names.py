"""What the `model` training option may name: a built-in conv or a user module.

Kept apart from `gnnsys.models.gnn` so that the options and the CLI's parser
check a model's name without importing PyG.
"""

from __future__ import annotations

CONVS = ("sage", "gcn", "gat")
NORMS = (None, "batch", "layer")
USER_MODEL = "module:"  # how training options name a user module: "module:" + its class's qualified name


def is_user_model(model: str) -> bool:
    """True when a `model` option names a user module (USER_MODEL), not one of CONVS."""
    return model.startswith(USER_MODEL)
