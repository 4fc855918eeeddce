"""`StageLink`: a stage's point-to-point traffic with its neighbours (through `gnnsys.parallel.ranks.Ranks`)."""

from __future__ import annotations

import time

import torch


class StageLink:
    """Point-to-point traffic of one stage with its neighbours (None at the
    ends): chunk activations forward, their gradients back, as `dtype` (bf16
    under bf16-mixed: half the bytes), on the group `ranks` picks for the
    device's tensors; counts bytes and seconds spent waiting."""

    def __init__(self, ranks, prev: int | None, next: int | None, dtype: torch.dtype = torch.float32):
        self.ranks, self.prev, self.next, self.dtype = ranks, prev, next, dtype
        self.device = ranks.device
        self.bytes_sent = 0
        self.wait_s = 0.0
        self._pending = []

    def post_recv(self, peer, rows: int, dim: int, tag: int):
        """Start receiving a [rows, dim] tensor of the link's dtype from `peer`."""
        buf = torch.empty(rows, dim, dtype=self.dtype, device=self.device)
        return buf, self.ranks.irecv(buf, peer, tag)

    def wait(self, handle) -> torch.Tensor:
        """Block until a posted receive completes; returns its tensor."""
        buf, work = handle
        t = time.perf_counter()
        work.wait()
        self.wait_s += time.perf_counter() - t
        return buf

    def send(self, peer, tensor: torch.Tensor, tag: int):
        """Start sending (as the link's dtype); the tensor is kept alive until `flush`."""
        tensor = tensor.detach().to(self.dtype).contiguous()
        self.bytes_sent += tensor.numel() * tensor.element_size()
        self._pending.append((tensor, self.ranks.isend(tensor, peer, tag)))

    def flush(self):
        """Wait for every send started so far."""
        t = time.perf_counter()
        for _, work in self._pending:
            work.wait()
        self._pending.clear()
        self.wait_s += time.perf_counter() - t
