"""A user's `torch.nn.Module` as the model of minibatch training: checked
against the blocks interface (gnnsys.models.gnn, module docstring) before
training starts, and copied and re-initialised for each run."""

from __future__ import annotations

import copy
import inspect

import torch

from gnnsys.errors import ConfigError
from gnnsys.models.gnn import GNNLayer
from gnnsys.models.names import USER_MODEL

DRY_SEEDS = 2  # training nodes of the batch a module is tried on


def model_name(module: torch.nn.Module) -> str:
    """The `model` option naming `module`: USER_MODEL + its class's qualified name."""
    cls = type(module)
    return f"{USER_MODEL}{cls.__module__}.{cls.__qualname__}"


def streams_layers(module: torch.nn.Module) -> bool:
    """True when exact layer-wise evaluation can stream `module`: its `layers` are GNNLayers."""
    layers = getattr(module, "layers", None)
    return isinstance(layers, torch.nn.ModuleList) and all(isinstance(m, GNNLayer) for m in layers)


def needs_degree(module: torch.nn.Module) -> bool:
    """The module's `needs_degree` (False when it has none)."""
    return bool(getattr(module, "needs_degree", False))


def check_user_model(module, dataset, options):
    """`options` (MinibatchOptions) for training `module` on `dataset`: model
    named by `model_name`, eval "auto" made "sampled" when the module has no
    GNNLayer `layers`. ConfigError naming what is missing when `module` is not a
    torch.nn.Module, has no parameters, no reset_parameters for several runs,
    a forward that does not take (x, blocks), or one that fails or returns
    another shape on a batch of DRY_SEEDS training nodes (run on a copy, in
    eval mode, without gradients: the module passed is not changed)."""
    if not isinstance(module, torch.nn.Module):
        raise ConfigError("model", f"must be one of sage, gcn, gat or a torch.nn.Module, got {type(module).__name__}")
    name = type(module).__name__
    if not any(True for _ in module.parameters()):
        raise ConfigError("model", f"{name} has no parameters to train")
    if options.runs > 1 and not any(hasattr(m, "reset_parameters") for m in module.modules()):
        raise ConfigError(
            "runs", f"{name} has no submodule with reset_parameters(), so its runs could not start from fresh weights"
        )
    _check_signature(module, name)
    options = options.replace(model=model_name(module))
    if options.eval_mode == "layerwise" and not streams_layers(module):
        if options.eval != "auto":
            raise ConfigError(
                "eval",
                f"layer-wise evaluation streams a ModuleList `layers` of GNNLayers, {name} has none; use 'sampled'",
            )
        options = options.replace(eval="sampled")
    _dry_forward(module, name, dataset, options)
    return options


def _check_signature(module, name: str):
    """ConfigError unless module.forward takes two positional arguments (x, blocks)."""
    try:
        inspect.signature(module.forward).bind(None, None)
    except TypeError:
        raise ConfigError(
            "model",
            f"{name}.forward{inspect.signature(module.forward)} must take (x, blocks): "
            "the features of blocks[0]'s source nodes and one Block per fanout",
        ) from None


@torch.no_grad()
def _dry_forward(module, name: str, dataset, options):
    """Run a copy of `module` on one sampled batch of DRY_SEEDS training
    nodes; ConfigError when it fails or its output is not [seeds, classes]."""
    from gnnsys.samplers.block import gcn_degree
    from gnnsys.samplers.neighbor import NeighborSampler

    seeds = dataset.split("train")[:DRY_SEEDS]
    if seeds.numel() == 0:
        return
    mb = NeighborSampler(dataset.indptr, dataset.indices, list(options.fanouts), seed=options.seed).sample(seeds)
    if needs_degree(module):
        mb.attach_degree(gcn_degree(dataset.indptr, dataset.indices))
    x = dataset.features[mb.input_nodes].float()
    trial = copy.deepcopy(module).cpu().eval()
    try:
        out = trial(x, mb.blocks)
    except Exception as e:  # the user's code: any failure, in one line
        why = " ".join(str(e).split())[:300]
        raise ConfigError(
            "model",
            f"{name}.forward(x, blocks) failed on a batch of {len(mb.blocks)} blocks "
            f"({x.shape[1]} input features): {type(e).__name__}: {why}",
        ) from None
    expect = (seeds.shape[0], dataset.num_classes)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != expect:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(
            "model",
            f"{name}.forward(x, blocks) must return [blocks[-1].num_dst, num_classes] = {list(expect)}, got {got}",
        )


def fresh_copy(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A deep copy of `module` re-initialised for a run with `seed`: torch
    seeded, then reset_parameters() of every submodule that has one, in
    `modules()` order."""
    fresh = copy.deepcopy(module)
    torch.manual_seed(seed)
    for m in fresh.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return fresh
