"""Zero-copy row gathers against a pinned memcpy of the same bytes (measures on a CUDA GPU).

For each row size (float32 rows) and table layout, a batch of random row ids
is gathered into GPU memory from a table of --table-mib by:

  zero-copy     the Triton kernel reading pinned host rows over PCIe
  gpu-resident  the same kernel reading the same table in GPU memory
  memcpy        a pinned -> device copy of the same bytes, contiguous (the PCIe limit)

Layouts: `aligned` (base and stride on 128-byte lines; the base is asserted
128 B-aligned), `offset` (the same rows, the table's base 64 B past a line,
as torch's allocator leaves a tensor), `packed` (rows of row_bytes - 4 bytes
back to back, an unpadded in-memory tensor).

Kernel time: CUDA events around --calls back-to-back launches of the kernel
alone (storage.triton_gather.launch_args: what gather_rows launches), per
launch, the median of --repeats; the memcpy is timed the same way. Reported
apart, per call of the FeatureSource path (TableFeatures.gather_async: error
buffer, ids, launch, the error's copy and event): `call_s`, its device time
(events around --calls calls), and `host_s`, the host thread's time to issue
one (with a config that sorts the ids, the sort is in `call_s`, not in the
kernel time). `vs_memcpy` = memcpy time / kernel time (1.0: PCIe speed). Rows are
checked bit for bit before timing. The JSON (--out) records the GPU, torch,
Triton, CUDA and each case's launch (tile rows and width, warps, grid, and
where its config came from: this GPU's tuning file from sweep_gather_gpu.py,
gather_plan.MEASURED or the default), and
the target: zero-copy >= 0.9x memcpy for aligned 512 B rows; it is
rewritten after each case, so a run cut short keeps the cases it finished.
--no-plot: no .png.

    python benchmarks/bench_gather_gpu.py --quick          # ~30 s on an H100
    python benchmarks/bench_gather_gpu.py --dry-run [...]  # the plan and its time estimate, no GPU needed

Flags (full default / --quick; a flag given wins over both):
  --row-bytes LIST    256,512,1024,2048,4096 (multiples of 4)
  --layouts LIST      aligned,offset / aligned,offset (of aligned, offset, packed)
  --table-mib N       1024 (>= 64)
  --batch N           200000 ids a gather
  --calls N           20 / 10 launches between two events
  --repeats N         5 / 3 timed runs (the median), after one warm-up run
  --max-programs N    caps the kernel's grid (default: the launch config's thread budget)
  --out PATH          default benchmarks/results/bench_gather_gpu.json
Without a GPU it prints one line and exits with status 2, measuring nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gather_common import (
    LAYOUTS,
    apply_preset,
    check_table,
    cuda_or_exit,
    describe_estimate,
    estimate,
    host_per_call,
    layout_list,
    machine,
    per_call,
    row_bytes_list,
    same_rows,
    shape,
)
from plotting import can_plot, save_figure

RESULTS = Path(__file__).resolve().parent / "results"
PRESETS = {
    "full": dict(row_bytes=[256, 512, 1024, 2048, 4096], layouts=["aligned", "offset"], calls=20, repeats=5),
    "quick": dict(row_bytes=[256, 512, 1024, 2048, 4096], layouts=["aligned", "offset"], calls=10, repeats=3),
}
METHODS = ("zero-copy", "gpu-resident", "memcpy")
TARGET = {"row_bytes": 512, "layout": "aligned", "ratio": 0.9}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    p.add_argument("--row-bytes", type=row_bytes_list, help="comma-separated row sizes in bytes")
    p.add_argument("--layouts", type=layout_list, help=f"comma-separated, of {', '.join(LAYOUTS)}")
    p.add_argument("--table-mib", type=int, default=1024, help="size of each table (default 1024)")
    p.add_argument("--batch", type=int, default=200_000, help="row ids a gather (default 200000)")
    p.add_argument("--calls", type=int, help="launches between two CUDA events")
    p.add_argument("--repeats", type=int, help="timed runs, after a warm-up")
    p.add_argument("--max-programs", type=int, help="cap of the kernel's grid (default: the thread budget)")
    p.add_argument("--out", type=Path, default=RESULTS / "bench_gather_gpu.json")
    p.add_argument("--no-plot", action="store_true", help="write the JSON only")
    p.add_argument("--quick", action="store_true", help="fewer calls and repeats (about 30 s on an H100)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its time estimate, measure nothing")
    args = apply_preset(p.parse_args(argv), PRESETS)
    check_table(p, args)
    for flag in ("calls", "repeats", "max_programs"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')}: {value} must be >= 1")
    return args


def plan(args) -> dict:
    """The cases (row size x layout, each table's shape and gathered bytes) and an estimate of the run's seconds."""
    cases = []
    for row_bytes in args.row_bytes:
        for layout in args.layouts:
            s = shape(row_bytes, layout)
            rows = s.rows(args.table_mib << 20)
            cases.append({"row_bytes": row_bytes, "layout": layout, "dim": s.dim, "stride": s.stride, "rows": rows})
            cases[-1]["gathered_bytes"] = args.batch * s.dim * 4
    # over PCIe per case: kernel, call and memcpy timings ((1 + repeats) x calls each), the host timing, the check
    launches = 3 * (1 + args.repeats) * args.calls + args.calls + 1
    moved = sum(c["gathered_bytes"] for c in cases) * launches
    compiles = 2 * len(cases)  # a kernel a case for pinned and for GPU tables, at most
    return {"cases": cases, **estimate(moved, compiles)}


def print_plan(p: dict, args) -> None:
    for c in p["cases"]:
        print(
            f"{c['row_bytes']:6d} B {c['layout']:8s} dim {c['dim']:5d} stride {c['stride']:6d} "
            f"{c['rows']:>10,d} rows, {c['gathered_bytes'] / 1e6:7.1f} MB a gather"
        )
    print(
        f"plan: {len(p['cases'])} cases, tables of {args.table_mib} MiB, batches of {args.batch}, "
        + describe_estimate(p, args)
    )


def bench_case(row_bytes: int, layout: str, tables, scratch, args) -> dict:
    """Every method for one row size and layout."""
    import torch

    from gnnsys.storage.gather_plan import MEASURED
    from gnnsys.storage.gpu_features import TableFeatures
    from gnnsys.storage.triton_gather import _gather_rows_kernel, launch_args, tuned_configs

    s = shape(row_bytes, layout)
    host, gpu = tables.view(s, "host"), tables.view(s, "gpu")
    if layout == "aligned":
        assert host.data_ptr() % 128 == 0 and gpu.data_ptr() % 128 == 0, "the aligned table is not 128 B-aligned"
    gen = torch.Generator(device="cuda").manual_seed(row_bytes)
    ids = torch.randint(0, host.shape[0], (args.batch,), device="cuda", generator=gen)
    out = torch.empty(args.batch, s.dim, device="cuda")
    nbytes = out.numel() * 4
    result = {"row_bytes": row_bytes, "layout": layout, "dim": s.dim, "stride": s.stride, "gathered_bytes": nbytes}
    result |= {"base_mod_128": host.data_ptr() % 128, "seconds": {}}
    for method, table in (("zero-copy", host), ("gpu-resident", gpu)):
        source = TableFeatures(table, s.dim, torch.float32, "cuda", args.max_programs)
        source.gather(ids, out)  # compiles; checks every id
        assert same_rows(out, table, ids, s), f"{method} {row_bytes} B {layout}: rows differ from the table's"
        err = torch.full((1,), args.batch, dtype=torch.int64, device="cuda")
        grid, launch, meta = launch_args(table, ids, out, err, args.max_programs)
        result["seconds"][method] = per_call(
            lambda: _gather_rows_kernel[grid](*launch, **meta), args.calls, args.repeats
        )
        if method == "zero-copy":
            measured = "tuning file" if tuned_configs(0) else "MEASURED" if MEASURED else "default"
            result["launch"] = {"grid": grid[0], **meta, "config": measured}
            result["call_s"] = per_call(lambda: source.gather_async(ids, out), args.calls, args.repeats)
            result["host_s"] = host_per_call(lambda: source.gather_async(ids, out), args.calls)
    src, dst = scratch[0][:nbytes], scratch[1][:nbytes]
    result["seconds"]["memcpy"] = per_call(lambda: dst.copy_(src, non_blocking=True), args.calls, args.repeats)
    result["gb_per_s"] = {k: nbytes / t / 1e9 for k, t in result["seconds"].items()}
    result["vs_memcpy"] = {k: result["seconds"]["memcpy"] / t for k, t in result["seconds"].items()}
    return result


def target(results: list) -> dict | None:
    """TARGET with the measured ratio and whether it is met (None when that case did not run)."""
    for r in results:
        if r["row_bytes"] == TARGET["row_bytes"] and r["layout"] == TARGET["layout"]:
            ratio = r["vs_memcpy"]["zero-copy"]
            return {**TARGET, "measured": ratio, "met": ratio >= TARGET["ratio"]}
    return None


def plot(results: list, layouts: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(layouts), figsize=(5.5 * len(layouts), 4), sharey=True, squeeze=False)
    for ax, layout in zip(axes[0], layouts):
        rs = [r for r in results if r["layout"] == layout]
        for method in METHODS:
            ax.plot([r["row_bytes"] for r in rs], [r["gb_per_s"][method] for r in rs], marker="o", label=method)
        ax.set(xscale="log", yscale="log", xlabel="row bytes", title=f"{layout}: {LAYOUTS[layout].split('(')[0]}")
    axes[0][0].set_ylabel("effective GB/s (kernel time)")
    axes[0][0].legend()
    save_figure(fig, path)


def main(argv=None) -> int:
    args = parse_args(argv)
    p = plan(args)
    if args.dry_run:
        print_plan(p, args)
        return 0
    status = cuda_or_exit("bench_gather_gpu")
    if status is not None:
        return status
    import torch
    from gather_common import Tables

    from gnnsys.atomic import atomic_write_bytes

    tables = Tables(args.table_mib << 20)
    most = max(c["gathered_bytes"] for c in p["cases"])
    scratch = (
        torch.empty(most, dtype=torch.uint8, pin_memory=True),
        torch.empty(most, dtype=torch.uint8, device="cuda"),
    )
    results: list = []
    report = {"benchmark": "bench_gather_gpu", "machine": machine(), "config": vars(args) | {"out": str(args.out)}}
    report |= {"target": None, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for c in p["cases"]:
        r = bench_case(c["row_bytes"], c["layout"], tables, scratch, args)
        results.append(r)
        print(
            f"{r['row_bytes']:5d} B {r['layout']:8s} "
            + "  ".join(f"{k} {v:6.1f} GB/s" for k, v in r["gb_per_s"].items())
            + f"  zero-copy/memcpy {r['vs_memcpy']['zero-copy']:.2f}x  host {r['host_s'] * 1e6:.0f} us a call",
            flush=True,
        )
        report |= {"target": target(results), "results": results}  # rewritten after every case: a run cut short
        atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())  # keeps the cases it finished
    print(f"wrote {args.out}")
    if report["target"]:
        t = report["target"]
        print(
            f"target: zero-copy {t['measured']:.2f}x memcpy for aligned 512 B rows ({'met' if t['met'] else 'missed'})"
        )
    if not args.no_plot and can_plot(args.out.with_suffix(".png")):
        plot(results, args.layouts, args.out.with_suffix(".png"))
        print(f"wrote {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
