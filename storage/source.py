"""`FeatureSource`: the contract every feature tier implements (a leaf).

A tier holds or reaches the rows of a [num_nodes, dim] feature table:
the dataset's rows (in memory, memory-mapped, pinned, on a GPU or read from
SSD), or a tier that serves some rows itself and the rest from the tier below
(`base`): a software cache, a victim buffer. Like DGL GraphBolt's `Feature`,
the base class gives every tier the same surface, with defaults for what a
tier has no use for, so that code above never probes a tier with hasattr:

- gather(ids, out=None) -> rows (the one method a tier must implement);
  gather_async(ids, out=None) -> a `GatherHandle`, the one handle type of
  every tier: wait() gives the rows in stream order, check() gives them
  after verifying every id (a tier that defers that check overrides it);
  gather_into(ids, out, at): rows `ids` written at rows `at` of `out`, which
  lets a tier above fill the caller's rows in place (tiers that can,
  override the default's temporary copy);
- set_window(batches): the ids of the batches sampled ahead, passed down
  the stack (a cache uses it for eviction and reading ahead);
- start_epoch(epoch): training's epoch `epoch` comes next (the packed
  tier packs from it; passed down by default);
- stats() / reset_stats(): the tier's own counters (empty by default);
- host_bytes(): {part: bytes} of host memory the tier itself holds now, so a
  stack's memory is the sum over its tiers (storage.base.stack_host_bytes);
- close(): release threads, files and buffers, down the stack;
- name: the key of the tier in stats and epoch records.

A tier's role in a stack is its class: `CacheTier` (a software cache; at
most one per stack) and `VictimTier` (the buffer of a cache's evicted rows,
directly under it); `storage.base.check_stack` reads the roles with
isinstance. `gnnsys.storage` exports the contract.
"""

from __future__ import annotations

import torch


class GatherHandle:
    """A gather that may still be running (the result of `gather_async`).

    Holds the rows (`rows`) or a torch Future of them (`future`): wait() gives
    the rows (blocking on the future), check() gives them after verifying
    every id was inside the table (here the same as wait(); handles of tiers
    that defer the check override it), done() whether wait() would return
    at once."""

    def __init__(self, rows: torch.Tensor | None = None, future: torch.futures.Future | None = None):
        if (rows is None) == (future is None):
            raise ValueError("a GatherHandle holds either rows or a future of them")
        self._rows, self._future = rows, future

    def wait(self) -> torch.Tensor:
        """The rows (waits for the future, if any)."""
        if self._future is not None:
            return self._future.wait()
        assert self._rows is not None  # one of the two, by the constructor
        return self._rows

    def check(self) -> torch.Tensor:
        """The rows, after verifying every id (IndexError otherwise)."""
        return self.wait()

    def done(self) -> bool:
        """Whether the rows are ready."""
        return self._future is None or self._future.done()


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

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> GatherHandle:
        """gather, already complete; asynchronous tiers override it."""
        return GatherHandle(self.gather(ids, out))

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, at: torch.Tensor) -> None:
        """Write row ids[i] into out[at[i]] for every i (`at`: int64 positions
        in `out`, a [rows, dim] tensor of this tier's dtype)."""
        out.index_copy_(0, at.to(out.device), self.gather(ids).to(out.device))

    def set_window(self, batches) -> None:
        """The ids of the batches sampled after the next gather (nearest first);
        a tier that does not use them passes them down."""
        if self.base is not None:
            self.base.set_window(batches)

    def start_epoch(self, epoch: int) -> None:
        """Training's epoch `epoch` is gathered next (a tier that packs
        batches ahead starts from it); a tier that does not use it passes it down."""
        if self.base is not None:
            self.base.start_epoch(epoch)

    def presampled(self, seeds, epoch: int, batch: int) -> dict | None:
        """Training batch `batch` of epoch `epoch` as a tier that samples ahead
        sampled it ({name: array}), if it did and its seeds are `seeds`; None
        (the caller samples it) from a tier that does not, past its base."""
        return None if self.base is None else self.base.presampled(seeds, epoch, batch)

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


class CacheTier(FeatureSource):
    """The role of a software cache of rows over its base (at most one per stack)."""

    name = "cache"


class VictimTier(FeatureSource):
    """The role of a victim buffer: rows its cache evicted, kept while the
    lookahead window needs them (directly under the cache), which offers them
    with `offer`."""

    name = "victim"

    def offer(self, ids, rows: torch.Tensor, next_use) -> None:
        """Take rows `rows` ([n, dim]) of the n `ids` the cache evicted, each
        needed `next_use` batches from now; the buffer keeps those it can."""
        raise NotImplementedError(f"{type(self).__name__} must implement offer")
