"""`TrainResult`: what a training run produced, and how it is assembled."""

from __future__ import annotations

import copy
import json
import os
import platform
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from gnnsys import cpu_features

from .outputs import write_output


@dataclass
class TrainResult:
    """What a training run produced (docs/architecture.md, "Training results").

    config: every option needed to rerun (plus run facts such as GNNPipe's
    stage boundaries); metric: "acc" or "auc"; epochs: one dict per epoch
    {epoch, loss, time_s, breakdown, train, valid, test} (the metrics are None
    in epochs that were not evaluated); best_epoch: the evaluated epoch with
    the best validation metric; test: its test metric; machine: device, CPU
    count, what the CPU executes natively (gnnsys.cpu_features), versions.
    `model` (the trained module) is not serialised.
    """

    config: dict
    metric: str
    epochs: list
    best_epoch: int | None
    test: float | None
    machine: dict
    model: torch.nn.Module | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """The JSON-serialisable fields."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "model"}

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path) -> Path:
        """Write the JSON atomically to `path` (PathError naming it when it cannot be)."""
        return write_output(path, (self.to_json() + "\n").encode())

    @classmethod
    def load(cls, path) -> TrainResult:
        """A TrainResult read back from its JSON."""
        return cls(**json.loads(Path(path).read_text()))


def make_result(options, history: list, model=None, **run_facts) -> TrainResult:
    """The TrainResult of a run with `options` (a TrainOptions) from its epoch
    records: the best epoch is the earliest evaluated one with the best
    validation metric. `run_facts` join the recorded config."""
    evaluated = [r for r in history if r["valid"] is not None]
    best = max(evaluated, key=lambda r: r["valid"], default=None)
    return TrainResult(
        config={**options.to_dict(), **run_facts},
        metric=options.metric,
        epochs=history,
        best_epoch=None if best is None else best["epoch"],
        test=None if best is None else best["test"],
        machine=machine_info(options.device),
        model=model,
    )


def machine_info(device) -> dict:
    """Where a run happened: device, CPU count, threads, the CPU and what it
    executes natively (`cpu`, gnnsys.cpu_features), versions."""
    import numba
    import numpy
    import torch_geometric

    info = {
        "device": str(device),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu_features.detect().to_dict(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {
            "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__,
            "numpy": numpy.__version__,
            "numba": numba.__version__,
        },
    }
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info
