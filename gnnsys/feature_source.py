"""`FeatureSource`: the contract every feature tier implements (a leaf).

A tier holds or reaches the rows of a [num_nodes, dim] feature table:
the dataset's rows (in memory, memory-mapped, pinned, on a GPU or read from
SSD), or a tier that serves some rows itself and the rest from the tier below
(`base`): a software cache, a victim buffer. Like DGL GraphBolt's `Feature`,
the base class gives every tier the same surface, with defaults for what a
tier has no use for, so that code above never probes a tier with hasattr:

- gather(ids, out=None) -> rows (the one method a tier must implement);
  gather_async(ids, out=None) -> a handle whose wait() gives them;
  gather_into(ids, out, at): rows `ids` written at rows `at` of `out`, which
  lets a tier above fill the caller's rows in place (tiers that can,
  override the default's temporary copy);
- set_window(batches): the ids of the batches sampled ahead, passed down
  the stack (a cache uses it for eviction and reading ahead);
- stats() / reset_stats(): the tier's own counters (empty by default);
- host_bytes(): {part: bytes} of host memory the tier itself holds now, so a
  stack's memory is the sum over its tiers (storage.base.stack_host_bytes);
- close(): release threads, files and buffers, down the stack;
- name: the key of the tier in stats and epoch records.

It lives in a leaf module, below `datasets`, because the dataset's own
`RowTable` is the bottom tier of every stack; `gnnsys.storage` exports it.
"""

from __future__ import annotations

import torch

from gnnsys.ids import completed


class FeatureSource:
    """Base class of the feature tiers (see the module docstring).

    Subclasses set `shape` ((num_nodes, dim)), `dtype`, `device` and `base`
    (the tier below, None at the bottom) and implement `gather`: rows `ids`
    (an int32/int64 tensor) as a [len(ids), dim] tensor on `device`, written
    into `out` when given; IndexError for an id outside [0, num_nodes).
    """

    name = "rows"
    base: FeatureSource | None = None
    shape: tuple
    dtype: torch.dtype
    device = torch.device("cpu")

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement gather")

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None):
        """gather, already complete (a torch Future); asynchronous tiers override it."""
        return completed(self.gather(ids, out))

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        """Write row ids[i] into out[at[i]] for every i (`at`: int64 positions
        in `out`, a [rows, dim] tensor of this tier's dtype)."""
        out.index_copy_(0, at.to(out.device), self.gather(ids).to(out.device))

    def set_window(self, batches) -> None:
        """The ids of the batches sampled after the next gather (nearest first);
        a tier that does not use them passes them down."""
        if self.base is not None:
            self.base.set_window(batches)

    def stats(self) -> dict:
        """This tier's counters since the last reset_stats ({} when it counts nothing)."""
        return {}

    def reset_stats(self) -> None:
        """Zero this tier's counters."""

    def host_bytes(self) -> dict:
        """{part: bytes} of host memory this tier itself holds now (not its base's)."""
        return {}

    def close(self) -> None:
        """Release this tier's threads, files and buffers, then the base's."""
        if self.base is not None:
            self.base.close()

    def __len__(self) -> int:
        return self.shape[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
