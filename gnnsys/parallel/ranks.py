"""`Ranks`: how the processes of a run talk to each other, decided in one place.

A run has W ranks (W = 1: one process, no process group). `Ranks` owns:

- each rank's device: `rank_device` gives cuda:LOCAL_RANK for any CUDA
  device asked for ("cuda", "cuda:0", ...), so the ranks on one machine never
  share a GPU;
- the groups: the default group (NCCL on CUDA, gloo on the CPU) for tensors
  on the rank's device, and a gloo group for host tensors (`host_group`; the
  default group itself when that is gloo). `group_for(tensor)` is the rule:
  a host tensor never goes to NCCL, a CUDA tensor never to gloo;
- the collective helpers every trainer calls (`all_reduce`, `mean`,
  `all_gather_rows`, objects, point-to-point), which are the identity (or
  nothing) when W = 1, so callers need no `world_size > 1` branch;
- `new_host_group()`: the gloo group of the shared feature cache. Its
  exchange thread runs collectives on that group only, on host tensors, while
  the training thread drives DDP's all-reduce on the default group: no two
  threads ever use an NCCL communicator at once (NCCL does not promise
  progress for that).

Collective names that differ between torch releases are called in
`all_gather_into` only. This module imports nothing from the project.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}


def rank_device(device: str | torch.device, local_rank: int) -> torch.device:
    """The device of the rank with `local_rank` on its machine: cuda:LOCAL_RANK
    (modulo the GPUs present) for a CUDA device, otherwise `device`."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    return dev


def backend_for(device: str | torch.device) -> str:
    """The backend of the default group: "nccl" for CUDA devices, else "gloo"."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def all_gather_into(out: torch.Tensor, tensor: torch.Tensor, group=None) -> None:
    """All-gather `tensor` of every rank into `out` ([W * len, ...], rank
    order): the one call of a collective whose name changed across torch
    releases (`all_gather_single` from torch 2.13, which deprecates
    `all_gather_into_tensor`; the list form where neither exists)."""
    gather = getattr(dist, "all_gather_single", None) or getattr(dist, "all_gather_into_tensor", None)
    if gather is not None:
        gather(out, tensor, group=group)
    else:
        dist.all_gather(list(out.chunk(dist.get_world_size(group))), tensor, group=group)


class Ranks:
    """The ranks of a run as this process sees them: `rank` of `world_size`,
    its `device`, the `backend` of the default group and the gloo `host_group`
    (see the module doc). Build with `single(device)` for one process, or
    `join(...)` after init_process_group on every rank."""

    def __init__(self, rank: int, world_size: int, device, backend: str, host_group=None):
        self.rank, self.world_size = rank, world_size
        self.device, self.backend = torch.device(device), backend
        self.host_group = host_group

    @classmethod
    def single(cls, device="cpu") -> Ranks:
        """One process: every helper is the identity."""
        return cls(0, 1, device, backend_for(device))

    @classmethod
    def join(cls, rank: int, world_size: int, device, backend: str) -> Ranks:
        """The ranks of the initialised default group (of `backend`); with
        NCCL, a gloo group for host tensors is made (a collective: every rank
        calls it)."""
        host = dist.new_group(backend="gloo") if backend != "gloo" else None
        return cls(rank, world_size, device, backend, host)

    @property
    def multi(self) -> bool:
        """True with more than one rank."""
        return self.world_size > 1

    def group_for(self, tensor: torch.Tensor):
        """The group `tensor` travels on: the host group for a tensor in host
        memory, the default group (None) for one on a GPU."""
        return self.host_group if tensor.device.type == "cpu" else None

    def new_host_group(self):
        """A new gloo group of all ranks, for host tensors only (collective)."""
        return dist.new_group(list(range(self.world_size)), backend="gloo")

    def all_reduce(self, values: list, op: str = "sum") -> list:
        """`values` (floats) reduced elementwise over the ranks with `op`
        ("sum", "max", "min"), on the host group."""
        if op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
        if not self.multi:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, OPS[op]), group=self.group_for(t))
        return t.tolist()

    def mean(self, value: float) -> float:
        """The mean of `value` over the ranks."""
        return self.all_reduce([float(value)])[0] / self.world_size

    def all_gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's `rows` (equal shapes) concatenated in rank order, on
        rows' device; `rows` itself with one rank."""
        if not self.multi:
            return rows
        rows = rows.contiguous()
        out = torch.empty((rows.shape[0] * self.world_size, *rows.shape[1:]), dtype=rows.dtype, device=rows.device)
        all_gather_into(out, rows, group=self.group_for(rows))
        return out

    def all_gather_object(self, obj) -> list:
        """Every rank's picklable `obj`, in rank order (on the host group)."""
        if not self.multi:
            return [obj]
        everyone = [None] * self.world_size
        dist.all_gather_object(everyone, obj, group=self.host_group)
        return everyone

    def broadcast_object(self, obj, src: int = 0):
        """Rank `src`'s picklable `obj`, on every rank (on the host group)."""
        if not self.multi:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.host_group)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank gets here (on the host group)."""
        if self.multi:
            dist.barrier(group=self.host_group)

    def isend(self, tensor: torch.Tensor, peer: int, tag: int):
        """Start sending `tensor` to rank `peer`; returns the work to wait on."""
        return dist.isend(tensor, dst=peer, group=self.group_for(tensor), tag=tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int):
        """Start receiving into `tensor` from rank `peer`; returns the work to wait on."""
        return dist.irecv(tensor, src=peer, group=self.group_for(tensor), tag=tag)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DistributedDataParallel over `model` (gradients averaged on the
        default group) with several ranks, else `model`."""
        if not self.multi:
            return model
        ids = [self.device] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def __repr__(self):
        return f"Ranks(rank {self.rank} of {self.world_size}, {self.device}, {self.backend})"
