"""What `gnnsys info` says about placing a feature table: its size, the host
memory available, the placement "auto" picks, and within a budget the
largest cache an SSD stack can keep."""

from __future__ import annotations

from gnnsys.host_memory import available_host_bytes

from .cache import StaticPolicy
from .memory_plan import GB, MAX_STAGING
from .placement import choose_placement
from .ssd import DEFAULT_MAX_READ, DEFAULT_THREADS


def placement_advice(
    num_nodes: int, row_stride: int, row_bytes: int, device="cpu", host_mem_budget: float | None = None
) -> dict:
    """What `gnnsys info` says about placing a table of `num_nodes` rows
    (`row_stride` bytes each on disk, `row_bytes` of data): its size, the
    host memory available, what placement "auto" would pick for `device`,
    and, given a budget (GB), whether the table fits it and the largest cache
    (rows) an SSD stack can keep within it."""
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
