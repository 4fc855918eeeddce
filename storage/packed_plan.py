"""The plan of the packed tier: how many batches a window holds, the host
memory its parts take (in the host-memory plan beside the other tiers'),
and whether reading from the SSD packs batches at all.

A window's batches are sized by what holds them: the scratch space (two
windows at a time, each batch's rows, its sampled arrays and the window's
cache on disk, and the sampled arrays of the window after them, drawn
ahead), the host-memory budget (the packer keeps each planned batch's row
ids, of two windows: the one it writes and the one drawn ahead) and the
epoch. `--features ssd` packs when a window fits and its one
sequential scan of the rows file costs less than reading the window's rows
at random (the device's measured rates, storage/io_probe.py); otherwise it
reads rows at random, and `reason` says why.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gnnsys.errors import ConfigError, DatasetError
from gnnsys.ids import sorted_distinct

from .direct_io import open_rows_file, row_blocks
from .io_probe import io_model
from .memory_plan import GB, HostMemoryPlan, plan_host_memory
from .pack_scan import SCAN_BYTES, staging_bytes
from .packed_cache import carry_bytes
from .packing import padded, read_buffer_bytes
from .ssd import rows_file

DEFAULT_AHEAD = 2  # batches whose packed files are read ahead

PACKED_BASE_STAGING = 4 * (128 << 10)  # the SSD tier serving unplanned gathers: 4 reads of 128 KiB


@dataclass(frozen=True)
class PackedPlan:
    """`window` batches a window, `batch_bytes` (a batch's file at most),
    `memory` the HostMemoryPlan (its parts include the packed tier's),
    `reason` one line on how the window was sized."""

    window: int
    batch_bytes: int
    memory: HostMemoryPlan
    reason: str


def id_bytes(num_nodes: int) -> int:
    """Bytes the packer keeps per planned row id (int32 below 2^31 nodes)."""
    return 4 if num_nodes < 2**31 else 8


def packed_parts(
    num_nodes: int, row_bytes: int, cache_rows: int, ahead: int, batch_rows: int, window: int, fixed: bool = False
) -> dict:
    """{part: bytes} the packed tier holds in host memory for windows of
    `window` batches of at most `batch_rows` distinct rows each, a cache of
    `cache_rows` rows (and the largest incoming.seg it carries) and files read `ahead` batches ahead (and with a
    `fixed` stream's pack, its batch and the next one read ahead)."""
    batch = padded(batch_rows * row_bytes)
    return {
        "packed.cache": padded(cache_rows * row_bytes),
        "packed.slots": 4 * num_nodes,
        "packed.read_buffers": ahead * read_buffer_bytes(batch) + (2 * batch if fixed else 0),
        "packed.incoming": read_buffer_bytes(carry_bytes(cache_rows, row_bytes)) if cache_rows else 0,
        "packer.counts": 5 * num_nodes,
        "packer.ids": 2 * window * batch_rows * id_bytes(num_nodes),  # the window written and the one drawn ahead
        "packer.staging": staging_bytes(window + 1) + SCAN_BYTES,  # its batches and the cache's file
        "ssd.staging": PACKED_BASE_STAGING,
    }


def plan_packed(
    num_nodes: int,
    row_bytes: int,
    *,
    per_epoch: int,
    batch_rows: int,
    cache_rows: int = 0,
    cache_gb: float | None = None,
    ahead: int,
    host_mem_budget: float | None = None,
    scratch_bytes: int | None = None,
    free_bytes: int,
    scratch="the scratch directory",
    sampled_bytes: int = 0,
    reserved_bytes: int = 0,
    fixed: bool = False,
) -> PackedPlan:
    """The PackedPlan of a table of `num_nodes` rows of `row_bytes` for
    epochs of `per_epoch` batches of at most `batch_rows` distinct rows:
    the cache (cache_rows or cache_gb; neither: the rows `host_mem_budget`
    and the disk leave beside the largest window, none without a budget), the window (the epoch's batches, or
    fewer where the scratch space, `scratch_bytes` or else the `free_bytes`
    of directory `scratch`, less `reserved_bytes` (a fixed stream's pack, at
    most half of it; `fixed`: there is one), cannot hold two windows of them, each batch's rows and
    `sampled_bytes` of its sampled arrays, or where
    `host_mem_budget` (GB) cannot hold the packer's ids); ConfigError naming
    the option, or DatasetError naming the directory, when no window of one
    batch fits."""
    chosen = not cache_rows and cache_gb is None
    cache_rows = plan_host_memory(num_nodes, row_bytes, cache_rows=cache_rows, cache_gb=cache_gb).cache_rows
    batch_bytes = padded(batch_rows * row_bytes)
    space = free_bytes if scratch_bytes is None else min(scratch_bytes, free_bytes)
    space -= min(reserved_bytes, space // 2)
    budget = None if host_mem_budget is None else int(host_mem_budget * GB)
    sizes = (num_nodes, row_bytes, ahead, batch_rows, fixed)

    def by_disk(cache: int) -> int:
        cache_on_disk = padded(cache * row_bytes) + 8 * cache
        return (space // 2 - cache_on_disk) // max(1, batch_bytes + 2 * sampled_bytes)  # and the next's sampled

    def limits(cache: int) -> dict:
        found = {"the epoch": per_epoch, "the scratch space": by_disk(cache)}
        if budget is not None:
            found["the host-memory budget"] = _most(per_epoch, lambda w: _held(sizes, cache, w) <= budget)
        return found

    found = limits(cache_rows)
    if chosen and budget is not None and min(found.values()) >= 1:  # the cache takes what the window leaves
        most = min(found.values())
        cache_rows = _most(num_nodes, lambda c: _held(sizes, c, most) <= budget and by_disk(c) >= most)
        found = limits(cache_rows)
    least = packed_parts(num_nodes, row_bytes, cache_rows, ahead, batch_rows, 0, fixed)  # a window of none
    bound = min(found, key=lambda k: found[k])
    window = min(per_epoch, found[bound])
    if window < 1:
        one = f"one packed batch ({batch_bytes:,} bytes, about {batch_rows:,} rows)"
        if bound == "the host-memory budget":
            raise ConfigError(
                "host_mem_budget",
                f"{host_mem_budget:g} GB cannot hold {one} beside {_parts(least)}: raise it or read rows at random",
            )
        if scratch_bytes is not None and scratch_bytes <= free_bytes:
            raise ConfigError(
                "scratch_gb", f"{space:,} bytes cannot hold {one} twice beside the window's cache: raise it"
            )
        raise DatasetError(
            scratch, f"not enough scratch space for {one} twice beside the window's cache: {free_bytes:,} bytes free"
        )
    parts = packed_parts(num_nodes, row_bytes, cache_rows, ahead, batch_rows, window, fixed)
    memory = HostMemoryPlan(cache_rows, 0, PACKED_BASE_STAGING, 0, row_bytes, parts, budget)
    batches = f"{window} batch{'es' if window > 1 else ''}"
    reason = f"windows of {batches} ({window * batch_bytes / GB:,.2f} GB at most), bound by {bound}"
    if chosen and cache_rows:
        reason += f", with a cache of {cache_rows:,} rows ({cache_rows * row_bytes / GB:,.2f} GB): the budget's rest"
    return PackedPlan(window, batch_bytes, memory, reason)


def _held(sizes: tuple, cache_rows: int, window: int) -> int:
    """The bytes packed_parts plans for `sizes` (num_nodes, row_bytes, ahead,
    batch_rows, fixed), a cache of `cache_rows` and windows of `window` batches."""
    num_nodes, row_bytes, ahead, batch_rows, fixed = sizes
    return sum(packed_parts(num_nodes, row_bytes, cache_rows, ahead, batch_rows, window, fixed).values())


def _most(high: int, fits) -> int:
    """The largest n in [0, high] with fits(n), for a `fits` that holds up to some n and not past it (0 if none)."""
    low = 0
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _parts(parts: dict) -> str:
    return ", ".join(f"{k} {v / 2**20:,.1f} MiB" for k, v in parts.items())


def packing_pays(plan: PackedPlan, file_bytes: int, batch_rows: int, model) -> tuple[bool, str]:
    """(whether a window of `plan` packs faster than its rows read at random,
    why): one sequential scan of the `file_bytes` rows file per window
    against `batch_rows` random reads per batch, at the rates of the
    device's IOModel `model` (None: unmeasured, packing is assumed to pay)."""
    if model is None:
        return True, "the device's read rates are not measured (a file under 64 MiB, or no O_DIRECT)"
    scan_s = file_bytes / model.seq_bytes_per_s
    random_s = plan.window * batch_rows / max(r for rates in model.rates.values() for r in rates.values())
    if scan_s >= random_s:
        return False, (
            f"a window of {plan.window} batches reads {random_s:.1f} s at random, less than its scan of the "
            f"rows file ({scan_s:.1f} s)"
        )
    return True, f"a window's scan of the rows file ({scan_s:.1f} s) beats its random reads ({random_s:.1f} s)"


def choose_packing(
    table,
    features: str,
    draws,
    *,
    random_reads: dict,
    batch_rows: int = 0,
    host_mem_budget: float | None = None,
    cache_rows: int = 0,
    cache_gb: float | None = None,
    lookahead: int = 0,
    scratch_dir=None,
    scratch_bytes: int | None = None,
):
    """((PackedPlan, the draws) or None, note) for the rows of RowTable
    `table`: the packed tier's plan where `features` is "packed", or "ssd"
    and packing pays; else None and why rows are read at random. draws(): the
    training batches' draws (None: none are drawn ahead); random_reads:
    {option: whether it was given} for the options only the random-read tier
    takes; batch_rows: a batch's distinct rows, if known (else estimated from
    the first draws); the cache, budget (GB), read-ahead and scratch as
    build_stack takes them. ConfigError or DatasetError where "packed" cannot
    hold one batch."""
    given = [name for name, on in random_reads.items() if on]
    if scratch_bytes == 0:
        if features == "packed":
            raise ConfigError("scratch_gb", "0 holds no packed batch; give features='ssd' to read rows at random")
        return None, "rows read at random: scratch_gb 0 allows no packed batches"
    if features == "packed":
        if draws is None:
            raise ConfigError("features", "'packed' needs the training batches' draws (open_feature_store passes them)")
        for name in given:
            raise ConfigError(
                name, "does not apply to features='packed' (its cache is the rows each window reads most)"
            )
    elif draws is None:
        return None, "rows read at random: no training batches are drawn ahead to pack"
    elif given:
        return None, f"rows read at random: {given[0]} is the random-read tier's"
    drawn, where = draws(), scratch_dir or tempfile.gettempdir()
    path, (num_nodes, dim), dtype, stride = rows_file(table)
    row_bytes = dim * dtype.itemsize
    sampled = getattr(drawn, "sampled", None)  # the packer writes each batch's sampled arrays too
    first = [sampled(0, b) if sampled else {"input_nodes": drawn.draw(0, b)} for b in range(min(3, drawn.batches))]
    largest = max((sorted_distinct(a["input_nodes"]).shape[0] for a in first), default=0)
    rows = min(num_nodes, max(batch_rows, largest + largest // 4))
    fixed = getattr(drawn, "fixed", None)  # packed once beside the windows, each batch's rows uncached
    reserved = 0 if fixed is None else fixed.batches * padded(rows * row_bytes)
    free, evaluation = free_space(where), ""
    space = free if scratch_bytes is None else min(scratch_bytes, free)
    if fixed is not None and reserved > space // 2:  # it may take half the scratch space at most
        evaluation = (
            f"; sampled evaluation reads rows at random: its {fixed.batches} batches need about "
            f"{reserved / GB:,.1f} GB packed, more than half the scratch space"
        )
        drawn.with_fixed(None)
        fixed, reserved = None, 0
    arrays = max((sum(v.nbytes for v in a.values()) for a in first), default=0) if sampled else 0
    try:
        plan = plan_packed(
            num_nodes,
            row_bytes,
            per_epoch=drawn.batches,
            batch_rows=rows,
            cache_rows=cache_rows,
            cache_gb=cache_gb,
            ahead=lookahead or DEFAULT_AHEAD,
            host_mem_budget=host_mem_budget,
            scratch_bytes=scratch_bytes,
            free_bytes=free,
            sampled_bytes=arrays + arrays // 4,
            reserved_bytes=reserved,
            fixed=fixed is not None,
            scratch=where,
        )
    except (ConfigError, DatasetError) as e:
        if features == "packed":
            raise
        return None, f"rows read at random: {e}"
    if features == "packed":
        return (plan, drawn), f"packed batches in {plan.reason}{evaluation}"
    pays, why = packing_pays(plan, num_nodes * stride, rows, _device_model(path, row_bytes, stride))
    if not pays:
        return None, f"rows read at random: {why}"
    return (plan, drawn), f"packed batches in {plan.reason}: {why}{evaluation}"


def _device_model(path, row_bytes: int, stride: int):
    """The IOModel of the device holding `path` (storage.io_probe), None where it takes no O_DIRECT reads."""
    try:
        file = open_rows_file(path, True)
    except ConfigError:
        return None
    os.close(file.fd)
    return io_model(path, row_blocks(row_bytes, stride, file.block) * file.block)


def free_space(directory) -> int:
    """Bytes free on the disk that holds (or will hold) `directory`."""
    path = Path(directory).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free
