"""Raw throughput of the SSD tier (issue 12, benchmark b): rows/s and MB/s of
`SSDFeatures.gather` for random id sets of a sampled batch's size, against a
plain O_DIRECT pread loop (one read of one block per row, same threads) on the
same file in the same run: the device's random-read rate at that depth.
`--engines` compares the tier's read engines (the thread pool, io_uring) in
the same run, each with `--threads` reads in flight (threads or ring depth).

Each case (engine x threads x batch size) runs `--repeats` times, tier and device
alternating, each run with fresh random ids (nothing is served twice), and
reports medians. Writes benchmarks/results/ssd_tier.json (and ssd_tier.png
with matplotlib).

    python -m gnnsys prepare synthetic --like ogbn-products --scale 1.8 --align 512 --out /tmp/ssd-bench/p
    python benchmarks/bench_ssd_tier.py /tmp/ssd-bench/p --threads 8,32 --batch-sizes 100000,400000 \\
        --engines threads,uring
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from gnnsys.datasets.atomic import atomic_write_bytes
from gnnsys.storage.direct_io import aligned
from gnnsys.storage.ssd import SSDFeatures
from plotting import save_figure

HERE = Path(__file__).resolve().parent
TARGET_IOPS_SHARE, TARGET_AMPLIFICATION = 0.80, 1.25


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared gnnsys dataset (features.bin with 512 B-aligned rows)")
    p.add_argument("--threads", default="8,32", help="reads in flight: pool threads, ring depth (comma-separated)")
    p.add_argument("--engines", default="threads,uring", help="SSDFeatures engines to compare (comma-separated: "
                   "threads, uring; uring where uring_available())")
    p.add_argument("--batch-sizes", default="100000,400000", help="unique ids per gather (comma-separated)")
    p.add_argument("--repeats", type=int, default=3, help="runs per case (>= 3 for a reported median)")
    p.add_argument("--budget-mib", type=int, default=256, help="SSDFeatures host_mem_budget (staging)")
    p.add_argument("--max-gap", type=int, default=0,
                   help="SSDFeatures max_gap (default 0: one request per run of adjoining rows, so tier and device "
                        "reads/s compare requests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE / "results" / "ssd_tier.json"))
    args = p.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",")]
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    args.engines = args.engines.split(",")
    return args


def machine() -> dict:
    """Platform, CPUs, load and versions of the machine running the benchmark."""
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "loadavg_note": "Linux counts threads waiting in reads in the load average: the benchmark's own "
                            "reader threads raise loadavg_end",
            "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}


def device_reads(path: Path, offsets: np.ndarray, block: int, threads: int) -> float:
    """Seconds for `threads` threads to pread `block` bytes at every offset with
    O_DIRECT (each thread a contiguous share, one aligned buffer per thread)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    shares = np.array_split(offsets, threads)

    def loop(share):
        buf = memoryview(aligned(block))
        for off in share.tolist():
            if os.preadv(fd, [buf], off) != block:
                raise OSError(f"short read at {off}")

    try:
        with ThreadPoolExecutor(threads) as pool:
            began = time.perf_counter()
            list(pool.map(loop, shares))
            return time.perf_counter() - began
    finally:
        os.close(fd)


def run_case(ssd: SSDFeatures, threads: int, batch: int, repeats: int, rng) -> dict:
    """Tier and device runs of one (engine, threads, batch) case, with their medians."""
    n, dim = ssd.shape
    out = torch.empty((batch, dim), dtype=ssd.dtype)
    runs = []
    for _ in range(repeats):
        ids = torch.from_numpy(rng.choice(n, batch, replace=False))
        ssd.reset_stats()
        began = time.perf_counter()
        ssd.gather(ids, out=out)
        tier_s = time.perf_counter() - began
        s = ssd.stats()
        offsets = np.sort(rng.choice(n, batch, replace=False)) * ssd.stride
        dev_s = device_reads(ssd.path, rng.permutation(offsets), ssd.block, threads)
        runs.append({"tier_s": tier_s, "tier_rows_per_s": batch / tier_s, "tier_reads_per_s": s["reads"] / tier_s,
                     "tier_device_mb_per_s": s["bytes_read"] / tier_s / 1e6,
                     "tier_useful_mb_per_s": s["useful_bytes"] / tier_s / 1e6, "reads": s["reads"],
                     "bytes_read": s["bytes_read"], "useful_bytes": s["useful_bytes"],
                     "read_amplification": s["read_amplification"], "device_s": dev_s,
                     "device_reads_per_s": batch / dev_s, "device_mb_per_s": batch * ssd.block / dev_s / 1e6})
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["iops_share"] = med["tier_reads_per_s"] / med["device_reads_per_s"]
    med["rows_share"] = med["tier_rows_per_s"] / med["device_reads_per_s"]
    return {"engine": ssd.engine, "threads": threads, "batch": batch, "runs": runs, "median": med}


def plot(cases: list, path: Path):
    """Bars of tier reads/s and rows/s against device reads/s per case."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{c['engine']} {c['threads']}\n{c['batch'] // 1000}k ids" for c in cases]
    x = np.arange(len(cases))
    fig, ax = plt.subplots(figsize=(1.8 * len(cases) + 2, 4))
    bars = [("device_reads_per_s", "device: O_DIRECT pread loop, reads/s"),
            ("tier_reads_per_s", "SSDFeatures reads/s"), ("tier_rows_per_s", "SSDFeatures rows/s")]
    for i, (key, name) in enumerate(bars):
        ax.bar(x + (i - 1) * 0.27, [c["median"][key] / 1e3 for c in cases], 0.27, label=name)
    ax.set_xticks(x, labels)
    ax.set_ylabel("thousands per second (median)")
    ax.set_title("SSD tier vs device, 512 B random reads")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    info = machine()
    cases = []
    for threads in args.threads:
        for engine in args.engines:
            with SSDFeatures(args.dataset, threads=threads, depth=threads, engine=engine, max_gap=args.max_gap,
                             host_mem_budget=args.budget_mib << 20, direct=True) as ssd:
                layout = {"rows": ssd.shape[0], "row_bytes": ssd.row_bytes, "row_stride": ssd.stride,
                          "block": ssd.block, "file_bytes": ssd.shape[0] * ssd.stride}
                for batch in args.batch_sizes:
                    case = run_case(ssd, threads, batch, args.repeats, rng)
                    m = case["median"]
                    print(f"{engine:7s} {threads:3d} in flight, batch {batch:7d}: tier {m['tier_rows_per_s']:9.0f} "
                          f"rows/s {m['tier_reads_per_s']:8.0f} reads/s {m['tier_device_mb_per_s']:6.1f} MB/s "
                          f"amp {m['read_amplification']:.3f} | device {m['device_reads_per_s']:8.0f} reads/s "
                          f"{m['device_mb_per_s']:6.1f} MB/s | share {m['iops_share']:.2f}", flush=True)
                    cases.append(case)
    info["loadavg_end"] = os.getloadavg()
    worst_share = min(c["median"]["iops_share"] for c in cases)
    by_engine = {e: min(c["median"]["iops_share"] for c in cases if c["engine"] == e) for e in args.engines}
    worst_amp = max(c["median"]["read_amplification"] for c in cases)
    stored_amp = max(c["median"]["bytes_read"] / (c["batch"] * layout["row_stride"]) for c in cases)
    result = {"benchmark": "ssd_tier", "dataset": str(Path(args.dataset).resolve()), "machine": info,
              "layout": layout, "repeats": args.repeats, "budget_mib": args.budget_mib, "cases": cases,
              "targets": {"iops_share": {"target": TARGET_IOPS_SHARE, "worst": worst_share,
                                         "worst_by_engine": by_engine, "met": worst_share >= TARGET_IOPS_SHARE},
                          "read_amplification": {"target": TARGET_AMPLIFICATION, "worst_over_payload": worst_amp,
                                                 "worst_over_stored_row": stored_amp,
                                                 "layout_floor": layout["row_stride"] / layout["row_bytes"],
                                                 "met_over_stored_row": stored_amp <= TARGET_AMPLIFICATION,
                                                 "met_over_payload": worst_amp <= TARGET_AMPLIFICATION}}}
    out = Path(args.out)
    atomic_write_bytes(out, json.dumps(result, indent=1).encode())
    try:
        plot(cases, out.with_suffix(".png"))
    except ImportError:
        print("matplotlib is not installed: no plot")
    print(json.dumps(result["targets"], indent=1))


if __name__ == "__main__":
    main()
