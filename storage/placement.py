"""Where the feature table lives: GPU, pinned host (zero-copy) or CPU gather.

`unified(features, placement="auto", device=...)` returns a `PlacedTensor`
(a UnifiedTensor: `x[ids]` gives rows on the compute device) and records,
and logs, what it chose and why. "auto" picks the fastest placement that
fits: the padded table in GPU memory if it fits `gpu_memory_budget` (a
fraction of the free GPU memory), else pinned host memory if it fits
`host_memory_budget` (a fraction of the available RAM) or can be pinned in
place, else the CPU gathers from the (memory-mapped) table. Without CUDA,
"auto" keeps the table where it is (memory-mapped or in memory) and "gpu" /
"pinned" raise a one-line error.

`_build` places the dataset's RowTable (the bottom of a tier stack) on the
chosen placement. The stack above it (an SSD source at the bottom instead, a
cache and a victim buffer above) is built by storage/stack_builder.py; a
source above wraps the next through its `base` (storage/base.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from gnnsys._capabilities import HAS_CUDA, normalize_device, require_cuda
from gnnsys.errors import ConfigError
from gnnsys.host_memory import available_host_bytes

from .base import UnifiedTensor
from .gpu_features import GPUFeatures, as_row_table

log = logging.getLogger(__name__)

PLACEMENTS = ("auto", "gpu", "pinned", "cpu-gather")


@dataclass(frozen=True)
class Placement:
    """The chosen placement `kind` ("gpu", "pinned" or "cpu-gather"), the table
    size it was chosen for, and a one-line reason."""

    kind: str
    table_bytes: int
    reason: str


class PlacedTensor(UnifiedTensor):
    """A UnifiedTensor that knows its `placement`."""

    def __init__(self, source, placement: Placement):
        super().__init__(source)
        self.placement = placement

    def __repr__(self):
        return f"{super().__repr__()[:-1]}, placement={self.placement.kind!r})"


def choose_placement(
    table_bytes: int,
    device,
    gpu_memory_budget: float = 0.5,
    host_memory_budget: float = 0.5,
    pins_in_place: bool = False,
) -> Placement:
    """The "auto" rule (see module docstring) for a table of `table_bytes` padded bytes."""
    for name, value in (("gpu_memory_budget", gpu_memory_budget), ("host_memory_budget", host_memory_budget)):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} must be a fraction in [0, 1], got {value}")
    device = normalize_device(device)
    mib = table_bytes / 2**20
    if device.type != "cuda":
        return Placement("cpu-gather", table_bytes, f"device {device}: the CPU gathers rows from the table")
    free, _ = torch.cuda.mem_get_info(device)
    if table_bytes <= gpu_memory_budget * free:
        return Placement(
            "gpu", table_bytes, f"{mib:.0f} MiB fit {gpu_memory_budget:.0%} of {free / 2**20:.0f} MiB free GPU memory"
        )
    host = available_host_bytes()
    if pins_in_place or table_bytes <= host_memory_budget * host:
        where = "pinned in place" if pins_in_place else f"fit {host_memory_budget:.0%} of {host / 2**20:.0f} MiB RAM"
        return Placement("pinned", table_bytes, f"{mib:.0f} MiB exceed the GPU budget; {where}")
    return Placement("cpu-gather", table_bytes, f"{mib:.0f} MiB exceed both the GPU and the host RAM budget")


def place(
    features,
    placement: str = "auto",
    device=None,
    gpu_memory_budget: float = 0.5,
    host_memory_budget: float = 0.5,
    progress: bool = True,
):
    """(FeatureSource, Placement) for `features` (a RowTable, a UnifiedTensor over
    one, or a 2-D tensor) placed for `device` (default: cuda if available)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if placement in ("gpu", "pinned"):
        require_cuda(f"placement {placement!r}")
    device = normalize_device(device if device is not None else ("cuda" if HAS_CUDA else "cpu"))
    if placement in ("gpu", "pinned") and device.type != "cuda":
        raise ConfigError(f"placement {placement!r}", f"needs a CUDA device, got {device}")
    rows = as_row_table(features)
    nbytes = rows.table.nbytes
    if placement == "auto":
        from .pinned import can_pin_in_place

        choice = choose_placement(nbytes, device, gpu_memory_budget, host_memory_budget, can_pin_in_place(rows.table))
    else:
        choice = Placement(placement, nbytes, "requested")
    log.info("features: %s (%s)", choice.kind, choice.reason)
    return _build(rows, choice.kind, device, progress), choice


def _build(rows, kind: str, device: torch.device, progress: bool):
    """The stack of sources for placement `kind` over the RowTable `rows`."""
    if kind == "gpu":
        return GPUFeatures.from_rows(rows, device, progress=progress)
    if kind == "pinned":
        from .pinned import PinnedFeatures

        return PinnedFeatures(rows, device, progress=progress)
    if device.type == "cuda":
        from .staged import StagedFeatures

        return StagedFeatures(rows, device)
    return rows


def unified(
    features,
    placement: str = "auto",
    device=None,
    gpu_memory_budget: float = 0.5,
    host_memory_budget: float = 0.5,
    progress: bool = True,
) -> PlacedTensor:
    """`x = unified(features, placement)`; then `x[ids]` returns rows on `device`.
    `x.placement` says what was chosen and why (also logged at INFO)."""
    source, choice = place(features, placement, device, gpu_memory_budget, host_memory_budget, progress)
    return PlacedTensor(source, choice)


def place_features(dataset, placement: str = "auto", device=None, **budgets) -> PlacedTensor:
    """`unified(dataset.features, ...)`: the dataset's feature table placed for training."""
    return unified(dataset.features, placement, device, **budgets)
