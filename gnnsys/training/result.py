"""`TrainResult`: what a training run produced, and how it is assembled."""

from __future__ import annotations

import copy
import json
import math
import os
import platform
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from gnnsys.runtime import cpu_features
from gnnsys.training.outputs import write_output


@dataclass
class TrainResult:
    """What a training run produced (docs/architecture.md, "Training results").

    config: every option needed to rerun (plus run facts such as GNNPipe's
    stage boundaries); metric: "acc" or "auc"; epochs: one dict per epoch
    {epoch, loss, time_s, breakdown, lr, train, valid, test} (the metrics
    are None in epochs that were not evaluated); best_epoch: the evaluated
    epoch with the best validation metric; test: its test metric; machine:
    device, CPU count, what the CPU executes natively (gnnsys.runtime.cpu_features),
    versions. With several runs (options.runs) these describe run
    `best_run`, the one with the highest best validation metric.
    runs: one dict per run, in the terms of OGB's Logger (`run_summary`):
    {run, seed, best_epoch, epochs_trained, stopped_early, highest_train,
    highest_valid, final_train, final_test, epochs}; summary: for each of
    the four metrics {mean, std} over the runs (`summarize`; std is the
    sample standard deviation, None for one run).
    `model` (the trained module, holding its best epoch's weights; None for
    GNNPipe) and `models` (every run's) are not serialised.
    """

    config: dict
    metric: str
    epochs: list
    best_epoch: int | None
    test: float | None
    machine: dict
    runs: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    best_run: int = 0
    model: torch.nn.Module | None = field(default=None, repr=False, compare=False)
    models: list = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict:
        """The JSON-serialisable fields."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name not in NOT_SERIALISED}

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path) -> Path:
        """Write the JSON atomically to `path` (PathError naming it when it cannot be)."""
        return write_output(path, (self.to_json() + "\n").encode())

    @classmethod
    def load(cls, path) -> TrainResult:
        """A TrainResult read back from its JSON."""
        return cls(**json.loads(Path(path).read_text()))


NOT_SERIALISED = ("model", "models")
LOGGER_METRICS = ("highest_train", "highest_valid", "final_train", "final_test")  # OGB Logger's statistics


def best_record(history: list) -> dict | None:
    """The earliest evaluated epoch record of `history` with the highest
    validation metric (None when none was evaluated); a NaN metric is never best."""
    scored = (r for r in history if r["valid"] is not None and not math.isnan(r["valid"]))
    return max(scored, key=lambda r: r["valid"], default=None)


def make_result(options, history: list, model=None, **run_facts) -> TrainResult:
    """The TrainResult of one run with `options` (a TrainOptions) from its
    epoch records (best epoch: `best_record`). `run_facts` join the recorded config."""
    best = best_record(history)
    runs = [run_summary(0, options, history)]
    return TrainResult(
        config={**options.to_dict(), **run_facts},
        metric=options.metric,
        epochs=history,
        best_epoch=None if best is None else best["epoch"],
        test=None if best is None else best["test"],
        machine=machine_info(options.device, getattr(options, "prefetch", None)),  # full-graph runs have no loader
        runs=runs,
        summary=summarize(runs),
        model=model,
        models=[model],
    )


def run_summary(run: int, options, history: list) -> dict:
    """Run `run` (trained with options.seed) in the terms of OGB's Logger:
    the highest train and valid metrics over its evaluated epochs, the train
    and test metric at its best validation epoch (`best_record`) as
    final_train and final_test; its epochs, how many it trained and whether
    early stopping ended it before options.epochs."""
    best = best_record(history)
    evaluated = [r for r in history if r["valid"] is not None]
    return {
        "run": run,
        "seed": options.seed,
        "best_epoch": None if best is None else best["epoch"],
        "epochs_trained": len(history),
        "stopped_early": len(history) < options.epochs,
        "highest_train": max((r["train"] for r in evaluated), default=None),
        "highest_valid": None if best is None else best["valid"],
        "final_train": None if best is None else best["train"],
        "final_test": None if best is None else best["test"],
        "epochs": history,
    }


def summarize(runs: list) -> dict:
    """{metric: {"mean", "std"}} over `runs` (run_summary dicts) for each of
    LOGGER_METRICS: the mean, and the sample standard deviation (ddof 1, as
    OGB's Logger, torch.std) or None for a single run; None when a run has
    no value."""
    out: dict[str, dict | None] = {}
    for name in LOGGER_METRICS:
        values = [r[name] for r in runs]
        if not values or any(v is None for v in values):
            out[name] = None
            continue
        mean = sum(values) / len(values)
        std = None if len(values) < 2 else math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        out[name] = {"mean": mean, "std": std}
    return out


def machine_info(device, prefetch: int | None = None) -> dict:
    """Where a run happened: device, CPU count, the threads of torch (intra-op
    and inter-op) and of numba's kernels, and given the run's `prefetch` the
    loader's (one sampling and one gather thread when it is > 0, and their
    niceness, `loader_nice`), the CPU and what it executes natively (`cpu`,
    gnnsys.runtime.cpu_features), versions."""
    import numba
    import numpy
    import torch_geometric

    from gnnsys.loading.options import loader_nice

    threads: dict = {
        "torch": torch.get_num_threads(),
        "torch_interop": torch.get_num_interop_threads(),
        "numba": numba.get_num_threads(),
    }
    if prefetch is not None:
        threads["loader"] = {"threads": 2 if prefetch > 0 else 0, "nice": loader_nice(device)}
    info = {
        "device": str(device),
        "cpu_count": os.cpu_count(),
        "threads": threads,
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
