"""`train(dataset, ...) -> TrainResult`: seeded minibatch node classification.

One epoch: the MinibatchLoader samples and gathers batches of training seeds
ahead of compute; each batch runs forward/backward/step on the model. Every
`eval_every` epochs the model is evaluated exactly (layer-wise full-neighbour
inference, `gnnsys.inference`) on train/valid/test. With a checkpoint
directory, a checkpoint is written atomically after every epoch, and
`resume=True` continues from the last complete one: sampling is a function of
(seed, epoch, batch) and the RNG states are saved, so a resumed run ends with
exactly the result of an uninterrupted one.
"""
from __future__ import annotations

import copy
import json
import os
import platform
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from gnnsys.datasets.atomic import atomic_write_bytes
from gnnsys.datasets.errors import DatasetError
from gnnsys.epochs import run_epochs

BREAKDOWN = ("sample_s", "gather_s", "transfer_s", "compute_s", "wait_s")
# options a resumed run may change; every other one must match the checkpoint
RESUMABLE = ("epochs", "checkpoint_dir", "resume", "progress", "features", "sampler", "retain_memory")


@dataclass
class TrainResult:
    """What a training run produced (DESIGN.md "Training results").

    config: every option needed to rerun; metric: "acc" or "auc"; epochs: one
    dict per epoch {epoch, loss, time_s, breakdown, train, valid, test} (the
    metrics are None in epochs that were not evaluated); best_epoch: the
    evaluated epoch with the best validation metric; test: its test metric;
    machine: device, CPU count, versions. `model` (the trained module) is not
    serialised.
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
        """Write the JSON atomically to `path`."""
        atomic_write_bytes(path, (self.to_json() + "\n").encode())
        return Path(path)

    @classmethod
    def load(cls, path) -> "TrainResult":
        """A TrainResult read back from its JSON."""
        return cls(**json.loads(Path(path).read_text()))


def train(dataset, model: str = "sage", fanouts=(15, 10, 5), batch_size: int = 1024, hidden: int = 256,
          layers: int | None = None, epochs: int = 10, lr: float = 0.005, weight_decay: float = 5e-4,
          dropout: float = 0.5, input_dropout: float = 0.0, norm: str | None = None,
          residual: bool = False, heads: int = 4, device="cpu", seed: int = 0, eval_every: int = 1,
          eval_batch_size: int = 4096, metric: str = "auto", prefetch: int = 4, features: str = "auto",
          sampler: str = "cpu", checkpoint_dir=None, resume: bool = False, progress: bool = True,
          retain_memory: bool = True, on_epoch_end=None) -> TrainResult:
    """Train a GNN ("sage", "gcn" or "gat") for node classification.

    dataset: a Dataset or the path of a prepared dataset. fanouts: neighbours
    per layer, output layer first; layers defaults to len(fanouts) and must
    equal it. metric "auto" is ROC AUC for 2-class datasets, else accuracy.
    features: where feature rows live for a CUDA device ("auto", "gpu",
    "pinned" zero-copy, "cpu-gather"; see gnnsys.storage.placement); sampler:
    "cpu", "gpu" or "gpu-pinned" (gnnsys.samplers.factory). Both change speed,
    not results. retain_memory: keep freed memory in the process for reuse
    (`gnnsys.allocator.retain_freed_memory`; faster steps, RSS stays at its peak).
    checkpoint_dir/resume: see the module docstring. on_epoch_end(record) is
    called after each epoch's checkpoint (a test can raise from it to simulate
    a kill). Returns a TrainResult whose `model` is the trained module.
    """
    config = {k: v for k, v in locals().items() if k not in ("dataset", "on_epoch_end")}
    dataset = _open_dataset(dataset)
    config = _check_config(config, dataset)
    if config["retain_memory"]:
        from gnnsys.allocator import retain_freed_memory

        retain_freed_memory()
    return _Run(dataset, config, on_epoch_end).run()


def _open_dataset(dataset):
    from gnnsys.datasets import Dataset, load_dataset

    return dataset if isinstance(dataset, Dataset) else load_dataset(dataset)


def _check_config(config: dict, dataset) -> dict:
    """Validated, JSON-ready config (DatasetError naming the bad option)."""
    from gnnsys.metrics import resolve_metric
    from gnnsys.models import CONVS, NORMS

    c = dict(config, fanouts=[int(f) for f in config["fanouts"]], device=str(config["device"]),
             checkpoint_dir=None if config["checkpoint_dir"] is None else str(config["checkpoint_dir"]))
    c["dataset"] = str(dataset.path) if dataset.path is not None else dataset.name
    c["layers"] = len(c["fanouts"]) if c["layers"] is None else int(c["layers"])
    if c["model"] not in CONVS:
        raise DatasetError("model", f"must be one of {', '.join(CONVS)}, got {c['model']!r}")
    if c["norm"] not in NORMS:
        raise DatasetError("norm", f"must be one of {NORMS}, got {c['norm']!r}")
    if not c["fanouts"] or any(f < -1 or f == 0 for f in c["fanouts"]):
        raise DatasetError("fanouts", f"must be positive counts or -1 (all), got {c['fanouts']}")
    if c["layers"] != len(c["fanouts"]):
        raise DatasetError("layers", f"{c['layers']} layers need {c['layers']} fanouts, got {c['fanouts']}")
    for name in ("batch_size", "hidden", "epochs", "eval_every", "eval_batch_size", "heads"):
        if int(c[name]) < 1:
            raise DatasetError(name, f"must be >= 1, got {c[name]}")
    if not 0 <= c["dropout"] < 1 or not 0 <= c["input_dropout"] < 1:
        raise DatasetError("dropout", "dropout and input_dropout must be in [0, 1)")
    from gnnsys.samplers.factory import SAMPLERS
    from gnnsys.storage.placement import PLACEMENTS

    if c["features"] not in PLACEMENTS:
        raise DatasetError("features", f"must be one of {', '.join(PLACEMENTS)}, got {c['features']!r}")
    if c["sampler"] not in SAMPLERS:
        raise DatasetError("sampler", f"must be one of {', '.join(SAMPLERS)}, got {c['sampler']!r}")
    if c["resume"] and c["checkpoint_dir"] is None:
        raise DatasetError("resume", "needs a checkpoint directory")
    if torch.device(c["device"]).type == "cuda":
        from gnnsys._capabilities import require_cuda

        require_cuda("device")
    try:
        c["metric"] = resolve_metric(c["metric"], dataset.num_classes)
    except ValueError as e:
        raise DatasetError("metric", str(e)) from None
    return c


def machine_info(device) -> dict:
    """Where a run happened: device, CPU count, threads, versions."""
    import numba
    import numpy
    import torch_geometric

    info = {"device": str(device), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "python": platform.python_version(),
            "versions": {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
                         "numpy": numpy.__version__, "numba": numba.__version__}}
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


class _Run:
    """One training run: model, optimizer, loader, history, checkpoints."""

    def __init__(self, dataset, config: dict, on_epoch_end=None):
        from gnnsys.models import GNN
        from gnnsys.storage.placement import place_features

        self.dataset, self.config, self.on_epoch_end = dataset, config, on_epoch_end
        c = config
        self.device = torch.device(c["device"])
        dataset.features = place_features(dataset, c["features"], self.device, progress=c["progress"])
        torch.manual_seed(c["seed"])
        self.model = GNN(c["model"], dataset.num_features, c["hidden"], dataset.num_classes, c["layers"],
                         dropout=c["dropout"], norm=c["norm"], residual=c["residual"], heads=c["heads"],
                         input_dropout=c["input_dropout"]).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=c["lr"], weight_decay=c["weight_decay"])
        self.history = []
        self.eval_nodes = torch.cat([dataset.split(s) for s in ("train", "valid", "test")])

    def run(self) -> TrainResult:
        c = self.config
        start = self._restore() if c["resume"] else 0
        loader = self._loader() if start < c["epochs"] else None
        run_epochs(c, start, self.history, lambda epoch: self._epoch(loader, epoch), self._evaluate, self._save,
                   self.on_epoch_end)
        return self._result()

    def _loader(self):
        from gnnsys.loader import MinibatchLoader

        c = self.config
        return MinibatchLoader(self.dataset, "train", c["fanouts"], batch_size=c["batch_size"], shuffle=True,
                               seed=c["seed"], prefetch=c["prefetch"], device=c["device"], sampler=c["sampler"])

    def _epoch(self, loader, epoch: int) -> dict:
        """One pass over the training seeds; the epoch's record without metrics."""
        self.model.train()
        loader.set_epoch(epoch)
        times = dict.fromkeys(BREAKDOWN, 0.0)
        total_loss, seen = 0.0, 0
        began = time.perf_counter()
        bar = tqdm(total=len(loader), desc=f"epoch {epoch + 1}/{self.config['epochs']}", unit="batch",
                   disable=not self.config["progress"], leave=False)
        with bar:
            for mb in loader:
                for k in BREAKDOWN:
                    times[k] += mb.timings.get(k, 0.0)
                t = time.perf_counter()
                if mb.x.device != self.device:
                    mb = mb.to(self.device)
                    times["transfer_s"] += self._elapsed(t)
                    t = time.perf_counter()
                loss = self._step(mb)
                times["compute_s"] += self._elapsed(t)
                n = mb.seeds.shape[0]
                total_loss += loss * n
                seen += n
                bar.update()
                bar.set_postfix(loss=f"{total_loss / seen:.4f}",
                                seeds_s=f"{seen / (time.perf_counter() - began):,.0f}")
        return {"epoch": epoch, "loss": total_loss / max(seen, 1), "time_s": time.perf_counter() - began,
                "breakdown": times, "train": None, "valid": None, "test": None}

    def _elapsed(self, t: float) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t

    def _step(self, mb) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(mb.x.float(), mb.blocks)
        loss = F.cross_entropy(logits, mb.y.long(), ignore_index=-1)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _evaluate(self) -> dict:
        """The metric on train/valid/test from exact layer-wise inference."""
        from gnnsys.inference import layerwise_inference
        from gnnsys.metrics import evaluate

        out = layerwise_inference(self.model, self.dataset, self.eval_nodes, self.config["eval_batch_size"],
                                  self.device)
        scores, offset = {}, 0
        for split in ("train", "valid", "test"):
            ids = self.dataset.split(split)
            logits = out[offset:offset + ids.shape[0]]
            offset += ids.shape[0]
            y = self.dataset.labels[ids].long()
            keep = y >= 0
            scores[split] = evaluate(self.config["metric"], logits[keep], y[keep])
        return scores

    def _save(self, epochs_done: int):
        from gnnsys.checkpoint import rng_state, save_checkpoint

        save_checkpoint(self.config["checkpoint_dir"], {
            "epoch": epochs_done, "config": self.config, "history": self.history,
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "rng": rng_state()})

    def _restore(self) -> int:
        """Load the last checkpoint (if any); returns the first epoch to run."""
        from gnnsys.checkpoint import FILE, load_checkpoint, set_rng_state

        state = load_checkpoint(self.config["checkpoint_dir"])
        if state is None:
            return 0
        saved = {k: v for k, v in state["config"].items() if k not in RESUMABLE}
        ours = {k: v for k, v in self.config.items() if k not in RESUMABLE}
        if saved != ours:
            diff = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
            raise DatasetError(Path(self.config["checkpoint_dir"]) / FILE,
                               f"was written with different options ({', '.join(diff)}); cannot resume")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        self.history = list(state["history"])
        return int(state["epoch"])

    def _result(self) -> TrainResult:
        evaluated = [r for r in self.history if r["valid"] is not None]
        best = max(evaluated, key=lambda r: r["valid"], default=None)  # earliest of equal bests
        return TrainResult(config=self.config, metric=self.config["metric"], epochs=self.history,
                           best_epoch=None if best is None else best["epoch"],
                           test=None if best is None else best["test"], machine=machine_info(self.device),
                           model=self.model)
