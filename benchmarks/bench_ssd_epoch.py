"""Training epochs with features in memory and on SSD, against a floor
computed from the device (fio) and the sampled batches.

Each run is a fresh child process that builds the minibatch trainer
(gnnsys.trainers.minibatch.MinibatchTrainer) with the tiers of one mode and trains
`--epochs` epochs of SAGE over the first `--batches` batches of a fixed
random subset of the training seeds, each epoch followed by the trainer's
evaluation (`--eval auto`: MinibatchTrainer.evaluate with the options'
eval="auto", timed apart as eval_s; `--eval none` skips it):

- memory: the whole feature table read into RAM first, for training and
  evaluation (the in-memory peer);
- memmap: numpy.memmap of features.bin through the page cache, the file's
  pages dropped before the run (`echo 1 > /proc/sys/vm/drop_caches` where
  permitted, else posix_fadvise(DONTNEED));
- ssd-<f>: `features="ssd"` reading rows at random (`scratch_gb=0`; packed
  batches are bench_packed.py's) with a cache of fraction f of the nodes under
  `--host-mem-budget` (default: 45% of features.bin), policy `--policy`,
  lookahead `--lookahead`; the SSD tier's engine and gaps come from the
  device's I/O probe (storage/io_probe.py), run once before the children.

Each child records its peak RSS (getrusage ru_maxrss). The device is
measured with fio in the same run (helpers.fio): random reads of the
dataset's read size with io_uring at `--fio-depths`, and 1 MiB sequential
reads. The floor of an SSD epoch is what the device needs for the rows the
epoch needed, whatever the tier chose to read: min(distinct uncached rows
needed (the SSD tier's unique_rows, summed over batches) / fio's best random
reads/s, features.bin / fio's sequential bandwidth) + the in-memory epoch's
compute time. Repeats alternate the modes; medians are reported. Writes JSON
and a PNG under benchmarks/results/ (--name).

    bash benchmarks/setup_fio.sh
    python benchmarks/bench_ssd_epoch.py /work/bench/papers-0.02 --modes memory,ssd-0.1 --batches 8 --epochs 3 \\
        --repeats 3 --name ssd_epoch_papers
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
from helpers import fio_machine, measure_device, read_bytes, read_size  # noqa: E402
from plotting import can_plot, save_figure  # noqa: E402

TARGET_STEADY, TARGET_FIRST, TARGET_RSS_SLACK, TARGET_MODE = 1.3, 1.5, 0.05, "ssd-0.1"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared dataset with 512 B-aligned feature rows")
    p.add_argument("--modes", default="memory,ssd-0.1", help="comma-separated: memory, memmap, ssd-<cache fraction>")
    p.add_argument("--batches", type=int, default=12, help="training batches per epoch")
    p.add_argument("--epochs", type=int, default=3, help="epoch 1 is the first (cold), the rest steady state")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--policy", default="static")
    p.add_argument("--lookahead", type=int, default=0)
    p.add_argument("--host-mem-budget", type=float, help="GB (default: 45%% of features.bin)")
    p.add_argument("--eval", choices=["auto", "none"], default="auto", help="evaluate after every epoch")
    p.add_argument("--fio-depths", default="1,8,32,128", help="queue depths of fio's random reads")
    p.add_argument("--fio-seconds", type=float, default=2.0, help="length of each fio run")
    p.add_argument("--name", default="ssd_epoch")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


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
    from gnnsys.loading.loader import MinibatchLoader
    from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions
    from gnnsys.storage import HOMOGENEOUS, FeatureStore, RowTable
    from gnnsys.trainers.minibatch import MinibatchTrainer
    from gnnsys.training.options import MinibatchOptions

    ds = load_dataset(args.dataset)
    mode = args.child
    tiers = (
        dict(
            features="ssd",
            scratch_gb=0.0,  # the random-read tier this bench measures against its floor, not packed batches
            cache_rows=int(float(mode.split("-")[1]) * ds.num_nodes),
            cache_policy=args.policy if float(mode.split("-")[1]) else None,  # None: not given (needs a cache)
            lookahead=args.lookahead if float(mode.split("-")[1]) else None,
            host_mem_budget=args.host_mem_budget,
        )
        if mode.startswith("ssd")
        else {}
    )
    if "eval" in MinibatchOptions.__dataclass_fields__:
        tiers["eval"] = "auto"
    dropped = drop_page_cache(ds.path / "features.bin") if mode == "memmap" else None
    options = MinibatchOptions(
        fanouts=[int(f) for f in args.fanouts.split(",")],
        batch_size=args.batch_size,
        hidden=args.hidden,
        epochs=args.epochs,
        progress=False,
        **tiers,
    ).for_dataset(ds)
    began = time.perf_counter()
    trainer = MinibatchTrainer(ds, options)
    if mode == "memory":
        trainer.rows = RowTable.from_tensor(ds.features.gather(torch.arange(ds.num_nodes)))
        trainer.store = FeatureStore({HOMOGENEOUS: trainer.rows})
    setup_s = time.perf_counter() - began
    seeds = ds.split("train")
    seeds = seeds[torch.from_numpy(np.random.default_rng(0).permutation(seeds.shape[0]))][
        : args.batches * args.batch_size
    ]
    loader = MinibatchLoader(
        ds,
        seeds,
        SamplingOptions(fanouts=list(options.fanouts)),
        BatchOptions(batch_size=args.batch_size, seed=0),
        PipelineOptions(prefetch=options.prefetch, lookahead=options.lookahead),
        features=trainer.store,
    )
    epochs = []
    for e in range(args.epochs):
        before = read_bytes(ds.path)
        record = trainer.train_epoch(loader, e)
        record["device_bytes"] = read_bytes(ds.path) - before
        began = time.perf_counter()
        if args.eval == "auto":
            record["metrics"] = trainer.evaluate()
        record["eval_s"] = time.perf_counter() - began
        epochs.append(record)
    return {
        "mode": mode,
        "setup_s": setup_s,
        "page_cache": dropped,
        "epochs": epochs,
        "eval_option": options.__dict__.get("eval"),
        "rss_peak_mib": _peak_rss_mib(),
    }


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _epoch_s(e: dict) -> float:
    """An epoch's training time plus its evaluation."""
    return e["time_s"] + e.get("eval_s", 0.0)


def summarize(runs: list, device: dict, file_bytes: int, budget_bytes: float) -> dict:
    """Per mode: first-epoch and steady-state medians (training + evaluation),
    device bytes, hit rates, the floor, peak RSS and the targets."""
    out = {}
    med = statistics.median
    for mode in dict.fromkeys(r["mode"] for r in runs):
        mine = [r for r in runs if r["mode"] == mode]
        steady_epochs = lambda r: r["epochs"][1:] or r["epochs"]  # noqa: E731
        ssd = [e["tiers"]["ssd"] for r in mine for e in steady_epochs(r) if "ssd" in e.get("tiers", {})]
        cache = [e["tiers"]["cache"] for r in mine for e in steady_epochs(r) if "cache" in e.get("tiers", {})]
        out[mode] = {
            "first_s": med(_epoch_s(r["epochs"][0]) for r in mine),
            "steady_s": med(med(_epoch_s(e) for e in r["epochs"][1:]) for r in mine)
            if len(mine[0]["epochs"]) > 1
            else None,
            "train_steady_s": med(e["time_s"] for r in mine for e in steady_epochs(r)),
            "eval_s": med(e.get("eval_s", 0.0) for r in mine for e in r["epochs"]),
            "compute_s": med(e["breakdown"]["compute_s"] for r in mine for e in steady_epochs(r)),
            "device_bytes_steady": med(e["device_bytes"] for r in mine for e in steady_epochs(r)),
            "rss_peak_mib": max(r["rss_peak_mib"] for r in mine),
            "runs": len(mine),
        }
        if ssd:
            needed = med(s["unique_rows"] for s in ssd)
            out[mode].update(
                rows_needed=needed,
                read_amplification=med(s["read_amplification"] for s in ssd),
                file_fraction=med(s["file_fraction"] for s in ssd),
                max_gap_mean=med(s["max_gap_mean"] for s in ssd),
                io_floor_s=min(needed / device["best_reads_per_s"], file_bytes / device["seq_bytes_per_s"]),
            )
        if cache:
            out[mode]["hit_rate"] = med(c["hit_rate"] for c in cache)
    memory = out.get("memory")
    for s in out.values():
        if s["steady_s"]:
            s["first_over_steady"] = s["first_s"] / s["steady_s"]
            s["first_target_met"] = s["first_over_steady"] <= TARGET_FIRST
        if "io_floor_s" in s and memory and memory["steady_s"]:
            s["floor_s"] = s["io_floor_s"] + memory["compute_s"]
            s["steady_over_bound"] = s["steady_s"] / max(memory["steady_s"], s["floor_s"])
            s["steady_target_met"] = s["steady_over_bound"] <= TARGET_STEADY
            s["train_over_bound"] = s["train_steady_s"] / max(memory["train_steady_s"], s["floor_s"])
            s["rss_bound_mib"] = (memory["rss_peak_mib"] - (file_bytes - budget_bytes) / 2**20) * (1 + TARGET_RSS_SLACK)
            s["rss_target_met"] = s["rss_peak_mib"] <= s["rss_bound_mib"]
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
    from gnnsys.atomic import atomic_write_bytes
    from gnnsys.storage.io_probe import io_model

    path = Path(args.dataset)
    file = path / "features.bin"
    file_bytes = file.stat().st_size
    if args.host_mem_budget is None:
        args.host_mem_budget = round(0.45 * file_bytes / 1e9, 3)
    info = fio_machine()
    size = read_size(path)
    model = io_model(file, size)  # probed once here (or cached): every SSD child plans with it
    device = measure_device(file, size, [int(d) for d in args.fio_depths.split(",")], args.fio_seconds)
    print(f"features.bin {file_bytes / 1e9:.2f} GB, host budget {args.host_mem_budget} GB", flush=True)
    runs = []
    for rep in range(args.repeats):
        for mode in args.modes.split(","):
            argv_child = [
                sys.executable,
                __file__,
                *(sys.argv[1:] if argv is None else argv),
                "--child",
                mode,
                "--host-mem-budget",
                str(args.host_mem_budget),
            ]
            load = os.getloadavg()
            done = subprocess.run(argv_child, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
            run = json.loads(done.stdout.strip().splitlines()[-1])
            run.update(repeat=rep, loadavg_before=load, loadavg_after=os.getloadavg())
            runs.append(run)
            print(
                f"rep {rep} {mode:>10}: "
                + ", ".join(f"{_epoch_s(e):.1f} s" for e in run["epochs"])
                + f" (eval {run['epochs'][0]['eval_s']:.1f} s); device {run['epochs'][-1]['device_bytes'] / 1e6:,.0f}"
                f" MB/epoch; peak RSS {run['rss_peak_mib']:,.0f} MiB; load {load[0]:.2f}",
                flush=True,
            )
    info["loadavg_end"] = os.getloadavg()
    summary = summarize(runs, device, file_bytes, args.host_mem_budget * 1e9)
    result = {
        "machine": info,
        "args": vars(args),
        "feature_bytes": file_bytes,
        "device": device,
        "io_model": model.to_json() if model else None,
        "summary": summary,
        "runs": runs,
        "targets": {
            "steady_over_max_memory_floor": TARGET_STEADY,
            "first_over_steady": TARGET_FIRST,
            "rss_slack": TARGET_RSS_SLACK,
            "mode": TARGET_MODE,
        },
    }
    out = HERE / "results" / f"{args.name}.json"
    atomic_write_bytes(out, json.dumps(result, indent=1).encode())
    if can_plot(out.with_suffix(".png")):
        plot(summary, out.with_suffix(".png"))
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    print(
        f"{'mode':>10} {'first s':>8} {'steady s':>9} {'eval s':>7} {'dev MB':>8} {'hit':>5} {'amp':>5} "
        f"{'file x':>6} {'floor s':>8} {'steady/bound':>12} {'first/steady':>12} {'RSS MiB':>8} {'RSS bound':>9}"
    )
    for mode, s in summary.items():
        print(
            f"{mode:>10} {s['first_s']:>8.2f} {fmt(s['steady_s'], '>9.2f')} {s['eval_s']:>7.2f} "
            f"{s['device_bytes_steady'] / 1e6:>8,.0f} {fmt(s.get('hit_rate'), '>5.2f')} "
            f"{fmt(s.get('read_amplification'), '>5.2f')} {fmt(s.get('file_fraction'), '>6.2f')} "
            f"{fmt(s.get('floor_s'), '>8.2f')} {fmt(s.get('steady_over_bound'), '>12.2f')} "
            f"{fmt(s.get('first_over_steady'), '>12.2f')} {s['rss_peak_mib']:>8,.0f} "
            f"{fmt(s.get('rss_bound_mib'), '>9,.0f')}"
        )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
