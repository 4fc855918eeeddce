"""The stack of feature tiers over one table, built from a run's options.

Bottom to top: the rows (the table placed by `storage.placement`, or the SSD
tier `SSDFeatures` reading the file a memory-mapped table maps, with
O_DIRECT), a victim buffer (when a lookahead window is given), and a
software cache (`CachedFeatures`, or `SharedCachedFeatures` over
data-parallel ranks) on top, every part sized by the host-memory plan
(storage/memory_plan.py). On a GPU, host rows reach it through pinned staging
(storage/staging.py): StagedFeatures over the rows (placement cpu-gather, or
the SSD tier without a cache), or the SSD tier's own staging for the rows a
GPU cache misses.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import torch

from gnnsys.errors import ConfigError

from .base import check_stack, tiers
from .cache import CachedFeatures, SharedCachedFeatures, VictimBuffer, run_policy
from .memory_plan import GB, SSD_ENGINE_BYTES, plan_host_memory
from .packed_plan import PACKED_BASE_STAGING, choose_packing
from .packed_source import DEFAULT_AHEAD, PackedFeatures
from .placement import unified
from .ssd import DEFAULT_MAX_READ, DEFAULT_THREADS, SSDFeatures
from .staged import StagedFeatures
from .staging import PinnedStaging

log = logging.getLogger(__name__)


def build_stack(
    table,
    *,
    degree,
    features: str = "auto",
    device="cpu",
    cache_rows: int = 0,
    cache_gb: float | None = None,
    cache_policy: str = "static",
    lookahead: int = 0,
    victim_rows: int | None = None,
    host_mem_budget: float | None = None,
    presample=None,
    progress: bool = True,
    ranks=None,
    replicate_frac: float = 0.0,
    batch_rows: int = 0,
    draws=None,
    scratch_dir=None,
    scratch_gb: float | None = None,
):
    """The FeatureSource stack over the RowTable `table` (see the module docstring).

    degree(): the cache's out-degree score (float64 per row), called only
    when the policy needs it.
    features: a placement of storage.placement ("auto", "gpu", "pinned",
    "cpu-gather") or "ssd" (the SSD tier reads the file `table` maps:
    storage.ssd.rows_file); cache_rows
    or cache_gb and cache_policy (storage.cache.RUN_POLICIES: "static" out-degree,
    "presample" hotness, "lru", "sieve", "s3fifo", "hybrid"): the cache (none
    when both are unset/0; on a CUDA device its rows live in GPU memory);
    lookahead > 0 adds a victim buffer of victim_rows rows and reading ahead
    for the cache (the loader passes the window); presample(): the
    pre-sampling hotness score, called only when the policy needs it
    (a policy scored_by "presample"); batch_rows: see plan_host_memory. `ranks` (gnnsys.parallel.ranks)
    of several data-parallel ranks: the cache is one `SharedCachedFeatures`
    of world_size x its rows on a gloo group of its own (replicate_frac: the
    share of each rank's slots holding the hottest rows on every rank), with
    no victim buffer. features "packed": the packed tier (`_packed`) over
    the SSD tier, packing the batches draws() gives in `scratch_dir`
    (default a directory of its own), at most `scratch_gb` GB on disk;
    "ssd" packs them too where it pays and no option of the random-read
    tier is given (storage.packed_plan.choose_packing), else reads rows at random.
    Returns (source, HostMemoryPlan), whose `note` says which and why.
    """
    if ranks is not None and ranks.multi:
        if victim_rows:
            raise ConfigError("victim_rows", "the shared cache of data-parallel workers has no victim buffer")
        victim_rows = 0
    on_gpu = torch.device(device).type == "cuda"  # hot rows in GPU memory, gathered rows arrive there
    sizes = dict(
        cache_rows=cache_rows,
        cache_gb=cache_gb,
        cache_policy=cache_policy,
        lookahead=lookahead,
        victim_rows=victim_rows,
        batch_rows=batch_rows,
        cache_on_host=not on_gpu,
    )
    if features in ("ssd", "packed"):
        scratch_bytes = None if scratch_gb is None else int(scratch_gb * GB)
        random_reads = {
            "cache_policy": sizes["cache_policy"] != "static",
            "lookahead": features == "ssd" and bool(lookahead),
            "victim_rows": bool(victim_rows),
            "replicate_frac": bool(replicate_frac),
        }
        packed, note = choose_packing(
            table,
            features,
            draws,
            random_reads=random_reads,
            batch_rows=batch_rows,
            host_mem_budget=host_mem_budget,
            cache_rows=cache_rows,
            cache_gb=cache_gb,
            lookahead=lookahead,
            scratch_dir=scratch_dir,
            scratch_bytes=scratch_bytes,
        )
        if packed is None and scratch_gb:
            raise ConfigError("scratch_gb", f"bounds packed batches, and none are packed here ({note})")
        if packed is not None:
            return _packed(table, packed, note, sizes, dict(scratch_dir=scratch_dir, scratch_bytes=scratch_bytes))
    else:
        note = ""
        for name, value in (("scratch_dir", scratch_dir), ("scratch_gb", scratch_gb)):
            if value is not None:
                raise ConfigError(name, "holds packed batches; needs features='ssd' or 'packed'")
    shared = ranks is not None and ranks.multi
    source, plan = _bottom(table, features, device, host_mem_budget, progress, sizes, shared)
    plan = replace(plan, note=note)
    if plan.cache_rows == 0:
        return check_stack(source), plan

    if plan.victim_rows:
        source = VictimBuffer(source, plan.victim_rows)
    if run_policy(cache_policy).scored_by == "presample":
        if presample is None:
            raise ConfigError("cache_policy", f"{cache_policy!r} needs a pre-sampling score")
        score = presample()
    else:
        score = degree()
    if ranks is not None and ranks.multi:
        shares = dict(score=score, replicate_frac=replicate_frac, group=ranks.new_host_group())
        source = SharedCachedFeatures(source, plan.cache_rows, cache_policy, **shares)
    else:
        source = CachedFeatures(
            source,
            plan.cache_rows,
            cache_policy,
            score=score,
            lookahead_fill=lookahead > 0,
            lookahead_fill_rows=plan.lookahead_fill_rows,
            device=device if on_gpu else None,
        )
    log.info(
        "feature tiers: %s; host memory planned: %s", " over ".join(repr(t) for t in tiers(source)), plan.describe()
    )
    return check_stack(source), plan


def _bottom(table, features, device, host_mem_budget, progress, sizes, shared=False):
    """(rows source, HostMemoryPlan): the placed table, or the SSD tier reading
    its file sized by the plan. Host rows used on a GPU pass through pinned
    staging (storage/staging.py): StagedFeatures over the table (placement
    cpu-gather) or over the SSD tier (no cache), or the SSD tier's own for the
    rows a GPU cache misses (a cache of one rank; `shared`: the data-parallel
    cache, which keeps its rows on the host)."""
    num_nodes, dim = table.shape
    row_bytes = dim * table.dtype.itemsize
    pinned_bytes = PinnedStaging.planned_bytes(row_bytes)
    if features != "ssd":
        plan = plan_host_memory(num_nodes, row_bytes, **sizes)
        source = unified(table, features, device, progress=progress).source
        if isinstance(source, StagedFeatures):
            plan = replace(plan, parts={**plan.parts, f"{source.name}.pinned": pinned_bytes})
        return source, plan
    cached = bool(sizes["cache_rows"]) or sizes["cache_gb"] is not None
    stage = None if sizes["cache_on_host"] or (cached and shared) else "ssd" if cached else StagedFeatures.name
    plan = plan_host_memory(
        num_nodes,
        row_bytes,
        host_mem_budget=host_mem_budget,
        min_staging=DEFAULT_THREADS * DEFAULT_MAX_READ,
        engine_bytes=SSD_ENGINE_BYTES,
        pinned={f"{stage}.pinned": pinned_bytes} if stage else None,
        **sizes,
    )
    pinned = PinnedStaging(dim, table.dtype, device) if stage == "ssd" else None
    source = SSDFeatures(table, host_mem_budget=plan.staging_bytes, pinned=pinned)
    if stage == StagedFeatures.name:
        try:
            source = StagedFeatures(source, device)
        except BaseException:
            source.close()
            raise
    return source, plan


PACKED_BASE = dict(engine="threads", threads=4, max_gap=0, host_mem_budget=PACKED_BASE_STAGING)  # unplanned gathers


def _packed(table, packed, note, sizes, scratch):
    """(PackedFeatures over an SSDFeatures of `table`'s file, HostMemoryPlan)
    of `packed` (choose_packing's plan and draws): its cache is the window's most read
    rows, its files read `lookahead` batches ahead (DEFAULT_AHEAD without
    one), its windows where `scratch` (scratch_dir, scratch_bytes) says."""
    plan, drawn = packed
    base = SSDFeatures(table, **PACKED_BASE)
    try:
        ahead = sizes["lookahead"] or DEFAULT_AHEAD
        source = PackedFeatures(
            base, table, drawn, capacity=plan.memory.cache_rows, ahead=ahead, window=plan.window, **scratch
        )
    except BaseException:
        base.close()
        raise
    log.info(
        "feature tiers: %s; %s; host memory planned: %s",
        " over ".join(repr(t) for t in tiers(source)),
        note,
        plan.memory.describe(),
    )
    return check_stack(source), replace(plan.memory, note=note)
