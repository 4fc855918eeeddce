"""Full-graph node classification: one process (the reference) or pipelined.

`train_fullgraph(dataset, ...)` trains on the whole graph every epoch (no
sampling): one forward over all nodes, the loss on the training nodes, one
optimiser step. With `workers > 1` (or `chunks > 1`) it runs GNNPipe
(`gnnsys.gnnpipe`): the units are split into one stage per worker and the
graph into chunks. Both return a `gnnsys.train.TrainResult`.

Models are lists of units, each `forward(x_src, block) -> [num_dst, out]`:
- shallow (default below 4 layers): `layers` GNNLayers in -> hidden -> ... -> classes;
- deep (`input_proj=True`, default from 4 layers): an input projection
  (a per-node Linear + ReLU, counted as a unit) to `hidden`, then `layers`
  GNNLayers, hidden ones with `residual` and `norm` ("layer" by default), the
  last one to the classes.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from gnnsys.datasets.errors import DatasetError
from gnnsys.epochs import run_epochs
from gnnsys.samplers import Block

DEEP_FROM = 4  # layers from which input_proj/residual/norm default on


class InputProjection(nn.Module):
    """Per-node Linear -> ReLU -> dropout; reads no neighbours (`local`)."""

    local = True

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.0):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin = nn.Linear(in_dim, out_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x_src: torch.Tensor, block: Block) -> torch.Tensor:
        """Rows of the block's destination nodes."""
        return self.dropout(torch.relu(self.lin(x_src[: block.num_dst])))


def build_units(conv: str, in_dim: int, hidden: int, num_classes: int, layers: int, *, heads: int = 4,
                norm: str | None = None, residual: bool = False, dropout: float = 0.5,
                input_proj: bool = False) -> nn.ModuleList:
    """The model as a list of units (see the module docstring)."""
    from gnnsys.models import GNNLayer

    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    units = []
    width = in_dim
    if input_proj:
        units.append(InputProjection(in_dim, hidden, dropout))
        width = hidden
    dims = [width] + [hidden] * (layers - 1) + [num_classes]
    for i in range(layers):
        last = i == layers - 1
        units.append(GNNLayer(conv, dims[i], dims[i + 1], heads=heads if conv == "gat" else 1,
                              norm=None if last else norm, residual=residual and not last,
                              dropout=0.0 if last else dropout, activation=not last))
    return nn.ModuleList(units)


def full_forward(units, x: torch.Tensor, block: Block) -> torch.Tensor:
    """All units over the whole graph (block = Block.full_graph(...))."""
    for u in units:
        x = u(x, block)
    return x


def split_scores(metric: str, logits: torch.Tensor, labels: torch.Tensor, splits: dict) -> dict:
    """The metric on train/valid/test (unlabelled nodes, -1, skipped)."""
    from gnnsys.metrics import evaluate

    scores = {}
    for name in ("train", "valid", "test"):
        ids = splits[name]
        y = labels[ids].long()
        keep = y >= 0
        scores[name] = evaluate(metric, logits[ids][keep], y[keep])
    return scores


def train_fullgraph(dataset, model: str = "gcn", layers: int = 2, hidden: int = 64, workers: int = 1,
                    chunks: int = 1, epochs: int = 100, lr: float = 0.01, weight_decay: float = 5e-4,
                    dropout: float = 0.5, norm: str | None = "auto", residual: bool | None = None,
                    input_proj: bool | None = None, heads: int = 4, seed: int = 0, eval_every: int = 1,
                    metric: str = "auto", partition: str = "auto", balance: str = "estimate",
                    history_momentum: float = 0.0, fresh_grad_scale: float = 1.0, refresh_every: int = 1,
                    warmup: bool = True,
                    device="cpu", checkpoint_dir=None, resume: bool = False, timeout_s: float = 120.0,
                    progress: bool = True, on_epoch_end=None):
    """Train a GNN ("gcn", "sage" or "gat") on the whole graph.

    workers = chunks = 1: single-process full-graph training (the reference).
    Otherwise GNNPipe with `workers` stages and `chunks` chunks (partition
    "auto"/"metis"/"rcm"/"range"; stages balanced by "estimate"d or
    "measure"d unit cost); warmup fills the historical embeddings with one
    forward pass before training, and again every `refresh_every` epochs
    (default 1, every epoch; 0: never, pure GNNPipe; see gnnsys.gnnpipe on
    staleness); history_momentum / fresh_grad_scale: see gnnsys.gnnpipe.
    norm "auto" = "layer" for deep models, else None.
    checkpoint_dir/resume: per-worker atomic checkpoints after every epoch.
    on_epoch_end(record) is called after each epoch (in every worker, with the
    record's "rank"). Returns a TrainResult (its `model` is the trained units
    for the single-process path, None for the pipeline).
    """
    config = {k: v for k, v in locals().items() if k not in ("dataset", "on_epoch_end")}
    from gnnsys.train import _open_dataset

    dataset = _open_dataset(dataset)
    config = check_config(config, dataset)
    if config["workers"] == 1 and config["chunks"] == 1:
        return _Reference(dataset, config, on_epoch_end).run()
    from gnnsys.gnnpipe import train_pipeline

    return train_pipeline(dataset, config, on_epoch_end)


def check_config(config: dict, dataset) -> dict:
    """Validated, JSON-ready options with the deep-model defaults filled in
    (DatasetError naming the bad option)."""
    from gnnsys.metrics import resolve_metric
    from gnnsys.models import CONVS, NORMS
    from gnnsys.partition import METHODS

    c = dict(config, device=str(config["device"]),
             checkpoint_dir=None if config["checkpoint_dir"] is None else str(config["checkpoint_dir"]))
    c["dataset"] = str(dataset.path) if dataset.path is not None else dataset.name
    deep = c["layers"] >= DEEP_FROM
    c["input_proj"] = deep if c["input_proj"] is None else bool(c["input_proj"])
    c["residual"] = deep if c["residual"] is None else bool(c["residual"])
    c["norm"] = ("layer" if deep else None) if c["norm"] == "auto" else c["norm"]
    if c["model"] not in CONVS:
        raise DatasetError("model", f"must be one of {', '.join(CONVS)}, got {c['model']!r}")
    if c["norm"] not in NORMS:
        raise DatasetError("norm", f"must be 'auto' or one of {NORMS}, got {c['norm']!r}")
    for name in ("layers", "hidden", "workers", "chunks", "epochs", "eval_every", "heads"):
        if int(c[name]) < 1:
            raise DatasetError(name, f"must be >= 1, got {c[name]}")
    units = c["layers"] + int(c["input_proj"])
    if c["workers"] > units:
        raise DatasetError("workers", f"{c['workers']} workers need at least as many units, the model has {units}")
    if c["chunks"] > dataset.num_nodes:
        raise DatasetError("chunks", f"{c['chunks']} chunks for {dataset.num_nodes} nodes")
    if c["norm"] == "batch" and c["chunks"] > 1:
        raise DatasetError("norm", "batch norm would use per-chunk statistics in the pipeline; use 'layer'")
    if c["partition"] not in METHODS:
        raise DatasetError("partition", f"must be one of {METHODS}, got {c['partition']!r}")
    if c["balance"] not in ("estimate", "measure"):
        raise DatasetError("balance", f"must be 'estimate' or 'measure', got {c['balance']!r}")
    if int(c["refresh_every"]) < 0:
        raise DatasetError("refresh_every", f"must be >= 0 (0: never), got {c['refresh_every']}")
    if not 0 <= c["dropout"] < 1 or not 0 <= c["history_momentum"] < 1:
        raise DatasetError("dropout", "dropout and history_momentum must be in [0, 1)")
    if c["resume"] and c["checkpoint_dir"] is None:
        raise DatasetError("resume", "needs a checkpoint directory")
    try:
        c["metric"] = resolve_metric(c["metric"], dataset.num_classes)
    except ValueError as e:
        raise DatasetError("metric", str(e)) from None
    return c


def units_for(config: dict, in_dim: int, num_classes: int) -> nn.ModuleList:
    """The model of a config, initialised from its seed (same on every worker)."""
    torch.manual_seed(config["seed"])
    return build_units(config["model"], in_dim, config["hidden"], num_classes, config["layers"],
                       heads=config["heads"], norm=config["norm"], residual=config["residual"],
                       dropout=config["dropout"], input_proj=config["input_proj"])


def make_result(config: dict, history: list, model=None):
    """A TrainResult from epoch records (best epoch by validation)."""
    from gnnsys.train import TrainResult, machine_info

    evaluated = [r for r in history if r["valid"] is not None]
    best = max(evaluated, key=lambda r: r["valid"], default=None)
    return TrainResult(config=config, metric=config["metric"], epochs=history,
                       best_epoch=None if best is None else best["epoch"],
                       test=None if best is None else best["test"], machine=machine_info(config["device"]),
                       model=model)


class _Reference:
    """Single-process full-graph training."""

    def __init__(self, dataset, config, on_epoch_end=None):
        self.config, self.on_epoch_end = config, on_epoch_end
        self.device = torch.device(config["device"])
        n = dataset.num_nodes
        self.x = dataset.features[torch.arange(n)].float().to(self.device)
        self.labels = dataset.labels.long().to(self.device)
        self.splits = {s: dataset.split(s).to(self.device) for s in ("train", "valid", "test")}
        self.block = Block.full_graph(dataset.indptr, dataset.indices).to(self.device)
        self.units = units_for(config, dataset.num_features, dataset.num_classes).to(self.device)
        self.opt = torch.optim.Adam(self.units.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
        self.history = []

    def run(self):
        from gnnsys.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state

        c = self.config
        start = 0
        if c["resume"] and (state := load_checkpoint(c["checkpoint_dir"])) is not None:
            self.units.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            set_rng_state(state["rng"])
            self.history, start = list(state["history"]), int(state["epoch"])
        def save(epochs_done: int):
            save_checkpoint(c["checkpoint_dir"], {"epoch": epochs_done, "history": self.history, "config": c,
                                                  "model": self.units.state_dict(),
                                                  "optimizer": self.opt.state_dict(), "rng": rng_state()})

        run_epochs(c, start, self.history, self._epoch, self._evaluate, save, self.on_epoch_end,
                   progress=lambda epochs: tqdm(epochs, desc="full-graph", disable=not c["progress"], leave=False))
        return make_result(c, self.history, self.units)

    def _epoch(self, epoch: int) -> dict:
        t = time.perf_counter()
        self.units.train()
        self.opt.zero_grad(set_to_none=True)
        out = full_forward(self.units, self.x, self.block)
        train = self.splits["train"]
        loss = F.cross_entropy(out[train], self.labels[train])
        loss.backward()
        self.opt.step()
        took = time.perf_counter() - t
        return {"epoch": epoch, "loss": loss.item(), "time_s": took, "rank": 0,
                "breakdown": {"sample_s": 0.0, "gather_s": 0.0, "transfer_s": 0.0, "compute_s": took, "wait_s": 0.0},
                "bytes_sent": 0, "train": None, "valid": None, "test": None}

    @torch.no_grad()
    def _evaluate(self) -> dict:
        self.units.eval()
        logits = full_forward(self.units, self.x, self.block).cpu()
        return split_scores(self.config["metric"], logits, self.labels.cpu(),
                            {k: v.cpu() for k, v in self.splits.items()})
