"""The stack of feature tiers a minibatch trainer reads, built from its
options, and the plan of the host memory it holds.

Bottom to top: the rows (the dataset's in-memory or memory-mapped table placed
by `storage.placement`, or the SSD tier `SSDFeatures` reading features.bin
with O_DIRECT), a victim buffer (when a lookahead window is given), and a
software cache (`CachedFeatures`, or `SharedCachedFeatures` over
data-parallel ranks) on top. `plan_host_memory` sizes every part the stack
holds in host memory (cache rows, the policy's per-node state and window,
victim rows and index, SSD read staging, rows read ahead) and, with
`host_mem_budget`, fits them into it: the rows read ahead get what the rest
leaves (up to the window's worth; the cache's stats say how many were
skipped for lack of room), and a budget that cannot hold the rest is refused
with one line naming each part and its size. `tier_stats` reads every tier's
counters, keyed by tier name, for the progress bar and the epoch records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from gnnsys.errors import ConfigError

log = logging.getLogger(__name__)

GB = 10**9
MAX_STAGING = 64 << 20  # staging beyond this buys no throughput (benchmarks/README.md, SSD tier)
FIRST_STAGING = 8 << 20  # staging served before the rows read ahead (a full ring of 64 KiB reads)
SSD_ENGINE_BYTES = 1 << 20  # held for the SSD tier's read engine (io_uring's rings are about 20 KiB)
PRESAMPLE_EPOCHS = 2
PRESAMPLE_FROM = 1_000_000  # pre-sampled epochs are numbered far beyond any training epoch
CACHE_POLICIES = ("static", "presample", "lru", "sieve", "s3fifo", "hybrid")  # the names training takes
PRESAMPLED = ("presample", "hybrid")  # policies scored by pre-sampled hotness (the others: out-degree)


def storage_policy(name: str) -> str:
    """The storage.cache policy a training policy name runs ("presample" is static over hotness)."""
    if name not in CACHE_POLICIES:
        raise ConfigError("cache_policy", f"must be one of {', '.join(CACHE_POLICIES)}, got {name!r}")
    return "static" if name == "presample" else name


@dataclass(frozen=True)
class HostMemoryPlan:
    """Rows of the cache, of the victim buffer and read ahead (None: bounded
    only by the window), bytes of SSD read staging (None: the tier's
    default), for rows of `row_bytes` bytes; `parts`: the planned bytes of
    every part ("tier.part"), `budget` the bytes it had to fit (or None)."""

    cache_rows: int
    victim_rows: int
    staging_bytes: int | None
    lookahead_fill_rows: int | None
    row_bytes: int
    parts: dict = field(default_factory=dict)
    budget: int | None = None

    @property
    def total(self) -> int:
        """Bytes of every planned part together."""
        return sum(self.parts.values())

    def describe(self) -> str:
        """One line: each part and its size."""
        return ", ".join(f"{name} {_mib(n)}" for name, n in self.parts.items()) or "nothing"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def plan_host_memory(
    num_nodes: int,
    row_bytes: int,
    *,
    cache_rows: int = 0,
    cache_gb: float | None = None,
    cache_policy: str = "static",
    lookahead: int = 0,
    victim_rows: int | None = None,
    host_mem_budget: float | None = None,
    min_staging: int = 0,
    engine_bytes: int = 0,
    batch_rows: int = 0,
    cache_on_host: bool = True,
) -> HostMemoryPlan:
    """The sizes of the host-memory parts of a stack (see HostMemoryPlan).

    cache_gb (GB = 10^9 bytes) converts to rows (at least one: ConfigError
    otherwise); the victim buffer defaults
    to a quarter of the cache when lookahead > 0 (else none); batch_rows:
    the distinct rows one batch needs (estimate_batch_rows), which sizes the
    policy's window and the rows read ahead (lookahead x batch_rows at most);
    cache_on_host False: the cache's rows live on a GPU; engine_bytes: held
    for the SSD tier's read engine. With a budget (GB) what the fixed parts
    leave is shared: the SSD staging gets up to FIRST_STAGING (at least
    `min_staging`, one read per SSD thread), the rows read ahead up to the
    window's worth, then the staging up to MAX_STAGING again;
    ConfigError("host_mem_budget") naming every part when the fixed parts and
    `min_staging` do not fit.
    """
    from gnnsys.storage.cache import POLICIES, VictimBuffer

    if cache_gb is not None:
        cache_rows = int(cache_gb * GB // row_bytes)
        if cache_rows == 0:
            raise ConfigError(
                "cache_gb",
                f"{cache_gb:g} GB holds no feature row ({row_bytes} bytes each); give "
                f"at least {row_bytes / GB:.3g} GB, or no cache",
            )
    cache_rows = min(int(cache_rows), num_nodes)
    if victim_rows is None:
        victim_rows = cache_rows // 4 if lookahead > 0 else 0
    victim_rows = min(int(victim_rows), num_nodes)
    window = lookahead * batch_rows if cache_rows else 0
    parts = {}
    if cache_rows:
        parts["cache.rows"] = cache_rows * row_bytes if cache_on_host else 0
        parts["cache.policy"] = POLICIES[storage_policy(cache_policy)].planned_bytes(
            cache_rows, num_nodes, scored=True, window_ids=window
        )
    if victim_rows:
        parts["victim"] = VictimBuffer.planned_bytes(victim_rows, num_nodes, row_bytes)
    if engine_bytes:
        parts["ssd.engine"] = engine_bytes
    sizes = dict(cache_rows=cache_rows, victim_rows=victim_rows, row_bytes=row_bytes)
    if host_mem_budget is None:
        return HostMemoryPlan(staging_bytes=None, lookahead_fill_rows=None, parts=parts, **sizes)
    budget = int(host_mem_budget * GB)
    left = budget - sum(parts.values())
    if left < min_staging:
        needed = dict(parts, **{"ssd.staging (at least)": min_staging})
        raise ConfigError(
            "host_mem_budget",
            f"{host_mem_budget:g} GB cannot hold "
            f"{', '.join(f'{k} {_mib(v)}' for k, v in needed.items())}: "
            f"{_mib(sum(needed.values()))} in all; raise it or shrink the cache",
        )
    staging = min(left, max(FIRST_STAGING, min_staging))
    lookahead_fill_rows = min((left - staging) // row_bytes, window) if lookahead and cache_rows else 0
    parts["ssd.staging"] = staging = min(left - lookahead_fill_rows * row_bytes, MAX_STAGING)
    if lookahead and cache_rows:
        parts["cache.lookahead_fill"] = lookahead_fill_rows * row_bytes
        if lookahead_fill_rows < window:
            log.info(
                "reading ahead is limited to %s rows of the %s a %d-batch window may need by the host-memory budget",
                f"{lookahead_fill_rows:,}",
                f"{window:,}",
                lookahead,
            )
    return HostMemoryPlan(
        staging_bytes=staging, lookahead_fill_rows=lookahead_fill_rows, parts=parts, budget=budget, **sizes
    )


def estimate_batch_rows(
    dataset, fanouts, batch_size: int, seed: int, batches: int = 3, sampling: str = "uniform"
) -> int:
    """The distinct input rows a training batch needs, measured: 1.25 x the
    largest of the first `batches` sampled batches of epoch 0 (the sampler
    training uses, so the estimate follows the graph, fanouts and sampling)."""
    sampler, seeds = _training_batches(dataset, fanouts, batch_size, seed, sampling)
    return largest_batch_rows(sampler, seeds, dataset.num_nodes, batches)


def largest_batch_rows(sampler, seed_batches, num_nodes: int, batches: int = 3) -> int:
    """1.25 x the largest `input_nodes` of the first `batches` batches of
    epoch 0 that `sampler` draws for `seed_batches` (SeedBatches), at most num_nodes."""
    seeds = seed_batches.epoch(0)[:batches]
    largest = max((sampler.sample(s, 0, i).input_nodes.shape[0] for i, s in enumerate(seeds)), default=0)
    return min(num_nodes, largest + largest // 4)


def build_feature_stack(dataset, **options):
    """The FeatureSource stack for `dataset` (see the module docstring):
    `build_table_stack` over dataset.features, whose SSD tier reads the
    prepared directory's features.bin and whose cache is scored by out-degree
    in the dataset's graph; `options` are build_table_stack's. Returns
    (source, HostMemoryPlan)."""
    from gnnsys.storage.cache import out_degree

    degree = lambda: out_degree(dataset.indices.numpy(), dataset.num_nodes)  # noqa: E731
    ssd = dataset.features if dataset.path is not None else None  # the file the load mapped (and its identity)
    return build_table_stack(dataset.features, ssd=ssd, degree=degree, **options)


def build_table_stack(
    table,
    *,
    ssd,
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
):
    """The FeatureSource stack over the RowTable `table` (see the module docstring).

    ssd: what the SSD tier reads (a prepared dataset directory, or a
    memory-mapped RowTable: storage.ssd.rows_file), None when there is
    nothing on disk to read; degree(): the cache's out-degree score (float64
    per row), called only when the policy needs it.
    features: a placement of storage.placement ("auto", "gpu", "pinned",
    "cpu-gather") or "ssd" (needs `ssd`); cache_rows
    or cache_gb and cache_policy (CACHE_POLICIES: "static" out-degree,
    "presample" hotness, "lru", "sieve", "s3fifo", "hybrid"): the cache (none
    when both are unset/0; on a CUDA device its rows live in GPU memory);
    lookahead > 0 adds a victim buffer of victim_rows rows and reading ahead
    for the cache (the loader passes the window); presample(): the
    pre-sampling hotness score, called only when the policy needs it
    (PRESAMPLED); batch_rows: see plan_host_memory. `ranks` (gnnsys.ranks)
    of several data-parallel ranks: the cache is one `SharedCachedFeatures`
    of world_size x its rows on a gloo group of its own (replicate_frac: the
    share of each rank's slots holding the hottest rows on every rank), with
    no victim buffer. Returns (source, HostMemoryPlan).
    """
    from gnnsys.storage.base import check_stack

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
    source, plan = _bottom(table, ssd, features, device, host_mem_budget, progress, sizes)
    if plan.cache_rows == 0:
        return check_stack(source), plan
    from gnnsys.storage.cache import CachedFeatures, SharedCachedFeatures

    if plan.victim_rows:
        from gnnsys.storage.cache import VictimBuffer

        source = VictimBuffer(source, plan.victim_rows)
    if cache_policy in PRESAMPLED:
        if presample is None:
            raise ConfigError("cache_policy", f"{cache_policy!r} needs a pre-sampling score")
        score = presample()
    else:
        score = degree()
    policy = storage_policy(cache_policy)
    if ranks is not None and ranks.multi:
        shares = dict(score=score, replicate_frac=replicate_frac, group=ranks.new_host_group())
        source = SharedCachedFeatures(source, plan.cache_rows, policy, **shares)
    else:
        source = CachedFeatures(
            source,
            plan.cache_rows,
            policy,
            score=score,
            lookahead_fill=lookahead > 0,
            lookahead_fill_rows=plan.lookahead_fill_rows,
            device=device if on_gpu else None,
        )
    log.info(
        "feature tiers: %s; host memory planned: %s", " over ".join(repr(t) for t in tiers_of(source)), plan.describe()
    )
    return check_stack(source), plan


def _bottom(table, ssd, features, device, host_mem_budget, progress, sizes):
    """(rows source, HostMemoryPlan): the placed table, or the SSD tier reading `ssd` sized by the plan."""
    num_nodes, dim = table.shape
    row_bytes = dim * table.dtype.itemsize
    if features != "ssd":
        from gnnsys.storage.placement import unified

        plan = plan_host_memory(num_nodes, row_bytes, **sizes)
        return unified(table, features, device, progress=progress).source, plan
    if ssd is None:
        raise ConfigError("features", "'ssd' reads a prepared dataset's features.bin; got an in-memory dataset")
    from gnnsys.storage.ssd import DEFAULT_MAX_READ, DEFAULT_THREADS, SSDFeatures

    plan = plan_host_memory(
        num_nodes,
        row_bytes,
        host_mem_budget=host_mem_budget,
        min_staging=DEFAULT_THREADS * DEFAULT_MAX_READ,
        engine_bytes=SSD_ENGINE_BYTES,
        **sizes,
    )
    return SSDFeatures(ssd, host_mem_budget=plan.staging_bytes), plan


def tiers_of(source):
    """The tiers of `source` from the top down (storage.base.tiers)."""
    from gnnsys.storage.base import tiers

    return list(tiers(source))


def tier_stats(source) -> dict:
    """{tier name: its stats()} for every tier of `source` that counts (cache,
    victim, ssd)."""
    return {t.name: stats for t in tiers_of(source) if (stats := t.stats())}


def tier_record(source) -> dict:
    """For an epoch record: {"tiers": tier_stats(source) plus "host_bytes",
    what the tiers hold in host memory at the epoch's end (storage.base.stack_host_bytes)},
    {} when no tier counts."""
    from gnnsys.storage.base import stack_host_bytes

    stats = tier_stats(source)
    return {"tiers": {**stats, "host_bytes": stack_host_bytes(source)}} if stats else {}


def tier_postfix(source, elapsed_s: float) -> dict:
    """Progress-bar values: each counting tier's hit rate, the SSD's MB/s over
    `elapsed_s`, its read amplification over the rows' payload and the times
    it read the whole file's worth of bytes."""
    shown = {}
    for name, s in tier_stats(source).items():
        if "hit_rate" in s:
            shown[name] = f"{s['hit_rate']:.0%}"
        if "bytes_read" in s:
            shown[f"{name}_MB_s"] = f"{s['bytes_read'] / 1e6 / max(elapsed_s, 1e-9):,.0f}"
            shown[f"{name}_amp"] = f"{s['read_amplification']:.2f}x"
            shown[f"{name}_file_x"] = f"{s['file_fraction']:.2f}"
    return shown


def reset_tier_stats(source) -> None:
    """Zero the counters of every tier of `source`."""
    for t in tiers_of(source):
        t.reset_stats()


def _training_batches(dataset, fanouts, batch_size: int, seed: int, sampling: str):
    """(CPU sampler, SeedBatches) over the training seeds, as training draws them."""
    from gnnsys.samplers.factory import make_sampler
    from gnnsys.samplers.seeds import SeedBatches

    sampler = make_sampler("cpu", dataset.indptr, dataset.indices, list(fanouts), seed=seed, sampling=sampling)
    return sampler, SeedBatches(dataset.split("train"), batch_size, shuffle=True, seed=seed)


def presample_score(
    dataset, fanouts, batch_size: int, seed: int, epochs: int = PRESAMPLE_EPOCHS, sampling: str = "uniform"
) -> np.ndarray:
    """GNNLab's hotness: in how many batches of `epochs` pre-sampled epochs of
    the training seeds (numbered from PRESAMPLE_FROM, never trained on) each
    node's features are needed, with the CPU sampler of `sampling`."""
    sampler, seeds = _training_batches(dataset, fanouts, batch_size, seed, sampling)
    return presampled_hotness(sampler, seeds, epochs)


def presampled_hotness(sampler, seed_batches, epochs: int = PRESAMPLE_EPOCHS) -> np.ndarray:
    """storage.cache.presample_hotness of `sampler` (with `num_nodes` and
    `sample`) over `epochs` epochs of `seed_batches` numbered from PRESAMPLE_FROM."""
    from gnnsys.storage.cache import presample_hotness

    return presample_hotness(sampler, seed_batches, range(PRESAMPLE_FROM, PRESAMPLE_FROM + epochs))


def placement_advice(
    num_nodes: int, row_stride: int, row_bytes: int, device="cpu", host_mem_budget: float | None = None
) -> dict:
    """What `gnnsys info` says about placing a table of `num_nodes` rows
    (`row_stride` bytes each on disk, `row_bytes` of data): its size, the
    host memory available, what placement "auto" would pick for `device`,
    and, given a budget (GB), whether the table fits it and the largest cache
    (rows) an SSD stack can keep within it."""
    from gnnsys.datasets.host_memory import available_host_bytes
    from gnnsys.storage.cache import StaticPolicy
    from gnnsys.storage.placement import choose_placement
    from gnnsys.storage.ssd import DEFAULT_MAX_READ, DEFAULT_THREADS

    table = num_nodes * row_stride
    available = available_host_bytes()
    auto = choose_placement(table, device)
    advice = {
        "table_bytes": table,
        "available_host_bytes": available,
        "auto": auto.kind,
        "auto_reason": auto.reason,
        "fits_host_memory": table <= available,
    }
    if host_mem_budget is not None:
        budget = int(host_mem_budget * GB)
        min_staging = DEFAULT_THREADS * DEFAULT_MAX_READ
        staging = min(MAX_STAGING, max(budget - table, min_staging))
        policy = StaticPolicy.planned_bytes(0, num_nodes, scored=True)  # a static cache's per-node state
        per_row = row_bytes + 8 + StaticPolicy.slot_bytes  # a row and its slot's state
        advice.update(
            host_mem_budget_bytes=budget,
            fits_budget=table <= budget,
            min_staging_bytes=min_staging,
            max_cache_rows=max(0, min(num_nodes, (budget - staging - policy) // per_row)),
        )
    return advice


def format_advice(a: dict) -> list[str]:
    """`placement_advice` as the lines of `gnnsys info`."""
    gib = lambda n: f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"  # noqa: E731
    lines = [
        f"table        {gib(a['table_bytes'])} on disk; {gib(a['available_host_bytes'])} of host memory "
        f"available ({'fits' if a['fits_host_memory'] else 'does not fit'})",
        f"placement    auto -> {a['auto']} ({a['auto_reason']})",
    ]
    if "fits_budget" in a:
        budget = gib(a["host_mem_budget_bytes"])
        if a["fits_budget"]:
            verdict = "the table fits; train with it in memory (--features auto)"
        elif a["host_mem_budget_bytes"] < a["min_staging_bytes"]:
            verdict = f"too small even for the SSD tier's read staging ({gib(a['min_staging_bytes'])})"
        else:
            verdict = (
                f"the table does not fit; train with --features ssd and a cache of up to "
                f"{a['max_cache_rows']:,} rows (--cache-rows)"
            )
        lines.append(f"budget       {budget}: {verdict}")
    return lines
