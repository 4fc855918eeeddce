"""Random-read rate of the SSD tier against fio on the same file, at the
same request size and the same number of reads in flight.

For every depth d and tier engine, in the same run and interleaved: the tier
(`SSDFeatures.gather` of fresh random rows, `--batch-size` a gather, repeated
for `--seconds`; max_gap 0 so that its requests are the rows' blocks) and fio
(`--direct=1 --rw=randread --bs=<the dataset's read size>` over features.bin,
time-based for `--seconds`): io_uring against fio's io_uring engine at
`--iodepth=d`, the thread pool of d threads against fio's psync engine with
d jobs (one blocking read each), and fio's libaio at `--iodepth=d` as a third
reference. Reported: requests/s of each and the ratio tier / fio per engine
and depth (medians of `--repeats` rounds), with fio's 1 MiB sequential read
bandwidth. Then the gap merging on real batches: the input nodes of
`--sampled-batches` NeighborSampler batches (fanouts 15/10/5, batch 1024) are
gathered by the tier (default engine) with each max_gap of `--gaps` ("auto":
chosen per gather from the device's probe), interleaved, twice each: median
seconds per batch, requests, amplification and file fraction per batch.
Needs fio (benchmarks/setup_fio.sh). Writes benchmarks/results/ssd_tier.json
and ssd_tier.png.

    bash benchmarks/setup_fio.sh
    python benchmarks/bench_ssd_tier.py /work/bench/papers-0.02 --depths 1,8,32,128 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from helpers import fio, fio_machine
from plotting import can_plot, save_figure

from gnnsys.atomic import atomic_write_bytes
from gnnsys.datasets import load_dataset
from gnnsys.storage.direct_io import row_blocks
from gnnsys.storage.ssd import SSDFeatures

HERE = Path(__file__).resolve().parent
TARGET_SHARE = 0.9
FIO_ENGINE = {"uring": "io_uring", "threads": "psync"}  # the fio engine each tier engine is compared with


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared gnnsys dataset (features.bin on the device to measure)")
    p.add_argument("--depths", default="1,8,32,128", help="reads in flight: ring depth, pool threads, fio depth/jobs")
    p.add_argument("--engines", default="threads,uring", help="SSDFeatures engines (uring where uring_available())")
    p.add_argument("--batch-size", type=int, default=20000, help="random rows per gather")
    p.add_argument("--seconds", type=float, default=2.0, help="length of each tier and fio run")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds (medians reported)")
    p.add_argument("--budget-mib", type=int, default=256, help="SSDFeatures host_mem_budget (staging)")
    p.add_argument("--sampled-batches", type=int, default=4, help="sampled batches for the gap comparison (0: none)")
    p.add_argument("--gaps", default="auto,0,8192", help="max_gap values compared on sampled batches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE / "results" / "ssd_tier.json"))
    args = p.parse_args(argv)
    args.depths = [int(d) for d in args.depths.split(",")]
    args.engines = args.engines.split(",")
    args.gaps = [g if g == "auto" else int(g) for g in args.gaps.split(",")]
    return args


def tier_run(ssd: SSDFeatures, batch: int, seconds: float, rng) -> dict:
    """Gathers of `batch` fresh random rows for about `seconds`: requests/s and rows/s."""
    n, dim = ssd.shape
    out = torch.empty((batch, dim), dtype=ssd.dtype)
    ssd.reset_stats()
    took = 0.0
    while took < seconds:
        ids = torch.from_numpy(rng.choice(n, batch, replace=False))
        began = time.perf_counter()
        ssd.gather(ids, out=out)
        took += time.perf_counter() - began
    s = ssd.stats()
    return {
        "reads_per_s": s["reads"] / took,
        "rows_per_s": s["rows"] / took,
        "mb_per_s": s["bytes_read"] / took / 1e6,
        "mean_read_bytes": s["bytes_read"] / s["reads"],
        "read_amplification": s["read_amplification"],
        "seconds": took,
    }


def compare_gaps(dataset, gaps: list, batches: int, budget: int) -> list:
    """Per max_gap of `gaps`: median seconds per gather of the input nodes of
    `batches` sampled batches (each gathered twice, gaps interleaved) and the
    tier's counters per batch."""
    import gnnsys
    from gnnsys.samplers import NeighborSampler, SeedBatches

    ds = gnnsys.load_dataset(dataset)
    sampler = NeighborSampler(ds.indptr, ds.indices, [15, 10, 5], seed=0)
    seeds = SeedBatches(ds.split("train"), 1024, shuffle=True, seed=0)
    inputs = [sampler.sample(b, 0, i).input_nodes for i, b in zip(range(batches), seeds.epoch(0))]
    tiers = {g: SSDFeatures(ds.features, max_gap=g, host_mem_budget=budget) for g in gaps}
    times = {g: [] for g in gaps}
    try:
        for ids in inputs * 2:
            for g, tier in tiers.items():
                began = time.perf_counter()
                tier.gather(ids)
                times[g].append(time.perf_counter() - began)
        out = []
        for g, tier in tiers.items():
            s, n = tier.stats(), len(times[g])
            out.append(
                {
                    "max_gap": g,
                    "engine": tier.engine,
                    "s_per_batch": statistics.median(times[g]),
                    "rows_per_batch": s["unique_rows"] / n,
                    "reads_per_batch": s["reads"] / n,
                    "read_amplification": s["read_amplification"],
                    "file_fraction_per_batch": s["file_fraction"] / n,
                    "max_gap_mean": s["max_gap_mean"],
                    "loadavg": os.getloadavg(),
                }
            )
            print(
                f"max_gap {g!s:>5} ({tier.engine}): {out[-1]['s_per_batch']:.2f} s/batch, "
                f"{out[-1]['reads_per_batch']:,.0f} requests/batch, amplification {s['read_amplification']:.2f}, "
                f"{out[-1]['file_fraction_per_batch']:.2f} of the file/batch, mean gap {s['max_gap_mean']:,.0f} B",
                flush=True,
            )
        return out
    finally:
        for tier in tiers.values():
            tier.close()


def plot(summary: list, path: Path):
    """Tier requests/s as a share of fio's at the same depth, per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for engine in dict.fromkeys(s["engine"] for s in summary):
        rows = [s for s in summary if s["engine"] == engine]
        ax.plot(
            [s["depth"] for s in rows],
            [s["share"] for s in rows],
            marker="o",
            label=f"{engine} / fio {FIO_ENGINE[engine]}",
        )
    ax.axhline(TARGET_SHARE, color="grey", linestyle="--", label=f"target {TARGET_SHARE}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("reads in flight")
    ax.set_ylabel("tier requests/s / fio requests/s (median)")
    ax.set_title("SSD tier random reads against fio, same request size and depth")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    info = fio_machine()
    rng = np.random.default_rng(args.seed)
    file = Path(args.dataset) / "features.bin"
    table = load_dataset(args.dataset).features
    readers = {}
    for depth in args.depths:
        for engine in args.engines:
            readers[engine, depth] = SSDFeatures(
                table,
                engine=engine,
                threads=depth,
                depth=depth,
                max_gap=0,
                host_mem_budget=args.budget_mib << 20,
                direct=True,
            )
    any_tier = next(iter(readers.values()))
    bs = row_blocks(any_tier.row_bytes, any_tier.stride, any_tier.block) * any_tier.block
    layout = {
        "rows": any_tier.shape[0],
        "row_bytes": any_tier.row_bytes,
        "row_stride": any_tier.stride,
        "block": any_tier.block,
        "read_size": bs,
        "file_bytes": file.stat().st_size,
    }
    runs = []
    try:
        for rep in range(args.repeats):
            for depth in args.depths:
                for engine in args.engines:
                    load = os.getloadavg()
                    tier = tier_run(readers[engine, depth], args.batch_size, args.seconds, rng)
                    refs = {e: fio(file, bs, depth, e, args.seconds) for e in (FIO_ENGINE[engine], "libaio")}
                    runs.append(
                        {"repeat": rep, "engine": engine, "depth": depth, "loadavg": load, "tier": tier, "fio": refs}
                    )
                    print(
                        f"rep {rep} {engine:7s} depth {depth:3d}: tier {tier['reads_per_s']:9,.0f} req/s | fio "
                        + " ".join(f"{e} {r['reads_per_s']:9,.0f}" for e, r in refs.items())
                        + f" | load {load[0]:.2f}",
                        flush=True,
                    )
        seq = [fio(file, 1 << 20, 8, "io_uring", args.seconds, rw="read") for _ in range(args.repeats)]
    finally:
        for r in readers.values():
            r.close()
    gaps = (
        compare_gaps(args.dataset, args.gaps, args.sampled_batches, args.budget_mib << 20)
        if args.sampled_batches
        else []
    )
    info["loadavg_end"] = os.getloadavg()
    summary = []
    for depth in args.depths:
        for engine in args.engines:
            mine = [r for r in runs if r["engine"] == engine and r["depth"] == depth]
            med = lambda f: statistics.median(f(r) for r in mine)  # noqa: E731
            tier = med(lambda r: r["tier"]["reads_per_s"])
            ref = med(lambda r: r["fio"][FIO_ENGINE[engine]]["reads_per_s"])
            libaio = med(lambda r: r["fio"]["libaio"]["reads_per_s"])
            summary.append(
                {
                    "engine": engine,
                    "depth": depth,
                    "tier_reads_per_s": tier,
                    "tier_rows_per_s": med(lambda r: r["tier"]["rows_per_s"]),
                    "tier_mean_read_bytes": med(lambda r: r["tier"]["mean_read_bytes"]),
                    "fio_engine": FIO_ENGINE[engine],
                    "fio_reads_per_s": ref,
                    "fio_libaio_reads_per_s": libaio,
                    "share": tier / ref,
                    "share_of_best_fio": tier / max(ref, libaio),
                }
            )
    worst = min(summary, key=lambda s: s["share"])
    result = {
        "benchmark": "ssd_tier",
        "dataset": str(Path(args.dataset).resolve()),
        "machine": info,
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "layout": layout,
        "fio_sequential": {
            "bs": 1 << 20,
            "depth": 8,
            "engine": "io_uring",
            "mb_per_s": statistics.median(s["mb_per_s"] for s in seq),
        },
        "summary": summary,
        "runs": runs,
        "gaps_on_sampled_batches": gaps,
        "target": {
            "share": TARGET_SHARE,
            "worst": worst["share"],
            "worst_case": f"{worst['engine']} depth {worst['depth']}",
            "met": worst["share"] >= TARGET_SHARE,
        },
    }
    out = Path(args.out)
    atomic_write_bytes(out, json.dumps(result, indent=1).encode())
    if can_plot(out.with_suffix(".png")):
        plot(summary, out.with_suffix(".png"))
    print(f"{'engine':>7} {'depth':>5} {'tier req/s':>11} {'fio req/s':>10} {'share':>6} {'libaio':>10}")
    for s in summary:
        print(
            f"{s['engine']:>7} {s['depth']:>5} {s['tier_reads_per_s']:>11,.0f} {s['fio_reads_per_s']:>10,.0f} "
            f"{s['share']:>6.2f} {s['fio_libaio_reads_per_s']:>10,.0f}"
        )
    print(
        f"fio sequential 1 MiB reads: {result['fio_sequential']['mb_per_s']:,.0f} MB/s; "
        f"target tier >= {TARGET_SHARE} x fio: worst {worst['share']:.2f} ({result['target']['worst_case']})"
    )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
