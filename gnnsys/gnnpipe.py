"""Pipelined layer-parallel full-graph training (GNNPipe).

The model's units (input projection, then the GNN layers) are split into S
contiguous stages, one per worker, balancing their cost with a small dynamic
program (`plan_stages`). The graph's nodes are renumbered so that C chunks are
contiguous id ranges with most of their in-neighbours inside
(`gnnsys.partition`). Every epoch the chunks flow through the stages like
microbatches, in an order reshuffled per epoch from a seed all stages share:
stage s computes chunk k while stage s+1 computes chunk k-1, activations going
forward and gradients going back with `isend`/`irecv`.

Historical embeddings. A unit that aggregates over neighbours needs its input
rows for the chunk's halo (out-of-chunk in-neighbours). Each stage keeps, per
aggregating unit, an N x d buffer of its input for all nodes: rows of chunks
already computed this epoch are fresh (and gradients flow into them), the rest
are the values of the last pass (historical; constants). The first stage
reads the input features, which are never stale. History holds training-mode
values (after dropout), like the neighbour rows single-process training
reads: the training forward stores each chunk's input, and the warm-up
(`exact_pass(refresh=True)`, layer-wise with the current weights, in training
mode) fills every buffer. Evaluation (`exact_pass()`, eval mode) leaves the
history alone, so how often one evaluates never changes training; each stage
draws its dropout masks from its own seed (`stage_seed`), not from the seed
that initialised the weights on every stage. `history_momentum` > 0
smooths the buffer (h <- m h + (1 - m) h_new), PipeGCN's staleness correction;
`fresh_grad_scale` multiplies the gradient sent into fresh out-of-chunk rows
(GNNPipe uses 2: an unbiased estimate under a random chunk order).
`refresh_every` N > 0 repeats the warm-up every N epochs: with N = 1 (the
default) every halo row a chunk reads was computed with the current weights
(only its dropout mask differs from its owner's), at the cost of one
layer-wise forward over all chunks per epoch that is not pipelined (stage
s+1 waits for stage s); N = 0 is GNNPipe as published (history only).

Staleness. Whatever the chunk order, a chunk reads the rows of the chunks
after it as history, so on an undirected graph half of the cut edges carry
values one epoch old (and send no gradient). On sparse graphs (Cora, the
arxiv shape, tolokers as stored) the pipeline stays within a point of
single-process training. On tolokers made undirected (88 neighbours per
node; METIS cuts 33% of the edges at C = 8, 59% at C = 16) a 4-layer GCN
trails it along the whole curve, with or without dropout: -1.7 AUC points
at 300 epochs, mean of 3 seeds, C = 8. Refreshing the history every epoch
cuts that to -0.1 with W = 2 workers, C = 8 and -0.5 with W = 4, C = 16
(means of 5 seeds, benchmarks/results/gnnpipe_convergence.json) for 14%
(W = 2) and 21% (W = 4) more epoch time on 2 cores; fewer chunks close it
too (C = 2: +0.5, but a larger bubble); stale gradients (PipeGCN's, handed
to the owner chunk's next backward) and history smoothing (m = 0.5) did not
help (benchmarks/results/gnnpipe_convergence_tolokers-u_*.json).

Schedule (GPipe): all C forwards, then all C backwards in reverse chunk order;
weight gradients accumulate over the chunks and each stage's optimiser steps
once per epoch, so weights are never stale, only embeddings. Bubble: (S-1) /
(C+S-1) of each phase. Memory per stage: the autograd state of every chunk
for its units (the same activations single-process full-graph training keeps
for those layers), plus one N x d history buffer per aggregating unit, plus
the received chunk inputs. Recomputing a chunk's forward during its backward
(GNNPipe's choice) would drop the first term to one chunk at a time; not done.

Each unit's input is made an autograd leaf per chunk, so one chunk's backward
never traverses another's graph: a chunk's gradient into fresh rows of an
earlier chunk lands in that chunk's leaf and is complete by the time the
reverse order reaches it.
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from gnnsys.datasets.errors import DatasetError
from gnnsys.epochs import run_epochs
from gnnsys.samplers import Block

# ----------------------------------------------------------------------------- stage balancing


def plan_stages(costs, num_stages: int) -> list[int]:
    """Split units with the given costs into `num_stages` non-empty contiguous
    runs minimising the most expensive run; returns the S + 1 boundaries."""
    costs = [float(c) for c in costs]
    n = len(costs)
    if not 1 <= num_stages <= n:
        raise ValueError(f"cannot split {n} layers into {num_stages} stages (need 1 <= stages <= layers)")
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    inf = float("inf")
    # best[s][i]: min over splits of units[:i] into s stages of the max stage cost
    best = np.full((num_stages + 1, n + 1), inf)
    cut = np.zeros((num_stages + 1, n + 1), dtype=np.int64)
    best[0][0] = 0.0
    for s in range(1, num_stages + 1):
        for i in range(s, n + 1):
            for j in range(s - 1, i):
                value = max(best[s - 1][j], prefix[i] - prefix[j])
                if value < best[s][i]:
                    best[s][i], cut[s][i] = value, j
    bounds = [n]
    for s in range(num_stages, 0, -1):
        bounds.append(int(cut[s][bounds[-1]]))
    return bounds[::-1]


def aggregates(unit: nn.Module) -> bool:
    """True when a unit reads neighbours (a GNN layer), False for per-node
    units (`local = True`, e.g. the input projection)."""
    return not getattr(unit, "local", False)


def estimate_unit_costs(units, num_nodes: int, num_edges: int) -> list[float]:
    """Flop-proportional cost of each unit on the whole graph: N x weights for
    the dense part, plus E x d_in for an aggregation."""
    costs = []
    for u in units:
        weights = sum(p.numel() for p in u.parameters())
        d_in = getattr(u, "in_dim", 0)
        costs.append(num_nodes * weights + (num_edges * d_in if aggregates(u) else 0))
    return costs


def measure_unit_costs(units, x: torch.Tensor, block: Block, repeats: int = 3) -> list[float]:
    """Median seconds of forward + backward of each unit on the whole graph
    (the profiler of GNNPipe); x is the first unit's input."""
    costs = []
    h = x
    for u in units:
        times = []
        for _ in range(repeats):
            inp = h.detach().requires_grad_()
            t = time.perf_counter()
            out = u(inp, block)
            out.sum().backward()
            times.append(time.perf_counter() - t)
        u.zero_grad(set_to_none=True)
        costs.append(float(np.median(times)))
        with torch.no_grad():
            h = u(h, block)
    return costs


# ----------------------------------------------------------------------------- chunks


@dataclass
class ChunkPlan:
    """The local graph of one chunk: its own nodes `start:stop` come first
    (local ids 0..n-1), then its halo (out-of-chunk in-neighbours, global ids
    sorted, so grouped by owner chunk). groups: (owner, halo slice, rows in the
    owner chunk, global ids) per owner. train: local rows of training nodes."""

    start: int
    stop: int
    block: Block
    halo: torch.Tensor
    groups: list = field(default_factory=list)
    train: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.stop - self.start


GCN_ADJ_KEY = "gcn_self_loops"  # the key gnnsys.models.gcn_adj_t caches its adjacency under


def build_chunk_plans(indptr, indices, chunk_ptr, gcn: bool = False) -> list[ChunkPlan]:
    """One ChunkPlan per chunk of a relabelled CSC graph. With `gcn`, each
    chunk's block carries the rows of the whole graph's normalised GCN
    adjacency (degrees of the whole graph, not of the chunk)."""
    from gnnsys.models import gcn_adj_t

    indptr, indices = indptr.long(), indices.long()
    full = gcn_adj_t(Block.full_graph(indptr, indices)) if gcn else None
    owner = torch.repeat_interleave(torch.arange(chunk_ptr.shape[0] - 1), chunk_ptr.diff())
    plans = []
    for c in range(chunk_ptr.shape[0] - 1):
        a, b = int(chunk_ptr[c]), int(chunk_ptr[c + 1])
        ip = indptr[a:b + 1] - indptr[a]
        src = indices[indptr[a]:indptr[b]]
        halo = torch.unique(src[(src < a) | (src >= b)])
        block = Block(*_local_csr(ip, src, a, b, halo), num_src=b - a + halo.shape[0], num_dst=b - a)
        if full is not None:
            crow = full.crow_indices()
            lo, hi = int(crow[a]), int(crow[b])
            gip, gcols = _local_csr(crow[a:b + 1] - lo, full.col_indices()[lo:hi], a, b, halo,
                                    values=full.values()[lo:hi])
            block.cache[GCN_ADJ_KEY] = torch.sparse_csr_tensor(gip, gcols[0], gcols[1],
                                                                     size=(b - a, block.num_src))
        groups = []
        if halo.numel():
            own = owner[halo]
            bounds = torch.searchsorted(own, torch.arange(chunk_ptr.shape[0]), right=False).tolist()
            bounds.append(halo.shape[0])
            for o in range(chunk_ptr.shape[0] - 1):
                if bounds[o + 1] > bounds[o]:
                    g = halo[bounds[o]:bounds[o + 1]]
                    groups.append((o, slice(bounds[o], bounds[o + 1]), g - int(chunk_ptr[o]), g))
        plans.append(ChunkPlan(a, b, block, halo, groups))
    return plans


def _local_csr(ip, src, a, b, halo, values=None):
    """Rows' sources renamed to local ids (own first, then halo), sorted per row."""
    inside = (src >= a) & (src < b)
    local = torch.where(inside, src - a, (b - a) + torch.searchsorted(halo, src))
    rows = torch.repeat_interleave(torch.arange(ip.shape[0] - 1), ip.diff())
    order = torch.argsort(rows * (b - a + halo.shape[0] + 1) + local)
    if values is None:
        return ip, local[order]
    return ip, (local[order], values[order])


# ----------------------------------------------------------------------------- communication


class StageLink:
    """Point-to-point traffic of one stage with its neighbours (None at the
    ends): chunk activations forward, their gradients back; counts bytes and
    seconds spent waiting."""

    def __init__(self, prev: int | None, next: int | None, device):
        self.prev, self.next, self.device = prev, next, device
        self.bytes_sent = 0
        self.wait_s = 0.0
        self._pending = []

    def post_recv(self, peer, rows: int, dim: int, tag: int):
        """Start receiving a [rows, dim] float tensor from `peer`."""
        buf = torch.empty(rows, dim, device=self.device)
        return buf, dist.irecv(buf, src=peer, tag=tag)

    def wait(self, handle) -> torch.Tensor:
        """Block until a posted receive completes; returns its tensor."""
        buf, work = handle
        t = time.perf_counter()
        work.wait()
        self.wait_s += time.perf_counter() - t
        return buf

    def send(self, peer, tensor: torch.Tensor, tag: int):
        """Start sending; the tensor is kept alive until `flush`."""
        tensor = tensor.detach().contiguous()
        self.bytes_sent += tensor.numel() * tensor.element_size()
        self._pending.append((tensor, dist.isend(tensor, dst=peer, tag=tag)))

    def flush(self):
        """Wait for every send started so far."""
        t = time.perf_counter()
        for _, work in self._pending:
            work.wait()
        self._pending.clear()
        self.wait_s += time.perf_counter() - t


# ----------------------------------------------------------------------------- one stage


class PipelineStage:
    """The units of one stage and its per-chunk forward/backward schedule.

    units: this stage's modules (forward(x_src, block)); plans: every chunk;
    in_dims: input width of each unit; features: the input features (first
    stage); labels/train ids (last stage); link: StageLink (None when S = 1).
    """

    def __init__(self, units, plans, in_dims, *, num_nodes, features=None, labels=None, train_ids=None,
                 link=None, num_train=None, history_momentum: float = 0.0, fresh_grad_scale: float = 1.0,
                 device="cpu"):
        self.units = nn.ModuleList(units)
        self.plans = plans
        self.in_dims = list(in_dims)
        self.link = link
        self.first = link is None or link.prev is None
        self.last = link is None or link.next is None
        self.device = torch.device(device)
        self.history_momentum = history_momentum
        self.fresh_grad_scale = fresh_grad_scale
        self.out_dim = self._out_dim(units[-1])
        self.hist = []
        for j, u in enumerate(units):
            if j == 0 and self.first:
                self.hist.append(features.to(self.device))
            elif aggregates(u):
                self.hist.append(torch.zeros(num_nodes, self.in_dims[j], device=self.device))
            else:
                self.hist.append(None)
        if self.last:
            self.labels = labels.to(self.device)
            mask = torch.zeros(num_nodes, dtype=torch.bool)
            mask[train_ids] = True
            for p in plans:
                p.train = mask[p.start:p.stop].nonzero().view(-1).to(self.device)
            self.num_train = int(num_train if num_train is not None else mask.sum())

    @staticmethod
    def _out_dim(unit) -> int:
        return int(getattr(unit, "out_dim"))

    # -- forward ------------------------------------------------------------------
    def _source_rows(self, j, c, own, leaves, done):
        """Input rows of unit j for chunk c's block: own rows, then the halo
        (fresh rows of chunks done this epoch, else history)."""
        plan = self.plans[c]
        if not plan.groups:
            return own
        parts = [own]
        for o, _, local, glob in plan.groups:
            if done[o]:
                rows = leaves[j][o][local]
                if self.fresh_grad_scale != 1.0:
                    rows = rows + (self.fresh_grad_scale - 1.0) * (rows - rows.detach())
            else:
                rows = self.hist[j][glob]
            parts.append(rows)
        return torch.cat(parts)

    def _remember(self, j, c, value):
        """Store chunk c's input of unit j in the history (smoothed)."""
        if self.hist[j] is None or (j == 0 and self.first):
            return
        p = self.plans[c]
        value = value.detach()
        if self.history_momentum > 0:
            m = self.history_momentum
            self.hist[j][p.start:p.stop].mul_(m).add_(value, alpha=1 - m)
        else:
            self.hist[j][p.start:p.stop] = value

    def _chunk_forward(self, c, x, leaves, outputs, done):
        """Run chunk c through this stage's units, keeping the autograd state;
        returns the stage output."""
        h = x
        for j, u in enumerate(self.units):
            if j > 0 or not self.first:
                h = h.detach().requires_grad_()
            leaves[j][c] = h
            self._remember(j, c, h)
            src = self._source_rows(j, c, h, leaves, done) if aggregates(u) else h
            outputs[j][c] = h = u(src, self.plans[c].block)
        return h

    def _recv_next(self, order, k, dim, base_tag, backward=False):
        if k >= len(order):
            return None
        peer = self.link.next if backward else self.link.prev
        c = order[k]
        return self.link.post_recv(peer, self.plans[c].size, dim, base_tag + c)

    def forward_pass(self, order):
        """Training forward of every chunk in `order` (pipelined); returns the
        autograd state (leaves, outputs, losses) for backward_pass."""
        C = len(self.plans)
        leaves = [[None] * C for _ in self.units]
        outputs = [[None] * C for _ in self.units]
        done = [False] * C
        losses = [None] * C
        self.units.train()
        recv = None if self.first else self._recv_next(order, 0, self.in_dims[0], 0)
        for k, c in enumerate(order):
            p = self.plans[c]
            if self.first:
                x = self.hist[0][p.start:p.stop]
            else:
                x = self.link.wait(recv)
                recv = self._recv_next(order, k + 1, self.in_dims[0], 0)
            out = self._chunk_forward(c, x, leaves, outputs, done)
            done[c] = True
            if not self.last:
                self.link.send(self.link.next, out, tag=c)
            else:
                losses[c] = F.cross_entropy(out[p.train], self.labels[p.start:p.stop][p.train],
                                            reduction="sum") / max(self.num_train, 1)
        if self.link is not None:
            self.link.flush()
        return leaves, outputs, losses

    @torch.no_grad()
    def exact_pass(self, refresh: bool = False):
        """Layer-wise pass over all chunks: unit j runs on every chunk before
        unit j+1, so every neighbour row is exact for the current weights.
        refresh=False: evaluation (eval mode), the history is left alone.
        refresh=True: the warm-up, in training mode (dropout on), storing
        every unit's input in the history. Returns the logits of all nodes on
        the last stage, else None. Not pipelined: stage s+1 starts when s is done."""
        C = len(self.plans)
        self.units.train(refresh)
        if not self.first:
            handles = [self._recv_next(list(range(C)), c, self.in_dims[0], 0) for c in range(C)]
            h = torch.cat([self.link.wait(hd) for hd in handles])
        else:
            h = self.hist[0]
        for j, u in enumerate(self.units):
            if refresh and self.hist[j] is not None and not (j == 0 and self.first):
                self.hist[j].copy_(h)
            out = torch.empty(h.shape[0], getattr(u, "out_dim"), device=self.device)
            for c, p in enumerate(self.plans):
                own = h[p.start:p.stop]
                src = torch.cat([own, h[p.halo]]) if aggregates(u) else own
                out[p.start:p.stop] = u(src, p.block)
            h = out
        if not self.last:
            for c, p in enumerate(self.plans):
                self.link.send(self.link.next, h[p.start:p.stop], tag=c)
            self.link.flush()
            return None
        return h

    # -- backward -----------------------------------------------------------------
    def backward_pass(self, order, state) -> float:
        """Backward every chunk in reverse `order`; returns the summed loss
        (last stage) or 0. Parameter gradients accumulate in .grad."""
        leaves, outputs, losses = state
        rev = list(reversed(order))
        C = len(self.plans)
        recv = None if self.last else self._recv_next(rev, 0, self.out_dim, C, backward=True)
        total = 0.0
        for k, c in enumerate(rev):
            if self.last:
                grad = None
                total += losses[c].item()
            else:
                grad = self.link.wait(recv)
                recv = self._recv_next(rev, k + 1, self.out_dim, C, backward=True)
            for j in reversed(range(len(self.units))):
                out = outputs[j][c]
                if j == len(self.units) - 1:
                    if self.last:
                        losses[c].backward()
                    else:
                        out.backward(grad)
                else:
                    g = leaves[j + 1][c].grad
                    if g is not None:
                        out.backward(g)
            if not self.first:
                g = leaves[0][c].grad
                self.link.send(self.link.prev, g if g is not None else torch.zeros_like(leaves[0][c]), tag=C + c)
        if self.link is not None:
            self.link.flush()
        return total


def stage_seed(seed: int, rank: int) -> int:
    """The seed of stage `rank`'s dropout masks. Every stage initialises the
    whole model from `seed` (identical weights); drawing dropout from that same
    generator state would give the units of different stages the same masks
    for the same chunk, correlated across layers unlike in one process."""
    return (seed * 1_000_003 + rank + 1) % (1 << 63)


def epoch_order(num_chunks: int, seed: int, epoch: int) -> list[int]:
    """The chunk order of an epoch: a permutation drawn from (seed, epoch),
    identical on every stage."""
    order = list(range(num_chunks))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


# ----------------------------------------------------------------------------- driver


@dataclass
class PipeSetup:
    """Everything a worker needs, computed once: the relabelled graph (new ids
    = chunk order), features/labels/splits in new ids, chunk and stage
    boundaries, the permutation (new -> old) and its partition method."""

    indptr: torch.Tensor
    indices: torch.Tensor
    features: torch.Tensor
    labels: torch.Tensor
    splits: dict
    num_classes: int
    chunk_ptr: torch.Tensor
    stage_ptr: list
    perm: torch.Tensor
    method: str
    unit_costs: list


def prepare_setup(dataset, config: dict) -> PipeSetup:
    """Partition, relabel and balance for a config of train_fullgraph."""
    from gnnsys.fullgraph import units_for
    from gnnsys.partition import chunk_graph, relabel_csc

    part = chunk_graph(dataset.indptr, dataset.indices, config["chunks"], config["partition"], config["seed"])
    indptr, indices = relabel_csc(dataset.indptr, dataset.indices, part.perm)
    inv = part.inverse()
    features = dataset.features[part.perm].float()
    units = units_for(config, dataset.num_features, dataset.num_classes)
    if config["balance"] == "measure":
        costs = measure_unit_costs(units, features, Block.full_graph(indptr, indices))
    else:
        costs = estimate_unit_costs(units, dataset.num_nodes, dataset.num_edges)
    return PipeSetup(indptr, indices, features, dataset.labels.long()[part.perm],
                     {s: inv[dataset.split(s)] for s in ("train", "valid", "test")}, dataset.num_classes,
                     part.chunk_ptr, plan_stages(costs, config["workers"]), part.perm, part.method, costs)


class _StageRun:
    """The epochs of one stage (rank) of a pipelined run; `world` 1 runs the
    whole model in this process without communication."""

    def __init__(self, setup: PipeSetup, config: dict, rank: int, world: int, device, on_epoch_end=None):
        from gnnsys.fullgraph import units_for

        self.setup, self.config, self.rank, self.world = setup, config, rank, world
        self.on_epoch_end = on_epoch_end
        self.device = torch.device(device)
        units = units_for(config, setup.features.shape[1], setup.num_classes)
        torch.manual_seed(stage_seed(config["seed"], rank))
        lo, hi = setup.stage_ptr[rank], setup.stage_ptr[rank + 1]
        mine = [u.to(self.device) for u in units[lo:hi]]
        plans = build_chunk_plans(setup.indptr, setup.indices, setup.chunk_ptr, gcn=config["model"] == "gcn")
        for p in plans:
            p.block = _block_to(p.block, self.device)
        link = None
        if world > 1:
            link = StageLink(rank - 1 if rank > 0 else None, rank + 1 if rank < world - 1 else None, self.device)
        self.stage = PipelineStage(mine, plans, [u.in_dim for u in mine], num_nodes=setup.features.shape[0],
                                   features=setup.features if rank == 0 else None,
                                   labels=setup.labels if rank == world - 1 else None,
                                   train_ids=setup.splits["train"], link=link,
                                   history_momentum=config["history_momentum"],
                                   fresh_grad_scale=config["fresh_grad_scale"], device=self.device)
        self.opt = torch.optim.Adam(self.stage.units.parameters(), lr=config["lr"],
                                    weight_decay=config["weight_decay"])
        self.history = []

    @property
    def last(self) -> bool:
        return self.rank == self.world - 1

    def run(self) -> list:
        """Train; returns the epoch records (complete on the last stage)."""
        c = self.config
        start = self._restore() if c["resume"] else 0
        if start == 0 and c["warmup"]:
            self.stage.exact_pass(refresh=True)
        return run_epochs(c, start, self.history, self._epoch, self._evaluate, self._save, self.on_epoch_end,
                          progress=lambda epochs: tqdm(epochs, desc=f"gnnpipe stage {self.rank}", leave=False,
                                                       disable=not (c["progress"] and self.last)))

    def _epoch(self, epoch: int) -> dict:
        link = self.stage.link
        sent0, wait0 = (link.bytes_sent, link.wait_s) if link else (0, 0.0)
        order = epoch_order(len(self.stage.plans), self.config["seed"], epoch)
        t = time.perf_counter()
        every = self.config["refresh_every"]
        if every and epoch > 0 and epoch % every == 0:
            self.stage.exact_pass(refresh=True)
        self.opt.zero_grad(set_to_none=True)
        state = self.stage.forward_pass(order)
        loss = self.stage.backward_pass(order, state)
        del state
        self.opt.step()
        took = time.perf_counter() - t
        sent, wait = (link.bytes_sent - sent0, link.wait_s - wait0) if link else (0, 0.0)
        totals = self._all_reduce([loss, float(sent)], dist.ReduceOp.SUM)
        slowest = self._all_reduce([took, wait], dist.ReduceOp.MAX)
        return {"epoch": epoch, "loss": totals[0], "time_s": slowest[0], "rank": self.rank,
                "breakdown": {"sample_s": 0.0, "gather_s": 0.0, "transfer_s": 0.0,
                              "compute_s": took - wait, "wait_s": wait},
                "bytes_sent": int(totals[1]), "train": None, "valid": None, "test": None}

    def _all_reduce(self, values, op):
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=op)
        return t.tolist()

    @torch.no_grad()
    def _evaluate(self) -> dict:
        from gnnsys.fullgraph import split_scores

        logits = self.stage.exact_pass()
        if not self.last:
            return {}
        return split_scores(self.config["metric"], logits.cpu(), self.setup.labels, self.setup.splits)

    # -- checkpoints: worker R keeps the last two epochs in slot0/slot1 --------------
    def _slot(self, epoch: int):
        from pathlib import Path

        return Path(self.config["checkpoint_dir"]) / f"worker{self.rank}" / f"slot{epoch % 2}"

    def _save(self, epochs_done: int):
        from gnnsys.checkpoint import rng_state, save_checkpoint

        save_checkpoint(self._slot(epochs_done), {
            "epoch": epochs_done, "config": _resume_key(self.config), "stage_ptr": self.setup.stage_ptr,
            "history": self.history, "units": self.stage.units.state_dict(), "optimizer": self.opt.state_dict(),
            "hist": [h if j > 0 or self.rank > 0 else None for j, h in enumerate(self.stage.hist)],
            "rng": rng_state()})

    def _restore(self) -> int:
        """Load the newest epoch that every worker has saved; 0 if none."""
        from gnnsys.checkpoint import FILE, load_checkpoint, set_rng_state

        states = [s for s in (load_checkpoint(self._slot(e)) for e in (0, 1)) if s is not None]
        mine = max((s["epoch"] for s in states), default=0)
        common = int(self._all_reduce([float(mine)], dist.ReduceOp.MIN)[0])
        if common == 0:
            return 0
        state = next((s for s in states if s["epoch"] == common), None)
        if state is None:
            raise DatasetError(self._slot(common) / FILE, f"worker {self.rank} has no checkpoint of epoch {common}")
        if state["config"] != _resume_key(self.config) or state["stage_ptr"] != self.setup.stage_ptr:
            raise DatasetError(self._slot(common) / FILE, "was written with different options; cannot resume")
        self.stage.units.load_state_dict(state["units"])
        self.opt.load_state_dict(state["optimizer"])
        for j, h in enumerate(state["hist"]):
            if h is not None:
                self.stage.hist[j].copy_(h)
        set_rng_state(state["rng"])
        self.history = list(state["history"])
        return common


def _resume_key(config: dict) -> dict:
    from gnnsys.train import RESUMABLE

    return {k: v for k, v in config.items() if k not in RESUMABLE and k not in ("timeout_s",)}


def _block_to(block: Block, device) -> Block:
    """block.to(device) keeping the precomputed GCN adjacency."""
    moved = block.to(device)
    if GCN_ADJ_KEY in block.cache:
        moved.cache[GCN_ADJ_KEY] = block.cache[GCN_ADJ_KEY].to(device)
    return moved


def pipeline_worker(ctx, setup: PipeSetup, config: dict, result_path, on_epoch_end=None):
    """One worker of a pipelined run (for gnnsys.distributed.launch /
    run_from_env). setup: a PipeSetup, or under torchrun the dataset path
    (rank 0 prepares the setup and broadcasts it). The last stage writes the
    epoch records (JSON) to result_path."""
    import json

    from gnnsys.datasets.atomic import atomic_write_bytes

    if not isinstance(setup, PipeSetup):  # torchrun: a dataset path; rank 0 prepares, all share
        from gnnsys.train import _open_dataset

        box = [prepare_setup(_open_dataset(setup), config) if ctx.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        setup = box[0]
    torch.set_num_threads(max(1, int(config.get("threads_per_worker") or torch.get_num_threads())))
    history = _StageRun(setup, config, ctx.rank, ctx.world_size, ctx.device, on_epoch_end).run()
    if ctx.rank == ctx.world_size - 1 and result_path is not None:
        atomic_write_bytes(result_path, json.dumps(history).encode())


def train_pipeline(dataset, config: dict, on_epoch_end=None):
    """GNNPipe training for train_fullgraph (config already checked)."""
    import json
    import tempfile
    from pathlib import Path

    from gnnsys.distributed import launch
    from gnnsys.fullgraph import make_result

    if "TORCHELASTIC_RUN_ID" in os.environ:
        return _train_under_torchrun(dataset, config, on_epoch_end)
    setup = prepare_setup(dataset, config)
    config = dict(config, partition_used=setup.method, stage_ptr=setup.stage_ptr,
                  chunk_sizes=setup.chunk_ptr.diff().tolist())
    if config["workers"] == 1:
        history = _StageRun(setup, config, 0, 1, config["device"], on_epoch_end).run()
        return make_result(config, history)
    with tempfile.TemporaryDirectory(prefix="gnnpipe-") as tmp:
        out = Path(tmp) / "history.json"
        run_config = dict(config, threads_per_worker=max(1, torch.get_num_threads() // config["workers"]))
        launch(pipeline_worker, config["workers"], (setup, run_config, str(out), on_epoch_end),
               device=config["device"], timeout_s=config["timeout_s"])
        history = json.loads(out.read_text())
    return make_result(config, history)


def _train_under_torchrun(dataset, config: dict, on_epoch_end=None):
    """This process is one of the W workers torchrun started (env://
    rendezvous, possibly across machines): rank 0 prepares the setup and
    broadcasts it. Returns the TrainResult on the last stage, None elsewhere."""
    import json
    import tempfile
    from pathlib import Path

    from gnnsys.distributed import run_from_env
    from gnnsys.fullgraph import make_result

    world = int(os.environ.get("WORLD_SIZE", 0))
    if world != config["workers"]:
        raise DatasetError("workers", f"{config['workers']} requested, but torchrun started {world} processes")
    if dataset.path is None:
        raise DatasetError("dataset", "under torchrun every worker opens the dataset: pass a prepared directory")
    with tempfile.TemporaryDirectory(prefix="gnnpipe-") as tmp:
        out = Path(tmp) / "history.json"
        run_config = dict(config, threads_per_worker=torch.get_num_threads())
        run_from_env(pipeline_worker, str(dataset.path), run_config, str(out), on_epoch_end,
                     device=config["device"], timeout_s=config["timeout_s"])
        return make_result(config, json.loads(out.read_text())) if out.exists() else None
