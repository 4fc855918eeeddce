"""`PipelineStage`: one stage's units, its historical embeddings and the
per-chunk forward/backward schedule (GPipe: all forwards, then all backwards)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnnsys.models.units import aggregates
from gnnsys.runtime.precision import Precision


class PipelineStage:
    """The units of one stage and its per-chunk forward/backward schedule.

    units: this stage's modules (forward(x_src, block)); plans: every chunk;
    in_dims: input width of each unit; features: the input features (first
    stage); labels/train ids (last stage); link: StageLink (None when S = 1).
    precision: a gnnsys.runtime.precision.Precision (default "32"): the units run
    under its autocast, history buffers hold its compute dtype, the loss is
    fp32 and scaled by its gradient scaler.
    """

    def __init__(
        self,
        units,
        plans,
        in_dims,
        *,
        num_nodes,
        features=None,
        labels=None,
        train_ids=None,
        link=None,
        num_train=None,
        history_momentum: float = 0.0,
        fresh_grad_scale: float = 1.0,
        device="cpu",
        precision: Precision | None = None,
    ):
        self.units = nn.ModuleList(units)
        self.plans = plans
        self.in_dims = list(in_dims)
        self.link = link
        self.first = link is None or link.prev is None
        self.last = link is None or link.next is None
        self.device = torch.device(device)
        self.precision = precision or Precision("32", self.device)
        self.dtype = self.precision.activation_dtype
        self.history_momentum = history_momentum
        self.fresh_grad_scale = fresh_grad_scale
        self.out_dim = self._out_dim(units[-1])
        self.hist = []
        for j, u in enumerate(units):
            if j == 0 and self.first:
                self.hist.append(features.to(self.device))
            elif aggregates(u):
                self.hist.append(torch.zeros(num_nodes, self.in_dims[j], dtype=self.dtype, device=self.device))
            else:
                self.hist.append(None)
        if self.last:
            self.labels = labels.to(self.device)
            mask = torch.zeros(num_nodes, dtype=torch.bool)
            mask[train_ids] = True
            for p in plans:
                p.train = mask[p.start : p.stop].nonzero().view(-1).to(self.device)
            self.num_train = int(num_train if num_train is not None else mask.sum())

    @staticmethod
    def _out_dim(unit) -> int:
        return int(unit.out_dim)

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
            self.hist[j][p.start : p.stop].mul_(m).add_(value, alpha=1 - m)
        else:
            self.hist[j][p.start : p.stop] = value

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
            with self.precision.autocast():
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
                x = self.hist[0][p.start : p.stop]
            else:
                x = self.link.wait(recv)
                recv = self._recv_next(order, k + 1, self.in_dims[0], 0)
            out = self._chunk_forward(c, x, leaves, outputs, done)
            done[c] = True
            if not self.last:
                self.link.send(self.link.next, out, tag=c)
            else:
                losses[c] = F.cross_entropy(
                    out[p.train].float(), self.labels[p.start : p.stop][p.train], reduction="sum"
                ) / max(self.num_train, 1)
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
        the last stage (of the compute dtype), else None. Not pipelined: stage
        s+1 starts when s is done."""
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
            out = torch.empty(h.shape[0], u.out_dim, dtype=self.dtype, device=self.device)
            for p in self.plans:
                own = h[p.start : p.stop]
                src = torch.cat([own, h[p.halo]]) if aggregates(u) else own
                with self.precision.autocast():
                    out[p.start : p.stop] = u(src, p.block)
            h = out
        if not self.last:
            for c, p in enumerate(self.plans):
                self.link.send(self.link.next, h[p.start : p.stop], tag=c)
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
                        self.precision.scale(losses[c]).backward()
                    else:
                        out.backward(grad.to(out.dtype))
                else:
                    g = leaves[j + 1][c].grad
                    if g is not None:
                        out.backward(g.to(out.dtype))
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
