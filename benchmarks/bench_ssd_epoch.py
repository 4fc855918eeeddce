"""Training epochs with features on SSD (issue 12, benchmarks c and d).

Each run is a fresh child process that builds the minibatch trainer
(gnnsys.minibatch.MinibatchTrainer) with the tiers of one mode and trains
`--epochs` epochs of SAGE over the first `--batches` batches of a fixed
random subset of the training seeds (no evaluation):

- memory: the whole feature table read into RAM first (the in-memory peer);
- memmap: numpy.memmap of features.bin through the page cache, the file's
  pages dropped before the run (`echo 1 > /proc/sys/vm/drop_caches` where
  permitted, else posix_fadvise(DONTNEED));
- ssd-<f>: `features="ssd"` with a cache of fraction f of the nodes under
  `--host-mem-budget` (default: 45% of features.bin), policy `--policy`,
  lookahead `--lookahead`.

Device bytes per epoch are the sectors read from the block device holding
the dataset during the epoch (/sys/dev/block/M:m/stat, for every mode alike;
/proc/self/io does not count a memory map's page faults here). The device's bandwidth for
this pattern is measured in the same run with a plain O_DIRECT pread loop of
random single blocks (bench_ssd_tier.device_reads) at the tier's thread
count. Repeats alternate the modes; medians are reported. Writes JSON and a
PNG under benchmarks/results/ (--name).

    python benchmarks/bench_ssd_epoch.py /work/bench12/products-0.5 --batches 12 --epochs 3 --repeats 3
    python benchmarks/bench_ssd_epoch.py /work/bench12/papers-0.18 --modes ssd-0.05 --batches 20 --epochs 1 \\
        --repeats 1 --host-mem-budget 4 --name ssd_epoch_papers
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_ssd_tier import device_reads, machine  # noqa: E402
from plotting import save_figure  # noqa: E402

TARGET_STEADY, TARGET_FIRST = 1.15, 1.5


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared dataset with 512 B-aligned feature rows")
    p.add_argument("--modes", default="memory,memmap,ssd-0.05,ssd-0.1,ssd-0.2")
    p.add_argument("--batches", type=int, default=12, help="training batches per epoch")
    p.add_argument("--epochs", type=int, default=3, help="epoch 1 is the first (cold), the rest steady state")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--policy", default="static")
    p.add_argument("--lookahead", type=int, default=0)
    p.add_argument("--host-mem-budget", type=float, help="GB (default: 45%% of features.bin)")
    p.add_argument("--device-seconds", type=float, default=3.0, help="length of the device-rate measurement")
    p.add_argument("--name", default="ssd_epoch")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def read_bytes(path: Path) -> int:
    """Bytes read so far from the block device holding `path` (its sectors
    read in /sys/dev/block: every reader of the device counts, page-cache
    misses of a memory map included; the machine must be otherwise idle)."""
    dev = os.stat(path).st_dev
    with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat") as f:
        return int(f.read().split()[2]) * 512


def drop_page_cache(path: Path) -> str:
    """Evict `path` from the page cache; says how."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "drop_caches"
    except OSError:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        return "fadvise"


def child(args) -> dict:
    """One run of one mode in this process: per-epoch records."""
    import torch

    from gnnsys.datasets import load_dataset
    from gnnsys.datasets.feature_table import RowTable
    from gnnsys.loader import MinibatchLoader
    from gnnsys.minibatch import MinibatchTrainer
    from gnnsys.training.options import MinibatchOptions

    ds = load_dataset(args.dataset)
    mode = args.child
    tiers = dict(features="ssd", cache_rows=int(float(mode.split("-")[1]) * ds.num_nodes), cache_policy=args.policy,
                 lookahead=args.lookahead, host_mem_budget=args.host_mem_budget) if mode.startswith("ssd") else {}
    dropped = drop_page_cache(ds.path / "features.bin") if mode == "memmap" else None
    options = MinibatchOptions(fanouts=[int(f) for f in args.fanouts.split(",")], batch_size=args.batch_size,
                               hidden=args.hidden, epochs=args.epochs, progress=False, **tiers).for_dataset(ds)
    began = time.perf_counter()
    trainer = MinibatchTrainer(ds, options)
    if mode == "memory":
        trainer.features = RowTable.from_tensor(ds.features.gather(torch.arange(ds.num_nodes)))
    setup_s = time.perf_counter() - began
    seeds = ds.split("train")
    seeds = seeds[torch.from_numpy(np.random.default_rng(0).permutation(seeds.shape[0]))][:args.batches * args.batch_size]
    loader = MinibatchLoader(ds, seeds, list(options.fanouts), batch_size=args.batch_size, seed=0,
                             prefetch=options.prefetch, features=trainer.features, lookahead=options.lookahead)
    epochs = []
    for e in range(args.epochs):
        before = read_bytes(ds.path)
        record = trainer._epoch(loader, e)
        record["device_bytes"] = read_bytes(ds.path) - before
        epochs.append(record)
    return {"mode": mode, "setup_s": setup_s, "page_cache": dropped, "epochs": epochs,
            "rss_peak_mib": _peak_rss_mib()}


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def device_rate(path: Path, seconds: float, size: int = 512, threads: int = 16) -> dict:
    """Random O_DIRECT reads of `size` bytes (a multiple of 512) at 512 B-aligned
    offsets of features.bin for about `seconds`: reads/s and MB/s."""
    file = path / "features.bin"
    blocks = (file.stat().st_size - size) // 512
    rng = np.random.default_rng(1)
    count = 2_000
    took = device_reads(file, rng.integers(0, blocks, count) * 512, size, threads)
    count = int(count * max(1.0, seconds / took))
    took = device_reads(file, rng.integers(0, blocks, count) * 512, size, threads)
    return {"reads_per_s": count / took, "mb_per_s": count * size / took / 1e6, "threads": threads, "size": size}


def measure_device(path: Path, runs: list, seconds: float) -> dict:
    """The device's rate for random reads of the SSD runs' mean read size
    (rounded up to 512 B; 512 B without SSD runs), measured now."""
    sizes = [e["tiers"]["ssd"]["bytes_read"] / e["tiers"]["ssd"]["reads"]
             for r in runs for e in r["epochs"] if e.get("tiers", {}).get("ssd", {}).get("reads")]
    size = max(512, -(-int(statistics.median(sizes)) // 512) * 512) if sizes else 512
    device = device_rate(path, seconds, size)
    print(f"device: {device['reads_per_s']:,.0f} random {size} B reads/s ({device['mb_per_s']:.1f} MB/s) at "
          f"{device['threads']} threads, O_DIRECT", flush=True)
    return device


def summarize(runs: list, device: dict) -> dict:
    """Per mode: first-epoch and steady-state medians, device bytes, hit rates, targets."""
    out = {}
    for mode in dict.fromkeys(r["mode"] for r in runs):
        mine = [r for r in runs if r["mode"] == mode]
        first = statistics.median(r["epochs"][0]["time_s"] for r in mine)
        steady_runs = [statistics.median(e["time_s"] for e in r["epochs"][1:]) for r in mine if len(r["epochs"]) > 1]
        steady = statistics.median(steady_runs) if steady_runs else None
        dev = statistics.median(statistics.median(e["device_bytes"] for e in r["epochs"][1:] or r["epochs"])
                                for r in mine)
        tiers = mine[0]["epochs"][-1].get("tiers", {})
        out[mode] = {"first_s": first, "steady_s": steady, "device_bytes_steady": dev,
                     "hit_rate": tiers.get("cache", {}).get("hit_rate"),
                     "read_amplification": tiers.get("ssd", {}).get("read_amplification"),
                     "io_floor_s": dev / (device["mb_per_s"] * 1e6), "runs": len(mine)}
    memory = out.get("memory", {}).get("steady_s")
    for mode, s in out.items():
        if mode.startswith("ssd") and s["steady_s"] and memory:
            bound = max(memory, s["io_floor_s"])
            s["steady_over_bound"] = s["steady_s"] / bound
            s["steady_target_met"] = s["steady_over_bound"] <= TARGET_STEADY
        if s["steady_s"]:
            s["first_over_steady"] = s["first_s"] / s["steady_s"]
            s["first_target_met"] = s["first_over_steady"] <= TARGET_FIRST
    return out


def plot(summary: dict, path: Path):
    """Bars of first and steady epoch time per mode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(summary)
    x = np.arange(len(modes))
    fig, ax = plt.subplots(figsize=(1.6 * len(modes) + 2, 4))
    ax.bar(x - 0.2, [summary[m]["first_s"] for m in modes], 0.4, label="first epoch")
    ax.bar(x + 0.2, [summary[m]["steady_s"] or 0 for m in modes], 0.4, label="steady state (median)")
    ax.set_xticks(x, modes)
    ax.set_ylabel("seconds per epoch")
    ax.set_title("SAGE epochs by feature placement")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    from gnnsys.datasets.atomic import atomic_write_bytes

    path = Path(args.dataset)
    file_bytes = (path / "features.bin").stat().st_size
    if args.host_mem_budget is None:
        args.host_mem_budget = round(0.45 * file_bytes / 1e9, 3)
    info = machine()
    print(f"features.bin {file_bytes / 1e9:.2f} GB, host budget {args.host_mem_budget} GB", flush=True)
    runs = []
    for rep in range(args.repeats):
        for mode in args.modes.split(","):
            argv_child = [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv), "--child", mode,
                          "--host-mem-budget", str(args.host_mem_budget)]
            load = os.getloadavg()
            done = subprocess.run(argv_child, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
            run = json.loads(done.stdout.strip().splitlines()[-1])
            run.update(repeat=rep, loadavg_before=load, loadavg_after=os.getloadavg())
            runs.append(run)
            print(f"rep {rep} {mode:>10}: " + ", ".join(f"{e['time_s']:.1f} s" for e in run["epochs"]) +
                  f"; device {run['epochs'][-1]['device_bytes'] / 1e6:,.0f} MB/epoch; load {load[0]:.2f}", flush=True)
    device = measure_device(path, runs, args.device_seconds)
    summary = summarize(runs, device)
    result = {"machine": info, "args": vars(args), "feature_bytes": file_bytes, "device": device,
              "summary": summary, "runs": runs}
    out = HERE / "results" / f"{args.name}.json"
    atomic_write_bytes(out, json.dumps(result, indent=1).encode())
    plot(summary, out.with_suffix(".png"))
    print(f"{'mode':>10} {'first s':>8} {'steady s':>9} {'dev MB':>8} {'hit':>5} {'amp':>5} {'io floor s':>10} "
          f"{'steady/bound':>12} {'first/steady':>12}")
    for mode, s in summary.items():
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{mode:>10} {s['first_s']:>8.2f} {fmt(s['steady_s'], '>9.2f')} {s['device_bytes_steady'] / 1e6:>8,.0f} "
              f"{fmt(s['hit_rate'], '>5.2f')} {fmt(s['read_amplification'], '>5.2f')} {s['io_floor_s']:>10.2f} "
              f"{fmt(s.get('steady_over_bound'), '>12.2f')} {fmt(s.get('first_over_steady'), '>12.2f')}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
