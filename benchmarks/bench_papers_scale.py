"""Training on a graph larger than memory, against the disk's floor.

One child process per sampling method (`--samplings`, default uniform and
labor) loads the prepared dataset (graph memory-mapped, features on the SSD
tier reading rows at random, `scratch_gb=0`, under `--host-mem-budget` GB with
an in-degree cache of `--cache-frac` of the nodes; its batches are its own,
which no packing plans) and trains SAGE (fanouts 15,10,5, batch 1024, hidden 256) on
`--first` batches and then `--steady` further batches of a fixed random
order of the training seeds: no batch is trained twice, so the cache sees
what a real epoch shows it. The child samples its anonymous memory
(RssAnon, /proc/self/status) every 0.2 s and records the peak.

The floor of a phase is what the device needs for the rows the phase needed
from it: the SSD tier's distinct uncached rows (its unique_rows, summed over
batches) x fio's time per request at its best depth (random reads of one
row's blocks, io_uring, same file, same run). Reported per phase: seeds/s,
rows the SSD tier read per batch, cache hit rate, floor seeds/s and measured
/ floor (target >= 0.8), first-phase seeds/s over steady (target: first
batches no slower than 1.5x steady, i.e. time ratio <= 1.5), and peak RssAnon
(target <= 8 GB). Writes benchmarks/results/<--name>.json.

    python benchmarks/bench_papers_scale.py /work/bench/papers-1.0 --first 8 --steady 24 --name papers_scale_1.0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from helpers import fio_machine, measure_device, read_bytes, read_size  # noqa: E402
from peaks import Peaks  # noqa: E402

from gnnsys.host_memory import anonymous_bytes  # noqa: E402

TARGET_FLOOR, TARGET_FIRST, TARGET_ANON_GB = 0.8, 1.5, 8.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared dataset with 512 B-aligned feature rows")
    p.add_argument("--samplings", default="uniform,labor")
    p.add_argument("--first", type=int, default=8, help="batches of the first (cold) phase")
    p.add_argument("--steady", type=int, default=24, help="batches of the steady phase that follows")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--host-mem-budget", type=float, default=4.0, help="GB for the SSD tier's host memory")
    p.add_argument("--cache-frac", type=float, default=0.05, help="cache rows as a fraction of the nodes")
    p.add_argument("--policy", default="static")
    p.add_argument("--lookahead", type=int, default=0)
    p.add_argument("--fio-depths", default="32,128")
    p.add_argument("--fio-seconds", type=float, default=3.0)
    p.add_argument("--checkpoint", help="save the trained model here (a `gnnsys predict` checkpoint directory)")
    p.add_argument("--name", default="papers_scale")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child(args) -> dict:
    """One sampling method in this process: a record per phase."""
    import torch

    from gnnsys.datasets import load_dataset
    from gnnsys.loading.loader import MinibatchLoader
    from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions
    from gnnsys.trainers.minibatch import MinibatchTrainer
    from gnnsys.training.options import MinibatchOptions

    anon = Peaks({"rss_anon": anonymous_bytes})
    began = time.perf_counter()
    ds = load_dataset(args.dataset)
    load_s = time.perf_counter() - began
    options = MinibatchOptions(
        fanouts=[int(f) for f in args.fanouts.split(",")],
        batch_size=args.batch_size,
        hidden=args.hidden,
        epochs=2,
        progress=False,
        features="ssd",
        scratch_gb=0.0,  # rows read at random: this bench draws its own batches, which no packing plans
        cache_rows=int(args.cache_frac * ds.num_nodes),
        cache_policy=args.policy if args.cache_frac else None,  # None: not given (a cache's options need a cache)
        lookahead=args.lookahead if args.cache_frac else None,
        host_mem_budget=args.host_mem_budget,
        sampling=args.child,
        checkpoint_dir=args.checkpoint,
    ).for_dataset(ds)
    began = time.perf_counter()
    trainer = MinibatchTrainer(ds, options)
    setup_s = time.perf_counter() - began
    seeds = ds.split("train")
    seeds = seeds[torch.from_numpy(np.random.default_rng(0).permutation(seeds.shape[0]))]
    b = args.batch_size
    phases = {"first": seeds[: args.first * b], "steady": seeds[args.first * b : (args.first + args.steady) * b]}
    records = {}
    for epoch, (phase, part) in enumerate(phases.items()):
        loader = MinibatchLoader(
            ds,
            part,
            SamplingOptions(fanouts=list(options.fanouts), method=args.child),
            BatchOptions(batch_size=b, seed=0),
            PipelineOptions(prefetch=options.prefetch, lookahead=options.lookahead),
            features=trainer.store,
            x_dtype={k: trainer.precision.input_dtype(stack.dtype) for k, stack in trainer.store.items()},
        )
        before = read_bytes(ds.path)
        record = trainer.train_epoch(loader, epoch)
        record.update(device_bytes=read_bytes(ds.path) - before, seeds=int(part.shape[0]), batches=len(loader))
        records[phase] = record
        print(f"{args.child} {phase}: {record['seeds'] / record['time_s']:,.0f} seeds/s", file=sys.stderr, flush=True)
    if args.checkpoint:
        trainer.history = list(records.values())
        trainer.save_checkpoint(len(records))
    return {
        "sampling": args.child,
        "load_s": load_s,
        "setup_s": setup_s,
        "phases": records,
        "precision": trainer.precision.name,
        "rss_anon_peak_bytes": anon.stop()["rss_anon"],
        "vm_hwm_bytes": _vm_hwm(),
    }


def _vm_hwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def summarize(run: dict, device: dict) -> dict:
    """Per phase: seeds/s, rows read per batch, hit rate, floor and ratios."""
    out = {}
    for phase, r in run["phases"].items():
        ssd, cache = r["tiers"].get("ssd", {}), r["tiers"].get("cache", {})
        floor_s = ssd.get("unique_rows", 0) / device["best_reads_per_s"]
        out[phase] = {
            "seeds_per_s": r["seeds"] / r["time_s"],
            "time_s": r["time_s"],
            "batches": r["batches"],
            "rows_needed_per_batch": ssd.get("unique_rows", 0) / r["batches"],
            "rows_requested_per_batch": cache.get("requested", 0) / r["batches"],
            "device_reads_per_batch": ssd.get("reads", 0) / r["batches"],
            "bytes_read_per_batch": ssd.get("bytes_read", 0) / r["batches"],
            "hit_rate": cache.get("hit_rate"),
            "floor_s": floor_s,
            "floor_seeds_per_s": r["seeds"] / floor_s if floor_s else None,
            "over_floor": floor_s / r["time_s"] if floor_s else None,
            "compute_s": r["breakdown"]["compute_s"],
            "device_bytes": r["device_bytes"],
        }
    first, steady = out["first"], out["steady"]
    out["first_time_over_steady"] = steady["seeds_per_s"] / first["seeds_per_s"]
    out["targets"] = {
        "steady_over_floor_met": steady["over_floor"] is not None and steady["over_floor"] >= TARGET_FLOOR,
        "first_met": out["first_time_over_steady"] <= TARGET_FIRST,
        "rss_anon_met": run["rss_anon_peak_bytes"] <= TARGET_ANON_GB * 1e9,
    }
    return out


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    from gnnsys.atomic import atomic_write_bytes
    from gnnsys.datasets.meta import read_meta

    path = Path(args.dataset)
    file = path / "features.bin"
    info = fio_machine()
    device = measure_device(file, read_size(path), [int(d) for d in args.fio_depths.split(",")], args.fio_seconds)
    meta = read_meta(path)
    runs, summary = [], {}
    for sampling in args.samplings.split(","):
        load = os.getloadavg()
        argv_child = [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv), "--child", sampling]
        done = subprocess.run(argv_child, stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit(f"{sampling} failed with status {done.returncode}")
        run = json.loads(done.stdout.strip().splitlines()[-1])
        run.update(loadavg_before=load, loadavg_after=os.getloadavg())
        runs.append(run)
        summary[sampling] = summarize(run, device)
        s = summary[sampling]
        print(
            f"{sampling:>8}: first {s['first']['seeds_per_s']:,.0f} seeds/s, steady {s['steady']['seeds_per_s']:,.0f}"
            f" seeds/s (floor {s['steady']['floor_seeds_per_s'] or 0:,.0f}, x{s['steady']['over_floor'] or 0:.2f}), "
            f"{s['steady']['rows_needed_per_batch']:,.0f} rows read per batch, hit {s['steady']['hit_rate']}, "
            f"RssAnon {run['rss_anon_peak_bytes'] / 1e9:.2f} GB, load {load[0]:.2f}",
            flush=True,
        )
    info["loadavg_end"] = os.getloadavg()
    result = {
        "machine": info,
        "args": vars(args),
        "dataset": {
            "path": str(path),
            "num_nodes": meta["num_nodes"],
            "num_edges": meta["num_edges"],
            "feature_bytes": file.stat().st_size,
            "synthetic": meta["source"].get("synthetic"),
        },
        "device": device,
        "summary": summary,
        "runs": runs,
        "targets": {
            "steady_over_floor": TARGET_FLOOR,
            "first_time_over_steady": TARGET_FIRST,
            "rss_anon_gb": TARGET_ANON_GB,
        },
    }
    out = HERE / "results" / f"{args.name}.json"
    atomic_write_bytes(out, json.dumps(result, indent=1).encode())
    print(f"written to {out}")


if __name__ == "__main__":
    main()
