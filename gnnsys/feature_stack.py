"""The stack of feature tiers a minibatch trainer reads, built from its options.

Bottom to top: the rows (the dataset's in-memory or memory-mapped table placed
by `storage.placement`, or the SSD tier `SSDFeatures` reading features.bin
with O_DIRECT), a victim buffer (when a lookahead window is given), and a
software cache (`CachedFeatures`) on top. With `host_mem_budget`, what the
SSD stack holds in host memory (cache rows, victim rows, read staging) is
planned to fit it (`plan_host_memory`) and a budget that cannot hold them is
refused with one line. `tier_stats` reads every tier's counters, keyed by
tier name, for the progress bar and the epoch records.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from gnnsys.errors import ConfigError

log = logging.getLogger(__name__)

GB = 10**9
MAX_STAGING = 64 << 20  # staging beyond this buys no throughput (benchmarks/README.md, SSD tier)
PRESAMPLE_EPOCHS = 2
PRESAMPLE_FROM = 1_000_000  # pre-sampled epochs are numbered far beyond any training epoch
TIER_NAMES = {"CachedFeatures": "cache", "SharedCachedFeatures": "cache", "VictimBuffer": "victim",
              "SSDFeatures": "ssd"}


@dataclass(frozen=True)
class HostMemoryPlan:
    """Rows of the cache and of the victim buffer, and bytes of SSD read
    staging (None: the tier's default), for rows of `row_bytes` bytes."""

    cache_rows: int
    victim_rows: int
    staging_bytes: int | None
    row_bytes: int

    def describe(self) -> str:
        """One line: what each part holds."""
        mb = lambda n: f"{n / 2**20:,.1f} MiB"  # noqa: E731
        staging = "default" if self.staging_bytes is None else mb(self.staging_bytes)
        return (f"cache {self.cache_rows:,} rows ({mb(self.cache_rows * self.row_bytes)}), victim buffer "
                f"{self.victim_rows:,} rows ({mb(self.victim_rows * self.row_bytes)}), SSD staging {staging}")


def plan_host_memory(num_nodes: int, row_bytes: int, *, cache_rows: int = 0, cache_gb: float | None = None,
                     lookahead: int = 0, victim_rows: int | None = None, host_mem_budget: float | None = None,
                     min_staging: int = 0) -> HostMemoryPlan:
    """The sizes of the host-memory parts of a stack (see HostMemoryPlan).

    cache_gb (GB = 10^9 bytes) converts to rows; the victim buffer defaults
    to a quarter of the cache when lookahead > 0 (else none); with a budget
    (GB) the staging gets what the cache and victim buffer leave, up to
    MAX_STAGING, and ConfigError("host_mem_budget") when that is less than
    `min_staging` bytes (one read per SSD thread).
    """
    if cache_gb is not None:
        cache_rows = int(cache_gb * GB // row_bytes)
    cache_rows = min(int(cache_rows), num_nodes)
    if victim_rows is None:
        victim_rows = cache_rows // 4 if lookahead > 0 else 0
    victim_rows = min(int(victim_rows), num_nodes)
    if host_mem_budget is None:
        return HostMemoryPlan(cache_rows, victim_rows, None, row_bytes)
    budget = int(host_mem_budget * GB)
    left = budget - (cache_rows + victim_rows) * row_bytes
    if left < min_staging:
        held = f"{(cache_rows + victim_rows) * row_bytes / 2**20:,.1f} MiB"
        raise ConfigError("host_mem_budget", f"{host_mem_budget:g} GB cannot hold the cache ({cache_rows:,} rows) "
                          f"and victim buffer ({victim_rows:,} rows), {held}, plus {min_staging / 2**20:.1f} MiB "
                          "of SSD read staging (one read per thread); raise it or shrink the cache")
    plan = HostMemoryPlan(cache_rows, victim_rows, min(left, MAX_STAGING), row_bytes)
    return plan


def build_feature_stack(dataset, *, features: str = "auto", device="cpu", cache_rows: int = 0,
                        cache_gb: float | None = None, cache_policy: str = "static", lookahead: int = 0,
                        victim_rows: int | None = None, host_mem_budget: float | None = None,
                        presample=None, progress: bool = True, world_size: int = 1, replicate_frac: float = 0.0):
    """The FeatureSource stack for `dataset` (see the module docstring).

    features: a placement of storage.placement ("auto", "gpu", "pinned",
    "cpu-gather") or "ssd" (needs a prepared dataset directory); cache_rows
    or cache_gb and cache_policy ("static" in-degree, "presample" hotness,
    "lru", "sieve", "s3fifo", "hybrid"): the cache (none when both are
    unset/0; on a CUDA device its rows live in GPU memory); lookahead > 0 adds a victim buffer of victim_rows rows and
    reading ahead for the cache (the loader passes the window); presample():
    the pre-sampling hotness score, called only when the policy needs it
    (presample and hybrid). world_size > 1 (a data-parallel rank, the
    process group initialised): the cache is one `SharedCachedFeatures` of
    world_size x its rows over all ranks (replicate_frac: the share of each
    rank's slots holding the hottest rows on every rank), with no victim
    buffer. Returns (source, HostMemoryPlan).
    """
    if world_size > 1:
        if victim_rows:
            raise ConfigError("victim_rows", "the shared cache of data-parallel workers has no victim buffer")
        victim_rows = 0
    source, plan = _bottom(dataset, features, device, host_mem_budget, progress, cache_rows, cache_gb, lookahead,
                           victim_rows)
    if plan.cache_rows == 0:
        return source, plan
    from gnnsys.storage.cache import CachedFeatures, SharedCachedFeatures, in_degree

    if plan.victim_rows:
        from gnnsys.storage.cache import VictimBuffer

        source = VictimBuffer(source, plan.victim_rows)
    if cache_policy in ("presample", "hybrid"):
        if presample is None:
            raise ConfigError("cache_policy", f"{cache_policy!r} needs a pre-sampling score")
        score = presample()
    else:
        score = in_degree(dataset.indptr.numpy())
    policy = "static" if cache_policy == "presample" else cache_policy
    if world_size > 1:
        source = SharedCachedFeatures(source, plan.cache_rows, policy, score=score, replicate_frac=replicate_frac)
        log.info("feature tiers: %s", " over ".join(repr(t) for t in tiers_of(source)))
        return source, plan
    on_gpu = torch.device(device).type == "cuda"  # hot rows in GPU memory, gathered rows arrive there
    source = CachedFeatures(source, plan.cache_rows, policy, score=score, prefetch=lookahead > 0,
                            device=device if on_gpu else None)
    log.info("feature tiers: %s", " over ".join(repr(t) for t in tiers_of(source)))
    return source, plan


def _bottom(dataset, features, device, host_mem_budget, progress, cache_rows, cache_gb, lookahead, victim_rows):
    """(rows source, HostMemoryPlan): the placed table, or the SSD tier sized by the plan."""
    num_nodes, dim = dataset.num_nodes, dataset.num_features
    row_bytes = dim * dataset.features.dtype.itemsize
    sizes = dict(cache_rows=cache_rows, cache_gb=cache_gb, lookahead=lookahead, victim_rows=victim_rows)
    if features != "ssd":
        from gnnsys.storage.placement import place_features

        plan = plan_host_memory(num_nodes, row_bytes, **sizes)
        return place_features(dataset, features, device, progress=progress).source, plan
    if dataset.path is None:
        raise ConfigError("features", "'ssd' reads a prepared dataset's features.bin; got an in-memory dataset")
    from gnnsys.storage.ssd import DEFAULT_MAX_READ, DEFAULT_THREADS, SSDFeatures

    plan = plan_host_memory(num_nodes, row_bytes, host_mem_budget=host_mem_budget,
                            min_staging=DEFAULT_THREADS * DEFAULT_MAX_READ, **sizes)
    return SSDFeatures(dataset.path, host_mem_budget=plan.staging_bytes), plan


def tiers_of(source):
    """The tiers of `source` from the top down (storage.base.tiers)."""
    from gnnsys.storage.base import tiers

    return list(tiers(source))


def tier_stats(source) -> dict:
    """{tier name: its stats()} for every tier of `source` that counts (cache,
    victim, ssd)."""
    return {TIER_NAMES.get(type(t).__name__, type(t).__name__): t.stats()
            for t in tiers_of(source) if hasattr(t, "stats")}


def tier_record(source) -> dict:
    """{"tiers": tier_stats(source)} for an epoch record, {} when no tier counts."""
    stats = tier_stats(source)
    return {"tiers": stats} if stats else {}


def tier_postfix(source, elapsed_s: float) -> dict:
    """Progress-bar values: each counting tier's hit rate, the SSD's MB/s over `elapsed_s`."""
    shown = {}
    for name, s in tier_stats(source).items():
        if "hit_rate" in s:
            shown[name] = f"{s['hit_rate']:.0%}"
        if "bytes_read" in s:
            shown[f"{name}_MB_s"] = f"{s['bytes_read'] / 1e6 / max(elapsed_s, 1e-9):,.0f}"
    return shown


def reset_tier_stats(source) -> None:
    """Zero the counters of every tier of `source`."""
    for t in tiers_of(source):
        if hasattr(t, "reset_stats"):
            t.reset_stats()


def presample_score(dataset, fanouts, batch_size: int, seed: int, epochs: int = PRESAMPLE_EPOCHS) -> np.ndarray:
    """GNNLab's hotness: in how many batches of `epochs` pre-sampled epochs of
    the training seeds (numbered from PRESAMPLE_FROM, never trained on) each
    node's features are needed, with the CPU sampler."""
    from gnnsys.samplers.factory import make_sampler
    from gnnsys.samplers.seeds import SeedBatches
    from gnnsys.storage.cache import presample_hotness

    sampler = make_sampler("cpu", dataset.indptr, dataset.indices, list(fanouts), seed=seed)
    seeds = SeedBatches(dataset.split("train"), batch_size, shuffle=True, seed=seed)
    return presample_hotness(sampler, seeds, range(PRESAMPLE_FROM, PRESAMPLE_FROM + epochs))


def placement_advice(num_nodes: int, row_stride: int, row_bytes: int, device="cpu",
                     host_mem_budget: float | None = None) -> dict:
    """What `gnnsys info` says about placing a table of `num_nodes` rows
    (`row_stride` bytes each on disk, `row_bytes` of data): its size, the
    host memory available, what placement "auto" would pick for `device`,
    and, given a budget (GB), whether the table fits it and the largest cache
    (rows) an SSD stack can keep within it."""
    from gnnsys.storage.placement import available_host_bytes, choose_placement
    from gnnsys.storage.ssd import DEFAULT_MAX_READ, DEFAULT_THREADS

    table = num_nodes * row_stride
    available = available_host_bytes()
    auto = choose_placement(table, device)
    advice = {"table_bytes": table, "available_host_bytes": available, "auto": auto.kind,
              "auto_reason": auto.reason, "fits_host_memory": table <= available}
    if host_mem_budget is not None:
        budget = int(host_mem_budget * GB)
        staging = min(MAX_STAGING, max(budget - table, DEFAULT_THREADS * DEFAULT_MAX_READ))
        advice.update(host_mem_budget_bytes=budget, fits_budget=table <= budget,
                      min_staging_bytes=DEFAULT_THREADS * DEFAULT_MAX_READ,
                      max_cache_rows=max(0, min(num_nodes, (budget - staging) // row_bytes)))
    return advice


def format_advice(a: dict) -> list[str]:
    """`placement_advice` as the lines of `gnnsys info`."""
    gib = lambda n: f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"  # noqa: E731
    lines = [f"table        {gib(a['table_bytes'])} on disk; {gib(a['available_host_bytes'])} of host memory "
             f"available ({'fits' if a['fits_host_memory'] else 'does not fit'})",
             f"placement    auto -> {a['auto']} ({a['auto_reason']})"]
    if "fits_budget" in a:
        budget = gib(a["host_mem_budget_bytes"])
        if a["fits_budget"]:
            verdict = "the table fits; train with it in memory (--features auto)"
        elif a["host_mem_budget_bytes"] < a["min_staging_bytes"]:
            verdict = f"too small even for the SSD tier's read staging ({gib(a['min_staging_bytes'])})"
        else:
            verdict = (f"the table does not fit; train with --features ssd and a cache of up to "
                       f"{a['max_cache_rows']:,} rows (--cache-rows)")
        lines.append(f"budget       {budget}: {verdict}")
    return lines
