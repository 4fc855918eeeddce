"""What the peer baselines share: reading a gnnsys dataset directory without
gnnsys (the peers run in their own environments), the benchmark's arguments,
the timed epoch loops and the JSON line a run prints.

The on-disk format is the contract in docs/architecture.md: meta.json, CSC indptr.npy /
indices.npy (sources of node v's in-edges are indices[indptr[v]:indptr[v+1]]),
features.bin with rows row_stride bytes apart, labels.npy and the *_idx.npy
splits. A multi-label dataset (meta labels.task "multilabel", ogbn-proteins)
has labels [N, tasks] of 0/1 with -1 for no label: its loss is binary cross
entropy with logits over the labelled entries and its metric OGB's ROC-AUC
averaged over tasks; otherwise cross entropy and accuracy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

FEATURE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class PeerDataset:
    """A gnnsys dataset in memory as plain tensors: CSC graph, float32 features,
    labels, splits."""

    def __init__(self, path):
        path = Path(path)
        meta = read_meta(path)
        self.path, self.meta, self.name = path, meta, meta["name"]
        self.num_nodes = int(meta["num_nodes"])
        self.indptr = torch.from_numpy(np.load(path / meta["graph"]["indptr"])).long()
        self.indices = torch.from_numpy(np.load(path / meta["graph"]["indices"])).long()
        self.features = read_features(path, meta["features"], self.num_nodes)
        self.labels = torch.from_numpy(np.load(path / meta["labels"]["file"])).long()
        self.num_classes = int(meta["labels"]["num_classes"])  # the task count of a multi-label dataset
        self.splits = {name: torch.from_numpy(np.load(path / file)).long()
                       for name, file in meta["splits"].items()}

    def src_dst(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(src, dst) of every stored edge, from the CSC arrays."""
        dst = torch.repeat_interleave(torch.arange(self.num_nodes), self.indptr.diff())
        return self.indices, dst


class PeerHeteroDataset:
    """A heterogeneous gnnsys dataset (meta kind "hetero", ogbn-mag's) in memory
    as plain tensors: node counts per type, (src, dst) edges per relation
    named "src__rel__dst", float32 features of the featured types, the
    target type's labels and splits."""

    def __init__(self, path):
        path = Path(path)
        meta = read_meta(path)
        if meta.get("kind") != "hetero":
            raise SystemExit(f"{path / 'meta.json'}: not a heterogeneous dataset (kind {meta.get('kind')!r})")
        self.path, self.meta, self.name, self.target = path, meta, meta["name"], meta["target"]
        self.num_nodes = {t: int(d["num_nodes"]) for t, d in meta["node_types"].items()}
        self.features = {t: read_features(path, d["features"], self.num_nodes[t])
                         for t, d in meta["node_types"].items() if d.get("features")}
        self.relations = {}
        for r in meta["relations"]:
            indptr = torch.from_numpy(np.load(path / r["indptr"])).long()
            src = torch.from_numpy(np.load(path / r["indices"])).long()
            dst = torch.repeat_interleave(torch.arange(self.num_nodes[r["dst"]]), indptr.diff())
            self.relations[(r["src"], f"{r['src']}__{r['rel']}__{r['dst']}", r["dst"])] = (src, dst)
        self.labels = torch.from_numpy(np.load(path / meta["labels"]["file"])).long()
        self.num_classes = int(meta["labels"]["num_classes"])
        self.splits = {name: torch.from_numpy(np.load(path / file)).long() for name, file in meta["splits"].items()}


def read_meta(path: Path) -> dict:
    """A gnnsys dataset directory's meta.json; SystemExit when it is not one."""
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise SystemExit(f"{path}: not a prepared gnnsys dataset (no meta.json)")
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != "gnnsys-dataset":
        raise SystemExit(f"{meta_file}: format is {meta.get('format')!r}, expected 'gnnsys-dataset'")
    return meta


def read_features(path: Path, f: dict, num_nodes: int) -> torch.Tensor:
    """A feature file described by `f` (meta's features entry) as a contiguous
    float32 [num_nodes, dim] tensor (the row padding dropped)."""
    dtype = FEATURE_DTYPES[f["dtype"]]
    rows = np.memmap(path / f["file"], dtype=np.uint8, mode="r", shape=(num_nodes, int(f["row_stride"])))
    body = np.array(rows[:, :f["dim"] * dtype.itemsize])  # a copy in memory, as the peers keep features
    return torch.from_numpy(body).view(dtype).reshape(-1, f["dim"]).float()


def parse_args(description: str, extend=None) -> argparse.Namespace:
    """The arguments every system's run takes (same names for all), and
    those `extend(parser)` adds."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("dataset", help="prepared gnnsys dataset directory")
    p.add_argument("--fanouts", default="15,10,5", help="neighbours per layer, seeds outwards (PyG order)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--epochs", type=int, default=1, help="training epochs (0: sampling epoch only)")
    p.add_argument("--eval", action="store_true",
                   help="validation/test accuracy after the last epoch (exact layer-wise full-neighbour inference)")
    p.add_argument("--eval-batch-size", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    if extend is not None:
        extend(p)
    args = p.parse_args()
    args.fanouts = [int(v) for v in args.fanouts.split(",")]
    return args


def seed_everything(seed: int):
    """Seed torch and numpy."""
    torch.manual_seed(seed)
    np.random.seed(seed)


def machine(**versions) -> dict:
    """The machine and versions a run ran on."""
    return {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "platform": platform.platform(), "loadavg": list(os.getloadavg()), **versions}


def warm_up(batches):
    """Draw one minibatch, untimed: JIT compilation, lazy graph formats and the
    page cache then weigh on no system's timed epoch."""
    it = iter(batches)
    next(it, None)
    del it


def timed_epoch(batches, gather, step=None) -> dict:
    """Run one epoch and time its stages.

    batches: the sampler, an iterable of minibatches; gather(batch) -> the
    input features; step(batch, x) -> loss, one model update (None: sampling
    and gathering only).
    Returns {time_s, batches, loss, breakdown: {sample_s, gather_s, compute_s}}.
    """
    sample_s = gather_s = compute_s = 0.0
    losses, n = [], 0
    start = time.perf_counter()
    it = iter(batches)
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        t1 = time.perf_counter()
        sample_s += t1 - t0
        if batch is None:
            break
        x = gather(batch)
        t2 = time.perf_counter()
        gather_s += t2 - t1
        if step is not None:
            losses.append(float(step(batch, x)))
            compute_s += time.perf_counter() - t2
        n += 1
    out = {"time_s": time.perf_counter() - start, "batches": n,
           "breakdown": {"sample_s": sample_s, "gather_s": gather_s, "compute_s": compute_s}}
    if losses:
        out["loss"] = float(np.mean(losses))
    return out


def task_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean training loss: binary cross entropy with logits over the labelled
    (>= 0) entries of multi-label [n, tasks] labels, else cross entropy."""
    if y.dim() == 2:
        known = y >= 0
        return F.binary_cross_entropy_with_logits(logits[known], y[known].float())
    return F.cross_entropy(logits, y)


def roc_auc(scores: np.ndarray, y: np.ndarray) -> float:
    """Binary ROC AUC of `scores` against 0/1 labels `y` (both classes
    present), tied scores counting half: the Mann-Whitney statistic from
    average ranks, what OGB's Evaluator gets from sklearn's roc_auc_score."""
    order = np.argsort(scores, kind="mergesort")
    ordered = scores[order]
    first = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    starts = np.concatenate([np.flatnonzero(first), [len(scores)]])
    average_rank = (starts[:-1] + starts[1:] + 1) / 2  # 1-based ranks of each run of equal scores, averaged
    ranks = np.empty(len(scores))
    ranks[order] = average_rank[np.cumsum(first) - 1]
    positives = y == 1
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def mean_rocauc(scores: torch.Tensor, y: torch.Tensor) -> float:
    """OGB's "rocauc": the ROC AUC of each task whose labelled entries hold
    both 0 and 1, on those entries, averaged over such tasks."""
    scores, y = scores.double().numpy(), y.numpy()
    per_task = []
    for t in range(y.shape[1]):
        labelled = y[:, t] >= 0
        column = y[labelled, t]
        if (column == 1).any() and (column == 0).any():
            per_task.append(roc_auc(scores[labelled, t], column))
    if not per_task:
        raise SystemExit("ROC-AUC is undefined: no task has both a positive and a negative labelled node")
    return float(np.mean(per_task))


def split_scores(logits: torch.Tensor, labels: torch.Tensor, splits: dict) -> dict:
    """{"valid": score, "test": score} of full-graph logits: OGB's ROC-AUC for
    multi-label [N, tasks] labels, else accuracy."""
    if labels.dim() == 2:
        return {name: mean_rocauc(logits[ids], labels[ids]) for name, ids in splits.items()
                if name in ("valid", "test")}
    return {name: float((logits[ids].argmax(-1) == labels[ids]).float().mean()) for name, ids in splits.items()
            if name in ("valid", "test")}


def train_and_report(record: dict, args, model, batches, gather, step, full_logits, labels, splits):
    """The shared end of a peer script: `args.epochs` timed training epochs,
    then (with --eval) valid/test scores of `full_logits()` (split_scores,
    named by record["metric"]), printed as one JSON line. Each epoch but the
    last also prints the record so far, marked "partial": a run killed for
    time leaves the epochs it finished (readers take the last line)."""
    record["epochs"] = []
    for epoch in range(args.epochs):
        model.train()
        record["epochs"].append({"epoch": epoch, **timed_epoch(batches, gather, step)})
        if epoch + 1 < args.epochs:
            emit(record | {"partial": True})
    if args.eval and args.epochs:
        record["metric"] = "rocauc" if labels.dim() == 2 else "acc"
        record.update(split_scores(full_logits(), labels, splits))
    emit(record)


def emit(record: dict):
    """Print one run's result as a JSON line on stdout."""
    print(json.dumps(record), flush=True)
    sys.stdout.flush()
