"""Sweep of the gather kernel's launch configs on a GPU; the fastest per row size is written where the kernel reads it.

For each row size (float32 rows in an aligned pinned table of --table-mib,
batches of --batch random ids, zero-copy), every launch config of --rows
(rows a tile) x --warps (a program) x --threads-per-sm (the grid's thread
budget a multiprocessor; an upper bound: launch_args cuts the grid to the
programs a multiprocessor holds at once, by the kernel's registers) is
timed, kernel only: CUDA events around --calls launches, the median of
--repeats after a warm-up. Configs whose tile would
not fit a thread's registers (storage.gather_plan.max_tile_rows) are left
out; the default config (gather_plan.default_config) is always measured.
Then the fastest config of each row size is timed once more with the ids
sorted on the device first (LaunchConfig.sort: rows read in address order,
stored through the permutation; its time includes the sort). Each config's
rows are checked against the table before it is timed.

The fastest config of each row size
- goes into this GPU's tuning file, gather-<gpu name>.json under
  $GNNSYS_CACHE_DIR (default ~/.cache/gnnsys; --tuning-dir DIR elsewhere,
  --no-install nowhere), which gather_rows reads the first time it runs on
  that GPU (so bench_gather_gpu.py run after this sweep measures the tuned
  kernel; its JSON says so per case);
- is printed as the lines of storage/gather_plan.py's MEASURED (the configs
  used on GPUs without a tuning file);
- is in the results JSON (--out) with every measurement, the GPU, torch,
  Triton and CUDA (rewritten after each row size, so a run cut short keeps
  the sizes it swept).

    python benchmarks/sweep_gather_gpu.py --quick          # ~60 s on an H100
    python benchmarks/sweep_gather_gpu.py --dry-run [...]  # the configs and a time estimate, no GPU needed

Flags (full default / --quick; a flag given wins over both):
  --row-bytes LIST        256,512,1024,2048,4096 / 512,2048 (multiples of 4)
  --rows LIST             4,8,16,32,64,128 / 8,16,32,64 (powers of two)
  --warps LIST            4,8 / 4,8 (powers of two, at most 16)
  --threads-per-sm LIST   512,1024,2048 / 1024,2048
  --table-mib N           1024 (>= 64)
  --batch N               200000
  --calls N               10 / 5
  --repeats N             3 / 2
  --out PATH              default benchmarks/results/sweep_gather_gpu.json
Without a GPU it prints one line and exits with status 2, measuring nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from gather_common import (
    apply_preset,
    check_table,
    cuda_or_exit,
    describe_estimate,
    estimate,
    int_list,
    machine,
    per_call,
    row_bytes_list,
    same_rows,
    shape,
)

from gnnsys.storage.gather_plan import LaunchConfig, default_config, max_tile_rows, plan_gather

RESULTS = Path(__file__).resolve().parent / "results"
PRESETS = {
    "full": dict(
        row_bytes=[256, 512, 1024, 2048, 4096],
        rows=[4, 8, 16, 32, 64, 128],
        warps=[4, 8],
        threads_per_sm=[512, 1024, 2048],
        calls=10,
        repeats=3,
    ),
    "quick": dict(
        row_bytes=[512, 2048], rows=[8, 16, 32, 64], warps=[4, 8], threads_per_sm=[1024, 2048], calls=5, repeats=2
    ),
}


def pow2_list(high: int):
    """An argparse type: distinct powers of two in 1..high."""

    def parse(text: str) -> list[int]:
        values = int_list(text, 1, high)
        bad = [v for v in values if v & (v - 1)]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]} is not a power of two")
        return values

    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    p.add_argument("--row-bytes", type=row_bytes_list, help="comma-separated row sizes in bytes")
    p.add_argument("--rows", type=pow2_list(1024), help="rows a tile to try")
    p.add_argument("--warps", type=pow2_list(16), help="warps a program to try")
    p.add_argument(
        "--threads-per-sm",
        type=lambda text: int_list(text, 32, 1 << 16),
        help="thread budgets a multiprocessor to try",
    )
    p.add_argument("--table-mib", type=int, default=1024, help="size of the table (default 1024)")
    p.add_argument("--batch", type=int, default=200_000, help="row ids a gather (default 200000)")
    p.add_argument("--calls", type=int, help="launches between two CUDA events")
    p.add_argument("--repeats", type=int, help="timed runs, after a warm-up")
    p.add_argument("--out", type=Path, default=RESULTS / "sweep_gather_gpu.json")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--tuning-dir", type=Path, help="where the tuning file goes (default: the machine cache)")
    where.add_argument("--no-install", action="store_true", help="write no tuning file")
    p.add_argument("--quick", action="store_true", help="2 row sizes, a smaller grid (about 60 s on an H100)")
    p.add_argument("--dry-run", action="store_true", help="print the configs and a time estimate, measure nothing")
    args = apply_preset(p.parse_args(argv), PRESETS)
    check_table(p, args)
    for flag in ("calls", "repeats"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag}: {getattr(args, flag)} must be >= 1")
    return args


def aligned_plan(row_bytes: int):
    """The gather plan of rows of `row_bytes` in the aligned layout (tables and outputs on lines)."""
    s = shape(row_bytes, "aligned")
    return plan_gather(4096, s.stride, 4096, s.dim * 4)


def configs_for(row_bytes: int, args) -> list[LaunchConfig]:
    """The configs to time for rows of `row_bytes` in the aligned layout: the
    grid of flags whose tiles fit (max_tile_rows), and the default config."""
    plan = aligned_plan(row_bytes)
    grid = [
        LaunchConfig(rows, warps, threads)
        for warps in args.warps
        for rows in args.rows
        if rows <= max_tile_rows(plan, warps)
        for threads in args.threads_per_sm
    ]
    default = default_config(plan.load_bytes)
    return grid if default in grid else [*grid, default]


def plan(args) -> dict:
    """{row bytes: configs} and an estimate of the run's seconds (each row size's fastest config
    is timed once more with ids sorted: one more config and compile a row size)."""
    configs = {r: configs_for(r, args) for r in args.row_bytes}
    runs = (1 + args.repeats) * args.calls + 1
    moved = sum(args.batch * r * (len(cs) + 1) * runs for r, cs in configs.items())
    compiles = sum(len({(c.rows, c.warps) for c in cs}) + 1 for cs in configs.values())
    return {"configs": configs, **estimate(moved, compiles)}


def print_plan(p: dict, args) -> None:
    for row_bytes, configs in p["configs"].items():
        shown = ", ".join(f"{c.rows}x{c.warps}w/{c.threads_per_sm}" for c in configs)
        print(f"{row_bytes:6d} B: {len(configs)} configs (rows x warps / threads a SM): {shown}")
    total = sum(len(cs) for cs in p["configs"].values())
    print(
        f"plan: {total} configs and the fastest of each row size with ids sorted, "
        f"a table of {args.table_mib} MiB, batches of {args.batch}, " + describe_estimate(p, args)
    )


def best(measured: list) -> dict:
    """{row bytes: the fastest measurement} of `measured`."""
    fastest = {}
    for m in measured:
        if m["row_bytes"] not in fastest or m["seconds"] < fastest[m["row_bytes"]]["seconds"]:
            fastest[m["row_bytes"]] = m
    return fastest


def code_lines(fastest: dict) -> list[str]:
    """The fastest configs as the lines of storage/gather_plan.py's MEASURED."""
    return [
        f"    {r}: LaunchConfig(rows={m['rows']}, warps={m['warps']}, "
        f"threads_per_sm={m['threads_per_sm']}, sort={m['sort']}),"
        for r, m in sorted(fastest.items())
    ]


def sweep_size(row_bytes: int, configs: list, tables, args) -> list[dict]:
    """Seconds a gather of every config for one row size (the kernel alone), then of
    the fastest with ids sorted on the device (the kernel and the sort)."""
    import torch

    s = shape(row_bytes, "aligned")
    table = tables.view(s, "host")
    gen = torch.Generator(device="cuda").manual_seed(row_bytes)
    ids = torch.randint(0, table.shape[0], (args.batch,), device="cuda", generator=gen)
    out = torch.empty(args.batch, s.dim, device="cuda")
    measured = [measure(config, table, ids, out, s, args) for config in configs]
    fastest = min(measured, key=lambda m: m["seconds"])
    sort_s = per_call(lambda: torch.sort(ids), args.calls, args.repeats)
    sorted_config = LaunchConfig(fastest["rows"], fastest["warps"], fastest["threads_per_sm"], sort=True)
    return [*measured, measure(sorted_config, table, ids, out, s, args, sort_s)]


def measure(config: LaunchConfig, table, ids, out, s, args, extra_s: float = 0.0) -> dict:
    """One config's kernel seconds (+ extra_s), its rows checked first."""
    import torch

    from gnnsys.storage.triton_gather import _gather_rows_kernel, launch_args

    err = torch.full((1,), args.batch, dtype=torch.int64, device="cuda")
    grid, launch, meta = launch_args(table, ids, out, err, None, config)
    out.zero_()
    compiled = _gather_rows_kernel[grid](*launch, **meta)  # Triton returns the compiled kernel
    assert same_rows(out, table, ids, s) and int(err[0]) == args.batch, f"{s.row_bytes} B, {config}: rows differ"
    seconds = per_call(lambda: _gather_rows_kernel[grid](*launch, **meta), args.calls, args.repeats) + extra_s
    m = {"row_bytes": s.row_bytes, **asdict(config), "grid": grid[0], "block_r": meta["BLOCK_R"]}
    m["registers"] = getattr(compiled, "n_regs", None)  # registers x threads_per_sm > 65536: not all resident
    m |= {"seconds": seconds, "gb_per_s": out.numel() * 4 / seconds / 1e9}
    m["default"] = config == default_config(aligned_plan(s.row_bytes).load_bytes)
    print(
        f"{s.row_bytes:5d} B rows {config.rows:4d} warps {config.warps:2d} threads/SM {config.threads_per_sm:5d} "
        f"grid {grid[0]:5d}{' sorted' if config.sort else ''}: {m['gb_per_s']:6.1f} GB/s"
        + ("  (default)" if m["default"] else ""),
        flush=True,
    )
    return m


def main(argv=None) -> int:
    args = parse_args(argv)
    p = plan(args)
    if args.dry_run:
        print_plan(p, args)
        return 0
    status = cuda_or_exit("sweep_gather_gpu")
    if status is not None:
        return status
    from gather_common import Tables

    from gnnsys.atomic import atomic_write_bytes
    from gnnsys.storage.gather_plan import tuning_document, tuning_path
    from gnnsys.storage.machine_cache import write_cache

    facts = machine()
    tables = Tables(args.table_mib << 20)
    report = {"benchmark": "sweep_gather_gpu", "machine": facts, "config": vars(args) | {"out": str(args.out)}}
    report["config"]["tuning_dir"] = str(args.tuning_dir) if args.tuning_dir else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    measured: list = []
    for r, cs in p["configs"].items():  # the report rewritten after each row size: a run cut short keeps them
        measured += sweep_size(r, cs, tables, args)
        atomic_write_bytes(args.out, json.dumps(report | {"measured": measured}, indent=2).encode())
    fastest = best(measured)
    defaults = {m["row_bytes"]: m for m in measured if m["default"]}
    for r, m in sorted(fastest.items()):
        print(f"{r:5d} B: fastest {m['gb_per_s']:.1f} GB/s, {defaults[r]['seconds'] / m['seconds']:.2f}x the default")
    print("for storage/gather_plan.py's MEASURED:\n" + "\n".join(code_lines(fastest)))
    tuned = {r: LaunchConfig(m["rows"], m["warps"], m["threads_per_sm"], m["sort"]) for r, m in fastest.items()}
    doc = tuning_document(facts["gpu"], tuned, torch=facts["torch"], triton=facts["triton"])
    status = 0
    if not args.no_install:
        path = tuning_path(facts["gpu"], args.tuning_dir)
        if write_cache(path, doc):
            print(f"wrote {path} (gather_rows reads it on this GPU)")
        else:
            status = 1
    report |= {"fastest": doc["configs"], "measured": measured}
    atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())
    print(f"wrote {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
