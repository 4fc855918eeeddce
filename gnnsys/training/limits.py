"""Whether a run fits this machine.

`check_machine` (when options meet the dataset): the processes a run starts
are at most twice the CPU cores this process may use, and the memory it is
estimated to need fits what the device has: host memory available
(MemAvailable) on the CPU, the GPU's memory on CUDA. The estimate: each
spawned process PROCESS_BYTES (64 data-parallel ranks held 17 GB before
their first epoch), the parameters 16 bytes each (weights, gradients, Adam's
two moments), and one step's layer outputs 12 bytes per value (output,
gradient, one temporary) over the rows each layer computes (every node in
full-graph training; batch x the fanouts' product, at most every node, in a
minibatch) plus the input features those rows read.
"""

from __future__ import annotations

import os

import torch

from gnnsys.errors import ConfigError
from gnnsys.storage.memory_plan import GB

PROCESS_BYTES = 270 * 10**6


def check_machine(options, dataset):
    """ConfigError when the run's processes exceed twice the usable cores or
    its estimated memory exceeds the device's (module docstring)."""
    from gnnsys.parallel.distributed import torchrun_env

    processes = 1 if torchrun_env() is not None else options.workers  # torchrun placed its own ranks
    cores = len(os.sched_getaffinity(0))
    if processes > 2 * cores:
        raise ConfigError(
            "workers",
            f"{processes} processes on {cores} CPU cores: at most {2 * cores} (twice the cores this process may use)",
        )
    params, step = model_bytes(options, dataset)
    parts = {"parameters with gradients and Adam state": params, "one step's activations": step}
    spawned = processes if processes > 1 else 0  # this process runs already
    device = torch.device(options.device)
    if device.type == "cuda":  # every rank on a GPU of its own
        have, where = torch.cuda.get_device_properties(device).total_memory, f"of {device}"
    else:
        from gnnsys.host_memory import available_host_bytes

        parts = {f"{spawned} worker processes": spawned * PROCESS_BYTES, **{k: processes * v for k, v in parts.items()}}
        have, where = available_host_bytes(), "of host memory available"
    need = sum(parts.values())
    if need > have:
        detail = ", ".join(f"{k} {v / GB:,.2f} GB" for k, v in parts.items() if v)
        raise ConfigError(
            "workers" if spawned else "hidden",
            f"this run needs about {need / GB:,.2f} GB ({detail}), more than the {have / GB:,.2f} GB {where}",
        )


def model_bytes(options, dataset) -> tuple[int, int]:
    """(bytes of the parameters with their gradients and Adam state, bytes
    of one step's layer outputs and input rows) of the model `options`
    describe for `dataset` (built on the meta device: nothing allocated); a
    user module's parameters are not known here and count 0, its layer
    outputs `hidden` wide."""
    from gnnsys.models.gnn import GNN
    from gnnsys.models.names import is_user_model
    from gnnsys.models.units import build_units

    o, dim, classes = options, dataset.num_features, dataset.num_classes
    shape = dict(heads=o.heads, norm=o.norm, residual=o.residual)
    params = 0
    if not is_user_model(o.model):
        with torch.device("meta"):
            model = (
                build_units(o.model, dim, o.hidden, classes, o.layers, input_proj=o.input_proj, **shape)
                if hasattr(o, "input_proj")
                else GNN(o.model, dim, o.hidden, classes, o.layers, **shape)
            )
        params = 16 * sum(p.numel() for p in model.parameters())
    rows = _layer_rows(options, dataset.num_nodes)  # input rows first
    widths = [o.hidden] * (o.layers - 1) + [classes]
    return params, 4 * rows[0] * dim + 12 * sum(r * w for r, w in zip(rows[1:], widths))


def _layer_rows(options, num_nodes: int) -> list[int]:
    """Rows of the input and of each layer's output in one step, input first."""
    fanouts = getattr(options, "fanouts", None)
    if fanouts is None:
        return [num_nodes] * (options.layers + 1)
    rows, count = [], options.batch_size
    for f in (0, *fanouts):  # output first: the batch, then each layer's sources
        count = num_nodes if f == -1 else count * (1 + f)
        rows.append(min(count, num_nodes))
    return rows[::-1]
