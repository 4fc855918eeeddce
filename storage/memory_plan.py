"""The plan of the host memory a stack of feature tiers holds.

`plan_host_memory` sizes every part a stack holds in host memory (cache
rows, the policy's per-node state and window, victim rows and index, SSD
read staging, rows read ahead, pinned staging for a GPU) and, with `host_mem_budget`, fits them into
it: the rows read ahead get what the rest leaves (up to the window's worth;
the cache's stats say how many were skipped for lack of room), and a budget
that cannot hold the rest is refused with one line naming each part and its
size.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from gnnsys.errors import ConfigError

log = logging.getLogger(__name__)

GB = 10**9
MAX_STAGING = 64 << 20  # staging beyond this buys no throughput (benchmarks/README.md, SSD tier)
FIRST_STAGING = 8 << 20  # staging served before the rows read ahead (a full ring of 64 KiB reads)
SSD_ENGINE_BYTES = 1 << 20  # held for the SSD tier's read engine (io_uring's rings are about 20 KiB)


@dataclass(frozen=True)
class HostMemoryPlan:
    """Rows of the cache, of the victim buffer and read ahead (None: bounded
    only by the window), bytes of SSD read staging (None: the tier's
    default), for rows of `row_bytes` bytes; `parts`: the planned bytes of
    every part ("tier.part"), `budget` the bytes it had to fit (or None),
    `note` one line on which tier reads the rows and why (out-of-core stacks)."""

    cache_rows: int
    victim_rows: int
    staging_bytes: int | None
    lookahead_fill_rows: int | None
    row_bytes: int
    parts: dict = field(default_factory=dict)
    budget: int | None = None
    note: str = ""

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
    pinned: dict | None = None,
) -> HostMemoryPlan:
    """The sizes of the host-memory parts of a stack (see HostMemoryPlan).

    cache_gb (GB = 10^9 bytes) converts to rows (at least one: ConfigError
    otherwise); the victim buffer defaults
    to a quarter of the cache when lookahead > 0 (else none); batch_rows:
    the distinct rows one batch needs (estimate_batch_rows), which sizes the
    policy's window and the rows read ahead (lookahead x batch_rows at most);
    cache_on_host False: the cache's rows live on a GPU; engine_bytes: held
    for the SSD tier's read engine; pinned: {part: bytes} of the pinned
    buffers that stage host rows for a GPU (storage/staging.py). With a budget (GB) what the fixed parts
    leave is shared: the SSD staging gets up to FIRST_STAGING (at least
    `min_staging`, one read per SSD thread), the rows read ahead up to the
    window's worth, then the staging up to MAX_STAGING again;
    ConfigError("host_mem_budget") naming every part when the fixed parts and
    `min_staging` do not fit.
    """
    from gnnsys.storage.cache import VictimBuffer, run_policy

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
        parts["cache.policy"] = run_policy(cache_policy).planned_bytes(
            cache_rows, num_nodes, scored=True, window_ids=window
        )
    if victim_rows:
        parts["victim"] = VictimBuffer.planned_bytes(victim_rows, num_nodes, row_bytes)
    if engine_bytes:
        parts["ssd.engine"] = engine_bytes
    parts.update(pinned or {})
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
