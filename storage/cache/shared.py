"""`SharedCachedFeatures`: the caches of the ranks of a torch.distributed group as one cache.

Every rank builds the same `SharedCachedFeatures(base, capacity, policy)` over
its own copy of the lower tiers (`base`: host table, victim buffer, SSD, ...).
Rows are owned by ranks under the rule of ownership.py (the hottest
`replicate_frac` of every rank's slots replicated, the next hottest rows
striped round-robin, the rest by id % W); a rank's own cache is a
`CachedFeatures` over the rows it owns only, so whatever its policy admits or
evicts, it never holds a row another rank owns. A gather:

1. checks and de-duplicates the ids; replicated and own rows are served
   locally, the others are grouped by owner (`Ownership.route`);
2. all ranks exchange their per-owner counts (`all_gather`, so every rank
   knows the whole W x W table), then the requested ids and the rows
   (`all_to_all_single`; skipped when nobody asks a peer for anything);
3. each owner serves its own ids and its peers' requests from its cache in
   one access of their union, filling misses from its own base
   (`serve_step`), and returns each peer's rows with the count of hits;
4. rows are assembled in the caller's order (into `out` when given).

A gather is a collective on a gloo process group of its own (made in
__init__ unless `group` is given; another backend is refused), so it never
interleaves with DDP's gradient all-reduce on the default group: every rank
must make the same sequence of gather/gather_async calls (ids may differ,
empty included). The wire carries host tensors only (a GPU base's rows cross
in one copy each way per gather): the exchange thread never drives an NCCL
communicator beside DDP's (NCCL promises no progress for two threads at once)
and no count or id waits on the GPU. On a CUDA base the exchange runs on its
own stream after the caller's (events), and the handle's wait() orders the
caller's current stream after it (`storage.cuda_stream.StreamHandle`).
"""

from __future__ import annotations

import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.distributed as dist

from gnnsys.errors import ConfigError
from gnnsys.ids import check_ids, distinct_inverse, gather_output, sorted_distinct
from gnnsys.storage.source import CacheTier, FeatureSource, GatherHandle

from ..cuda_stream import CudaStreams, StreamHandle
from .cached import CachedFeatures
from .ownership import Ownership, exchange_bytes, serve_step, shard_policy

STATS = ("requested", "distinct", "local_hits", "remote_hits", "misses", "bytes_sent", "bytes_received", "exchange_s")


class ShardRows(FeatureSource):
    """The rows `ids` (sorted int64 global ids, a numpy array) of `base` as a
    FeatureSource of len(ids) rows: local row i is base row ids[i]. A view:
    the shared cache that made it closes the base, not this."""

    name = "shard"

    def __init__(self, base, ids: np.ndarray):
        self.base = base
        self.ids = torch.from_numpy(ids)
        self.shape = (ids.shape[0], base.shape[1])
        self.dtype, self.device = base.dtype, base.device

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Local rows `ids` read from the base."""
        ids = check_ids(torch.as_tensor(ids), self.shape[0])
        return self.base.gather(self.ids[ids.cpu().long()], out=out)

    def host_bytes(self) -> dict:
        """{"ids": bytes} of the shard's id map."""
        return {"ids": self.ids.nbytes}

    def close(self) -> None:
        """Nothing: the base belongs to the shared cache."""


class SharedCachedFeatures(CacheTier):
    """A FeatureSource over `base` whose cache is shared by every rank of a group.

    capacity: this rank's slots (W x capacity in all); policy: a name of
    POLICIES (not belady) with its options (`score`, the hotness every rank
    must have identically: it decides ownership, see ownership.py);
    replicate_frac: the share of every rank's slots holding the hottest rows
    on every rank; group: the ranks sharing the cache, a gloo group (default:
    all, in a group of its own); streams: the CUDA stream API (default
    CudaStreams() on a CUDA base; a stand-in runs the ordering on the CPU).
    Construction is collective too (every rank, same
    arguments: they are compared, and a difference raises ConfigError).

    gather(ids, out) returns rows in the caller's order. Bad ids (IndexError)
    or a bad `out` raise on the rank that passed them after the counts
    exchange, where they are flagged: the other ranks then skip the exchange
    and read the ids they would have asked peers for from their own base, so
    nobody hangs and every result stays exact. A failure after that point (a
    lower tier's read error) leaves peers waiting in the collective: the
    launcher's fault handling (gnnsys.parallel.distributed) stops them.

    gather_async(ids, out) queues the gather on the exchange thread; its
    handle's wait() gives the rows or raises. Gathers and set_window run one
    at a time in call order (exchange of batch i+1 beside compute on batch i);
    `ids` and `out` must not change until the handle is done.

    stats(): requested (ids, repeats included), distinct (per-gather distinct
    ids), local_hits (distinct ids served from this rank's cache or replica),
    remote_hits (from a peer's cache), misses (rows this rank read from its
    lower tiers, for itself or peers), bytes_sent and bytes_received (ids,
    rows, hit counts; not the 8 x (W + 1) bytes per peer of the count table),
    bytes_from_base, hit_rate = (local_hits + remote_hits) / distinct,
    exchange_s: seconds in the collectives (counts, ids, rows).
    """

    def __init__(
        self,
        base,
        capacity: int,
        policy: str = "static",
        *,
        group=None,
        replicate_frac: float = 0.0,
        streams: CudaStreams | None = None,
        **policy_options,
    ):
        if not dist.is_available() or not dist.is_initialized():
            raise ConfigError("group", "torch.distributed is not initialised: call init_process_group on every rank")
        if not isinstance(policy, str):
            raise ConfigError("policy", "the shared cache builds each rank's policy over its own rows: pass a name")
        self.base = base
        self.shape, self.dtype, self.device = tuple(base.shape), base.dtype, base.device
        self.policy = policy
        self._own_group = group is None
        self.group = dist.new_group(list(range(dist.get_world_size())), backend="gloo") if group is None else group
        backend = dist.get_backend(self.group)
        if backend != "gloo":
            raise ConfigError("group", f"the shared cache exchanges host tensors on gloo, got a {backend} group")
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self._streams = CudaStreams() if streams is None and self.device.type == "cuda" else streams
        self._stream = self._streams.new_stream(self.device) if self._streams is not None else None
        score = policy_options.get("score")
        self._check_same_everywhere(capacity, replicate_frac, score)
        self.ownership = Ownership(self.shape[0], self.world_size, capacity, replicate_frac, score)
        self._shard = self.ownership.owned(self.rank)
        slots = self.ownership.capacity - self.ownership.num_replicated
        self._cache = CachedFeatures(
            ShardRows(base, self._shard), slots, shard_policy(self._shard, policy, slots, **policy_options)
        )
        replicated = torch.from_numpy(self.ownership.replicated)
        self._replica = base.gather(replicated) if replicated.numel() else None
        self._row_bytes = self.shape[1] * self.dtype.itemsize
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gnnsys-shared-cache")
        self._closed = False
        self.reset_stats()

    def _check_same_everywhere(self, capacity, replicate_frac, score):
        """ConfigError naming the first argument that differs between ranks."""
        digest = None if score is None else zlib.crc32(np.ascontiguousarray(score, dtype=np.float64).data)
        mine = {
            "shape": self.shape,
            "dtype": str(self.dtype),
            "capacity": int(capacity),
            "policy": self.policy,
            "replicate_frac": float(replicate_frac),
            "score": digest,
        }
        everyone = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self.group)
        for name, value in mine.items():
            other = next((r for r, theirs in enumerate(everyone) if theirs[name] != value), None)
            if other is not None:
                raise ConfigError(
                    name,
                    f"must be the same on every rank of the shared cache: rank {self.rank} "
                    f"has {value!r}, rank {other} has {everyone[other][name]!r}",
                )

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` as a [len(ids), dim] tensor on `device`, in `out` if
        given (a collective: see the class doc)."""
        return self.gather_async(ids, out).wait()

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> GatherHandle:
        """Queue gather(ids, out) on the exchange thread; a handle of the rows (see the class doc)."""
        future = torch.futures.Future()
        if self._streams is None:
            self._submit(_settle, future, self._step, ids, out)
            return GatherHandle(future=future)
        called, done = self._streams.new_event(), self._streams.new_event()
        called.record(self._streams.current(self.device))  # ids and out are written on the caller's stream
        self._submit(_settle, future, self._ordered_step, ids, out, called, done)
        return StreamHandle(GatherHandle(future=future), done, self._streams, self.device)

    def _ordered_step(self, ids, out, called, done):  # `_step` on the exchange stream, between two events
        with self._streams.use(self._stream):
            self._stream.wait_event(called)
            self._streams.record_stream(torch.as_tensor(ids), self._stream)
            rows = self._step(ids, out)
            done.record(self._stream)
        return rows

    def set_window(self, batches) -> None:
        """The ids of the batches this rank samples after its next gather
        (nearest first): the rows it owns go to its own policy's lookahead
        (hybrid), applied in call order with the gathers."""
        local = []
        for b in batches:
            b = sorted_distinct(torch.as_tensor(b).cpu().numpy().astype(np.int64, copy=False))
            b = b[(b >= 0) & (b < self.shape[0])]
            local.append(np.searchsorted(self._shard, b[self.ownership.owner[b] == self.rank]))
        self._submit(self._cache.set_window, local)

    def cached_ids(self) -> np.ndarray:
        """The sorted ids held by this rank's own cache (its replica excluded),
        after the gathers queued before this call."""

        def held():
            id_of = self._cache.policy.id_of
            return self._shard[np.sort(id_of[id_of >= 0])]

        return self._submit(held).result()

    def _submit(self, fn, *args):
        if self._closed:
            raise RuntimeError("SharedCachedFeatures is closed")
        return self._pool.submit(fn, *args)

    def _step(self, ids, out):
        """One gather, on the exchange thread (the steps of the module doc)."""
        try:
            ids = check_ids(torch.as_tensor(ids), self.shape[0])
            out = gather_output(out, ids.shape[0], self.shape[1], self.dtype, self.device)
            uniq, inverse = distinct_inverse(ids.cpu().numpy().astype(np.int64, copy=False))
            replicated, own, order, counts = self.ownership.route(uniq, self.rank)
            failure = None
        except Exception as e:  # noqa: BLE001 - a rank with bad input must still take part in the counts exchange
            failure, counts = e, np.zeros(self.world_size, np.int64)
        began = time.perf_counter()
        table, failed = self._exchange_counts(counts, failure is not None)
        waited = time.perf_counter() - began
        if failure is not None:
            raise failure
        rows = torch.empty((uniq.shape[0], self.shape[1]), dtype=self.dtype, device=self.device)
        if replicated.any():
            where = np.searchsorted(self.ownership.replicated, uniq[replicated])
            rows[_index(np.flatnonzero(replicated), self.device)] = self._replica[_index(where, self.device)]
        misses = 0
        if failed.any():  # a peer's input was bad: no exchange; read what peers would have served
            table[:] = 0
            if order.shape[0]:
                rows[_index(order, self.device)] = self.base.gather(torch.from_numpy(uniq[order]))
            misses += order.shape[0]
        asked, wanted = table[self.rank], table[:, self.rank]
        exchanging = bool(table.any())
        began = time.perf_counter()
        received = self._exchange_ids(uniq[order], asked, wanted) if exchanging else np.empty(0, np.int64)
        waited += time.perf_counter() - began
        own_ids = uniq[own]
        own_rows, reply, own_hits, peer_hits, served_misses = self._serve(own_ids, received, wanted)
        if own_ids.shape[0]:
            rows[_index(np.flatnonzero(own), self.device)] = own_rows
        remote_hits = 0
        if exchanging:
            began = time.perf_counter()
            remote, remote_hits = self._exchange_rows(reply, peer_hits, asked, wanted)
            waited += time.perf_counter() - began
            if order.shape[0]:
                rows[_index(order, self.device)] = remote
        torch.index_select(rows, 0, _index(inverse, self.device), out=out)
        with self._lock:
            self._counts["requested"] += ids.shape[0]
            self._counts["distinct"] += uniq.shape[0]
            self._counts["local_hits"] += int(replicated.sum()) + own_hits
            self._counts["remote_hits"] += remote_hits
            self._counts["misses"] += misses + served_misses
            self._counts["bytes_sent"] += exchange_bytes(asked, wanted, self._row_bytes)
            self._counts["bytes_received"] += exchange_bytes(wanted, asked, self._row_bytes)
            self._counts["exchange_s"] += waited
        return out

    def _serve(self, own_ids: np.ndarray, received: np.ndarray, wanted: np.ndarray):
        """This rank's share as an owner (`serve_step` over its own cache):
        the rows of its own ids, the rows its peers asked for (in `received`
        order), the hits among its own ids and per peer, and the misses."""
        served = []

        def look_up(local):
            hit = self._cache.policy.slot_of[local] >= 0  # cached before this access (CachePolicy's slot map)
            served.append(self._cache.gather(torch.from_numpy(local)))
            return hit

        _, where, own_hits, peer_hits, misses = serve_step(self._shard, look_up, own_ids, received, wanted)
        rows = torch.index_select(served[0], 0, _index(where, self.device))
        n = own_ids.shape[0]
        return rows[:n], rows[n:], own_hits, peer_hits, misses

    def _exchange_counts(self, counts: np.ndarray, failed: bool):
        """Every rank's per-owner counts (table[s, d]: ids s asks d for) and
        whether its input was bad."""
        mine = torch.tensor([*counts.tolist(), int(failed)], dtype=torch.int64)
        everyone = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(everyone, mine, group=self.group)
        table = torch.stack(everyone).numpy()
        return table[:, : self.world_size].copy(), table[:, self.world_size] != 0

    def _exchange_ids(self, ids: np.ndarray, asked: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """Send `asked[r]` ids to each rank r; receive the ids they want from this one, grouped by rank."""
        received = torch.empty(int(wanted.sum()), dtype=torch.int64)
        dist.all_to_all_single(received, torch.from_numpy(ids), wanted.tolist(), asked.tolist(), group=self.group)
        return received.numpy()

    def _exchange_rows(self, reply: torch.Tensor, peer_hits: np.ndarray, asked: np.ndarray, wanted: np.ndarray):
        """Send each peer its rows (from `reply`, grouped by peer) followed by
        its hit count, as bytes; returns the rows this rank asked for (grouped
        by owner) and the hits its owners reported. Each segment's rows start
        at a multiple of the row item size (rows are whole items, counts 8 B).
        Host tensors only: a GPU base's rows cross to the host in one copy
        and the received rows go back in one."""
        rb = self._row_bytes
        size_out = wanted * rb + 8 * (wanted > 0)
        size_in = asked * rb + 8 * (asked > 0)
        reply = reply.cpu()
        send = torch.empty(int(size_out.sum()), dtype=torch.uint8)
        at, first = 0, 0
        for peer, n in enumerate(wanted.tolist()):
            if n:
                send[at : at + n * rb] = reply[first : first + n].reshape(-1).view(torch.uint8)
                hits = torch.tensor([int(peer_hits[peer])], dtype=torch.int64)
                send[at + n * rb : at + n * rb + 8] = hits.view(torch.uint8)
                at, first = at + n * rb + 8, first + n
        received = torch.empty(int(size_in.sum()), dtype=torch.uint8)
        dist.all_to_all_single(received, send, size_in.tolist(), size_out.tolist(), group=self.group)
        rows = torch.empty((int(asked.sum()), self.shape[1]), dtype=self.dtype)
        at, first, hits = 0, 0, 0
        for n in asked.tolist():
            if n:
                rows[first : first + n] = received[at : at + n * rb].view(self.dtype).view(n, self.shape[1])
                hits += int(received[at + n * rb : at + n * rb + 8].clone().view(torch.int64))
                at, first = at + n * rb + 8, first + n
        return rows.to(self.device), hits

    def stats(self) -> dict:
        """This rank's counters since the last reset_stats (see the class doc)."""
        with self._lock:
            out = dict(self._counts)
        out["bytes_from_base"] = out["misses"] * self._row_bytes
        hits = out["local_hits"] + out["remote_hits"]
        out["hit_rate"] = hits / out["distinct"] if out["distinct"] else 0.0
        return out

    def reset_stats(self) -> None:
        """Zero the counters."""
        with self._lock:
            self._counts = dict.fromkeys(STATS, 0)

    def close(self) -> None:
        """Finish the queued gathers, stop the exchange thread and free the
        group made in __init__ (collective: every rank closes)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        self._cache.close()
        if self._own_group:
            dist.destroy_process_group(self.group)
        super().close()

    def host_bytes(self) -> dict:
        """This rank's own cache's parts (rows, policy, lookahead fill), its shard's
        id map, the replicated rows and the ownership map."""
        held = dict(self._cache.host_bytes())
        held["shard"] = self._shard.nbytes
        held["replica"] = (
            self._replica.nbytes if self._replica is not None and self._replica.device.type == "cpu" else 0
        )
        held["ownership"] = sum(v.nbytes for v in vars(self.ownership).values() if isinstance(v, np.ndarray))
        return held

    def __repr__(self):
        o = self.ownership
        return (
            f"SharedCachedFeatures({self.policy}, rank {self.rank} of {self.world_size}, {o.capacity:,} slots "
            f"per rank ({o.num_replicated:,} replicated), {self.shape[0]:,} rows, over {type(self.base).__name__})"
        )


def _index(positions: np.ndarray, device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)).to(device)


def _settle(future, fn, *args):
    """Run fn(*args) and put its result, or its exception, in `future`."""
    try:
        future.set_result(fn(*args))
    except BaseException as e:  # noqa: BLE001 - the caller's wait() re-raises it
        future.set_exception(e)
